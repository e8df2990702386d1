"""CostModel: op costs per device and the communication model, with provenance."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from autodist.errors import CostModelError
from autodist.graph.item import GraphItem
from autodist.graph.xla import resolve_xla
from cost_models.calibration import TransferCalibration
from cost_models.emulated_link import EmulatedLinkCalibration
from cost_models.overlap import OVERLAP_FILE, NcclOverlap
from cost_models.remote_step import RemoteStepCalibration
from cost_models.comm import CommModel
from cost_models.cudnn_rnn import cudnn_kernels, cudnn_rnn_loops
from cost_models.executor import ExecutorModel, fit_serial_overhead, measured_widths, op_predecessors, settling_runs
from cost_models.features import RAW_COLUMNS, design_matrix, device_peak
from cost_models.gpu import MODEL_FILE as GPU_MODEL, GpuKernelParams, job_step
from cost_models.measured_steps import MeasuredStep, measured_steps_of
from cost_models.loop_iteration import LoopIterationCalibration
from cost_models.prior import OP_CLASS, prior_seconds
from cost_models.step_table import step_table
from cost_models.types import OpCost

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TIMINGS = os.path.join(DATA_DIR, "op_timings.csv.gz")
TIMINGS_META = os.path.join(DATA_DIR, "op_timings.json")
MODEL_PICKLE = os.path.join(DATA_DIR, "op_model.pkl")
MODEL_META = os.path.join(DATA_DIR, "op_model.json")
ONE_THREAD_PICKLE = os.path.join(DATA_DIR, "op_model_one_thread.pkl")
ONE_THREAD_META = os.path.join(DATA_DIR, "op_model_one_thread.json")
CALIBRATION = os.path.join(DATA_DIR, "transfer_calibration.json")
COLLECTIVES = os.path.join(DATA_DIR, "collective_calibration.json")
REMOTE_STEP = os.path.join(DATA_DIR, "remote_step_calibration.json")
EMULATED_LINK = os.path.join(DATA_DIR, "emulated_link_calibration.json")
LOOP_ITERATION = os.path.join(DATA_DIR, "loop_iteration_calibration.json")
COST_MODEL_ENV = "AUTODIST_COST_MODEL"


class UnknownOpTypeWarning(UserWarning):
    """Some op types had neither learned data nor a prior: fallback costs used."""


class StaleModelWarning(UserWarning):
    """The shipped op model was pickled by another scikit-learn version and was refitted from its data."""


@dataclass(frozen=True)
class CommRecords:
    """The measured and fitted records the communication model reads (each ``None`` where missing).

    ``transfers``: TensorFlow transfers over loopback gRPC
    (cost_models.calibration.TransferCalibration); ``collectives``: the CPU
    collective calibration (see :class:`~cost_models.comm.CommModel`);
    ``remote_step``: the fixed cost of a step one client drives on remote
    tasks (cost_models.remote_step); ``emulated_link``: what TensorFlow
    achieves over this machine's emulated links (without it, emulated
    clusters cannot be priced); ``overlap``: the fixed cost per collective
    and compute contention of NCCL collectives on GPUs, fitted on published
    scaling (cost_models.overlap).
    """

    transfers: TransferCalibration | None = None
    collectives: TransferCalibration | None = None
    remote_step: RemoteStepCalibration | None = None
    emulated_link: EmulatedLinkCalibration | None = None
    overlap: NcclOverlap | None = None

    def comm_model(self, resource_spec):
        """The :class:`~cost_models.comm.CommModel` of ``resource_spec`` on these records."""
        return CommModel(resource_spec, self.transfers, self.collectives, remote_step=self.remote_step,
                         emulated_link=self.emulated_link, overlap=self.overlap)



class CostModel:
    """Predicts op times and builds communication models.

    Parameters
    ----------
    op_model : cost_models.op_model.OpTimeRegressor or None
        The fitted op-time model; ``None`` prices every op with the prior.
    learned_devices : iterable of str
        Device models (``DeviceSpec.model``) the op model was trained on; on
        any other device the prior is used.
    comm : CommRecords
        What the communication model reads (default: no records).
    executor_overhead : float
        Seconds TensorFlow's executor spends on every op of a step besides
        its kernel, on the learned devices (see :func:`fit_executor_overhead`).
    executor : cost_models.executor.ExecutorModel or None
        How TensorFlow's executor overlaps ops on the learned CPU devices
        (see :func:`fit_executor`); ``None``: ops run one after another.
    one_thread_model : cost_models.op_model.OpTimeRegressor or None
        Kernel times with one intra-op thread, fitted like ``op_model``: with
        it, the executor model's op widths (see cost_models.executor).
    gpu : cost_models.gpu.GpuKernelParams or None
        The GPU kernel model's parameters, fitted on published figures (see
        cost_models.gpu); without them, GPU devices cannot be priced.
    measured_steps : iterable of cost_models.measured_steps.MeasuredStep
        Profiled steps timed whole: a CPU step of the same structure is
        scaled to their measured time (see cost_models.measured_steps).
    loop_iteration : cost_models.loop_iteration.LoopIterationCalibration or None
        What a loop iteration's control costs (see :meth:`_with_loops`);
        ``None``: a body's ops that run no kernel get their per-op price.
    """

    def __init__(self, op_model=None, learned_devices=(), comm=CommRecords(), executor_overhead=0.0, executor=None,
                 one_thread_model=None, gpu=None, measured_steps=(), loop_iteration=None):
        self.op_model = op_model
        self.learned_devices = frozenset(learned_devices if op_model is not None else ())
        self.comm = comm
        self.executor_overhead = float(executor_overhead)
        self.executor = executor
        self.one_thread_model = one_thread_model
        self.gpu = gpu
        self.measured_steps = {(m.structure, m.device_model): m for m in measured_steps}
        self.loop_iteration = loop_iteration
        self._id = None

    @classmethod
    def default(cls):
        """The shipped model: fitted op model on the shipped data plus the transfer calibration.

        Loads without TensorFlow.  A pickle written by another scikit-learn
        version is refitted from the shipped timings (a few seconds).
        """
        return _model_in(DATA_DIR)

    @property
    def id(self):
        """A short content id for provenance: ``"costmodel-<hash>"``."""
        if self._id is None:
            self._id = self._content_id()
        return self._id

    def _content_id(self):
        h = hashlib.sha256()
        if self.op_model is not None:
            h.update(json.dumps(
                {"params": self.op_model.get_params(), "types": self.op_model.op_types_,
                 "kernel_rates": self.op_model.kernel_rate_, "devices": sorted(self.learned_devices),
                 "executor_overhead": self.executor_overhead,
                 "executor": self.executor.to_dict() if self.executor else None,
                 "measured_steps": [m.to_dict() for _, m in sorted(self.measured_steps.items())]},
                sort_keys=True).encode())
            for model in (self.op_model, self.one_thread_model):
                if model is not None:
                    h.update(np.asarray(model.estimator_.predict(_probe_matrix(model))).tobytes())
        comm = self.comm
        for part in (comm.transfers, comm.collectives, self.gpu, comm.remote_step, comm.emulated_link, comm.overlap,
                     self.loop_iteration):
            if part is not None:
                h.update(json.dumps(part.to_dict(), sort_keys=True).encode())
        return f"costmodel-{h.hexdigest()[:16]}"

    def op_costs(self, graph_item, device, cores=None):
        """Predicted :class:`OpCost` of every op of ``graph_item`` on ``device``.

        One vectorised predict per call, plus the executor's schedule of the
        step where the device has an executor model (:meth:`predict_step`).
        ``cores``: the cores a CPU device's process really gets (a share of
        the machine its figures were measured on, when processes share it);
        the executor then runs the step on that many (on one, every op at its
        one-thread speed).
        Op types unknown to both the learned model and the prior get the
        fallback cost (cost_models.prior) and are counted in one
        :class:`UnknownOpTypeWarning` per call.

        Returns
        -------
        dict of op name -> OpCost
        """
        if not graph_item.ops:
            return {}
        if not device.memory_bandwidth or device.memory_bandwidth <= 0:
            raise CostModelError(f"device {device.name!r} has no memory_bandwidth", field="memory_bandwidth")
        if device.kind == "GPU":
            seconds, sources, shares, fallback = self._with_loops(
                graph_item, lambda item, extra, widths: self._gpu_step(item, device, extra),
                cudnn=cudnn_rnn_loops(graph_item) if not resolve_xla(graph_item.job, device.kind).on else ())
        else:
            one_core = (lambda item, extra, widths: self._cpu_step(item, device, 1, extra, widths)) \
                if self.executor is not None else None
            seconds, sources, shares, fallback = self._with_loops(
                graph_item, lambda item, extra, widths: self._cpu_step(item, device, cores, extra, widths), one_core)
            scale = self._measured_scale(graph_item, device, cores, shares)
            if scale is not None:
                seconds, shares = seconds * scale, shares * scale
                sources = np.where(sources == "learned", "step-measured", sources).astype(object)
        if fallback:
            types = sorted(set(fallback))
            warnings.warn(
                f"{len(fallback)} ops of {len(types)} unknown op types got the fallback cost: {', '.join(types)}",
                UnknownOpTypeWarning,
                stacklevel=2,
            )
        names = list(graph_item.ops)
        return {name: OpCost(float(s), str(src), float(share))
                for name, s, src, share in zip(names, seconds, sources, shares)}

    def _with_loops(self, graph_item, price, one_core=None, cudnn=()):
        """Seconds, sources and step shares of ``graph_item``'s ops, and the op types that got the fallback cost.

        ``price(item, extra, widths)`` prices one step's ops, ``extra``
        seconds added to each op's own and ``widths`` the cores each op turns
        into speed (NaN: the op's own; see cost_models.executor).  A loop op
        (autodist.graph.item.LoopInfo) adds its trips times one iteration
        (:meth:`_iteration`).  With ``one_core`` (``price`` on one core: a
        CPU with an executor model), a loop op's width is one iteration's
        time on one core over its time on the cores it has, as an op's width
        is its one-thread time over its time (two loops of small ops, a
        bidirectional layer's, run side by side).  The loops named in
        ``cudnn`` (a GPU step's cuDNN layers, cost_models.cudnn_rnn) add what
        cuDNN runs for them instead of their iterations.
        """
        extra = np.zeros(len(graph_item.ops))
        widths = np.full(len(graph_item.ops), np.nan)
        index = {name: i for i, name in enumerate(graph_item.ops)}
        fallback = []
        for loop in graph_item.loops.values():
            body = GraphItem(loop.ops, [], graph_item.job, loop.loops)
            if loop.op in cudnn:
                extra[index[loop.op]] += self._cudnn_layer(loop, body, price)
                continue
            seconds, inner = self._iteration(loop, body, price, one_core)
            extra[index[loop.op]] += loop.trips * seconds
            fallback += inner
            if one_core is not None and seconds > 0:
                widths[index[loop.op]] = max(self._iteration(loop, body, one_core, one_core)[0] / seconds, 1.0)
        seconds, sources, shares, op_types = price(graph_item, extra, widths)
        return seconds, sources, shares, fallback + list(op_types[sources == "fallback"])

    @staticmethod
    def _cudnn_layer(loop, body, price):
        """Seconds of what cuDNN runs for ``loop`` (its ``body`` a GraphItem) in one step: its kernels priced by
        ``price`` on the step's GPU, those of the recurrence once per time step (cost_models.cudnn_rnn)."""
        kernels, per_step = cudnn_kernels(loop, body, body.job)
        _, _, shares, _ = price(kernels, None, None)
        each = np.array([name in per_step for name in kernels.ops])
        return float(shares[~each].sum() + loop.trips * shares[each].sum())

    def _iteration(self, loop, body, price, one_core):
        """Seconds of one iteration of ``loop`` (its ``body`` a GraphItem) and the op types that got the fallback.

        Its body's ops are priced by ``price`` as one step on the same device
        (nested loops alike), scheduled among themselves (on a CPU, the
        executor model), not beside the iterations before and after them;
        but for the ops that run no kernel (the prior's ``trivial`` class),
        which the executor runs inline: with a loop iteration calibration
        (cost_models.loop_iteration), they and the loop's lowered control are
        priced by it instead.
        """
        _, _, shares, fallback = self._with_loops(body, price, one_core)
        if self.loop_iteration is not None:
            inline = np.array([OP_CLASS.get(op.type) == "trivial" for op in body.ops.values()])
            shares = np.append(shares[~inline], self.loop_iteration.iteration_seconds(int(inline.sum())))
        return float(np.sum(shares)), fallback

    def _cpu_step(self, graph_item, device, cores, extra=None, widths=None):
        """Seconds alone, sources, step shares and op types of ``graph_item``'s ops on a CPU (:meth:`predict_step`;
        ``extra``: seconds added to each op's, ``widths`` the widths of some)."""
        table = step_table(graph_item)  # built once per GraphItem: its raw feature columns
        raw = {column: table[column] for column in RAW_COLUMNS}
        try:
            peak = device_peak(device)
        except ValueError as exc:
            raise CostModelError(str(exc), field="peak_flops") from None
        seconds, sources, shares = self.predict_step(raw, op_predecessors(list(graph_item.ops.values())),
                                                     device.kind, device.model, peak, device.memory_bandwidth, cores,
                                                     extra, widths)
        return seconds, sources, shares, raw["op_type"]

    def measured_step(self, graph_item, device_model):
        """The step of ``graph_item``'s structure timed whole on ``device_model`` (a MeasuredStep), or None."""
        return self.measured_steps.get((graph_item.structure_hash(), device_model))

    def _measured_scale(self, graph_item, device, cores, shares):
        """Measured over predicted step time where a step of ``graph_item``'s structure was timed whole on
        ``device``'s model (cost_models.measured_steps), at its batch on the cores its process gets; ``None``
        elsewhere.  ``shares``: the predicted step shares of ``graph_item``'s ops.
        """
        step = self.measured_step(graph_item, device.model)
        predicted = float(np.sum(shares))
        if step is None or not graph_item.job.batch_size or predicted <= 0:
            return None
        on = cores if cores is not None else self.executor.cores if self.executor else max(step.seconds_by_cores)
        return step.seconds(float(on), graph_item.job.batch_size) / predicted

    def _gpu_step(self, graph_item, device, extra=None):
        """Kernel seconds, sources, step shares and op types of one micro-batch on a GPU (cost_models.gpu).

        Ops of types the prior does not know stream their bytes as
        memory-bound kernels (source ``"fallback"``); the rest are
        ``"calibrated"`` on architectures the published figures cover, but
        for products of a class and precision those figures do not exercise
        there (:meth:`GpuKernelParams.covers`), and ``"assumed"`` elsewhere.
        """
        step = self._gpu_kernels(graph_item, device)
        seconds, shares = step.shares(self.gpu)
        if extra is not None:
            seconds, shares = seconds + extra, shares + extra
        sources = np.where(step.fallback, "fallback", np.where(self._covered(step), "calibrated", "assumed"))
        return seconds, sources.astype(object), shares, step_table(graph_item)["op_type"]

    def _gpu_kernels(self, graph_item, device):
        if self.gpu is None:
            raise CostModelError("this cost model has no GPU kernel model; it cannot price GPUs",
                                 source=GPU_MODEL)
        return job_step(step_table(graph_item), graph_item.job, device)

    def _covered(self, step):
        """Per op, whether the published figures calibrate its kernel on ``step``'s architecture."""
        calibrated = self.gpu.calibrated(step.architecture)
        return np.array([self.gpu.covers(step.architecture, c) if c else calibrated for c in step.kernel_classes()],
                        dtype=bool)

    def assumed_gpu_kernels(self, graph_item, device):
        """Kernel class -> its share of the step's kernel time, for the products of ``graph_item`` on ``device``
        (a GPU of a calibrated architecture) whose class no published figure of that architecture exercises."""
        step = self._gpu_kernels(graph_item, device)
        kernel, _ = step.shares(self.gpu)
        classes, covered, total = step.kernel_classes(), self._covered(step), float(kernel.sum())
        return {c: float(kernel[classes == c].sum()) / total
                for c in sorted(set(classes[~covered & step.compute]))} if total > 0 else {}

    def conv_transposes(self, graph_item, device):
        """The share of ``graph_item``'s kernel time on ``device`` (a GPU) that cuDNN spends transposing NCHW
        convolution tensors, and why its framework lays them out NCHW (cost_models.conv_layout)."""
        return self._gpu_kernels(graph_item, device).transposes(self.gpu)

    def predict_step(self, raw, predecessors, device_kind, device_model, peak_flops, memory_bandwidth, cores=None,
                     extra=None, widths=None):
        """Per op of a one-device step (``raw`` features, ``predecessors``): seconds alone, source, step share.

        ``extra``: seconds added to each op's own, and ``widths`` the widths
        that replace the executor's where not NaN (a loop op's iterations,
        see :meth:`_with_loops`).

        On a learned device, every op the op model knows costs its expected
        kernel time plus the executor overhead; the rest get the prior
        (source ``"prior"``, or ``"fallback"`` for types it does not know
        either).  Ops whose outputs no op reads cost nothing: Grappler
        prunes them.  On a learned CPU device with an executor model, the
        shares are those of the executor's overlapped schedule, on ``cores``
        of the measured machine's cores where given (their share of the
        memory bandwidth too); elsewhere (GPUs run ops on one stream) the ops
        run one after another and a share is the op's time.
        """
        seconds, fallback = prior_seconds(raw, device_kind, peak_flops, memory_bandwidth)
        sources = np.where(fallback, "fallback", "prior").astype(object)
        extra = np.zeros(len(seconds)) if extra is None else extra
        if self.op_model is None or device_model not in self.learned_devices:
            seconds = np.where(raw["unread"] > 0, 0.0, seconds + extra)
            return seconds, sources, seconds
        learned, X, kernel = self._learned_kernels(raw, peak_flops, memory_bandwidth)
        seconds = seconds.copy()
        seconds[learned] = kernel * self.op_model.kernel_rates(raw["op_type"][learned]) + self.executor_overhead
        sources[learned] = "learned"
        seconds = np.where(raw["unread"] > 0, 0.0, seconds + extra)
        if self.executor is None or device_kind != "CPU":
            return seconds, sources, seconds
        own = self._widths(raw["op_type"], learned, X, kernel)
        widths = own if widths is None else np.where(np.isnan(widths), own, np.minimum(widths, self.executor.cores))
        executor = self.executor
        if cores is not None and cores < executor.cores:
            executor = replace(executor, cores=float(cores),
                               memory_bandwidth=executor.memory_bandwidth * cores / executor.cores)
        shares = executor.schedule(seconds, widths, raw["input_bytes"] + raw["output_bytes"], predecessors)[1]
        return seconds, sources, shares

    def _learned_kernels(self, raw, peak_flops, memory_bandwidth):
        """The ops the op model knows (mask), their design matrix and their kernel seconds when a kernel runs."""
        learned = self.op_model.knows(raw["op_type"])
        X = design_matrix({k: v[learned] for k, v in raw.items()}, peak_flops, memory_bandwidth)
        return learned, X, self.op_model.predict(X, ran_kernel=True)

    def _widths(self, op_types, learned, X, kernel):
        """Per op on the learned CPU, the cores its kernel turns into speed (see cost_models.executor).

        The predicted one-thread time over the predicted time, between 1
        and the executor's cores, for ops both models know (from
        :meth:`_learned_kernels`' results); every core (no gain from running
        beside another op) for the rest.
        """
        widths = np.full(len(op_types), self.executor.cores)
        if self.one_thread_model is None:
            return widths
        both = self.one_thread_model.knows(op_types[learned])
        one_thread = self.one_thread_model.predict(X[both], ran_kernel=True)
        widths[np.flatnonzero(learned)[both]] = measured_widths(kernel[both], one_thread, self.executor.cores)
        return widths

    def comm_model(self, resource_spec):
        """The :class:`~cost_models.comm.CommModel` of ``resource_spec``."""
        return self.comm.comm_model(resource_spec)


def _probe_matrix(op_model):
    """A fixed design matrix whose predictions fingerprint a fitted model."""
    from cost_models.features import FEATURES

    X = np.empty((len(op_model.op_types_), len(FEATURES)), dtype=object)
    for i, t in enumerate(op_model.op_types_):
        X[i, 0] = t
        X[i, 1:] = [4.0] + [float(i % 7 + j) for j in range(len(FEATURES) - 2)]
    return op_model._encode(X)


def fit_op_model(timings, params=None):
    """An op model fitted on the rows of ``timings`` that may run (untimed ones set the kernel rates).

    Unread ops are left out: they are pruned by rule, not by chance.
    """
    timings = timings.subset(timings.raw["unread"] == 0)
    if len(timings.timed()) == 0:
        raise CostModelError("no timed rows to fit", source=TIMINGS)
    return _fit_regressor(timings, timings.seconds, params)


def fit_one_thread_model(timings, params=None):
    """A model of kernel times with one intra-op thread, fitted on the rows timed both ways; ``None`` without any."""
    both = timings.subset((timings.raw["unread"] == 0) & np.isfinite(timings.seconds)
                          & np.isfinite(timings.seconds_one_thread))
    if len(both) == 0:
        return None
    return _fit_regressor(both, both.seconds_one_thread, params)


def _fit_regressor(rows, seconds, params):
    """An :class:`~cost_models.op_model.OpTimeRegressor` of ``seconds`` on the features of ``rows``."""
    from cost_models.op_model import OpTimeRegressor

    X = design_matrix(rows.raw, rows.peak_flops, rows.memory_bandwidth)
    return OpTimeRegressor(**(params or DEFAULT_PARAMS)).fit(X, seconds)


def _profiled_steps(timings, steps):
    """``(rows, record)`` of each zoo model in ``steps`` (name -> step record) with rows in ``timings``."""
    out = []
    for name, record in sorted(steps.items()):
        mine = timings.origin == name
        if mine.any():
            out.append((timings.subset(mine), record))
    return out


def fit_executor_overhead(timings, steps):
    """Seconds per op that a measured step spends beyond its kernels.

    Fits ``step = sum of kernel seconds + overhead * ops`` over the profiled
    zoo steps in ``steps`` (name -> record with ``step_seconds``), by least
    squares on the relative error; 0 when no step was measured.  Unread ops
    (pruned, see cost_models.features.unread_ops) are not counted.
    """
    profiled = _profiled_steps(timings, steps)
    if not profiled:
        return 0.0
    kernel = np.array([np.nansum(rows.seconds) for rows, _ in profiled])
    ops = np.array([float((rows.raw["unread"] == 0).sum()) for rows, _ in profiled])
    step = np.array([float(record["step_seconds"]) for _, record in profiled])
    a, b = ops / step, (step - kernel) / step
    return max(float(a @ b / (a @ a)), 0.0)


def measured_op_seconds(rows, overhead):
    """Per op of one profiled step (``rows``), its measured kernel seconds plus ``overhead``; pruned ops 0."""
    return np.where(rows.raw["unread"] > 0, 0.0, np.nan_to_num(rows.seconds) + overhead)


def measured_step(rows, overhead, cores):
    """``(op seconds, widths, bytes moved, predecessors)`` of one profiled step as measured, for the executor model."""
    return (measured_op_seconds(rows, overhead), measured_widths(rows.seconds, rows.seconds_one_thread, cores),
            rows.raw["input_bytes"] + rows.raw["output_bytes"], rows.predecessors())


def fit_executor(timings, steps, overhead, cores):
    """The :class:`ExecutorModel` of the profiled CPU, or ``None`` without default-executor steps.

    TensorFlow's default executor has one inter-op thread per core, so
    ``lanes`` is ``cores``; the memory bandwidth is the profiled device's;
    the serial part of the per-op ``overhead`` is fitted so that the
    schedules of the measured ops (kernel seconds plus ``overhead``, widths
    from the one-thread times) match the zoo steps timed under the default
    executor (``default_step_seconds``).  Training runs with the executor
    settled, so where some steps were timed settled
    (:func:`~cost_models.executor.settling_runs`), the fit uses only those:
    before it settles, the executor treats every kernel as expensive and
    hands it to another thread whenever other ops are ready.
    """
    profiled = [(rows, record) for rows, record in _profiled_steps(timings, steps) if "default_step_seconds" in record]
    settled = [(rows, record) for rows, record in profiled if settling_runs(float(record["default_step_seconds"]))]
    data = [(*measured_step(rows, overhead, cores), float(record["default_step_seconds"]))
            for rows, record in settled or profiled]
    if not data:
        return None
    bandwidth = float(profiled[0][0].memory_bandwidth[0])
    serial = fit_serial_overhead(data, int(cores), float(cores), bandwidth, overhead)
    return ExecutorModel(int(cores), float(cores), bandwidth, serial)


def fit_cost_model(timings, steps=None, cores=None, params=None, comm=CommRecords(), gpu=None, loop_iteration=None):
    """A :class:`CostModel` fitted on ``timings``: op model, one-thread model, executor overhead and executor model.

    ``steps`` holds the profiled step records (name -> record); ``cores`` is
    the profiled machine's core count (no executor model without it);
    ``comm`` (the communication records), ``gpu`` (the GPU kernel model's parameters) and ``loop_iteration``
    (cost_models.loop_iteration) are passed through.
    """
    overhead = fit_executor_overhead(timings, steps or {})
    return CostModel(fit_op_model(timings, params), sorted(set(timings.timed().device_model)), comm, overhead,
                     fit_executor(timings, steps or {}, overhead, cores) if cores else None,
                     fit_one_thread_model(timings, params), gpu, measured_steps_of(steps), loop_iteration)


# Estimator and target: compared by `python benchmarks/costmodel_eval.py` (see benchmarks/results).
# Iterations and leaf size: 3-fold cross-validation inside the eval's training split (op MAPE >= 50 us)
# gave 18.8% for 200 iterations, 20-row leaves and early stopping; 17.3% for 400 iterations and 5-row leaves.
DEFAULT_PARAMS = {"estimator": "hist", "max_iter": 400, "learning_rate": 0.1, "max_leaf_nodes": 31,
                  "min_samples_leaf": 5, "random_state": 0, "target": "roofline_ratio"}


@lru_cache(maxsize=4)
def _model_in(folder, with_remote_step=True):
    """The cost model saved in ``folder``; what it lacks (op data, a calibration) is the shipped one.  Without
    its remote step calibration where ``with_remote_step`` is False."""
    from cost_models.fitting.dataset import read_meta, read_timings
    from cost_models.op_model import load_model

    transfers, collectives = _calibrations(folder)
    comm = CommRecords(transfers, collectives,
                       _record(folder, REMOTE_STEP, RemoteStepCalibration) if with_remote_step else None,
                       _record(folder, EMULATED_LINK, EmulatedLinkCalibration), NcclOverlap.load(OVERLAP_FILE))
    gpu = GpuKernelParams.load(GPU_MODEL)
    loop_iteration = _record(folder, LOOP_ITERATION, LoopIterationCalibration)
    ops = folder if os.path.exists(in_folder(folder, TIMINGS)) else DATA_DIR
    if not os.path.exists(in_folder(ops, TIMINGS)):
        raise CostModelError("the shipped op timings are missing (reinstall autodist)", source=in_folder(ops, TIMINGS))
    try:
        op_model, meta = load_model(in_folder(ops, MODEL_PICKLE), in_folder(ops, MODEL_META))
        # No one-thread model: data without one-thread times (GPU rows).
        one_thread_model = None
        if os.path.exists(in_folder(ops, ONE_THREAD_META)):
            one_thread_model, _ = load_model(in_folder(ops, ONE_THREAD_PICKLE), in_folder(ops, ONE_THREAD_META))
        data = meta["training_data"]
        executor = ExecutorModel.from_dict(data["executor"]) if data["executor"] else None
        return CostModel(op_model, data["devices"], comm, data["executor_overhead_seconds"], executor,
                         one_thread_model, gpu, [MeasuredStep.from_dict(m) for m in data.get("measured_steps", [])],
                         loop_iteration)
    except (CostModelError, KeyError) as exc:
        warnings.warn(f"the op model in {ops} could not be loaded ({exc}); refitted from its timings",
                      StaleModelWarning, stacklevel=3)
        timings_meta = read_meta(in_folder(ops, TIMINGS_META))
        return fit_cost_model(read_timings(in_folder(ops, TIMINGS)), timings_meta.get("steps"),
                              profiled_cores(timings_meta), comm=comm, gpu=gpu, loop_iteration=loop_iteration)


def in_folder(folder, shipped_path):
    """The file of ``folder`` named as the shipped ``shipped_path``."""
    return os.path.join(folder, os.path.basename(shipped_path))


def _calibrations(folder=DATA_DIR):
    """The transfer and CPU collective calibrations of ``folder``, else the shipped ones (``None`` where missing)."""
    paths = [in_folder(folder, p) if os.path.exists(in_folder(folder, p)) else p for p in (CALIBRATION, COLLECTIVES)]
    return tuple(TransferCalibration.load(path) if os.path.exists(path) else None for path in paths)


def _record(folder, shipped_path, record):
    """The ``record`` (a VersionedRecord class) saved in ``folder`` under the shipped file's name, else the
    shipped one (``None`` where missing)."""
    path = in_folder(folder, shipped_path) if os.path.exists(in_folder(folder, shipped_path)) else shipped_path
    return record.load(path) if os.path.exists(path) else None


def user_folder():
    """Where ``autodist profile`` writes by default: ``$XDG_CACHE_HOME/autodist/cost-model`` (``~/.cache/...``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "autodist", "cost-model")


def load_cost_model(folder=None, with_remote_step=True):
    """The cost model measured into ``folder`` (by ``autodist profile --out``), else into ``$AUTODIST_COST_MODEL``.

    Without either, the shipped model.  A folder's op data and calibrations
    replace the shipped ones; what it lacks comes from the shipped data.
    ``with_remote_step=False`` leaves the remote step calibration out (to
    price the ops of a new one, cost_models.remote_step).
    """
    folder = folder or os.environ.get(COST_MODEL_ENV)
    if folder and not os.path.isdir(folder):
        raise CostModelError("no such folder (measure one with `autodist profile ... --out DIR`)", source=folder)
    return _model_in(os.path.abspath(folder) if folder else DATA_DIR, with_remote_step)


def profiled_cores(meta):
    """Cores of the machine the timings in ``meta`` were taken on (None if not recorded)."""
    return (meta.get("machine") or {}).get("cores")


def save_default(timings, meta, folder=DATA_DIR):
    """Write timings and their description to ``folder``, fit the cost model
    on them and save its op models next to them (pickle plus metadata).

    Returns
    -------
    CostModel
    """
    from cost_models.fitting.dataset import write_meta, write_timings
    from cost_models.op_model import save_model

    os.makedirs(folder, exist_ok=True)
    model = fit_cost_model(timings, meta.get("steps"), profiled_cores(meta), comm=CommRecords(*_calibrations(folder)))
    timed = timings.timed()
    description = {
        "rows": len(timings),
        "timed_rows": len(timed),
        "timed_one_thread_rows": int(np.isfinite(timed.seconds_one_thread).sum()),
        "devices": sorted(model.learned_devices),
        "executor_overhead_seconds": model.executor_overhead,
        "executor": model.executor.to_dict() if model.executor else None,
        "measured_steps": [m.to_dict() for _, m in sorted(model.measured_steps.items())],
        "origins": sorted(set(timings.origin)),
        "op_types": len(set(timed.raw["op_type"])),
        "file": os.path.basename(TIMINGS),
        "note": meta.get("note", ""),
    }
    write_timings(os.path.join(folder, os.path.basename(TIMINGS)), timings)
    write_meta(os.path.join(folder, os.path.basename(TIMINGS_META)), meta)
    for op_model, pickle_path, meta_path in ((model.op_model, MODEL_PICKLE, MODEL_META),
                                             (model.one_thread_model, ONE_THREAD_PICKLE, ONE_THREAD_META)):
        paths = [os.path.join(folder, os.path.basename(p)) for p in (pickle_path, meta_path)]
        if op_model is not None:
            save_model(op_model, *paths, description)
        else:  # data without one-thread times: an older one-thread model does not describe it
            for path in paths:
                if os.path.exists(path):
                    os.unlink(path)
    _model_in.cache_clear()
    return model
