"""The runtime's side of Keras ``model.fit`` (:mod:`autodist.loops.fit`): in a replica, Keras' own fit with the
model's ``train_step`` run on this replica's share of each batch and its gradients summed over the replicas (see
:mod:`launcher.runtime.collective`); from a single client, :class:`launcher.runtime.fit.PlacedFit`."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from autodist.errors import LaunchError
from autodist.loops import fit
from launcher.runtime import phases
from launcher.runtime.collective import batch_mismatch_is_a_launch_error
from launcher.runtime.fit import (PlacedFit, at_plan_batch, check_global_batch, fewer_steps_repeated, global_batch_rows,
                                  replica_rows, replica_share)

NAME = fit.NAME

# Keras callbacks that write files, and the attribute that holds where.  Every replica but the first works in a
# folder of its own (autodist.workdir) and keeps such a callback where it writes there; one that writes elsewhere
# (an absolute path, a folder linked from the user's) would write the first replica's files again, and is dropped.
FILE_WRITING_CALLBACKS = {"ModelCheckpoint": "filepath", "BackupAndRestore": "backup_dir", "TensorBoard": "log_dir",
                          "CSVLogger": "filename"}


@contextlib.contextmanager
def replica(run):
    """Inside: ``model.fit`` is Keras' fit with ``run``'s replica step and a progress callback; yields Keras' fit."""

    def replica_fit(model, *args, **kwargs):
        return _replica_fit(run, original, model, *args, **kwargs)

    with fit.hook(replica_fit) as original:
        yield original


def one_client(client):
    """Inside: ``model.fit`` trains from the plan's single client; yields the :class:`PlacedFit`."""
    return PlacedFit(client.layout, client.plan_path, report_path=client.report_path)


def _replica_fit(run, keras_fit, model, x=None, y=None, batch_size=None, *args, callbacks=None, **kwargs):
    """Keras' fit (``keras_fit``), with ``run``'s replica step and a progress callback."""
    import keras

    group = run.group
    if model.optimizer is None:
        raise LaunchError("model.fit needs a compiled model (call model.compile first)", field="model")
    x, batch_size = at_plan_batch(group.layout, x, batch_size)
    x = replica_share(group.layout, x, group.size, group.rank)
    x, y, kwargs = replica_rows(group.layout, x, y, kwargs, group.size, group.rank)
    if not args:  # epochs given by name, or none
        x, kwargs = fewer_steps_repeated(x, kwargs)
    rows = _fit_batch_rows(x, y, batch_size)
    if run.steps and not hasattr(x, "__next__") and phases.needs_plan(group.layout, model, rows, run.fitted):
        run.plan_phase(phases.phase_layout(run.plan_path, model, x, y, batch_size, kwargs.get("sample_weight"),
                                           run.call_site()))
    run.fitted = model
    check_global_batch(group.layout, rows)
    group.broadcast_from_first(model.weights)
    # Keras' fit takes one callback or a (nested) list of them: its CallbackList flattens what it is given.
    kept = [c for c in keras.tree.flatten(callbacks or []) if run.first or writes_in_own_folder(c)]
    progress = _progress_callback(run, run.samples(rows))
    model.train_step = group.replica_step(type(model).train_step.__get__(model))
    if model.run_eagerly:  # Keras calls the step eagerly; the replica's step (its collectives) is traced
        import tensorflow as tf

        model.train_step = tf.function(model.train_step, reduce_retracing=True)
    model.train_function = None
    jit = group.layout.jit_compile(group.device_type)
    if model.jit_compile is True and not jit:
        print(f"autodist: the model's jit_compile=True step runs without XLA, as the plan priced it: "
              f"{group.layout.xla_reason}", file=run.console, flush=True)
    model.jit_compile = jit  # Keras builds its train function with jit_compile: the step as priced
    try:
        with batch_mismatch_is_a_launch_error():
            return keras_fit(model, x, y, batch_size, *args, callbacks=kept + [progress], **kwargs)
    finally:
        del model.train_step
        model.train_function = None


def _progress_callback(run, rows):
    """A Keras callback that times each training batch and reports it to ``run``: from the end of the batch
    before (the first: from its own start) to its end, so that a step's time holds all that Keras' fit loop
    does for it (its data, its callbacks), as the cost model prices a fit step."""
    import keras

    class Progress(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            steps, epochs = self.params.get("steps"), self.params.get("epochs")
            run.reporter.expect(run.steps + steps * epochs if steps and epochs else None)
            self.since = None

        def on_train_batch_begin(self, batch, logs=None):
            if self.since is None:
                self.since = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            run.count(logs or {}, now - self.since, rows)
            self.since = now

    return Progress()


def _fit_batch_rows(x, y, batch_size):
    """Samples per global batch of a fit call: ``batch_size`` for arrays, a dataset's static batch dimension."""
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return global_batch_rows(x.element_spec)
    return (batch_size or 32) if any(isinstance(a, np.ndarray) for a in (x, y)) else None


def writes_in_own_folder(callback):
    """Whether ``callback`` writes no file, or only inside this process's working folder (links resolved)."""
    attribute = FILE_WRITING_CALLBACKS.get(type(callback).__name__)
    if attribute is None:
        return True
    here = os.path.realpath(os.getcwd())
    return os.path.commonpath([here, os.path.realpath(os.fspath(getattr(callback, attribute, "")))]) == here
