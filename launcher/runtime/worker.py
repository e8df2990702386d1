"""One replica of a collective run: the user's script in this replica's process.

Inside :class:`CollectiveRun`, every kind of training loop the script may
run (Keras' fit, a custom loop's ``tf.function`` step, a ``tf.distribute``
strategy) runs as this replica's, with its gradients summed over the
replicas: each kind's side is in :mod:`launcher.runtime.loops`, its hook
in :mod:`autodist.hooks`, removed on exit.  The first replica prints
progress; every one can write a JSON record of what it ran.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

from autodist.errors import LaunchError
from autodist.io import read_json, write_json_atomic
from launcher.runtime import phases
from launcher.runtime.layout import canonical_device


class CollectiveRun:
    """Context manager: the script's training loops (``model.fit``, custom-loop steps) run as this process's replica.

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
        self.console = self.out if self.first else _Discard()  # where this replica's lines go
        self.reporter = StepReporter(group.layout.predicted_step_time, None, self.console)
        self.steps = 0
        self.fitted = None  # the model the last model.fit trained (phases.needs_plan)
        self._traces = 0  # the group's traces by the end of the last step counted
        self._stack = None

    def __enter__(self):
        from launcher.runtime import loops, reshuffle

        self._stack = contextlib.ExitStack()
        self._stack.enter_context(reshuffle.repeats_alike())  # the replicas' repeated shuffles draw alike
        self._stack.enter_context(loops.replica(self))
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    # -- what each kind of loop reports (launcher.runtime.loops) ----------------------
    def samples(self, rows):
        """Samples of the global batch a step of ``rows`` trains on: every replica's where each runs its own."""
        return rows * self.group.size if rows and self.group.layout.per_replica else rows

    def count(self, out, seconds, samples):
        """One step done: ``out`` its loss (or logs), ``seconds`` its time, ``samples`` its global batch."""
        loss = _scalar(out.get("loss") if isinstance(out, dict) else out)
        self.steps += 1
        traced, self._traces = self.group.traces > self._traces, self.group.traces
        self.reporter.step(self.steps, loss, seconds, samples, traced)

    def plan_phase(self, planned):
        """Run from now on under ``planned`` (a later phases.Phase; None: keep the plan)."""
        if planned is None:
            return
        self.group.relayout(planned.layout)
        about = phases.kept(planned, len(self.reporter.phase_starts) + 1) if self.first else {}
        self.reporter.next_phase(planned.layout.predicted_step_time, **about)
        print(planned.line, file=self.console, flush=True)

    def call_site(self):
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
            "phase_first_steps": [phase["first_step"] for phase in self.reporter.phase_starts],
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
            phases.close(self.reporter, self.plan_path)
        if report_path:
            write_json_atomic(report_path, self.record())


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
