"""The runtime sums a worker task's replicas' PS gradients before one push and pulls each shard once.

Two replicas on this process's CPU are one task (the same device string's task), so each PS
shard is pulled once and each dense PS gradient is summed locally before its push; the
embedding's rows are gathered on its PS instead, so no whole shard of it is pulled; training
still gives plain Keras' weights.
"""

import re

import numpy as np

STEPS, BATCH = 3, 16
LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _all_ps_layout(model):
    """Every variable on PS (the embedding in two shards); two replicas in one task."""
    from launcher.runtime.layout import RunLayout, VariablePlacement

    variables = {}
    for w in model.trainable_weights:
        shards = (LOCAL_CPU, LOCAL_CPU) if w.path.startswith("embedding") else (LOCAL_CPU,)
        variables[w.path] = VariablePlacement(w.path, "ps", shards, axis=0, sparse=w.path.startswith("embedding"))
    return RunLayout((LOCAL_CPU, LOCAL_CPU), ("n0", "n0"), variables, predicted_step_time=1e-3, plan_name="local")


def test_layout_groups_replicas_by_task():
    from launcher.runtime.layout import RunLayout

    devices = ("/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0",
               "/job:worker/task:0/device:GPU:1", "/job:worker/task:1/device:GPU:1")
    layout = RunLayout(devices, ("a", "b", "a", "b"), {}, predicted_step_time=0.0)
    assert layout.replicas_by_task() == [(0, 2), (1, 3)]


def test_one_pull_and_one_push_per_task_and_the_same_weights():
    from run_small_mlp import build_model, make_data, trained_weights

    from launcher.runtime.trainer import PlacedTrainer

    x, y = make_data(STEPS, BATCH, seed=5)
    model = build_model(0)
    trainer = PlacedTrainer(model, _all_ps_layout(model))
    graph = trainer._traced_step().get_concrete_function(x[:BATCH], y[:BATCH]).graph
    names = [op.name.rsplit("/", 1)[-1] for op in graph.get_operations()]
    shards = sum(len(v.devices) for v in trainer.layout.ps_variables())
    assert sum(n.startswith("ps_pull") and not n.startswith("ps_pulled") for n in names) == shards  # not 2x
    assert sum(n.startswith("ps_local_copy") for n in names) == 2 * shards  # one per replica and shard
    dense_shards = sum(len(v.devices) for v in trainer.layout.ps_variables() if not v.name.startswith("embedding"))
    assert sum(bool(re.fullmatch(r"ps_local_sum(_\d+)?", n)) for n in names) == dense_shards
    assert sum(n.startswith("ps_local_sum_rows") for n in names) == 2  # the embedding's two shards: rows joined
    for b in range(STEPS):
        trainer.step(x[b * BATCH:(b + 1) * BATCH], y[b * BATCH:(b + 1) * BATCH])
    trainer.write_back()
    reference = build_model(0)
    reference.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0)
    for name, value in trained_weights(reference).items():
        np.testing.assert_allclose(trained_weights(model)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_an_embedding_on_ps_sends_its_rows_not_its_shards():
    """What the simulator prices for a sparse PS variable: the rows a replica looks up travel, not the shard."""
    from run_small_mlp import build_model, make_data

    from launcher.runtime.trainer import PlacedTrainer

    x, y = make_data(STEPS, BATCH, seed=5)
    model = build_model(0)
    trainer = PlacedTrainer(model, _all_ps_layout(model))
    running = trainer.running_ops(x[:BATCH], y[:BATCH])
    reads = {op.name: op for op in running if op.name.rsplit("/", 1)[-1].startswith("ps_pull")
             and not op.name.rsplit("/", 1)[-1].startswith("ps_pulled")}
    consumers = {}
    for op in running:
        for tensor in op.inputs:
            if tensor.op.name in reads:
                consumers.setdefault(tensor.op.name, set()).add(op.type)
    embedding_reads = [name for name, op in reads.items() if list(op.inputs[0].shape) == [32, 8]]
    assert len(embedding_reads) == 2  # its two shards of 32 rows
    for name in embedding_reads:
        assert consumers[name] == {"GatherV2"}, consumers[name]  # rows gathered where the shard lives
    dense_reads = set(reads) - set(embedding_reads)
    assert all(consumers[name] == {"Identity"} for name in dense_reads)  # pulled whole, once per task
    assert trainer.whole_pulls_of_sparse(x[:BATCH], y[:BATCH]) == []


def test_rows_read_without_keras_take_are_named_as_whole_pulls():
    """A layer that reads rows with tf.gather on its variable pulls whole shards: the runtime says so."""
    import keras
    import tensorflow as tf

    from launcher.runtime.layout import RunLayout, VariablePlacement
    from launcher.runtime.trainer import PlacedTrainer

    class GatherRows(keras.layers.Layer):
        def build(self, input_shape):
            self.table = self.add_weight(shape=(64, 4), name="table")

        def call(self, ids):
            return tf.reduce_sum(tf.gather(self.table, ids), axis=1)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,), dtype="int32"), GatherRows(name="rows"), keras.layers.Dense(1)],
                             name="lookup")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    variables = {w.path: VariablePlacement(w.path, "ps", (LOCAL_CPU,), sparse=w.path.endswith("rows/table"))
                 for w in model.trainable_weights}
    trainer = PlacedTrainer(model, RunLayout((LOCAL_CPU,), ("n0",), variables, predicted_step_time=1e-3))
    x, y = np.arange(24, dtype=np.int32).reshape(8, 3), np.zeros((8, 1), np.float32)
    assert trainer.whole_pulls_of_sparse(x, y) == ["lookup/rows/table"]
