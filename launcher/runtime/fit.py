"""``model.fit`` under a plan: an explicit context that routes fit to the runtime.

Inside :class:`PlacedFit`, ``keras.Model.fit`` trains through a
:class:`~launcher.runtime.trainer.PlacedTrainer` (the hook is
:func:`autodist.hooks.keras_fit`); the original method is restored on exit.
Outside it nothing is patched.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from autodist.errors import LaunchError
from autodist.io import write_json_atomic
from autodist.throughput import EXECUTOR_SETTLE_RUNS, samples_per_second

from autodist.graph.item import ONE_CLIENT_FIT_ARGS


def _ms(seconds):
    return f"{seconds * 1e3:.2f} ms"


class StepReporter:
    """Progress lines: step, loss, measured step time and samples/s against the prediction.

    With ``total_steps`` known, about ten lines in all; without (a custom
    loop), steps 1-10, then every 10th, then every 100th from step 1000.
    A run's later training phases (launcher.runtime.phases) start at
    :meth:`next_phase`; the closing lines measure each phase on its own steps,
    less those that traced the step function again (:func:`_measured`).
    """

    def __init__(self, predicted_step_time, total_steps=None, out=None):
        self.predicted = predicted_step_time
        self.out = out or sys.stdout
        self.times = []
        self.traced = []  # whether each step traced the step function (its time is mostly the trace)
        self.phase_starts = [{"phase": 1, "first_step": 1, "predicted_step_time": predicted_step_time}]
        self.expect(total_steps)

    def expect(self, total_steps):
        """From now on the run ends at step ``total_steps`` (None: unknown)."""
        self.total = total_steps
        self.every = max(1, (total_steps - len(self.times)) // 10) if total_steps else None

    def next_phase(self, predicted_step_time, **about):
        """From the next step on, a later training phase predicted at ``predicted_step_time`` (0: not priced);
        ``about``: what its record keeps besides (its source, its plan's files)."""
        self.predicted = predicted_step_time
        self.phase_starts.append(dict(about, phase=len(self.phase_starts) + 1, first_step=len(self.times) + 1,
                                      predicted_step_time=predicted_step_time))

    def _shown(self, index):
        if self.total:
            return index == 1 or index == self.total or index % self.every == 0
        return index <= 10 or index % (100 if index >= 1000 else 10) == 0

    def step(self, index, loss, seconds, samples=None, traced=False):
        self.times.append(seconds)
        self.traced.append(traced)
        if not self._shown(index):
            return
        of = f"/{self.total}" if self.total else ""
        shown_loss = f"  loss {loss:.4f}" if loss is not None else ""
        rate = samples_per_second(samples, seconds)
        rate = f"  {rate:.0f} samples/s" if rate else ""
        predicted = f"  (predicted {_ms(self.predicted)})" if self.predicted > 0 else ""
        print(f"step {index}{of}{shown_loss}  step {_ms(seconds)}{rate}{predicted}", file=self.out, flush=True)

    def measured_step_time(self):
        """Median step time of the measured steps of the whole run (:func:`_measured`)."""
        times = _measured(self.times, self.traced)[1]
        return float(np.median(times)) if times else 0.0

    def phases(self, plan_path):
        """One record per training phase that ran a step: its steps (``first_step``-``last_step``), the median
        of its measured ones (:func:`_measured`: ``measured_from`` on, None: all of them, less the steps
        ``retraced``), its prediction, and its plan (``plan_path`` for the first; a later one's where it was
        kept).  ``only_retraced``: every step after the first traced again, so the median is of traces."""
        out = []
        starts = self.phase_starts
        for k, phase in enumerate(starts):
            first = phase["first_step"]
            last = starts[k + 1]["first_step"] - 1 if k + 1 < len(starts) else len(self.times)
            times = self.times[first - 1:last]
            if not times:
                continue
            skip, measured, retraced = _measured(times, self.traced[first - 1:last])
            out.append(dict({"plan": str(plan_path)} if k == 0 else {}, **phase, last_step=last,
                            measured_from=first + skip if len(times) > skip else None,
                            retraced=[first + i for i in retraced],
                            only_retraced=bool(retraced) and len(retraced) == len(times) - skip,
                            measured_step_time=float(np.median(measured))))
        return out

    def summary(self, plan_path):
        """The closing lines: each phase's measured against predicted step time, and its plan."""
        phases = self.phases(plan_path)
        for phase in phases:
            print(measured_line(phase, len(phases) > 1), file=self.out, flush=True)


def _measured(times, traced):
    """``(skip, the steps a measured step time is the median of, the indices of those left out)``: the steps after
    TensorFlow's executor settled (its first EXECUTOR_SETTLE_RUNS runs, which profiling leaves out of the step times
    the cost model is fitted on) where at least as many follow them, else all but the first (it traces the graph),
    less those that traced the step again (an epoch's smaller last batch is another shape: its step's time is
    mostly the trace), unless every one did (then they are all there is)."""
    skip = EXECUTOR_SETTLE_RUNS if len(times) >= 2 * EXECUTOR_SETTLE_RUNS else 1
    settled = range(skip, len(times))
    retraced = [i for i in settled if traced[i]]
    kept = [times[i] for i in settled if not traced[i]]
    return skip, kept or times[skip:] or times, retraced


def measured_line(phase, numbered=False):
    """The closing line of one training phase (a record of :meth:`StepReporter.phases`, its prediction 0 where
    its plan is not priced); ``numbered``: the run had several, and the line names which."""
    measured, predicted = phase["measured_step_time"], phase["predicted_step_time"]
    ratio = f" ({measured / predicted:.2f}x the prediction)" if predicted > 0 else ""
    steps = f" (median of steps {phase['measured_from']}-{phase['last_step']}{_retraced(phase)})" \
        if phase["measured_from"] else ""
    against = f"vs predicted {_ms(predicted)}{ratio}" if predicted > 0 else "(this phase's plan is not priced)"
    where = f" at {phase['source']}" if phase.get("source") else ""
    label = f"phase {phase['phase']}{where}: " if numbered else ""
    plan = f"; plan {phase['plan']}" if phase.get("plan") else ""
    return f"autodist: {label}measured step time {_ms(measured)}{steps} {against}{plan}"


def _retraced(phase):
    """What the closing line says of the steps left out because they traced the step again."""
    retraced = phase.get("retraced") or []
    if not retraced:
        return ""
    if phase.get("only_retraced"):
        return "; each traced the step again (another batch shape): a trace, not a measure of the step"
    shown = ", ".join(map(str, retraced[:5])) + (", ..." if len(retraced) > 5 else "")
    return f", less step{'s' if len(retraced) > 1 else ''} {shown}, which traced the step again"


class PlacedFit:
    """Context manager: ``model.fit`` inside it trains with the plan's layout.

    Parameters
    ----------
    layout : RunLayout
    plan_path : str
        Shown in the final summary.
    report_path : str, optional
        Where to write a JSON record of the run (devices, transfers, times).
    """

    def __init__(self, layout, plan_path, report_path=None, out=None):
        self.layout = layout
        self.plan_path = plan_path
        self.report_path = report_path
        self.out = out or sys.stdout
        self.fits = 0
        self._hooks = None

    def __enter__(self):
        from autodist import hooks

        def fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, shuffle=True,
                initial_epoch=0, **kwargs):
            return self.fit(model, x, y, batch_size, epochs, callbacks, shuffle, initial_epoch, kwargs)

        self._hooks = contextlib.ExitStack()
        self._hooks.enter_context(hooks.keras_fit(fit))
        return self

    def __exit__(self, *exc):
        self._hooks.close()
        return False

    def fit(self, model, x, y, batch_size, epochs, callbacks, shuffle, initial_epoch, extra):
        import keras

        from launcher.runtime.trainer import PlacedTrainer

        for arg in ONE_CLIENT_FIT_ARGS:  # planned for allreduce at capture; a later fit may still pass one
            if extra.get(arg) is not None:
                raise LaunchError(f"model.fit({arg}=...) runs only in Keras' own fit loop, under plans that allreduce "
                                  "every variable, and this plan uses parameter servers; plan with --allreduce-only",
                                  field=arg)
        x, batch_size = at_plan_batch(self.layout, x, batch_size)
        x, y, validation_data = _split_validation(x, y, extra)
        epoch_batches, steps_per_epoch = _epoch_batches(x, y, batch_size or 32, shuffle)
        self.fits += 1
        trainer = PlacedTrainer(model, self.layout)
        hooks = keras.callbacks.CallbackList(callbacks, add_history=True, model=model, epochs=epochs,
                                             steps=steps_per_epoch, verbose=0)
        total = steps_per_epoch * (epochs - initial_epoch) if steps_per_epoch else None
        reporter = StepReporter(self.layout.predicted_step_time, total, self.out)
        first_batch = None
        hooks.on_train_begin()
        done = 0
        for epoch in range(initial_epoch, epochs):
            hooks.on_epoch_begin(epoch)
            model.reset_metrics()
            losses = []
            for b, (xb, yb) in enumerate(epoch_batches()):
                if first_batch is None:
                    check_global_batch(self.layout, global_batch_rows(xb))
                    first_batch = (xb, yb)
                    for name in trainer.whole_pulls_of_sparse(xb, yb):
                        print(f"autodist: warning: {name!r} is read other than through keras.ops.take (an "
                              "Embedding's lookup), so every step pulls its whole PS shards where the plan priced "
                              "the rows it touches", file=self.out, flush=True)
                hooks.on_train_batch_begin(b)
                start = time.perf_counter()
                traces = trainer.traces
                loss = trainer.step(xb, yb)
                losses.append(loss)
                done += 1
                reporter.step(done, loss, time.perf_counter() - start, global_batch_rows(xb), trainer.traces > traces)
                hooks.on_train_batch_end(b, {"loss": loss})
            trainer.write_back()
            logs = {"loss": float(np.mean(losses)),  # the epoch's mean, as Keras logs it
                    **{name: float(value) for name, value in model.get_metrics_result().items() if name != "loss"}}
            if validation_data is not None and (epoch + 1) % (extra.get("validation_freq") or 1) == 0:
                logs.update(_validated(model, validation_data, extra, batch_size or 32))
            hooks.on_epoch_end(epoch, logs)
            if getattr(model, "stop_training", False):
                break
        hooks.on_train_end()
        reporter.summary(self.plan_path)
        if self.report_path:
            write_json_atomic(self.report_path, {
                "plan": str(self.plan_path),
                "steps": done,
                "measured_step_time": reporter.measured_step_time(),
                "step_times": list(reporter.times),
                "predicted_step_time": reporter.predicted,
                "variable_devices": trainer.variable_devices(),
                "transfers": [list(t) for t in trainer.transfers(*first_batch)] if first_batch else [],
            })
        return model.history


