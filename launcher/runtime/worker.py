"""One replica of a collective run: the user's script in this replica's process.

Inside :class:`CollectiveRun`, ``keras.Model.fit`` is Keras' own fit with the
model's ``train_step`` run on this replica's slice of each batch and its
gradients summed over the replicas (see :mod:`launcher.runtime.collective`);
the training step of a custom loop (a ``tf.function`` that applies gradients,
or an ``autodist.function``) gets the same treatment.  The hooks are
:mod:`autodist.hooks`' and are removed on exit.  The first replica prints
progress; every one can write a JSON record of what it ran.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback

import numpy as np

from autodist.errors import LaunchError
from launcher.runtime import phases
from launcher.runtime.fit import (at_plan_batch, check_global_batch, fewer_steps_repeated, global_batch_rows,
                                  replica_share)
from launcher.runtime.layout import canonical_device
from autodist.io import read_json, write_json_atomic

# Keras callbacks that write files, and the attribute that holds where.  Every replica but the first works in a
# folder of its own (launcher.workdir) and keeps such a callback where it writes there; one that writes elsewhere
# (an absolute path, a folder linked from the user's) would write the first replica's files again, and is dropped.
FILE_WRITING_CALLBACKS = {"ModelCheckpoint": "filepath", "BackupAndRestore": "backup_dir", "TensorBoard": "log_dir",
                          "CSVLogger": "filename"}



class CollectiveRun:
    """Context manager: ``model.fit`` and custom-loop steps run as this process's replica.

    Parameters
    ----------
    group : launcher.runtime.collective.CollectiveGroup
    plan_path : str
        Shown in the final summary.
    """

    def __init__(self, group, plan_path, out=None, script=""):
        from launcher.runtime.fit import StepReporter

        self.group = group
        self.plan_path = plan_path
        self.script = script
        self.first = group.rank == 0
        self.out = out or sys.stdout
        self.reporter = StepReporter(group.layout.predicted_step_time, None, self.out if self.first else _Discard())
        self.steps = 0
        self._traced = {}  # id of a custom loop's step -> (the step, its replica's tf.function)
        self._original_fit = None
        self._stack = None

    def __enter__(self):
        from autodist import hooks
        from autodist.graph.script import steps_run_by

        self._stack = contextlib.ExitStack()
        self._original_fit = self._stack.enter_context(hooks.keras_fit(self.fit))
        self._stack.enter_context(steps_run_by(self))
        self._stack.enter_context(hooks.single_replica_strategies(self.out if self.first else _Discard(),
                                                                  task_id=self.group.rank))
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    # -- custom loops ----------------------------------------------------------------
    def call_step(self, step, args, kwargs):
        """One call of a custom loop's step: traced once, first call checks data and broadcasts weights."""
        import tensorflow as tf

        traced = self._traced.get(id(step), (None, None))[1]
        if traced is None:
            if self.group.layout.rebatched:
                raise LaunchError(f"the plan's global batch is {self.group.layout.batch_size} (--global-batch) and "
                                  "a custom loop's step gets the script's own batches, which autodist run cannot "
                                  "re-cut; use --batch-per-replica or the script's batch", field="--global-batch")
            if self.steps:
                self._plan_phase(phases.step_layout(self.group.layout, self.plan_path, step, args, kwargs,
                                                    self._call_site()))
            check_global_batch(self.group.layout, global_batch_rows((args, kwargs)))
            traced = tf.function(self.group.replica_step(step.python_function), **self._step_options(step))
            traced.get_concrete_function(*args, **kwargs)
            self.group.broadcast_from_first(self.group.variables.values())
            self._traced[id(step)] = (step, traced)
        start = time.perf_counter()
        with _batch_mismatch_is_a_launch_error():
            out = traced(*args, **kwargs)
        self._count(out, time.perf_counter() - start, self._samples(global_batch_rows((args, kwargs))))
        return out

    def _samples(self, rows):
        """Samples of the global batch a step of ``rows`` trains on: every replica's where each runs its own."""
        return rows * self.group.size if rows and self.group.layout.per_replica else rows

    def _step_options(self, step):
        """``tf.function`` options of a custom loop's replica step: the script's, compiled as the plan priced it."""
        from autodist.hooks import step_options

        options = step_options(step)
        jit = self.group.layout.jit_compile(self.group.device_type)
        return options if jit is None else dict(options, jit_compile=jit)

    def _count(self, out, seconds, samples):
        loss = _scalar(out.get("loss") if isinstance(out, dict) else out)
        self.steps += 1
        self.reporter.step(self.steps, loss, seconds, samples)

    # -- model.fit -------------------------------------------------------------------
    def fit(self, model, x=None, y=None, batch_size=None, *args, callbacks=None, **kwargs):
        """Keras' fit, with this replica's step and a progress callback."""
        if model.optimizer is None:
            raise LaunchError("model.fit needs a compiled model (call model.compile first)", field="model")
        x, batch_size = at_plan_batch(self.group.layout, x, batch_size)
        x = replica_share(self.group.layout, x, self.group.size, self.group.rank)
        if not args:  # epochs given by name, or none
            x, kwargs = fewer_steps_repeated(x, kwargs)
        rows = _fit_batch_rows(x, y, batch_size)
        if self.steps and not hasattr(x, "__next__") and phases.needs_plan(self.group.layout, model, rows):
            self._plan_phase(phases.phase_layout(self.plan_path, model, x, y, batch_size, kwargs.get("sample_weight"),
                                                 self._call_site()))
        check_global_batch(self.group.layout, rows)
        self.group.broadcast_from_first(model.weights)
        kept = [c for c in callbacks or [] if self.first or _writes_in_own_folder(c)]
        progress = _progress_callback(self, self._samples(rows))
        model.train_step = self.group.replica_step(type(model).train_step.__get__(model))
        if model.run_eagerly:  # Keras calls the step eagerly; the replica's step (its collectives) is traced
            import tensorflow as tf

            model.train_step = tf.function(model.train_step, reduce_retracing=True)
        model.train_function = None
        jit = self.group.layout.jit_compile(self.group.device_type)
        if jit is False and model.jit_compile and self.group.device_type != "GPU":
            print("autodist: the model's jit_compile=True step runs without XLA on these CPU replicas (XLA compiles "
                  "no CPU collective), as the plan priced it", file=self.out if self.first else _Discard(), flush=True)
        if jit is not None:  # Keras builds its train function with jit_compile: the step as priced
            model.jit_compile = jit
        try:
            with _batch_mismatch_is_a_launch_error():
                return self._original_fit(model, x, y, batch_size, *args, callbacks=kept + [progress], **kwargs)
        finally:
            del model.train_step
            model.train_function = None

    def _plan_phase(self, planned):
        """Run from now on under ``planned`` (``(RunLayout, line)`` of a later phase; None: keep the plan)."""
        if planned is None:
            return
        layout, line = planned
        self.group.relayout(layout)
        self.reporter.predicted = layout.predicted_step_time
        print(line, file=self.out if self.first else _Discard(), flush=True)

    def _call_site(self):
        """``script:line`` of the innermost line of the script on the stack."""
        target = os.path.abspath(self.script)
        lines = [f.lineno for f in traceback.extract_stack() if os.path.abspath(f.filename) == target]
        return f"{self.script}:{lines[-1]}" if lines else self.script

    # -- at the end ------------------------------------------------------------------
    def record(self):
        """What this replica ran: steps, times, where its variables live and the collectives of its steps.

        ``tf_devices`` are the variables' devices as this process names them;
        ``variable_devices`` name each by the plan's device of this replica,
        after checking it is this process's own device.
        """
        import tensorflow as tf

        own = canonical_device(tf.config.list_logical_devices(self.group.device_type)[0].name)
        tf_devices = {name: canonical_device(_device_of(v)) for name, v in sorted(self.group.variables.items())}
        planned = self.group.layout.replica_devices[self.group.rank]
        return {
            "plan": str(self.plan_path),
            "replica": self.group.rank,
            "steps": self.steps,
            "measured_step_time": self.reporter.measured_step_time(),
            "step_times": list(self.reporter.times),
            "predicted_step_time": self.reporter.predicted,
            "tf_devices": tf_devices,
            "variable_devices": {name: [planned if device == own else device] for name, device in tf_devices.items()},
            "collectives": self.group.collective_ops(),
            "micro_batches": self.group.micro_batches_per_step,
            "transfers": [],
        }

    def finish(self, report_path=None):
        """Print the summary (first replica) and write the record; a run that trained nothing is an error."""
        if not self.steps:
            raise LaunchError("the script ended without calling model.fit or a training step (a tf.function "
                              "that calls optimizer.apply_gradients, or an autodist.function), "
                              "so nothing ran with the plan")
        if self.first:
            self.reporter.summary(self.plan_path)
        if report_path:
            write_json_atomic(report_path, self.record())


