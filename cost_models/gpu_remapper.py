"""The ops TensorFlow's Grappler remapper folds into another op's GPU kernel when XLA does not compile the step.

TensorFlow 2.21's remapper (tensorflow/core/grappler/optimizers/remapper.cc:
``IsGpuCompatible``, ``FindContractionWithBias*``, ``FindFusedBatchNormEx``,
``FindFusedBatchNormGradEx``) rewrites, for ops placed on a GPU:

- Conv2D + BiasAdd + Relu into one ``_FusedConv2D`` (cuDNN's fused
  convolution): float32 only, a spatial filter (neither of its dimensions 1:
  1x1 fused convolutions ran "significantly slower in large scale
  benchmarks"), Relu the only activation.  A Conv2D + BiasAdd alone, a
  float16 convolution or another activation is not rewritten on a GPU.
- MatMul + BiasAdd (+ Relu) into one ``_FusedMatMul`` (cuBLASLt's epilogue),
  float32 or float16, only where the process sets ``TF_USE_CUBLASLT``.
- FusedBatchNorm (+ an Add of a side input) + Relu into one
  ``_FusedBatchNormEx``, and the gradient's ReluGrad into its
  ``FusedBatchNormGrad``: in training only for float16 NHWC tensors whose
  channels are a multiple of 4, and only where the process sets
  ``TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT`` (NVIDIA's TensorFlow 1
  examples set it); in inference for float32 or float16, NHWC or NCHW.

In every pattern each intermediate has no other reader and no control edge.
A folded op launches no kernel, and moves only what the fused kernel still
moves for it: nothing for an epilogue (a bias, a Relu), the side input for
the batch norm's Add (read), and for the Relu's gradient the activation it
masks by (read) and, with a side input, the side input's gradient (written).
The switches are the ones capture saw the script turn on
(``JobInfo.gpu_env``).  Where XLA compiles the step, the remapper leaves it
to XLA (cost_models.step_table.epilogue_fused prices XLA's fusions).

Why a rule here and not the pass itself: capture has no GPU, and run on a
virtual GPU (as autodist.graph.amp_rewrite runs the mixed precision pass),
TensorFlow 2.21's CPU build rewrites none of these patterns, while the same
graph placed on the CPU gets its CPU fusions.
"""

from __future__ import annotations

from autodist.graph.job_options import BATCHNORM_PERSISTENT, CUBLASLT

BATCH_NORMS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
BATCH_NORM_GRADS = ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
SIDE_INPUT_ADDS = ("Add", "AddV2")


class StepGraph:
    """The step's ops with who reads what, and the shapes and bytes of their inputs (the remapper's view of the
    graph, cost_models.winograd's too)."""

    def __init__(self, ops, inputs):
        self.ops = ops
        self.inputs = inputs
        self.by_name = {op.name: op for op in ops}
        self.position = {op.name: i for i, op in enumerate(ops)}
        self.readers = {}
        for tensors in inputs:
            for tensor in tensors:
                self.readers[tensor] = self.readers.get(tensor, 0) + 1
        self.controlled = set()  # ops with a control input or a control output
        for op in ops:
            controls = [t[1:] for t in op.inputs if t.startswith("^")]
            if controls:
                self.controlled.add(op.name)
                self.controlled.update(controls)

    def free(self, op):
        return op.name not in self.controlled

    def input_op(self, op, index=0):
        """The op producing ``op``'s input ``index`` where ``op`` is its only reader and no control edge touches
        it (a pattern's intermediate), else None."""
        tensors = self.inputs[self.position[op.name]]
        if len(tensors) <= index:
            return None
        source = self.by_name.get(tensors[index].rpartition(":")[0])
        if source is None or self.readers[tensors[index]] != 1 or not self.free(source):
            return None
        return source

    def _source(self, op, index):
        """``(producer, output index)`` of ``op``'s input ``index``; ``(None, 0)`` if none."""
        tensors = self.inputs[self.position[op.name]]
        if len(tensors) <= index:
            return None, 0
        name, _, port = tensors[index].rpartition(":")
        return self.by_name.get(name), int(port or 0)

    def producer(self, op, index):
        """The op producing ``op``'s input ``index`` (None if none)."""
        return self._source(op, index)[0]

    def input_bytes(self, op, index):
        """Bytes of ``op``'s input ``index`` (0 if not known)."""
        source, port = self._source(op, index)
        return source.output_bytes[port] if source is not None and port < len(source.output_bytes) else 0

    def input_shape(self, op, index):
        """Shape of ``op``'s input ``index`` (None if not known)."""
        source, port = self._source(op, index)
        return source.output_shapes[port] if source is not None and port < len(source.output_shapes) else None


