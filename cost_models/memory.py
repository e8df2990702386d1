"""Peak device memory of a training step, from the liveness of its tensors.

A device holds, at the peak of a step:
- its parameters and optimizer slots (persistent, given by the caller), and a
  gradient accumulation buffer as large as the parameters when the step
  accumulates several micro-batches;
- every tensor alive at that moment: an op that runs a kernel allocates its
  outputs when it runs and they are freed after their last reader
  (cost_models.step_table's ``last_use``, which follows reshapes and
  identities to the real reader; a multi-output op's outputs read earlier,
  ``early_bytes``, are freed after their own last reader).  Forward outputs are therefore held until
  their backward use, gradients until the update, temporaries briefly.
  Ops that run no kernel (constants, variable reads, reshapes) allocate
  nothing; pruned ops never run;
- a framework reserve and, for convolutional steps, cuDNN's workspace.

Under fused kernels (cost_models.step_table.fuses_elementwise: XLA, or the hand-fused
kernels of the published runs' frameworks), a chain of elementwise ops runs
as one kernel, fused into the reductions it feeds, and writes only what
another kind of op reads: an elementwise output that only elementwise ops
and reductions read (``opaque_use`` of the step table is -1) is never
allocated; its backward recomputes it from the chain's stored input
(cost_models.step_table.inside_elementwise_chains).  Dropout masks (bool)
are stored.  This is what lets the published BERT runs fit: the Keras graph
computes GELU and layer norm from primitive ops and would hold their
intermediates (G33, G34 at batch 112 and 320 on 80 GB: 93 and 97 GB
without it).

The peak is found by sweeping the ops in graph order, which is the order
TensorFlow's executor runs a step's forward, backward and update on one
stream.
"""

from __future__ import annotations

import numpy as np

from cost_models.gpu import HOST_DTYPES, halved_by_precision
from cost_models.prior import OP_CLASS
from cost_models.step_table import CONV_TYPES, inside_elementwise_chains

# Assumed, not measured (no figure in ../shared/reference): TensorFlow's
# runtime and allocator fragmentation hold about half a GB of a GPU beyond the
# tensors, and cuDNN's convolution workspace, which TensorFlow caps at 4 GiB
# (TF_CUDNN_WORKSPACE_LIMIT_IN_MB), is taken as 256 MiB for the algorithms
# autotuning picks on the calibration models.
FRAMEWORK_RESERVE_BYTES = 512 * 2**20
CONV_WORKSPACE_BYTES = 256 * 2**20


def allocated_bytes(table, precision="fp32", fused_kernels=False):
    """Bytes each op allocates for its outputs when it runs (0 for ops that run no kernel).

    A float32 graph run at fp16/bf16 (a precision override) allocates half
    the bytes for its forward and backward float32 outputs
    (cost_models.gpu.halved_by_precision).  With
    ``fused_kernels``, the inside of elementwise chains is not allocated
    (see the module docstring).
    """
    classes = np.array([OP_CLASS.get(t, "") for t in table["op_type"]], dtype=object)
    allocates = (classes != "trivial") & (table["unread"] == 0) & ~np.isin(table["dtype"], HOST_DTYPES)
    if fused_kernels:
        allocates = allocates & ~inside_elementwise_chains(table)
    nbytes = np.where(allocates, table["output_bytes"], 0.0)
    return np.where(halved_by_precision(table, precision), nbytes / 2, nbytes)


def live_peak(table, precision="fp32", mask=None, fused_kernels=False):
    """The largest total of live tensor bytes over the step (ops where ``mask``, if given)."""
    nbytes = allocated_bytes(table, precision, fused_kernels)
    if mask is not None:
        nbytes = np.where(mask, nbytes, 0.0)
    n = len(nbytes)
    if n == 0:
        return 0
    index = np.arange(n)
    # Outputs last read early (cost_models.step_table's early_bytes) are freed after their own last reader.
    early = nbytes * np.divide(table["early_bytes"], table["output_bytes"], out=np.zeros(n),
                               where=table["output_bytes"] > 0)
    freed = np.maximum(table["last_use"], index) + 1
    freed_early = np.maximum(table["early_use"], index) + 1
    delta = np.zeros(n + 1)
    np.add.at(delta, index, nbytes)
    np.add.at(delta, freed, early - nbytes)
    np.add.at(delta, freed_early, -early)
    return int(np.cumsum(delta)[:n].max())


def runtime_overhead_bytes(table, mask=None):
    """The framework reserve, plus cuDNN's workspace where the step convolves."""
    convolves = np.isin(table["op_type"], CONV_TYPES)
    if mask is not None:
        convolves = convolves & mask
    return FRAMEWORK_RESERVE_BYTES + (CONV_WORKSPACE_BYTES if convolves.any() else 0)


def step_peak_bytes(table, persistent_bytes, accumulated_bytes=0, micro_batches=1, precision="fp32", mask=None,
                    fused_kernels=False):
    """Peak bytes of one GPU running the step (ops where ``mask``).

    ``persistent_bytes``: parameters and optimizer slots held on the device;
    ``accumulated_bytes``: the gradients it accumulates over ``micro_batches``
    (a buffer only when there is more than one); ``fused_kernels``: whether
    elementwise chains run fused (XLA, or a published run's framework).
    """
    accumulation = accumulated_bytes if micro_batches > 1 else 0
    return (int(persistent_bytes) + int(accumulation) + live_peak(table, precision, mask, fused_kernels)
            + runtime_overhead_bytes(table, mask))