def _writes_in_own_folder(callback):
    """Whether ``callback`` writes no file, or only inside this process's working folder (links resolved)."""
    attribute = FILE_WRITING_CALLBACKS.get(type(callback).__name__)
    if attribute is None:
        return True
    here = os.path.realpath(os.getcwd())
    return os.path.commonpath([here, os.path.realpath(os.fspath(getattr(callback, attribute, "")))]) == here


@contextlib.contextmanager
def _batch_mismatch_is_a_launch_error():
    """The step's batch check fails inside TensorFlow; say it as a LaunchError."""
    import tensorflow as tf

    from launcher.runtime.collective import BATCH_MISMATCH

    try:
        yield
    except tf.errors.InvalidArgumentError as exc:
        if BATCH_MISMATCH in str(exc):
            raise LaunchError(BATCH_MISMATCH, field="data") from None
        raise


def merge_records(paths, out_path):
    """One record of a collective run from its replicas' records (or merged ones): devices in replica order."""
    records = []
    for path in paths:
        record = read_json(path)
        records.extend(record.get("replicas", [record]))
    records.sort(key=lambda r: r["replica"])
    merged = dict(records[0], replicas=records)
    for key in ("variable_devices", "tf_devices"):
        merged[key] = {name: [d for r in records for d in _as_list(r[key].get(name, []))] for name in records[0][key]}
    write_json_atomic(out_path, merged)


def _as_list(value):
    return value if isinstance(value, list) else [value]


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
            run._count(logs or {}, now - self.since, rows)
            self.since = now

    return Progress()


def _device_of(variable):
    """The device of a Keras variable or a ``tf.Variable``."""
    import keras

    return (variable.value if isinstance(variable, keras.Variable) else variable).device


class _Discard:
    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _scalar(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _fit_batch_rows(x, y, batch_size):
    """Samples per global batch of a fit call: ``batch_size`` for arrays, a dataset's static batch dimension."""
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return global_batch_rows(x.element_spec)
    return (batch_size or 32) if any(isinstance(a, np.ndarray) for a in (x, y)) else None
