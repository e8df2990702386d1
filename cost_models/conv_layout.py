"""Which convolutions of a step cuDNN gets in NCHW, as the framework that runs the step lays them out.

cuDNN's tensor-core convolutions (half precision, and TF32 on Ampere and
later) take NHWC tensors; given NCHW ones, cuDNN transposes every operand
and result in and out of NHWC.  Measured on an H100 with PyTorch's
ResNet-50 (benchmarks/results/gpu_torch_steps_h100.md): TF32 runs 1.38x
faster channels-last than NCHW, plain float32 (CUDA cores) the same either
way; MosaicML's channels-last method card gives about 30% for AMP on V100 and
A100.  Who lays the tensors out:

- **PyTorch** (published runs): NCHW unless the script asks for channels-last
  (``JobInfo.layout``).
- **XLA** (``xla/service/gpu/transforms/layout_assignment.cc``,
  ``HeuristicLayoutAssignment``): NHWC for every convolution on Hopper and
  later; before Hopper NHWC only for float16/bfloat16 convolutions, NCHW for
  float32 ones, TF32 included.
- **TensorFlow without XLA**, Grappler's layout optimizer
  (``generic_layout_optimizer.cc``, ``GetSrcAndDstDataFormats``): the whole
  graph stays NHWC when at least half of its forward convolutions prefer it
  (half precision on Volta and later; TF32 on Ampere and later, but only in a
  graph with no float32 convolution gradient, so never in a TF32 training
  step); otherwise every convolution runs NCHW.

Only cuDNN's tensor-core convolutions pay for NCHW (a float32 convolution on
CUDA cores takes either layout, and TensorFlow's depthwise convolutions are
its own kernels), so only those are returned.
"""

from __future__ import annotations

import numpy as np

# Architectures whose GPUs have tensor cores (a half or TF32 convolution on them wants NHWC).
TENSOR_CORE_ARCHITECTURES = ("volta", "turing", "ampere", "hopper")
# Architectures on which XLA lays every convolution out NHWC.
XLA_NHWC_ARCHITECTURES = ("hopper",)
FORWARD_CONVS = ("Conv2D", "Conv3D")
CONV_GRADIENTS = ("Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2")
# The convolutions TensorFlow runs through cuDNN (its depthwise ones run kernels of its own, in either layout).
CUDNN_CONVS = FORWARD_CONVS + CONV_GRADIENTS + ("_FusedConv2D",)
# Grappler keeps NHWC where at least this share of the forward convolutions prefer it.
GRAPPLER_NHWC_SHARE = 0.5


def transposed_convs(op_type, conv, half, tf32, architecture, xla, framework="", layout="nhwc"):
    """Per op, whether it is a tensor-core convolution cuDNN gets NCHW tensors for (bool array), and why (the
    layout's chooser, in words; "" where none is).

    ``conv``, ``half`` and ``tf32``: per op, a convolution kernel, one run at
    half precision on tensor cores, one run in TF32 (cost_models.gpu.GpuStep's masks);
    ``xla``: whether XLA compiles the step; ``framework`` and ``layout`` as in
    ``JobInfo`` (a PyTorch run's own layout).
    """
    none = np.zeros_like(conv)
    cudnn = conv & np.isin(op_type, CUDNN_CONVS)
    tensor_core = cudnn & (half | tf32) if architecture in TENSOR_CORE_ARCHITECTURES else none
    if framework == "pytorch":
        chosen = tensor_core if layout == "nchw" else none
        why = "the script keeps PyTorch's NCHW tensors"
    elif xla:
        chosen = tensor_core & ~half if architecture not in XLA_NHWC_ARCHITECTURES else none
        why = "XLA lays float32 convolutions out NCHW before Hopper"
    else:
        chosen = none if _grappler_keeps_nhwc(op_type, conv, half, tf32) else tensor_core
        why = ("Grappler's layout optimizer lays a TF32 training step out NCHW (it keeps NHWC for TF32 convolutions "
               "only where no float32 convolution gradient runs)" if (conv & tf32).any() else
               "Grappler's layout optimizer lays the step out NCHW (fewer than half its convolutions run in half "
               "precision)")
    return chosen, why if chosen.any() else ""


def _grappler_keeps_nhwc(op_type, conv, half, tf32):
    forward = conv & np.isin(op_type, FORWARD_CONVS)
    float32_gradient = bool((conv & np.isin(op_type, CONV_GRADIENTS) & ~half).any())
    prefers = forward & (half | (tf32 & (not float32_gradient)))
    return bool(forward.any()) and prefers.sum() >= GRAPPLER_NHWC_SHARE * forward.sum()
