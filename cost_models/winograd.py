"""Which convolutions cuDNN can run as Winograd transforms: fewer multiplies than their FLOP count says.

A 3x3 convolution of stride 1 and no dilation can be computed by Winograd's
minimal filtering: F(2x2, 3x3) does 2.25x fewer multiplies than the direct
convolution, F(4x4, 3x3) 4x (Lavin and Gray 2016).  cuDNN has such algorithms
for the forward pass and both gradients (``CUDNN_CONVOLUTION_*_ALGO_WINOGRAD``
and ``..._WINOGRAD_NONFUSED``), and TensorFlow's and XLA's autotuners pick
them for float32 convolutions on CUDA cores, where they beat implicit GEMM;
tensor-core convolutions (half precision, TF32) run implicit GEMM.  Grouped
convolutions (ResNeXt's) have none.  The GPU kernel model runs these
convolutions at ``winograd`` times the float32 convolution efficiency, a
factor fitted on the published figures (cost_models.gpu).
"""

from __future__ import annotations

FORWARD, INPUT_GRADIENT, FILTER_GRADIENT = "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"


def winograd_convs(ops):
    """Names of the ops of ``ops`` (a step's OpInfo records) that are Winograd-eligible convolutions."""
    outputs = {op.name: op.output_shapes for op in ops}

    def shape(tensor):
        name, _, port = tensor.rpartition(":")
        shapes = outputs.get(name) or []
        port = int(port or 0)
        return list(shapes[port]) if port < len(shapes) and shapes[port] else None

    found = set()
    for op in ops:
        if op.type not in (FORWARD, INPUT_GRADIENT, FILTER_GRADIENT):
            continue
        if any(s != 1 for s in op.attrs.get("strides", [1])) or any(d != 1 for d in op.attrs.get("dilations", [1])):
            continue
        inputs = op.data_inputs
        own = list(op.output_shapes[0]) if op.output_shapes and op.output_shapes[0] else None
        # (filter shape [h, w, in, out], the shape of the image side whose channels are the filter's "in")
        sides = {FORWARD: (shape(inputs[1]) if len(inputs) > 1 else None, shape(inputs[0]) if inputs else None),
                 INPUT_GRADIENT: (shape(inputs[1]) if len(inputs) > 1 else None, own),
                 FILTER_GRADIENT: (own, shape(inputs[0]) if inputs else None)}[op.type]
        kernel, image = sides
        if not kernel or len(kernel) != 4 or kernel[:2] != [3, 3]:
            continue
        channel = 1 if op.attrs.get("data_format") == "NCHW" else 3
        if image and len(image) == 4 and image[channel] not in (-1, kernel[2]):
            continue  # grouped: the image has more channels than the filter takes
        found.add(op.name)
    return found
