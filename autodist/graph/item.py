"""GraphItem: one training step as plain data.

A GraphItem holds every op of the captured step (forward, backward, optimizer
update), every variable with its gradient and update ops, and facts about the
job.  It serialises to versioned JSON and loads without TensorFlow.

Tensor names follow TensorFlow: ``"op_name:index"``; control inputs are
written ``"^op_name"``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import networkx as nx

from autodist.graph.checks import PHASES, check_graph_document
from autodist.io import check_document, read_json, write_text_atomic

FORMAT = "autodist.graph_item"
VERSION = 1


@dataclass
class OpInfo:
    """One op of the step.

    ``output_shapes`` entries are lists of ints (``-1`` for an unknown
    dimension) or ``None`` for an unknown rank; ``output_bytes`` uses 0 for
    an unknown size.  ``flops`` is 0 for op types we do not count.
    ``attrs`` keeps the few attributes cost features need (strides, padding,
    data_format, transpose flags, equation).
    """

    name: str
    type: str
    inputs: list[str] = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    output_bytes: list[int] = field(default_factory=list)
    scope: str = ""
    phase: str = "other"
    flops: int = 0
    colocation: list[str] = field(default_factory=list)
    device: str = ""
    attrs: dict = field(default_factory=dict)

    @property
    def data_inputs(self):
        """Input tensor names, without control inputs."""
        return [t for t in self.inputs if not t.startswith("^")]

    @property
    def total_output_bytes(self):
        return sum(self.output_bytes)


@dataclass
class LoopInfo:
    """The body of one loop op (``While``, ``StatelessWhile``) of the step, which runs ``trips`` times per step.

    ``op`` names the loop op; ``ops`` are what one iteration runs, in
    topological order: the body function's ops, its condition's ops and, where
    TensorFlow lowers the loop (``lowered``), the control ops it lowers it to
    (see :mod:`autodist.graph.loops`).  ``outputs`` are the tensors an
    iteration hands to the next.  ``trips_known`` is False where the capture
    could not find the trip count: ``trips`` is then 1 (the body priced once).
    ``loops`` are the loops the body holds, priced per iteration of this one.
    An op's ``flops`` is that of one execution; the loop op's own record
    carries ``trips`` x its body's (see :meth:`flops`).
    """

    op: str
    trips: int = 1
    trips_known: bool = True
    lowered: bool = True
    ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    loops: list = field(default_factory=list)

    def flops(self):
        """FLOPs of every iteration together, nested loops included."""
        return self.trips * sum(op.flops for op in self.ops)

    def kept_bytes(self):
        """Output index of the loop op -> bytes of the tensor list it returns that every iteration appends one
        element to (a forward loop keeps each step's activations for its gradient loop): trips x the element."""
        produced = {op.name: op for op in self.ops}
        sizes = {f"{op.name}:{i}": b for op in self.ops for i, b in enumerate(op.output_bytes)}
        kept = {}
        for i, tensor in enumerate(self.outputs):
            producer = produced.get(tensor.rpartition(":")[0])
            if producer is not None and producer.type == "TensorListPushBack" and len(producer.data_inputs) > 1:
                kept[i] = self.trips * sizes.get(producer.data_inputs[1], 0)
        return kept

    def unknown_trips(self):
        """Names of the loop ops, this one or nested, whose trip count the capture could not find."""
        return ([] if self.trips_known else [self.op]) + [name for loop in self.loops for name in loop.unknown_trips()]

    def to_dict(self):
        record = {name: _copy(value) for name, value in vars(self).items() if name not in ("ops", "loops")}
        return dict(record, ops=[_plain(op) for op in self.ops], loops=[loop.to_dict() for loop in self.loops])

    @classmethod
    def from_dict(cls, data):
        return cls(**dict(data, ops=[OpInfo(**o) for o in data["ops"]],
                          loops=[cls.from_dict(loop) for loop in data["loops"]]))


@dataclass
class VariableInfo:
    """One variable: a model weight, or an optimizer slot of one.

    ``handle_op`` is the op that yields the variable's resource handle in the
    step graph.  ``gradients`` are tensor names; for a sparse gradient they
    are the IndexedSlices (values, indices) tensors.  ``slot_of`` names the
    trainable variable an optimizer slot belongs to.  ``model_weight`` is True
    for the model's own weights, trainable or not (e.g. BatchNorm moving
    statistics), and False for optimizer and metric state.
    """

    name: str
    shape: list[int]
    dtype: str
    bytes: int
    trainable: bool = True
    handle_op: str = ""
    read_ops: list[str] = field(default_factory=list)
    gradients: list[str] = field(default_factory=list)
    sparse_gradient: bool = False
    sparse_update: bool = False
    update_ops: list[str] = field(default_factory=list)
    slots: list[str] = field(default_factory=list)
    slot_of: str | None = None
    rows_touched: int | None = None
    model_weight: bool = False


# model.fit arguments autodist's one-client fit loop (PS and hybrid plans) does not run; Keras' own fit, which runs
# plans that allreduce every variable, runs them.
ONE_CLIENT_FIT_ARGS = ("class_weight", "sample_weight", "steps_per_epoch")


@dataclass
class JobInfo:
    """Facts about the job the step belongs to."""

    model_name: str = ""
    batch_size: int = 0
    input_shapes: dict = field(default_factory=dict)
    optimizer: str = ""
    tf_version: str = ""
    source: str = ""
    # How the script trains: "fit" (keras.Model.fit), "function" (a custom
    # loop's step function) or "" (a graph loaded from a file).
    step: str = ""
    # Numeric precision of the step's compute: "fp32", "tf32" (float32 products
    # on TF32 tensor cores where the GPU has them, TensorFlow's default), "fp16"
    # or "bf16" (Keras mixed precision); "" for graphs that do not say (fp32).
    precision: str = ""
    # The Keras dtype policy the script ran under ("float32", "mixed_float16", ...).
    dtype_policy: str = ""
    # Whether the step is compiled with XLA on the host that captured it (Keras' jit_compile,
    # tf.function(jit_compile=True)).
    xla: bool = False
    # What the script asked for: "on", "off" or "auto" (Keras' default, resolved per device where the step is
    # priced: autodist.graph.xla); "" for graphs that do not say ("on" where ``xla``, else "off").
    jit_compile: str = ""
    # Keras' model_supports_jit: every layer supports XLA and op determinism is off (for "auto").
    jit_supported: bool = True
    # The tf.distribute strategy the model was built under ("" for none), which turns Keras' "auto" off.
    distribute_strategy: str = ""
    # The Keras LSTM and GRU layers that run on cuDNN on a GPU (their settings allow it), which turns Keras' "auto"
    # off there: cuDNN's RNN ops are not XLA-compilable (autodist.graph.xla).  A CPU-only host runs them as loops.
    cudnn_rnns: list = field(default_factory=list)
    # Whose kernels run the step: "" TensorFlow (the graph's ops, as Grappler and XLA leave them), or "pytorch",
    # a published PyTorch run's hand-fused kernels (cost_models.gpu; only calibration rows say so), and the
    # layout cuDNN gets its convolution tensors in: "" (TensorFlow's NHWC on GPUs) or "nchw" (PyTorch's default).
    framework: str = ""
    layout: str = ""
    # Whether TensorFlow's automatic mixed precision graph rewrite runs the float32 step in float16 on GPUs
    # (autodist.graph.amp_rewrite: the ops are the rewritten graph's).
    amp_rewrite: bool = False
    # TensorFlow's GPU_ENV switches (autodist.graph.job_options) the script's process turned on when capture
    # traced the step: which fused kernels Grappler's remapper runs on a GPU (cost_models.gpu_remapper).
    gpu_env: list = field(default_factory=list)
    # Micro-batches whose gradients are accumulated before one update (gradient accumulation).
    micro_batches: int = 1
    # Whether autodist's runtime runs this job on collective ops only: a custom
    # loop captured from a script (see why_collective_only); placement reads it.
    collective_only: bool = False
    # Why the step cannot run at another batch (it pins the captured batch in a shape, e.g. a Reshape to a
    # constant shape): "" where it can.  Set at capture (autodist.graph.trace).
    batch_pinned: str = ""
    # Horovod's batch semantics (autodist.graph.semantics): every replica runs the script's own batch
    # (script_batch) and batch_size is replicas x that batch.
    batch_per_replica: bool = False
    # The batch the script gives one step where the job is planned at another (0: batch_size).
    script_batch: int = 0
    # The model.fit arguments the step's call passes that only Keras' own fit loop runs (ONE_CLIENT_FIT_ARGS):
    # autodist's one-client loop, which runs PS and hybrid plans, does not.
    fit_arguments: list = field(default_factory=list)
    # The class (module.Name) whose own train_step Keras' fit runs for the model, "" for Keras' own: autodist's
    # one-client loop, which runs PS and hybrid plans, rebuilds Keras' own step and cannot run another.
    custom_train_step: str = ""
    # The variables the step's optimizers update more than once a step (a GAN's critic updated n times before its
    # generator), with how many times: the runtime sums their gradients at each update; the simulator prices one.
    updates_per_step: dict = field(default_factory=dict)
    # The costly op types the tf.data pipeline that feeds model.fit runs on the host (autodist.graph.input_pipeline:
    # reading, decoding, resizing, ...), which the step's price leaves out; [] for none or another input.
    input_pipeline: list = field(default_factory=list)

    def why_collective_only(self):
        """Why only plans that allreduce every variable, one device per replica, can run this job; None if any can.

        A custom loop's step runs as written in every replica process, its
        gradients summed on collective ops.  PS and hybrid plans run from one
        client that rebuilds a compiled Keras model's step with each variable
        where the plan puts it; the variables a custom step closes over
        cannot be moved there, and TensorFlow 2.21 allows no collective op in
        a client that runs ops on other tasks.  Placement leaves such plans out.
        """
        if self.collective_only:
            return ("a custom training loop runs on collective ops only (PS and hybrid plans run a compiled Keras "
                    "model's step from one client)")
        if self.custom_train_step:
            return (f"{self.custom_train_step} overrides train_step, which Keras' fit runs in every replica on "
                    "collective ops (PS and hybrid plans run Keras' own step from one client)")
        if self.fit_arguments:
            return (f"model.fit({self.fit_arguments[0]}=...) runs in Keras' own fit loop, under plans that allreduce "
                    "every variable (PS and hybrid plans run autodist's one-client loop, which does not take it)")
        if self.batch_per_replica:
            return ("every replica runs the script's own batch, which runs on collective ops only (PS and hybrid "
                    "plans split one global batch from one client)")
        return None


def _copy(value):
    """Copy of a record field: the records hold lists and dicts of plain values, at most two deep."""
    if isinstance(value, list):
        return [_copy(v) if isinstance(v, (list, dict)) else v for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) if isinstance(v, (list, dict)) else v for k, v in value.items()}
    return value


