"""Roofline prior: op time from FLOPs, bytes and per-op-type efficiencies.

seconds = max(FLOPs / (peak * eff_flops), bytes / (bandwidth * eff_memory))
          + launch overhead

It prices ops on CPU devices the learned model has no data for, and ops of
types the learned model does not know; GPUs are priced by the kernel model
(cost_models.gpu), which uses the classes below.  Figures, from
../shared/reference/hardware.md unless stated:
- large matrix products reach ~80% of tensor peak (790 of 989 TFLOP/s for an
  8192^3 bf16 matmul on one H100); convolutions and batched or small products
  reach less, we take 0.6 and 0.5;
- elementwise ops, reductions, gathers and copies are memory bound; we assume
  they stream at 0.8 of peak memory bandwidth (no figure in hardware.md);
- a GPU kernel costs "a few us" to launch: 5 us; on a CPU the TensorFlow
  executor's per-op cost is taken as 2 us (eager dispatch measured ~15 us
  here, graph execution is far cheaper).
Ops that do no kernel work (constants, identities, variable handles, empty
tensor lists) cost the launch overhead only; so do control flow and function
calls (If, While, PartitionedCall): a loop's body, which a capture holds
(autodist.graph.loops), is priced op by op, trips times, on top of its While
op (cost_models.model.CostModel), but an If's branches and a call's body are
not held (their work is not counted).  A tensor list op that moves one
element (a loop's TensorArray read or write, a forward loop keeping a value
for its gradient) moves a reference to it, not its bytes (the kernels in
tensorflow/core/kernels/list_kernels.h copy only a list shared elsewhere);
one that builds a list from a tensor or a tensor from a list copies it.  A dense read of a copy-on-read variable (see
cost_models.features.COPY_ON_READ) is a copy: memory bound.  Op types in
none of the tables get the documented
fallback: streaming their bytes at 0.5 of memory bandwidth, at least 10 us.
"""

from __future__ import annotations

import numpy as np

from autodist.errors import CostModelError
from cost_models.features import COPY_ON_READ, moved_bytes

COMPUTE_EFFICIENCY = {
    "matmul": 0.8,
    "conv": 0.6,
    "batched": 0.5,
}
MEMORY_EFFICIENCY = 0.8
LAUNCH_SECONDS = {"GPU": 5e-6, "CPU": 2e-6}

FALLBACK_MEMORY_EFFICIENCY = 0.5
FALLBACK_MIN_SECONDS = 10e-6

OP_CLASS = {}
for _t in ("MatMul", "_FusedMatMul", "_MklMatMul", "_MklNativeFusedMatMul", "SparseMatMul"):
    OP_CLASS[_t] = "matmul"
for _t in (
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter", "_FusedConv2D", "_MklNativeFusedConv2D",
):
    OP_CLASS[_t] = "conv"
for _t in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"):
    OP_CLASS[_t] = "batched"
