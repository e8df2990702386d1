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


def winograd_convs(graph):
    """Names of the ops of ``graph`` (the step's cost_models.gpu_remapper.StepGraph) that are Winograd-eligible
    convolutions."""
    found = set()
    for op in graph.ops:
        if op.type not in (FORWARD, INPUT_GRADIENT, FILTER_GRADIENT):
            continue
        if any(s != 1 for s in op.attrs.get("strides", [1])) or any(d != 1 for d in op.attrs.get("dilations", [1])):
            continue
        own = list(op.output_shapes[0]) if op.output_shapes and op.output_shapes[0] else None
        # (filter shape [h, w, in, out], the shape of the image side whose channels are the filter's "in")
        kernel, image = {FORWARD: (graph.input_shape(op, 1), graph.input_shape(op, 0)),
                         INPUT_GRADIENT: (graph.input_shape(op, 1), own),
                         FILTER_GRADIENT: (own, graph.input_shape(op, 0))}[op.type]
        if not kernel or len(kernel) != 4 or list(kernel[:2]) != [3, 3]:
            continue
        channel = 1 if op.attrs.get("data_format") == "NCHW" else 3
        if image and len(image) == 4 and image[channel] not in (-1, kernel[2]):
            continue  # grouped: the image has more channels than the filter takes
        found.add(op.name)
    return found
