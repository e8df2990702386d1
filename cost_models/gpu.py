"""GPU kernel model: how TensorFlow runs one training step on one GPU.

What a step costs on a GPU, as modelled:

- **No kernel, no cost.**  Constants, identities, variable reads, reshapes,
  shape arithmetic and control flow run no GPU kernel (the ``trivial``
  class of cost_models.prior); neither do small int32 ops, which TensorFlow
  keeps in host memory.  Ops nothing reads are pruned (cost_models.features).
- **Ops run inside another's kernel launch nothing.**  Without XLA, those
  Grappler's remapper folds into a fused kernel as TensorFlow 2.21 does on a
  GPU (cost_models.gpu_remapper: a float32 spatial convolution's BiasAdd and
  Relu; a matrix product's only under cuBLASLt; a batch norm's side-input
  Add and Relu, and the Relu's gradient, only in float16 under cuDNN's
  persistent batch norm), moving only what the fused kernel still moves for
  them; with XLA, and in the published PyTorch runs, the bias add and
  activation after a product (cost_models.step_table.epilogue_fused), which
  cost nothing.
- **Kernels.**  A matrix product or convolution runs at
  ``peak(precision) * efficiency(class, precision) / (1 + half_flops / flops)``
  (small products are far from peak), with one efficiency per class
  (matmul, conv) and precision (half, tf32, fp32), a float32 convolution
  cuDNN runs as a Winograd transform at ``winograd`` times its class's
  (cost_models.winograd: fewer multiplies than its FLOPs), and never faster than it
  streams its operands and result (the roofline: a product of few FLOPs per
  byte is memory-bound).  Every other kernel (elementwise, reductions,
  normalisation, gathers, each optimizer-update op) streams its bytes at
  ``memory`` times the memory bandwidth.  float32 products use TF32 tensor
  cores where the GPU has them and the job allows it (TensorFlow's default
  on Ampere and later), float16/bfloat16 ops their tensor-core peak, or,
  where the GPU has no tensor cores for the dtype (Pascal; bfloat16 before
  Ampere), the float32 peak and efficiency (:data:`CUDA_CORE_HALVES`).  A
  float32 graph run at fp16/bf16 moves half the bytes outside its update; a
  mixed-precision graph moves what its dtypes say (:func:`halved_by_precision`).
- **Fusion.**  Where a step's elementwise chains run fused (XLA, or a
  published run's framework, see below), the memory-bound ops inside a
  chain (cost_models.step_table.inside_elementwise_chains) launch nothing
  and move nothing: the kernel that ends the chain keeps their
  intermediates in registers.  Keras computes a mixed-precision batch norm
  in float32 from primitive ops (casts in and out), so this is what lets an
  AMP ResNet-50 move about half the bytes per sample of its float32 step,
  as NVIDIA's fused fp16 kernels do.  The memory-bound kernels left are
  scaled by one factor per fuser: ``xla_memory`` under XLA (TensorFlow's
  CNNs and transformers alike), ``fused_pytorch`` for PyTorch's examples.
  Whether a job runs XLA is resolved for the device it runs on
  (autodist.graph.xla: Keras' jit_compile="auto" compiles with XLA on
  GPUs).  A published TensorFlow run whose source does not say is
  priced between the two, at the geometric mean of its step with and
  without XLA (no parameter stands for what the source left out); XLA does
  not apply to PyTorch.
- **The published runs' own kernels.**  The calibration steps are the zoo's
  Keras 3 equivalents of the published models, captured as a user captures
  them.  Keras 3 computes batch norm, GELU and dropout from primitive ops,
  which run as kernels of their own without XLA; NVIDIA's TensorFlow 1
  ResNets without XLA ran batch norm as FusedBatchNormV3, and their steps
  are captured so (the zoo's ``--fused-batch-norm``).  PyTorch's examples
  fused their elementwise chains by hand (``JobInfo.framework`` "pytorch",
  cost_models.step_table.fuses_elementwise).  TensorFlow's transformers
  without XLA ran layer norm, GELU and dropout as separate ops, as the
  Keras graph does (G20/amp runs 2.3x slower than G20/amp-xla).  NVIDIA's
  TensorFlow 1 examples ran AMP as TensorFlow's graph rewrite of their float32 step, which keeps BERT's layer
  norms, tanh GELU and softmax in float32; their BERT steps are captured
  that way (autodist.graph.amp_rewrite), as is a user's job that turns the
  rewrite on.
- **Launches.**  The host issues kernels one after another, ``launch``
  seconds each; the GPU runs them in order on one stream.  A kernel starts
  when it is issued and the previous one ended, so launch cost shows only
  where kernels are shorter than their launch:
  ``end_i = max(end_{i-1}, issued_i) + kernel_i``.
- **Tensor layout.**  cuDNN's tensor-core convolutions (half precision,
  and TF32) take NHWC tensors and transpose NCHW ones in and out of NHWC;
  such a convolution streams its bytes twice more (a read and a write of
  each), at ``memory`` times the bandwidth.  Which convolutions get NCHW
  tensors is the framework's choice, as cost_models.conv_layout states it:
  PyTorch's unless a script asks for channels-last; XLA's float32 (TF32)
  convolutions before Hopper; a TF32 training step's under Grappler's
  layout optimizer.  Half-precision TensorFlow steps run NHWC.
- **Gradient accumulation**: a step of ``m`` micro-batches runs the forward
  and backward ops ``m`` times and the update once.

The efficiencies are per GPU architecture (Volta, Ampere, Hopper), as a
shared value times an architecture factor; they are fitted on the published
single-GPU figures only (:func:`fit`, cost_models.fitting.published).  A GPU of an
architecture the data does not cover gets the shared values, and its costs
are marked assumed (``calibrated`` is False).  So are the kernels of a
class and precision (:meth:`GpuStep.kernel_classes`, e.g. "conv_half") that
no fitted figure of the GPU's architecture spends a tenth of its step on
(:meth:`GpuKernelParams.covers`): their efficiency is the shared value
times a factor fitted on other kernels (Hopper's convolutions are priced
from BERT's matrix products, and the held-out AMP ResNet-50 figure on H100
comes out 28% faster than published).
"""

