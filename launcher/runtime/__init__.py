"""The in-task runtime: apply a plan to a training job on TensorFlow's own runtime.

``layout`` resolves a plan into device strings (no TensorFlow); ``trainer``
places variables and builds the synchronous step; ``allreduce`` sums
gradients across replicas; ``fit`` routes ``model.fit`` through the trainer;
``server`` and ``client`` are the two kinds of task process; ``joining``
makes a client that cannot reach its peers say so within a timeout.
"""
