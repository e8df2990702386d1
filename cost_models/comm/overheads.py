"""The fixed costs of a step besides its transfers: the loop that drives it and the client's dispatch."""

from __future__ import annotations


class LoopOverheads:
    """What ``self.remote_step`` (a RemoteStepCalibration, or None) measured (a part of :class:`CommModel`)."""

    def client_step_seconds(self, tasks):
        """The fixed cost of one step that a client drives on ``tasks`` remote tasks (its dispatch and wait)."""
        return self.remote_step.seconds(tasks) if self.remote_step is not None else 0.0

    def replica_loop_seconds(self, loop):
        """The fixed cost of one step that each replica's own ``loop`` (``"fit"``, ``"function"``, ``""``) drives."""
        return self.remote_step.replica_loop_seconds(loop) if self.remote_step is not None else 0.0

    def client_cpu_seconds(self, tasks):
        """CPU seconds per step of the client process that drives ``tasks`` remote tasks, and of each task's
        process for its part: ``(client, per task)``, measured (0 without the measurement)."""
        if self.remote_step is None:
            return 0.0, 0.0
        return self.remote_step.client_cpu_seconds(tasks), self.remote_step.task_cpu

    def endpoint_cpu_seconds(self, nbytes):
        """CPU seconds one endpoint's process spends sending or receiving one tensor of ``nbytes`` over gRPC
        inside a step, measured (0 without the measurement)."""
        return self.remote_step.endpoint_cpu_seconds(nbytes) if self.remote_step is not None else 0.0