from __future__ import annotations

import json
import os

import numpy as np

from autodist.errors import CostModelError
from autodist.graph import amp_rewrite
from autodist.graph.job_options import PRECISIONS
from autodist.graph.xla import resolve_xla
from autodist.resource_spec.presets import find_device_model
from cost_models.conv_layout import transposed_convs
from cost_models.features import moved_bytes
from cost_models.prior import OP_CLASS
from cost_models.step_table import fuses_elementwise, inside_elementwise_chains

FORMAT = "autodist.gpu_kernel_model"
VERSION = 4
MODEL_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gpu_kernel_model.json")

COMPUTE_CLASSES = ("matmul", "conv", "batched")
HOST_DTYPES = ("int32",)
HOST_MAX_ELEMENTS = 1024  # int32 shape arithmetic stays in host memory
# The fitted parameters, each a positive number (fitted in log space).
SHARED = ("matmul_half", "matmul_tf32", "matmul_fp32", "conv_half", "conv_tf32", "conv_fp32", "winograd", "memory",
          "half_flops", "launch", "xla_memory", "fused_pytorch")
# The framework whose kernels run a step (JobInfo.framework) -> the factor on its memory-bound kernels where
# it fuses without XLA.
FRAMEWORK_FUSION = {"pytorch": "fused_pytorch"}
PER_ARCHITECTURE = ("compute", "memory")
LAYOUTS = ("nhwc", "nchw")


def architecture_of(device_model):
    """The GPU architecture of a device model (its ``DeviceModel.architecture`` in the preset catalogue, found by
    name or alias), "" for a model the catalogue does not hold."""
    found = find_device_model(str(device_model))
    return found[1].architecture if found else ""


def peak_key(dtype, precision, peaks):
    """The ``peak_flops`` key a product of ``dtype`` runs at under the job's ``precision``.

    float32 products run on TF32 tensor cores where the device lists a
    ``tf32`` peak and the job is not "fp32"; a precision override to
    fp16/bf16 runs float32 products at that precision.
    """
    if dtype in ("float16", "half"):
        return "float16"
    if dtype == "bfloat16":
        return "bfloat16"
    if precision in ("fp16", "bf16"):
        return {"fp16": "float16", "bf16": "bfloat16"}[precision]
    if precision == "tf32" and "tf32" in peaks:
        return "tf32"
    return "float32"