def _dtype(op):
    return op.output_dtypes[0] if op.output_dtypes else ""


def _spatial_filter(graph, conv):
    """Whether ``conv``'s filter is known and neither of its spatial dimensions is 1."""
    shape = graph.input_shape(conv, 1)
    return bool(shape) and len(shape) == 4 and shape[0] not in (1, -1) and shape[1] not in (1, -1)


def _fusing_contraction(graph, bias_add, env, with_relu):
    """Whether the remapper folds ``bias_add`` (and the Relu reading it, ``with_relu``) into its product."""
    product = graph.input_op(bias_add)
    if product is None:
        return False
    if product.type == "MatMul":
        return CUBLASLT in env and _dtype(product) in ("float32", "float16")
    return (with_relu and product.type == "Conv2D" and _dtype(product) == "float32"
            and product.attrs.get("data_format", "NHWC") in ("NHWC", "NCHW") and _spatial_filter(graph, product))


def _fusing_batch_norm(graph, batch_norm, env):
    """Whether ``batch_norm`` is one the remapper fuses with the Relu after it (its output read once)."""
    if batch_norm is None or batch_norm.type not in BATCH_NORMS or not graph.free(batch_norm):
        return False
    if graph.readers.get(f"{batch_norm.name}:0", 0) != 1:
        return False
    data_format, dtype = batch_norm.attrs.get("data_format", "NHWC"), _dtype(batch_norm)
    if not batch_norm.attrs.get("is_training", True):
        return dtype in ("float32", "float16") and data_format in ("NHWC", "NCHW")
    shape = batch_norm.output_shapes[0] if batch_norm.output_shapes else None
    return (BATCHNORM_PERSISTENT in env and dtype == "float16" and data_format == "NHWC"
            and bool(shape) and len(shape) == 4 and shape[3] > 0 and shape[3] % 4 == 0)


def _relu_fusions(graph, relu, env):
    """The ops folded together with ``relu`` (itself included), each with the bytes the fused kernel still moves
    for it; empty where none is."""
    source = graph.input_op(relu)
    if source is None or not graph.free(relu):
        return {}
    if source.type == "BiasAdd":
        return {source.name: 0, relu.name: 0} if _fusing_contraction(graph, source, env, with_relu=True) else {}
    if source.type in BATCH_NORMS:
        return {relu.name: 0} if _fusing_batch_norm(graph, source, env) else {}
    if source.type in SIDE_INPUT_ADDS:
        shapes = [graph.input_shape(source, i) for i in (0, 1)]
        same_shape = shapes[0] is not None and shapes[0] == shapes[1]  # FusedBatchNormEx does not broadcast
        for norm, side in ((graph.producer(source, 0), 1), (graph.producer(source, 1), 0)):
            if same_shape and _fusing_batch_norm(graph, norm, env):
                return {source.name: graph.input_bytes(source, side), relu.name: 0}
    return {}


def remapper_fused(graph, env=()):
    """The ops the GPU remapper folds into another op's kernel (see the module docstring): name -> the bytes the
    fused kernel still moves for it.

    ``graph`` is the step's :class:`StepGraph` (its ops in topological
    order); ``env`` the switches the script turned on (``JobInfo.gpu_env``).
    """
    ops, inputs = graph.ops, graph.inputs
    fused = {}
    for op in ops:
        if op.type == "Relu":
            fused.update(_relu_fusions(graph, op, env))
    # What a batch norm's gradient reads as its incoming gradient.
    batch_norm_gradients = {tensors[0] for op, tensors in zip(ops, inputs) if op.type in BATCH_NORM_GRADS and tensors}
    for op in ops:
        if op.type == "BiasAdd" and op.name not in fused and graph.free(op):
            if _fusing_contraction(graph, op, env, with_relu=False):
                fused[op.name] = 0
        elif op.type == "ReluGrad" and graph.free(op) and f"{op.name}:0" in batch_norm_gradients:
            # The gradient of a fused batch norm + (side input +) Relu: the Relu's gradient folds into the batch
            # norm's, the only reader of its output (or one of two, with the side input's gradient, then written).
            activation = graph.producer(op, 1)
            readers = graph.readers[f"{op.name}:0"]
            if activation is not None and activation.name in fused and readers <= 2:
                side_gradient = op.output_bytes[0] if readers == 2 and op.output_bytes else 0
                fused[op.name] = graph.input_bytes(op, 1) + side_gradient
    return fused