for _t in (
    # elementwise arithmetic and activations
    "Add", "AddV2", "AddN", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "FloorDiv", "FloorMod",
    "Maximum", "Minimum", "Neg", "Abs", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Pow",
    "Reciprocal", "SquaredDifference", "Sign", "Round", "Floor", "Ceil", "Erf", "Tanh", "Sigmoid",
    "Sin", "Cos", "Tan", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift",
    "Relu", "Relu6", "Elu", "Selu", "Softplus", "LeakyRelu", "Gelu", "ReluGrad", "Relu6Grad", "EluGrad",
    "SeluGrad", "SoftplusGrad", "LeakyReluGrad", "TanhGrad", "SigmoidGrad", "RsqrtGrad", "SqrtGrad",
    "BiasAdd", "BiasAddGrad", "BiasAddV1", "Cast", "Select", "SelectV2", "Greater", "GreaterEqual",
    "Less", "LessEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "ZerosLike",
    "OnesLike", "Fill", "ClipByValue", "IsFinite", "IsNan", "IsInf", "Erfc", "MatrixBandPart", "Softmax",
    "LogSoftmax",
    "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
    # reductions and normalisation
    "Sum", "Mean", "Max", "Min", "Prod", "ArgMax", "ArgMin", "All", "Any", "L2Loss",
    "FusedBatchNorm", "FusedBatchNormV3", "FusedBatchNormGrad", "FusedBatchNormGradV3",
    "BroadcastGradientArgs", "BroadcastTo", "Tile", "L2Normalize",
    # pooling
    "MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad", "MaxPoolV2", "MaxPoolGradV2", "MaxPool3D", "AvgPool3D",
    "MaxPool3DGrad", "AvgPool3DGrad",
    # data movement
    "Transpose", "ConjugateTranspose", "ConcatV2", "Concat", "Split", "SplitV", "Slice",
    "StridedSlice", "StridedSliceGrad", "Pack", "Unpack", "Pad", "PadV2", "MirrorPad", "Reverse",
    "ReverseV2", "GatherV2", "Gather", "GatherNd", "ResourceGather", "ScatterNd", "OneHot",
    "UnsortedSegmentSum", "SegmentSum", "Unique", "DynamicStitch", "TensorScatterUpdate", "DenseBincount",
    "ImageProjectiveTransformV3",
    # resampling (Keras' Resizing and bilinear UpSampling2D), diagonals, top-k membership (top-k accuracy metrics)
    "ResizeBilinear", "ResizeBilinearGrad", "ResizeNearestNeighbor", "ResizeNearestNeighborGrad", "ResizeBicubic",
    "ResizeBicubicGrad", "ResizeArea", "ScaleAndTranslate", "ScaleAndTranslateGrad", "CropAndResize",
    "CropAndResizeGradImage", "MatrixDiagV3", "MatrixDiagPartV3", "MatrixSetDiagV3", "InTopKV2",
    "Range", "Cumsum", "TopKV2", "Where", "InvertPermutation", "RandomUniform", "RandomStandardNormal",
    "TruncatedNormal", "StatelessRandomUniformV2", "StatelessRandomNormalV2",
    # shape and seed arithmetic on a few elements
    "ConcatOffset", "StatelessRandomGetKeyCounter",
    # tensor lists (a loop's TensorArray): a whole tensor to or from a list
    "TensorListFromTensor", "TensorListStack", "TensorListGather", "TensorListScatterIntoExistingList",
    # variable updates
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceApplyAdam",
    "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyKerasMomentum",
    "ResourceApplyAdagradV2", "ResourceApplyRMSProp", "ResourceScatterAdd", "ResourceScatterSub",
    "ResourceScatterUpdate", "ResourceSparseApplyAdagradV2", "ResourceSparseApplyMomentum",
    "ResourceSparseApplyKerasMomentum", "ResourceSparseApplyGradientDescent", COPY_ON_READ,
):
    OP_CLASS[_t] = "memory"
for _t in (
    "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault",
    "ReadVariableOp", "VarHandleOp", "VarIsInitializedOp", "Shape", "ShapeN", "Size", "Rank",
    "Reshape", "ExpandDims", "Squeeze", "Bitcast", "StopGradient", "PreventGradient", "Snapshot", "_Arg",
    "_Retval", "_Send", "_Recv", "Enter", "Exit", "Merge", "Switch", "NextIteration",
    "LoopCond", "Assert", "PrintV2", "DestroyResourceOp", "EnsureShape", "CheckNumerics",
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase", "PartitionedCall",
    "StatefulPartitionedCall", "EmptyTensorList", "TensorListReserve", "TensorListLength", "TensorListElementShape",
    "TensorListGetItem", "TensorListSetItem", "TensorListPushBack", "TensorListPopBack", "VariableShape", "_Retval",
):
    OP_CLASS[_t] = "trivial"


def known_op_type(op_type):
    """Whether the prior has a class for ``op_type``."""
    return op_type in OP_CLASS


def prior_seconds(raw, device_kind, peak_flops, memory_bandwidth):
    """Prior seconds per row of ``raw`` and a mask of rows that used the fallback.

    Parameters
    ----------
    raw : dict of arrays
        Raw feature columns (cost_models.features.RAW_COLUMNS).
    device_kind : str
        ``"GPU"`` or ``"CPU"`` (sets the launch overhead).
    peak_flops, memory_bandwidth : float or array
        FLOP/s and bytes/s of the device.

    Returns
    -------
    seconds : numpy array
    fallback : numpy bool array
    """
    if device_kind not in LAUNCH_SECONDS:
        raise CostModelError(f"no per-op cost for device kind {device_kind!r} (one of {', '.join(LAUNCH_SECONDS)})",
                             field="kind")
    launch = LAUNCH_SECONDS[device_kind]
    classes = np.array([OP_CLASS.get(t, "") for t in raw["op_type"]], dtype=object)
    compute_eff = np.array([COMPUTE_EFFICIENCY.get(c, 1.0) for c in classes])
    data = moved_bytes(raw)
    roofline = np.maximum(
        raw["flops"] / (np.asarray(peak_flops) * compute_eff),
        data / (np.asarray(memory_bandwidth) * MEMORY_EFFICIENCY),
    )
    fallback = classes == ""
    fallback_seconds = np.maximum(data / (np.asarray(memory_bandwidth) * FALLBACK_MEMORY_EFFICIENCY), FALLBACK_MIN_SECONDS)
    seconds = np.where(classes == "trivial", 0.0, roofline) + launch
    seconds = np.where(fallback, fallback_seconds + launch, seconds)
    return seconds, fallback