EFFICIENCY_KIND = {"float16": "half", "bfloat16": "half", "tf32": "tf32", "float32": "fp32"}
HALF_DTYPES = ("float16", "bfloat16")
# Half precisions an architecture has no tensor cores for (NVIDIA's architecture whitepapers: Pascal has none; Volta's
# and Turing's take float16; bfloat16 runs on the tensor cores of Ampere and later).  Their products run on CUDA cores
# at the float32 rate: TensorFlow computes float16 convolutions and matrix products in float32 unless told not to
# (TF_FP16_CONV_USE_FP32_COMPUTE, ConvDoFP32ComputationFP16Input in its CUDA stream executor's cuda_dnn.cc;
# TF_FP16_MATMUL_USE_FP32_COMPUTE, tensorflow/core/util/matmul_autotune.cc; both on by default), so the P100's doubled
# float16 peak goes unused.
CUDA_CORE_HALVES = {"pascal": ("float16", "bfloat16"), "volta": ("bfloat16",), "turing": ("bfloat16",)}
# A peak_flops key -> the precision a job's products run at there.
RUNS_AS = {"float32": "fp32", "tf32": "tf32", "float16": "fp16", "bfloat16": "bf16"}


def product_peak(dtype, precision, peaks, architecture):
    """The ``peak_flops`` key a product of ``dtype`` runs at on a GPU of ``architecture``: :func:`peak_key`'s, but
    "float32" for a half precision the architecture has no tensor cores for (:data:`CUDA_CORE_HALVES`)."""
    key = peak_key(dtype, precision, peaks)
    return "float32" if key in CUDA_CORE_HALVES.get(architecture, ()) else key


def runs_as(precision, device):
    """The precision (one of :data:`PRECISIONS`) a job of ``precision`` runs its float32 products at on ``device``:
    "fp32" where the device has no tensor cores for the job's (no TF32 before Ampere, :data:`CUDA_CORE_HALVES`)."""
    return RUNS_AS[product_peak("float32", precision, device.peak_flops or {}, architecture_of(device.model))]


def halved_by_precision(table, precision):
    """Ops whose float32 tensors a half-precision override stores at 2 bytes (bool per op).

    Only a float32 graph (no float16/bfloat16 op) run at fp16/bf16 is
    overridden, outside its update; a mixed-precision graph already says
    which ops run in float32 (Keras keeps normalisation statistics, softmax
    and the loss there; TensorFlow's graph rewrite keeps what its deny list
    names), and they do.
    """
    if precision not in ("fp16", "bf16") or np.isin(table["dtype"], HALF_DTYPES).any():
        return np.zeros(len(table["dtype"]), dtype=bool)
    return (table["dtype"] == "float32") & (table["phase"] != "update")


def job_step(table, job, device, xla="job"):
    """The :class:`GpuStep` of ``job``'s step (its step ``table``; ``job`` a JobInfo) on ``device``, as the job
    runs there: its precision, XLA resolved for the device (autodist.graph.xla), its micro-batches, framework
    and layout.  ``xla`` True/False/None (not known: published runs only) replaces the resolved setting.

    Raises CostModelError for a job captured with TensorFlow's mixed precision graph rewrite on a GPU where
    TensorFlow skips it: the step would run float32 as written, which its rewritten graph does not record.
    """
    if job.amp_rewrite and architecture_of(device.model) in amp_rewrite.SKIPPED_ON:
        raise CostModelError(f"TensorFlow skips its mixed precision graph rewrite on {device.model} (compute "
                             f"capability below 7.0), so the step runs float32 there, not as captured (rewritten): "
                             f"turn auto_mixed_precision off in the script to price it on this GPU",
                             field="job.amp_rewrite")
    on = resolve_xla(job, device.kind).on if xla == "job" else xla
    return GpuStep(table, device, job.precision or "fp32", on, job.micro_batches, job.framework, job.layout or "nhwc")