def _plain(record):
    """A dataclass record as a dict of copies (``dataclasses.asdict`` is ~30x slower here)."""
    return {name: _copy(value) for name, value in vars(record).items()}


class GraphItem:
    """The training step: ops in topological order, variables and job facts.

    Parameters
    ----------
    ops : list of OpInfo
        Every op of the step.
    variables : list of VariableInfo
        Trainable weights and optimizer slots.
    job : JobInfo
    loops : list of LoopInfo, optional
        The bodies of the step's loop ops (absent from documents of steps
        without loops, which read as before).
    """

    def __init__(self, ops, variables, job=None, loops=()):
        self.ops = {op.name: op for op in ops}
        self.variables = {v.name: v for v in variables}
        self.job = job or JobInfo()
        self.loops = {loop.op: loop for loop in loops}
        self._graph = None
        self._structure = None

    # -- views -----------------------------------------------------------
    @property
    def graph(self):
        """A ``networkx.DiGraph`` of op names; edges carry ``bytes``."""
        if self._graph is None:
            g = nx.DiGraph()
            for op in self.ops.values():
                g.add_node(op.name)
            for op in self.ops.values():
                for tensor in op.inputs:
                    src, nbytes = self._edge(tensor)
                    if src in self.ops and src != op.name:
                        old = g.get_edge_data(src, op.name, {"bytes": 0})["bytes"]
                        g.add_edge(src, op.name, bytes=old + nbytes)
            self._graph = g
        return self._graph

    def _edge(self, tensor):
        if tensor.startswith("^"):
            return tensor[1:], 0
        src, _, idx = tensor.rpartition(":")
        if not src:
            return tensor, 0
        op = self.ops.get(src)
        if op is None:
            return src, 0
        i = int(idx)
        return src, op.output_bytes[i] if i < len(op.output_bytes) else 0

    def tensor_bytes(self, tensor):
        """Bytes of a tensor named ``"op:index"`` (0 when unknown)."""
        return self._edge(tensor)[1]

    def trainable_variables(self):
        return [v for v in self.variables.values() if v.trainable]

    def slot_variables(self):
        return [v for v in self.variables.values() if v.slot_of is not None]

    def parameter_bytes(self):
        return sum(v.bytes for v in self.trainable_variables())

    def model_weights(self):
        """The model's own weights, trainable or not (what ``keras.Model.count_params`` counts)."""
        return [v for v in self.variables.values() if v.model_weight]

    def parameter_count(self):
        total = 0
        for v in self.trainable_variables():
            n = 1
            for d in v.shape:
                n *= d
            total += n
        return total

    def step_inputs(self):
        """Names of the placeholders that feed the batch to the step (their first dimension is the batch size)."""
        batch = self.job.batch_size
        return {name for name, op in self.ops.items()
                if op.type == "Placeholder" and not op.data_inputs
                and op.output_shapes and op.output_shapes[0] and op.output_shapes[0][0] == batch}

    def input_bytes(self):
        """Bytes of one step's input batch (features and labels), as the step's placeholders hold it."""
        return sum(self.ops[name].total_output_bytes for name in self.step_inputs())

    def total_flops(self):
        """FLOPs of one step; a loop op's record carries its iterations' (:class:`LoopInfo`)."""
        return sum(op.flops for op in self.ops.values())

    def unknown_trips(self):
        """Names of the loop ops whose trip count the capture could not find (their body is priced once)."""
        return [name for loop in self.loops.values() for name in loop.unknown_trips()]

    def ops_by_phase(self):
        counts = {p: 0 for p in PHASES}
        for op in self.ops.values():
            counts[op.phase] += 1
        return counts

    def describe(self):
        """One line: model, ops, trainable variables, parameters and batch size."""
        return (
            f"{self.job.model_name or '(unnamed model)'}: {len(self.ops):,} ops, "
            f"{len(self.trainable_variables())} trainable variables ({self.parameter_count():,} parameters), "
            f"batch size {self.job.batch_size}"
        )

    # -- serialisation ---------------------------------------------------
    def to_dict(self):
        data = {
            "format": FORMAT,
            "version": VERSION,
            "job": _plain(self.job),
            "ops": [_plain(op) for op in self.ops.values()],
            "variables": [_plain(v) for v in self.variables.values()],
        }
        if self.loops:  # an optional field: steps without loops keep their documents (and content hashes)
            data["loops"] = [loop.to_dict() for loop in self.loops.values()]
        return data

    def content_hash(self):
        """sha256 of the canonical JSON of ops, variables and job facts."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def structure_hash(self):
        """sha256 of what the batch does not change: the op types (with counts) and the variables' shapes.

        A step captured at another batch (or re-scaled to one, see
        ``autodist.graph.rebatch.at_batch``) has the same structure hash.
        """
        if self._structure is None:
            ops = sorted(op.type for op in self.ops.values())
            variables = sorted((list(v.shape), v.dtype) for v in self.variables.values())
            self._structure = hashlib.sha256(json.dumps([ops, variables], separators=(",", ":")).encode()).hexdigest()
        return self._structure

    @classmethod
    def from_dict(cls, data, where="<graph item>"):
        """A GraphItem from its JSON document, once every invariant of :mod:`autodist.graph.checks` holds."""
        check_document(data, FORMAT, VERSION, "graph item", where)
        check_graph_document(data, where)
        return cls(
            [OpInfo(**o) for o in data["ops"]],
            [VariableInfo(**v) for v in data["variables"]],
            JobInfo(**data["job"]),
            [LoopInfo.from_dict(loop) for loop in data.get("loops", [])],
        )

    def save(self, path):
        """Write compact JSON atomically (temp file, then rename).

        Compact, because ``json`` only uses its fast C encoder without
        indentation: a ResNet-50 step saves in a third of the time.
        """
        write_text_atomic(path, json.dumps(self.to_dict(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path):
        return cls.from_dict(read_json(path), where=str(path))

    def __eq__(self, other):
        return isinstance(other, GraphItem) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return (
            f"GraphItem(model={self.job.model_name!r}, ops={len(self.ops)}, "
            f"variables={len(self.variables)})"
        )
