"""The fixed cost of driving one training step, measured on this machine.

Two kinds of loop drive a step, besides its ops and tensor transfers:

- **One client on remote tasks.** Plans with a parameter server (or a
  replica split over devices) run from one client: the chief calls one
  ``tf.function`` whose ops are placed on the worker and PS tasks
  (``launcher.runtime.trainer``).  Every call pays the client's dispatch of
  the function's part on each remote task and the wait for them all.  It is
  measured for 1..K remote tasks running a trivial op each (a chief process
  connected to K ``tf.distribute.Server`` processes, as the runtime
  connects) and fitted as ``seconds = base + per_task * tasks``.
- **Every replica its own loop.** Plans on collective ops run the user's
  script in every replica process: Keras' ``model.fit`` loop (its data
  iterator, callbacks and the call of its train function) or the script's
  own loop calling its ``tf.function`` step.  Each is timed on a trivial
  job (cost_models.profiling.loop_probe: one Dense unit, whose ops take
  microseconds), and the cost model's price of that job's own ops
  (``local_ops``, the step captured from the same script and simulated as
  one process on ``cpu-local``) is taken off: ``fit_step`` and
  ``function_step`` are the loop alone, so that a job's ops are not priced
  twice (its own, plus the probe's inside the loop's cost).

Where a step's processes share a few cores (an emulated node's, or this
machine's), it is bound by their CPU work as much as by its timeline
(placement.simulator, ``Simulator._cpu_floor``), so the same command
measures what a client-driven step costs the cores:

- ``client_cpu`` + ``client_cpu_per_task * tasks``: the client process's
  CPU seconds per step of the trivial remote step, and ``task_cpu`` what
  each remote task's process spends on its part;
- ``tensor_cpu`` + ``nbytes / tensor_cpu_rate``: what one endpoint's
  process spends on one tensor moved between two tasks inside a step
  (gRPC's send or receive, its copies and (de)serialisation): 16 tensors of
  each size read by one task from another's variables, each task on its own
  core, the CPU of both processes against the same reads done locally.

Measurements, fit, command and machine are stored as data
(``cost_models/data/remote_step_calibration.json``); the harness that
measures them is cost_models.profiling.remote_step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cost_models.calibration import VersionedRecord

FORMAT = "autodist.remote_step_calibration"
VERSION = 4


@dataclass
class RemoteStepCalibration(VersionedRecord):
    """``seconds = base + per_task * tasks`` of one client-driven step, the fixed cost of a step each replica
    drives itself (``fit_step``, ``function_step``), what a client-driven step costs the processes' cores
    (``client_cpu``, ``client_cpu_per_task``, ``task_cpu``, ``tensor_cpu``, ``tensor_cpu_rate``), and the
    medians behind them.

    ``measurements``: ``{"tasks", "seconds", "client_cpu", "task_cpu", "repeats", "seconds_per_session"}``;
    ``local_measurements``: ``{"fit_step": [seconds per session], "function_step": [...], "repeats"}``, whole
    steps of the trivial job; ``local_ops``: ``{"fit_step": seconds, "function_step": seconds}``, its ops as the
    cost model prices them (taken off the medians of ``local_measurements``);
    ``tensor_measurements``: ``{"bytes", "endpoint_cpu", "tensors", "repeats"}``.
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "a remote step calibration"

    base: float
    per_task: float
    fit_step: float
    function_step: float
    client_cpu: float
    client_cpu_per_task: float
    task_cpu: float
    tensor_cpu: float
    tensor_cpu_rate: float
    measurements: list = field(default_factory=list)
    local_measurements: dict = field(default_factory=dict)
    local_ops: dict = field(default_factory=dict)
    tensor_measurements: list = field(default_factory=list)
    command: str = ""
    machine: dict = field(default_factory=dict)

    def seconds(self, tasks):
        """The fixed cost of one step whose function has parts on ``tasks`` remote tasks."""
        return self.base + self.per_task * tasks

    def replica_loop_seconds(self, loop):
        """The fixed cost of one step that a replica's own ``loop`` drives: ``"fit"`` (Keras ``model.fit``),
        ``"function"`` (a script's loop calling its ``tf.function`` step), or ``""`` (a graph without a script:
        no loop to price)."""
        return {"fit": self.fit_step, "function": self.function_step, "": 0.0}[loop]

    def client_cpu_seconds(self, tasks):
        """The client process's CPU seconds per step it drives on ``tasks`` remote tasks."""
        return self.client_cpu + self.client_cpu_per_task * tasks

    def endpoint_cpu_seconds(self, nbytes):
        """CPU seconds one endpoint's process spends on one tensor of ``nbytes`` sent to or received from
        another task inside a step."""
        return self.tensor_cpu + nbytes / self.tensor_cpu_rate