class GpuStep:
    """One step's ops on one GPU model, ready to price with any parameters.

    Parameters
    ----------
    table : dict of arrays
        The step table (cost_models.step_table).
    device : DeviceSpec-like
        ``model``, ``peak_flops`` (dict by dtype), ``memory_bandwidth``.
    precision : str
        One of :data:`PRECISIONS`.
    xla : bool or None
        Whether XLA compiles the step; None: not known (published runs only;
        a TensorFlow run is then priced at the geometric mean of both, a
        PyTorch run without XLA).
    micro_batches : int
    framework : str
        Whose kernels run the step (``JobInfo.framework``): "" for
        TensorFlow, "pytorch" for a published PyTorch run (see
        :data:`FRAMEWORK_FUSION`: its fuser without XLA).
    layout : str
        A published PyTorch run's own layout: "nchw" where its convolution
        tensors stay NCHW (cost_models.conv_layout); "nhwc" otherwise.

    :func:`job_step` builds it from a job, as users' plans and the
    calibration rows both do.

    Raises CostModelError when the device lists no peak for a precision the
    step needs.
    """

    def __init__(self, table, device, precision="fp32", xla=False, micro_batches=1, framework="", layout="nhwc"):
        if precision not in PRECISIONS:
            raise CostModelError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})",
                                 field="precision")
        if layout not in LAYOUTS:
            raise CostModelError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})", field="layout")
        self.architecture = architecture_of(device.model)
        self.xla = xla if xla is None else bool(xla)
        self.micro_batches = int(micro_batches)
        if self.xla is None and framework == "pytorch":
            self.xla = False
        # The factor on the memory-bound kernels left where elementwise chains are fused, without XLA and with it
        # (None: nothing fused).
        self.fuser = {x: (("xla_memory" if x else FRAMEWORK_FUSION[framework])
                          if fuses_elementwise(x, framework) else None) for x in (False, True)}
        op_type = table["op_type"]
        dtype = table["dtype"]
        classes = np.array([OP_CLASS.get(t, "") for t in op_type], dtype=object)
        host = np.isin(dtype, HOST_DTYPES) & (table["out0_elements"] <= HOST_MAX_ELEMENTS)
        no_kernel = (classes == "trivial") | host | (table["unread"] > 0)
        # Ops run inside another op's kernel, without XLA and with it, and the bytes that kernel still moves for
        # them (the remapper's; none in an epilogue).
        self.folded = {x: (table["fused"] if fuses_elementwise(x, framework) else table["remapped"]) > 0
                       for x in (False, True)}
        halved = halved_by_precision(table, precision)
        self.folded_bytes = {x: np.zeros(len(op_type)) if fuses_elementwise(x, framework)
                             else np.where(halved, table["remapped_bytes"] / 2, table["remapped_bytes"])
                             for x in (False, True)}
        self.compute = np.isin(classes, COMPUTE_CLASSES) & ~no_kernel
        self.conv = (classes == "conv") & self.compute
        self.winograd = (table["winograd"] > 0) & self.conv
        self.memory = ~no_kernel & ~self.compute
        self.chained = self.memory & inside_elementwise_chains(table)
        self.fallback = (classes == "") & self.memory
        self.update = table["phase"] == "update"
        peaks = device.peak_flops or {}
        keys = np.array([product_peak(str(d), precision, peaks, self.architecture) if c else ""
                         for d, c in zip(dtype, self.compute)], dtype=object)
        missing = sorted(set(keys[self.compute]) - set(peaks))
        if missing:
            raise CostModelError(f"device {device.model!r} lists no {missing[0]} peak, which this "
                                 f"{precision} job needs", field="peak_flops")
        self.peak = np.array([float(peaks[k]) if k else 1.0 for k in keys])
        kinds = np.array([EFFICIENCY_KIND.get(k, "") for k in keys], dtype=object)
        self.kinds = {kind: kinds == kind for kind in set(EFFICIENCY_KIND.values())}
        self.flops = np.maximum(table["flops"], 1.0)
        data = moved_bytes(table)
        self.bytes = np.where(halved, data / 2, data)
        # Tensor-core convolutions given NCHW tensors, without XLA and with it (cost_models.conv_layout): a transpose in
        # or out of NHWC reads and writes each operand and result.
        nchw = {x: transposed_convs(op_type, self.conv, self.kinds["half"], self.kinds["tf32"], self.architecture, x,
                                    framework, layout) for x in (False, True)}
        self.transposed_bytes = {x: np.where(mask, 2 * self.bytes, 0.0) for x, (mask, _) in nchw.items()}
        self.transposed_why = {x: why for x, (_, why) in nchw.items()}
        self.memory_bandwidth = float(device.memory_bandwidth)
        if self.memory_bandwidth <= 0:
            raise CostModelError(f"device {device.model!r} has no memory_bandwidth", field="memory_bandwidth")

    def kernel_seconds(self, params, xla=None):
        """Seconds each op's kernel runs on the GPU (0 for ops that launch none), with XLA or not (``xla``;
        default: the step's own setting, without XLA where it is not known)."""
        xla = self.xla if xla is None else xla
        arch = params.architecture(self.architecture)
        eff = np.ones(len(self.peak))
        for kind, mask in self.kinds.items():
            eff[mask & ~self.conv] = params.shared[f"matmul_{kind}"]
            eff[mask & self.conv] = params.shared[f"conv_{kind}"]
        eff = eff * arch["compute"] * np.where(self.winograd & self.kinds["fp32"], params.shared["winograd"], 1.0)
        compute = self.flops / (self.peak * eff) * (1.0 + params.shared["half_flops"] / self.flops)
        bandwidth = self._bandwidth(params)
        streaming = self.bytes / bandwidth
        compute = np.maximum(compute, streaming) + self.transposed_bytes[bool(xla)] / bandwidth
        memory = np.where(self._launching(xla), streaming * self._fusion(params, xla),
                          self.folded_bytes[bool(xla)] / bandwidth)
        return np.where(self.compute, compute, memory)

    def _bandwidth(self, params):
        """Bytes per second a memory-bound kernel streams."""
        return self.memory_bandwidth * params.shared["memory"] * params.architecture(self.architecture)["memory"]

    def transposes(self, params):
        """The share of the step's kernel time cuDNN spends transposing NCHW convolution tensors in and out of NHWC,
        and why they are NCHW ("" where none are); without XLA where the step's setting is not known."""
        xla = bool(self.xla)
        total = float(self.kernel_seconds(params, xla).sum())
        share = float(self.transposed_bytes[xla].sum()) / self._bandwidth(params) / total if total > 0 else 0.0
        return share, self.transposed_why[xla]

    def _launching(self, xla):
        """Which ops launch a kernel of their own: not the memory-bound ops inside a chain a fusing kernel runs."""
        launching = (self.compute | self.memory) & ~self.folded[bool(xla)]
        return launching & ~self.chained if self.fuser[bool(xla)] else launching

    def _fusion(self, params, xla):
        """The factor on the memory-bound kernels left (1 where nothing is fused)."""
        fuser = self.fuser[bool(xla)]
        return params.shared[fuser] if fuser else 1.0

    def shares(self, params):
        """Per op, its kernel seconds and the time it adds to the step (launch queue included).

        A step whose XLA setting is not known (:class:`GpuStep`'s ``xla``)
        gets its shares without XLA, scaled to the geometric mean of its
        step times with and without.
        """
        if self.xla is not None:
            return self._shares(params, self.xla)
        kernel, without = self._shares(params, False)
        _, with_xla = self._shares(params, True)
        scale = np.sqrt(self._total(with_xla) / self._total(without))
        return kernel * scale, without * scale

    def _shares(self, params, xla):
        kernel = self.kernel_seconds(params, xla)
        launches = np.where(self._launching(xla), params.shared["launch"], 0.0)
        issued = np.cumsum(launches)
        ran = np.cumsum(kernel)
        # end_i = ran_i + max_{j <= i} (issued_j - ran_{j-1}): the GPU waits for the host at most there.
        wait = np.maximum.accumulate(np.maximum(issued - (ran - kernel), 0.0))
        # Each op adds its kernel and the GPU's extra wait before it: end_i - end_{i-1}, without the rounding of
        # differencing the running sums (a 5 ps kernel after seconds of them).
        return kernel, kernel + np.diff(wait, prepend=0.0)

    def kernel_classes(self):
        """Per op, the fitted efficiency its kernel runs at ("conv_half", "matmul_tf32", ...; "" for memory-bound
        kernels and ops that launch none)."""
        out = np.full(len(self.peak), "", dtype=object)
        for kind, mask in self.kinds.items():
            out[mask & self.compute & self.conv] = f"conv_{kind}"
            out[mask & self.compute & ~self.conv] = f"matmul_{kind}"
        return out

    def kernels_only(self):
        """The same step without the ops that launch no kernel (same step time, less to compute when fitting)."""
        keep = self.compute | self.memory
        out = object.__new__(GpuStep)
        out.__dict__.update({k: v[keep] if isinstance(v, np.ndarray) else v for k, v in self.__dict__.items()})
        out.kinds = {kind: mask[keep] for kind, mask in self.kinds.items()}
        out.folded = {x: mask[keep] for x, mask in self.folded.items()}
        out.folded_bytes = {x: moved[keep] for x, moved in self.folded_bytes.items()}
        out.transposed_bytes = {x: moved[keep] for x, moved in self.transposed_bytes.items()}
        return out

    def step_seconds(self, params):
        """Seconds of one step: micro-batches times the forward and backward, plus the update."""
        _, share = self.shares(params)
        return self._total(share)

    def _total(self, share):
        return self.micro_batches * float(share[~self.update].sum()) + float(share[self.update].sum())