def _split_validation(x, y, extra):
    """``(x, y, validation data or None)``: ``validation_data``, or the last ``validation_split`` of the arrays
    (taken before any shuffle, as Keras does)."""
    split = extra.get("validation_split")
    if not split:
        return x, y, extra.get("validation_data")
    if extra.get("validation_data") is not None:
        return x, y, extra["validation_data"]  # Keras ignores the split when given validation_data
    if not (hasattr(x, "shape") and hasattr(y, "shape")):
        raise LaunchError("model.fit(validation_split=...) needs arrays x and y", field="validation_split")
    cut = int(np.floor(len(x) * (1.0 - split)))
    return x[:cut], y[:cut], (x[cut:], y[cut:])


def _validated(model, data, extra, batch_size):
    """``val_``-prefixed logs of Keras' own ``evaluate`` on the validation data (after the epoch's weights are
    written back into the model)."""
    vx, vy = (data[0], data[1]) if isinstance(data, tuple) and len(data) >= 2 else (data, None)
    results = model.evaluate(vx, vy, batch_size=extra.get("validation_batch_size") or batch_size,
                             steps=extra.get("validation_steps"), verbose=0, return_dict=True)
    return {f"val_{k}": float(v) for k, v in results.items()}


def _epoch_batches(x, y, batch_size, shuffle):
    """(a function giving one epoch's (x, y) global batches, steps per epoch or None) from fit's x and y.

    Arrays are cut into ``batch_size`` rows (shuffled, as Keras does, from a
    fixed seed); a ``tf.data.Dataset`` gives its own batches of (x, y).
    """
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        if y is not None:
            raise LaunchError("model.fit(dataset, y): a dataset holds its own targets; leave y out", field="y")
        spec = x.element_spec
        if not isinstance(spec, tuple) or len(spec) != 2:
            raise LaunchError("model.fit under autodist run takes a dataset of (x, y) batches "
                              "(sample weights are not supported)", field="x")
        steps = int(x.cardinality())
        return (lambda: x.as_numpy_iterator()), (steps if steps > 0 else None)
    if y is None or not hasattr(x, "shape") or not hasattr(y, "shape"):
        raise LaunchError("model.fit under autodist run takes arrays x and y, or a tf.data.Dataset of (x, y)",
                          field="x")
    x, y = np.asarray(x), np.asarray(y)
    rng = np.random.default_rng(0)

    def epoch():
        order = rng.permutation(len(x)) if shuffle else np.arange(len(x))
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            yield x[idx], y[idx]

    return epoch, -(-len(x) // batch_size)


def at_plan_batch(layout, x, batch_size):
    """``model.fit``'s ``(x, batch_size)`` re-cut to the plan's global batch where the plan was made at another than
    the script's (``--global-batch``): arrays in batches of the plan's, a dataset's batches rebatched."""
    import keras
    import tensorflow as tf

    if not layout.rebatched:
        return x, batch_size
    if isinstance(x, tf.data.Dataset):
        return x.rebatch(layout.batch_size), batch_size
    if isinstance(x, keras.utils.PyDataset) or hasattr(x, "__next__"):
        raise LaunchError(f"the plan's global batch is {layout.batch_size} (--global-batch) and model.fit got a "
                          f"{type(x).__name__}, whose batches autodist run cannot re-cut; give arrays or a "
                          "tf.data.Dataset", field="--global-batch")
    return x, layout.batch_size


# Set by ``autodist bench`` in every replica: the fewest steps a ``model.fit`` on a dataset trains (fewer_steps_repeated).
MIN_STEPS_ENV = "AUTODIST_MIN_FIT_STEPS"


def fewer_steps_repeated(x, kwargs, environ=None):
    """``model.fit``'s ``(x, kwargs)``, a dataset of fewer batches than :data:`MIN_STEPS_ENV` over its epochs
    repeated and each epoch bounded by ``steps_per_epoch``, as Keras trains a repeated dataset: ``autodist bench``
    measures the median of its steps after a warm-up, and a script that trains one step (one batch, one epoch)
    gives nothing to measure.  The step is the script's, on its batches in their order, again: the first pass is
    cached and replayed, not drawn anew (a reshuffling shuffle or a random map, as keras-io's mixup has, would draw
    every pass anew, in each replica at its own pace).  Arrays, a dataset of unknown length, epochs given by
    position, and any fit without the variable set: as given."""
    import tensorflow as tf

    wanted = int((os.environ if environ is None else environ).get(MIN_STEPS_ENV, "0"))
    if not wanted or not isinstance(x, tf.data.Dataset):
        return x, kwargs
    epochs = kwargs.get("epochs", 1) - kwargs.get("initial_epoch", 0)
    per_epoch = kwargs.get("steps_per_epoch") or int(x.cardinality())
    if epochs < 1 or per_epoch < 0 or epochs * per_epoch >= wanted:
        return x, kwargs
    return x.cache().repeat(), dict(kwargs, steps_per_epoch=-(-wanted // epochs))


def replica_share(layout, x, replicas, rank):
    """``model.fit``'s ``x`` as replica ``rank`` of ``replicas`` reads it where every replica runs the script's
    batch (Horovod's semantics): a dataset's batches dealt out in turn, so that the replicas train on different
    samples (an unshuffled pipeline would give each the same) and an epoch is one pass over the data; every replica
    gets as many (a last round of fewer than ``replicas`` batches is dropped), or the collectives would wait on one
    that has finished.  Anything else, and ``x`` under the other semantics, as given."""
    import tensorflow as tf

    if not layout.per_replica or replicas < 2 or not isinstance(x, tf.data.Dataset):
        return x
    count = int(x.cardinality())
    if count == tf.data.INFINITE_CARDINALITY:
        return x.shard(replicas, rank)
    if count >= 0:
        return x.take(count - count % replicas).shard(replicas, rank)
    one = not isinstance(x.element_spec, tuple)

    def own(*batches):  # unknown length: whole rounds of ``replicas`` batches, this replica's of each
        return tf.data.Dataset.zip(batches[0] if one else batches).skip(rank).take(1)

    return x.window(replicas, drop_remainder=True).flat_map(own)


def replica_rows(layout, x, y, kwargs, replicas, rank):
    """``model.fit``'s ``(x, y, kwargs)`` as replica ``rank`` of ``replicas`` reads arrays where every replica runs
    the script's batch (Horovod's semantics): ``validation_split``'s last rows taken first, on every replica, as
    Keras takes them (as ``validation_data``); then the training rows, ``sample_weight``'s with them (class weights
    follow ``y``), dealt out one in ``replicas`` from row ``rank``, so that the replicas train on different rows
    whatever ``shuffle``, an epoch is one pass over the data, and the replicas' step ``i`` together holds one
    process's batch ``i`` at ``replicas`` x the batch without shuffling.  Every replica gets as many rows (the last
    ``len % replicas`` are dropped).  Anything else, and arrays under the other semantics, as given."""
    import tensorflow as tf

    def is_array(a):
        return isinstance(a, (np.ndarray, tf.Tensor))

    data = (x, y, kwargs.get("sample_weight"))
    if (not layout.per_replica or replicas < 2 or x is None
            or not all(is_array(a) for a in tf.nest.flatten(x))):
        return x, y, kwargs
    rows = int(tf.nest.flatten(x)[0].shape[0])
    kwargs = dict(kwargs)
    split = kwargs.pop("validation_split", 0)
    if split and kwargs.get("validation_data") is None:  # Keras ignores the split when given validation_data
        cut = int(np.floor(rows * (1.0 - split)))
        held = tf.nest.map_structure(lambda a: a[cut:] if is_array(a) else a, data)
        kwargs["validation_data"] = held if held[2] is not None else held[:2]
        data, rows = tf.nest.map_structure(lambda a: a[:cut] if is_array(a) else a, data), cut
    keep = rows - rows % replicas
    x, y, weights = tf.nest.map_structure(lambda a: a[:keep][rank::replicas] if is_array(a) else a, data)
    if weights is not None:
        kwargs["sample_weight"] = weights
    return x, y, kwargs


def global_batch_rows(batch):
    """Samples in a global batch: the leading dimension of its first array or tensor spec (None if unknown)."""
    import tensorflow as tf

    for part in tf.nest.flatten(batch):
        shape = getattr(part, "shape", None)
        if shape is not None and len(shape) >= 1:
            return None if shape[0] is None else int(shape[0])
    return None


def check_global_batch(layout, rows):
    """Raise LaunchError when a step's batch (``rows``, None: unknown) is not the one the plan was made for
    (``RunLayout.step_rows``: every replica's where each runs the script's batch, else the global batch).

    Only the first step is checked: an epoch's last batch may be smaller.
    """
    if layout.per_replica and rows and layout.step_rows and rows != layout.step_rows:
        raise LaunchError(f"the script's batch is {rows} samples and the plan was made for every replica running "
                          f"{layout.step_rows}; plan again with this batch (autodist run --replan)", field="batch size")
    if rows and layout.batch_size and rows != layout.batch_size and not layout.per_replica:
        raise LaunchError(f"the script's global batch is {rows} samples and the plan was made for "
                          f"{layout.batch_size}; plan again with this batch (autodist run --replan), "
                          "or give the script the plan's batch size", field="batch size")
