"""Floating-point operations of one op, from its type, shapes and attributes.

Counts follow the usual convention: a multiply-add is 2 FLOPs.  Heavy op types
(matrix products, convolutions and their backprops) get exact counts; common
element-wise and reduction ops count one FLOP per element; anything else is 0.
Unknown dimensions (``-1``) or ranks (``None``) give 0, never a guess.
"""

from __future__ import annotations

import math

# One FLOP per output element.
ELEMENTWISE = frozenset(
    """Add AddV2 Sub Mul RealDiv Div DivNoNan Maximum Minimum Neg Square Sqrt Rsqrt Exp Log
    Tanh Sigmoid Relu Relu6 Elu Selu LeakyRelu Gelu Softplus Pow SquaredDifference BiasAdd
    ReluGrad Relu6Grad EluGrad SeluGrad LeakyReluGrad TanhGrad SigmoidGrad SqrtGrad RsqrtGrad
    Reciprocal Erf AddN FloorMod FloorDiv Abs Sign""".split()
)
# One FLOP per input element.
REDUCTIONS = frozenset("Sum Mean Max Min Prod BiasAddGrad L2Loss".split())
# A few FLOPs per element (exp, sum, divide, ...).
PER_ELEMENT = {
    "Softmax": 5,
    "LogSoftmax": 5,
    "SoftmaxCrossEntropyWithLogits": 8,
    "SparseSoftmaxCrossEntropyWithLogits": 8,
    "FusedBatchNormV3": 8,
    "FusedBatchNormGradV3": 12,
}


def _known(shape):
    return shape is not None and all(d >= 0 for d in shape)


def _numel(shape):
    return math.prod(shape) if _known(shape) else 0


def _matmul(ins, out, attrs):
    a = ins[0]
    if not (_known(a) and len(a) == 2):
        return 0
    k = a[0] if attrs.get("transpose_a") else a[1]
    return 2 * _numel(out) * k


def _batch_matmul(ins, out, attrs):
    a = ins[0]
    if not (_known(a) and len(a) >= 2):
        return 0
    k = a[-2] if attrs.get("adj_x") else a[-1]
    return 2 * _numel(out) * k


def _einsum(ins, out, attrs):
    """2 x the product of every index size (free and contracted) of an einsum."""
    lhs = attrs.get("equation", "").split("->")[0].split(",")
    if len(lhs) != len(ins) or not all(_known(s) for s in ins):
        return 0
    sizes = {}
    for labels, shape in zip(lhs, ins):
        head, ellipsis, tail = labels.partition("...")
        n_ell = len(shape) - len(head) - len(tail) if ellipsis else 0
        parts = list(head) + [f"...{i}" for i in range(n_ell)] + list(tail)
        if len(parts) != len(shape):
            return 0
        for label, dim in zip(parts, shape):
            sizes[label] = max(sizes.get(label, 1), dim)
    if len(ins) == 1:
        return _numel(ins[0])
    return 2 * math.prod(sizes.values())


def _conv(ins, out, attrs):
    """Forward convolution: 2 x output elements x filter volume x in-channels."""
    filt = ins[1]
    if not _known(filt):
        return 0
    return 2 * _numel(out) * math.prod(filt[:-1])


def _conv_backprop(ins, out, attrs):
    """Both conv backprops: 2 x out_backprop elements x filter volume x in-channels."""
    filt = ins[1] if len(ins) > 1 and _known(ins[1]) and len(ins[1]) >= 4 else out
    grad = ins[2] if len(ins) > 2 else None
    if not (_known(filt) and _known(grad)):
        return 0
    return 2 * _numel(grad) * math.prod(filt[:-1])


def _conv_backprop_filter(ins, out, attrs):
    # inputs: (input, filter_sizes, out_backprop); the output has the filter's shape
    return _conv_backprop([ins[0], out, ins[2] if len(ins) > 2 else None], out, attrs)


def _depthwise(ins, out, attrs):
    filt = ins[1]
    if not _known(filt):
        return 0
    return 2 * _numel(out) * math.prod(filt[:-2])


def _depthwise_backprop_input(ins, out, attrs):
    filt = ins[1] if len(ins) > 1 else None
    grad = ins[2] if len(ins) > 2 else None
    if not (_known(filt) and _known(grad)):
        return 0
    return 2 * _numel(grad) * filt[-1] * math.prod(filt[:-2])


def _depthwise_backprop_filter(ins, out, attrs):
    grad = ins[2] if len(ins) > 2 else None
    if not (_known(out) and _known(grad)):
        return 0
    return 2 * _numel(grad) * math.prod(out[:-2])


HEAVY = {
    "MatMul": _matmul,
    "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul,
    "BatchMatMulV3": _batch_matmul,
    "Einsum": _einsum,
    "Conv2D": _conv,
    "Conv3D": _conv,
    "Conv2DBackpropInput": _conv_backprop,
    "Conv3DBackpropInputV2": _conv_backprop,
    "Conv2DBackpropFilter": _conv_backprop_filter,
    "Conv3DBackpropFilterV2": _conv_backprop_filter,
    "DepthwiseConv2dNative": _depthwise,
    "DepthwiseConv2dNativeBackpropInput": _depthwise_backprop_input,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_backprop_filter,
}


def op_flops(op_type, input_shapes, output_shapes, attrs=None):
    """FLOPs of one execution of an op.

    Parameters
    ----------
    op_type : str
        TensorFlow op type, e.g. ``"Conv2D"``.
    input_shapes : list
        Shape of each data input (list of ints, ``-1`` unknown) or ``None``.
    output_shapes : list
        Shape of each output, same convention.
    attrs : dict, optional
        Op attributes as kept in OpInfo.attrs (transpose flags, equation, ...).

    Returns
    -------
    int
        The FLOP count, 0 when the type is not counted or a shape is unknown.
    """
    attrs = attrs or {}
    out = output_shapes[0] if output_shapes else None
    if op_type in HEAVY:
        return int(HEAVY[op_type](input_shapes, out, attrs))
    if op_type in ELEMENTWISE:
        if op_type == "AddN":
            return _numel(out) * max(len(input_shapes) - 1, 1)
        return _numel(out)
    if op_type in REDUCTIONS:
        return _numel(input_shapes[0]) if input_shapes else 0
    if op_type in PER_ELEMENT:
        src = input_shapes[0] if input_shapes else None
        return PER_ELEMENT[op_type] * _numel(src)
    return 0