class GpuKernelParams:
    """The fitted efficiencies (see the module docstring), with provenance.

    Parameters
    ----------
    shared : dict
        One value per name in :data:`SHARED`.
    architectures : dict
        Architecture -> {"compute": factor, "memory": factor}; architectures
        not listed use factor 1 and are not calibrated.
    fitted_on : list of str
        Calibration row ids the values were fitted on.
    coverage : dict
        Architecture -> the kernel classes (:meth:`GpuStep.kernel_classes`)
        its fitted figures exercise (:meth:`covers`).
    """

    def __init__(self, shared, architectures=None, fitted_on=(), source="", coverage=None):
        missing = [k for k in SHARED if k not in shared]
        if missing:
            raise CostModelError(f"GPU kernel parameters lack {missing[0]!r}", field="shared")
        self.shared = {k: float(shared[k]) for k in SHARED}
        self.architectures = {a: {k: float(v[k]) for k in PER_ARCHITECTURE} for a, v in (architectures or {}).items()}
        self.fitted_on = list(fitted_on)
        self.source = source
        self.coverage = {a: sorted(classes) for a, classes in (coverage or {}).items()}

    def architecture(self, arch):
        return self.architectures.get(arch, {"compute": 1.0, "memory": 1.0})

    def calibrated(self, arch):
        """Whether ``arch``'s factors were fitted on published figures."""
        return arch in self.architectures

    def covers(self, arch, kernel_class):
        """Whether the fitted figures of ``arch`` exercise kernels of ``kernel_class`` (e.g. "conv_half")."""
        return kernel_class in self.coverage.get(arch, ())

    def to_dict(self):
        return {"format": FORMAT, "version": VERSION, "shared": self.shared, "architectures": self.architectures,
                "coverage": self.coverage, "fitted_on": self.fitted_on, "source": self.source,
                "parameters": list(SHARED)}

    @classmethod
    def from_dict(cls, data, where="<gpu kernel model>"):
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise CostModelError(f"not a {FORMAT} version {VERSION} document", source=where)
        try:
            return cls(data["shared"], data.get("architectures"), data.get("fitted_on", ()), data.get("source", ""),
                       data["coverage"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CostModelError(f"malformed GPU kernel parameters ({exc})", source=where) from None

    @classmethod
    def load(cls, path=MODEL_FILE):
        try:
            with open(path) as f:
                return cls.from_dict(json.load(f), where=path)
        except OSError as exc:
            raise CostModelError(f"cannot read the GPU kernel model ({exc.strerror})", source=path) from None
        except json.JSONDecodeError as exc:
            raise CostModelError(f"not JSON ({exc.msg})", source=path) from None
