"""Named devices, links and machines with their published figures.

Every figure cites its row in ``../shared/reference/hardware.md`` ("hw.md"
below) or a public vendor page.  Bandwidths are bytes per second per
direction; a NIC's latency is half the end-to-end figure, since a path
between two nodes adds the latencies of both NICs.

A machine preset named ``NAME`` gives one node; ``NAME:N`` gives ``N``
identical nodes named ``node-0 .. node-N-1`` (``local-0 ..`` for
``cpu-local``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

from autodist.errors import InputError
from autodist.resource_spec.spec import DeviceSpec, LinkSpec, NodeSpec, ResourceSpec

MAX_NODES = 100_000  # sanity limit on a node count, against typos
GB = 10**9  # bytes of memory, as vendors count them
GBPS = 1e9  # bytes per second
TFLOPS = 1e12
US = 1e-6


@dataclass(frozen=True)
class DeviceModel:
    """Figures of one device model (FLOP/s per dtype, bytes, bytes/s).

    ``fabric`` and ``host_link`` name the link presets GPUs of this model
    use between each other and to their host, when a machine does not say;
    ``architecture`` is a GPU's (``"volta"``, ``"ampere"``, ...: the GPU
    kernel model's parameters are per architecture), "" for a CPU.
    ``cores``: a CPU model's cores (what its peak is priced on; 0 unknown).
    """

    kind: str
    peak_flops: dict
    memory_bytes: int
    memory_bandwidth: float
    fabric: str = ""
    host_link: str = ""
    aliases: tuple = ()
    cores: int = 0
    architecture: str = ""

    def device(self, model, node, index):
        """A :class:`DeviceSpec` of this model, ``index``-th of its kind on ``node``."""
        return DeviceSpec(
            name=f"{node}/{self.kind}:{index}",
            kind=self.kind,
            model=model,
            peak_flops=dict(self.peak_flops),
            memory_bytes=self.memory_bytes,
            memory_bandwidth=self.memory_bandwidth,
            node=node,
            index=index,
        )


def _cpu(cores, ghz, flop_per_cycle, memory_bytes, memory_bandwidth):
    """A CPU host: peak = cores x base clock x FLOP per cycle (float64 half of it)."""
    fp32 = cores * ghz * 1e9 * flop_per_cycle
    return DeviceModel("CPU", {"float32": fp32, "float64": fp32 / 2}, memory_bytes, memory_bandwidth, cores=cores)


# FLOP per cycle per core, float32: two 512-bit FMA units = 64 (Intel Xeon
# Scalable, AVX-512), two 256-bit FMA units = 32 (AVX2: Broadwell, AMD Zen 2).
AVX512_FP32_PER_CYCLE = 64
AVX2_FP32_PER_CYCLE = 32

DEVICE_MODELS = {
    # NVIDIA Tesla P100 datasheet (images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf): SXM2
    # (NVLink) 10.6 FP32 / 21.2 FP16 TFLOP/s, PCIe 9.3 / 18.7; 16 GB HBM2 at 732 GB/s (the 12 GB PCIe card 549 GB/s).
    # Pascal has no tensor cores: FP16 runs on CUDA cores at twice the FP32 rate, bfloat16 not at all (FP32 rate).
    "P100-SXM2": DeviceModel(
        "GPU",
        {"float32": 10.6 * TFLOPS, "float16": 21.2 * TFLOPS, "bfloat16": 10.6 * TFLOPS},
        16 * GB,
        732 * GBPS,
        fabric="nvlink-p100",
        host_link="pcie-gen3",
        aliases=("tesla-p100-sxm2-16gb", "p100-sxm2-16gb", "p100", "tesla-p100"),
        architecture="pascal",
    ),
    "P100-PCIE-16GB": DeviceModel(
        "GPU",
        {"float32": 9.3 * TFLOPS, "float16": 18.7 * TFLOPS, "bfloat16": 9.3 * TFLOPS},
        16 * GB,
        732 * GBPS,
        fabric="pcie-gen3",
        host_link="pcie-gen3",
        aliases=("tesla-p100-pcie-16gb", "p100-pcie"),
        architecture="pascal",
    ),
    "P100-PCIE-12GB": DeviceModel(
        "GPU",
        {"float32": 9.3 * TFLOPS, "float16": 18.7 * TFLOPS, "bfloat16": 9.3 * TFLOPS},
        12 * GB,
        549 * GBPS,
        fabric="pcie-gen3",
        host_link="pcie-gen3",
        aliases=("tesla-p100-pcie-12gb",),
        architecture="pascal",
    ),
    # hw.md "V100 SXM2": 15.7 FP32, 125 FP16 tensor TFLOP/s, 16/32 GB, 0.9 TB/s.
    # No bfloat16 tensor cores on Volta, so bfloat16 runs at the FP32 rate.
    "V100-16GB": DeviceModel(
        "GPU",
        {"float32": 15.7 * TFLOPS, "float16": 125 * TFLOPS, "bfloat16": 15.7 * TFLOPS},
        16 * GB,
        900 * GBPS,
        fabric="nvlink-v100",
        host_link="pcie-gen3",
        aliases=("tesla-v100-sxm2-16gb", "v100", "tesla-v100"),
        architecture="volta",
    ),
    "V100-32GB": DeviceModel(
        "GPU",
        {"float32": 15.7 * TFLOPS, "float16": 125 * TFLOPS, "bfloat16": 15.7 * TFLOPS},
        32 * GB,
        900 * GBPS,
        fabric="nvlink-v100",
        host_link="pcie-gen3",
        aliases=("tesla-v100-sxm2-32gb",),
        architecture="volta",
    ),
    # NVIDIA V100 datasheet (images.nvidia.com/content/technologies/volta/pdf/
    # volta-v100-datasheet-update-us-1165301-r5.pdf): V100 PCIe 14 FP32 / 112 tensor TFLOP/s, 16/32 GB, 900 GB/s,
    # no NVLink.
    "V100-PCIE-16GB": DeviceModel(
        "GPU",
        {"float32": 14 * TFLOPS, "float16": 112 * TFLOPS, "bfloat16": 14 * TFLOPS},
        16 * GB,
        900 * GBPS,
        fabric="pcie-gen3",
        host_link="pcie-gen3",
        aliases=("tesla-v100-pcie-16gb", "v100-pcie"),
        architecture="volta",
    ),
    "V100-PCIE-32GB": DeviceModel(
        "GPU",
        {"float32": 14 * TFLOPS, "float16": 112 * TFLOPS, "bfloat16": 14 * TFLOPS},
        32 * GB,
        900 * GBPS,
        fabric="pcie-gen3",
        host_link="pcie-gen3",
        aliases=("tesla-v100-pcie-32gb", "tesla-v100s-pcie-32gb"),
        architecture="volta",
    ),
    # NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/
    # pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): A100 40GB SXM,
    # 19.5 FP32 (156 TF32), 312 FP16/BF16 tensor TFLOP/s, 1,555 GB/s.
    "A100-40GB": DeviceModel(
        "GPU",
        {"float32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "float16": 312 * TFLOPS, "bfloat16": 312 * TFLOPS},
        40 * GB,
        1555 * GBPS,
        fabric="nvlink-a100",
        host_link="pcie-gen4",
        aliases=("nvidia-a100-sxm4-40gb", "a100-sxm4-40gb", "a100"),
        architecture="ampere",
    ),
    # hw.md "A100 SXM 80GB": 19.5 FP32 (TF32 156), 312 tensor TFLOP/s, 80 GB, 2.0 TB/s.
    "A100-80GB": DeviceModel(
        "GPU",
        {"float32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "float16": 312 * TFLOPS, "bfloat16": 312 * TFLOPS},
        80 * GB,
        2000 * GBPS,
        fabric="nvlink-a100",
        host_link="pcie-gen4",
        aliases=("nvidia-a100-sxm4-80gb", "a100-sxm4-80gb", "nvidia-a100-80gb-hbm2e"),
        architecture="ampere",
    ),
    # The A100 datasheet above: A100 PCIe 40GB as the SXM part (19.5 / 156 TF32 / 312 TFLOP/s) with 1,555 GB/s;
    # A100 80GB PCIe 1,935 GB/s.  PCIe Gen4; an NVLink bridge joins pairs where a cluster file says so.
    "A100-PCIE-40GB": DeviceModel(
        "GPU",
        {"float32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "float16": 312 * TFLOPS, "bfloat16": 312 * TFLOPS},
        40 * GB,
        1555 * GBPS,
        fabric="pcie-gen4",
        host_link="pcie-gen4",
        aliases=("a100-pcie-40gb", "nvidia-a100-pcie-40gb"),
        architecture="ampere",
    ),
    "A100-PCIE-80GB": DeviceModel(
        "GPU",
        {"float32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "float16": 312 * TFLOPS, "bfloat16": 312 * TFLOPS},
        80 * GB,
        1935 * GBPS,
        fabric="pcie-gen4",
        host_link="pcie-gen4",
        aliases=("nvidia-a100-80gb-pcie", "a100-80gb-pcie"),
        architecture="ampere",
    ),
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): H100 PCIe 51 FP32 TFLOP/s, TF32 756 and FP16/BF16
    # 1,513 with 2:4 sparsity (378 and 756.5 dense), 80 GB at 2.0 TB/s, PCIe Gen5.
    "H100-PCIE": DeviceModel(
        "GPU",
        {"float32": 51 * TFLOPS, "tf32": 378 * TFLOPS, "float16": 756.5 * TFLOPS, "bfloat16": 756.5 * TFLOPS},
        80 * GB,
        2000 * GBPS,
        fabric="pcie-gen5",
        host_link="pcie-gen5",
        aliases=("nvidia-h100-pcie", "h100-pcie-80gb"),
        architecture="hopper",
    ),
    # hw.md "H100 SXM": 67 FP32, 989 BF16/FP16 tensor TFLOP/s, 80 GB, 3.35 TB/s.  TF32 tensor:
    # 989 TFLOP/s with 2:4 sparsity, half of it dense (NVIDIA H100 datasheet,
    # nvidia.com/en-us/data-center/h100, "TF32 Tensor Core 989 teraFLOPS*", *with sparsity).
    "H100-SXM": DeviceModel(
        "GPU",
        {"float32": 67 * TFLOPS, "tf32": 494.5 * TFLOPS, "float16": 989 * TFLOPS, "bfloat16": 989 * TFLOPS},
        80 * GB,
        3350 * GBPS,
        fabric="nvlink-h100",
        host_link="pcie-gen5",
        aliases=("nvidia-h100-80gb-hbm3", "h100-sxm5-80gb", "nvidia-h100-sxm5-80gb", "h100"),
        architecture="hopper",
    ),
    # hw.md "H200 SXM": 67 FP32, 989 BF16/FP16 tensor TFLOP/s, 141 GB, 4.8 TB/s; TF32 as the H100.
    "H200-SXM": DeviceModel(
        "GPU",
        {"float32": 67 * TFLOPS, "tf32": 494.5 * TFLOPS, "float16": 989 * TFLOPS, "bfloat16": 989 * TFLOPS},
        141 * GB,
        4800 * GBPS,
        fabric="nvlink-h100",
        host_link="pcie-gen5",
        aliases=("nvidia-h200", "nvidia-h200-141gb-hbm3e", "h200"),
        architecture="hopper",
    ),
    # hw.md "T4": 8.1 FP32, 65 FP16 tensor TFLOP/s, 16 GB, 0.32 TB/s, PCIe only
    # (Turing has no bfloat16 tensor cores: FP32 rate).
    "T4": DeviceModel(
        "GPU",
        {"float32": 8.1 * TFLOPS, "float16": 65 * TFLOPS, "bfloat16": 8.1 * TFLOPS},
        16 * GB,
        320 * GBPS,
        fabric="pcie-gen3",
        host_link="pcie-gen3",
        aliases=("tesla-t4", "nvidia-t4"),
        architecture="turing",
    ),
    # CPU hosts.  Peaks are cores x base clock x FLOP/cycle (upper bounds: AVX-512
    # clocks run lower); memory bandwidth is channels x transfer rate x 8 bytes.
    # DGX H100 user guide (docs.nvidia.com/dgx/dgxh100-user-guide): 2x Xeon
    # Platinum 8480C, 56 cores each at 2.0 GHz, 2 TB; 8 channels DDR5-4800 per socket.
    "xeon-8480c-2s": _cpu(112, 2.0, AVX512_FP32_PER_CYCLE, 2 * 10**12, 2 * 8 * 4.8e9 * 8),
    # DGX A100 user guide (docs.nvidia.com/dgx/dgxa100-user-guide): 2x AMD EPYC
    # 7742, 64 cores each at 2.25 GHz, 1 TB; 8 channels DDR4-3200 per socket.
    "epyc-7742-2s": _cpu(128, 2.25, AVX2_FP32_PER_CYCLE, 10**12, 2 * 8 * 3.2e9 * 8),
    # aws.amazon.com/ec2/instance-types/p4: p4d.24xlarge, 96 vCPUs (48 cores of
    # Xeon Platinum 8275CL at 3.0 GHz), 1152 GiB; 6 channels DDR4-2933 per socket.
    "xeon-8275cl-2s": _cpu(48, 3.0, AVX512_FP32_PER_CYCLE, 1152 * 2**30, 2 * 6 * 2.933e9 * 8),
    # aws.amazon.com/ec2/instance-types/g4: g4dn.12xlarge, 48 vCPUs (24 cores of
    # Xeon Platinum 8259CL at 2.5 GHz), 192 GiB; 6 channels DDR4-2933.
    "xeon-8259cl-24c": _cpu(24, 2.5, AVX512_FP32_PER_CYCLE, 192 * 2**30, 6 * 2.933e9 * 8),
    # aws.amazon.com/ec2/instance-types/p3: p3.16xlarge, 64 vCPUs (32 cores of
    # Xeon E5-2686 v4 at 2.3 GHz, AVX2), 488 GiB; 4 channels DDR4-2400 per socket.
    "xeon-e5-2686v4-2s": _cpu(32, 2.3, AVX2_FP32_PER_CYCLE, 488 * 2**30, 2 * 4 * 2.4e9 * 8),
    # Intel ARK, Xeon Platinum 8380: 40 cores at 2.3 GHz, 8 channels DDR4-3200;
    # a common 2-socket training server with 512 GiB.
    "xeon-8380-2s": _cpu(80, 2.3, AVX512_FP32_PER_CYCLE, 512 * 2**30, 2 * 8 * 3.2e9 * 8),
    # This machine, measured by benchmarks/cluster_local_machine.py (results in
    # benchmarks/results/cluster_local_machine.json, "earlier_runs": the less
    # busy runs; under a load average of 8 the same script saw 4-6x less):
    # 2 logical CPUs, numpy float32 matmul 113-176 GFLOP/s, memory copy
    # 18.7 GB/s; /proc/meminfo MemTotal 24684084 kB.  cpu-local:N's N workers share it.
    "cpu-local": DeviceModel("CPU", {"float32": 150e9, "float64": 75e9}, 24684084 * 1024, 18.7 * GBPS),
}

LINK_PRESETS = {
    # hw.md "NVLink per GPU (both directions)": V100 300, A100 600, H100 900 GB/s,
    # so 150 / 300 / 450 GB/s per direction.  NVLink latency is not in hw.md;
    # taken like PCIe's ~1 us.  (p3.16xlarge's V100s form a hybrid cube mesh, not
    # all pairs linked directly; modelled as a full fabric.)
    # P100 (Tesla P100 datasheet): four NVLink 1.0 links, 160 GB/s both directions, so 80 per direction.
    "nvlink-p100": LinkSpec("nvlink", 80 * GBPS, 1 * US),
    "nvlink-v100": LinkSpec("nvlink", 150 * GBPS, 1 * US),
    "nvlink-a100": LinkSpec("nvlink", 300 * GBPS, 1 * US),
    "nvlink-h100": LinkSpec("nvlink", 450 * GBPS, 1 * US),
    # hw.md "PCIe Gen3/4/5 x16": 15.75 / 31.5 / 63 GB/s, ~1 us.
    "pcie-gen3": LinkSpec("pcie", 15.75 * GBPS, 1 * US),
    "pcie-gen4": LinkSpec("pcie", 31.5 * GBPS, 1 * US),
    "pcie-gen5": LinkSpec("pcie", 63 * GBPS, 1 * US),
    # The same links where GPUs reach each other through the CPU's host bridge
    # (nvidia-smi topo: PHB, NODE or SYS; no PCIe switch for peer-to-peer), which
    # cost_models.comm prices slower ("pcie-cpu").
    "pcie-gen3-cpu": LinkSpec("pcie", 15.75 * GBPS, 1 * US, via_cpu=True),
    "pcie-gen4-cpu": LinkSpec("pcie", 31.5 * GBPS, 1 * US, via_cpu=True),
    # hw.md "InfiniBand EDR / HDR / NDR": 12.5 / 25 / 50 GB/s, ~1-2 us end to end.
    "ib-edr": LinkSpec("infiniband", 12.5 * GBPS, 0.75 * US, rdma=True),
    "ib-hdr": LinkSpec("infiniband", 25 * GBPS, 0.75 * US, rdma=True),
    "ib-ndr": LinkSpec("infiniband", 50 * GBPS, 0.75 * US, rdma=True),
    # hw.md "RoCE 25 / 100 / 200 GbE": 3.1 / 12.5 / 25 GB/s, ~2-5 us end to end.
    "roce-25g": LinkSpec("roce", 3.125 * GBPS, 1.5 * US, rdma=True),
    "roce-100g": LinkSpec("roce", 12.5 * GBPS, 1.5 * US, rdma=True),
    "roce-200g": LinkSpec("roce", 25 * GBPS, 1.5 * US, rdma=True),
    # hw.md "TCP over Ethernet 10 / 25 GbE": line rate 1.25 / 3.1 GB/s, ~20-50 us
    # end to end; 50 and 100 GbE by the same line-rate arithmetic (Gb/s / 8).
    "eth-10g": LinkSpec("ethernet", 1.25 * GBPS, 15 * US),
    "eth-25g": LinkSpec("ethernet", 3.125 * GBPS, 15 * US),
    "eth-50g": LinkSpec("ethernet", 6.25 * GBPS, 15 * US),
    "eth-100g": LinkSpec("ethernet", 12.5 * GBPS, 15 * US),
    # AWS EFA (aws.amazon.com/hpc/efa): 100 Gb/s per adapter on p4d, RDMA through
    # the SRD transport and GPUDirect RDMA; latency assumed 5 us per side (not
    # in hw.md).  Ethernet underneath, so kind "ethernet" with rdma set.
    "efa-100g": LinkSpec("ethernet", 12.5 * GBPS, 5 * US, rdma=True, gpudirect=True),
    # This machine's TCP loopback, measured by benchmarks/cluster_local_machine.py
    # ("earlier_runs" in its result): 1.35-1.65 GB/s one stream, one-way latency
    # 4-16 us; busier runs there show 0.2-0.6 GB/s and 5-7 us.  TensorFlow's own
    # per-transfer overhead is calibrated elsewhere (cost_models), so these stay
    # plain socket figures.
    "loopback-local": LinkSpec("loopback", 1.5 * GBPS, 5 * US),
}


@dataclass(frozen=True)
class MachinePreset:
    """One machine model: its devices, in-node fabric, host link and NICs."""

    description: str
    gpu_model: str
    gpu_count: int
    cpu_model: str
    fabric: str
    nics: tuple = ()  # (link preset, count, gpudirect)
    host_link: str = ""
    node_prefix: str = "node"

    def node(self, name, address=""):
        """A :class:`NodeSpec` of this machine called ``name``."""
        devices = [DEVICE_MODELS[self.cpu_model].device(self.cpu_model, name, 0)]
        if self.gpu_count:
            gpu = DEVICE_MODELS[self.gpu_model]
            devices += [gpu.device(self.gpu_model, name, i) for i in range(self.gpu_count)]
        nics = []
        for link, count, gpudirect in self.nics:
            nics += [replace(LINK_PRESETS[link], gpudirect=gpudirect)] * count
        return NodeSpec(
            name=name,
            devices=devices,
            fabric=LINK_PRESETS[self.fabric],
            nics=nics,
            address=address,
            host_link=LINK_PRESETS[self.host_link] if self.host_link else None,
        )


MACHINES = {
    # DGX H100 user guide: 8x H100 SXM on NVSwitch, 8x ConnectX-7 NDR 400 Gb/s
    # for compute with GPUDirect RDMA, PCIe Gen5 host.
    "dgx-h100": MachinePreset(
        "NVIDIA DGX H100: 8x H100 SXM, NVSwitch, 8x NDR InfiniBand, GPUDirect RDMA",
        "H100-SXM", 8, "xeon-8480c-2s", "nvlink-h100", (("ib-ndr", 8, True),), "pcie-gen5",
    ),
    # DGX A100 user guide: 8x A100 80GB on NVSwitch, 8x ConnectX-6 HDR 200 Gb/s
    # for compute with GPUDirect RDMA, PCIe Gen4 host.
    "dgx-a100": MachinePreset(
        "NVIDIA DGX A100: 8x A100 80GB, NVSwitch, 8x HDR InfiniBand, GPUDirect RDMA",
        "A100-80GB", 8, "epyc-7742-2s", "nvlink-a100", (("ib-hdr", 8, True),), "pcie-gen4",
    ),
    # aws.amazon.com/ec2/instance-types/p4: 8x A100 40GB, NVSwitch 600 GB/s,
    # 400 Gb/s as 4x 100 Gb/s EFA with GPUDirect RDMA.
    "p4d.24xlarge": MachinePreset(
        "AWS p4d.24xlarge: 8x A100 40GB, NVSwitch, 4x 100 Gb/s EFA, GPUDirect RDMA",
        "A100-40GB", 8, "xeon-8275cl-2s", "nvlink-a100", (("efa-100g", 4, True),), "pcie-gen4",
    ),
    # aws.amazon.com/ec2/instance-types/g4: g4dn.12xlarge, 4x T4 on PCIe,
    # 50 Gb/s networking, no RDMA.  AWS does not publish its PCIe tree: the T4s
    # are assumed to reach each other through the CPU (no PCIe switch).
    "g4dn.12xlarge": MachinePreset(
        "AWS g4dn.12xlarge: 4x T4 on PCIe Gen3 through the CPU, 50 GbE TCP",
        "T4", 4, "xeon-8259cl-24c", "pcie-gen3-cpu", (("eth-50g", 1, False),),
    ),
    # aws.amazon.com/ec2/instance-types/p3: p3.16xlarge, 8x V100 16GB with
    # NVLink, 25 Gb/s networking, no RDMA.
    "p3.16xlarge": MachinePreset(
        "AWS p3.16xlarge: 8x V100 16GB, NVLink, 25 GbE TCP",
        "V100-16GB", 8, "xeon-e5-2686v4-2s", "nvlink-v100", (("eth-25g", 1, False),), "pcie-gen3",
    ),
    "cpu-2s-25g": MachinePreset(
        "CPU server: 2x Xeon Platinum 8380, 512 GiB, 25 GbE TCP",
        "", 0, "xeon-8380-2s", "pcie-gen4", (("eth-25g", 1, False),),
    ),
    "cpu-local": MachinePreset(
        "this machine: one CPU worker per node on TCP loopback (measured figures)",
        "", 0, "cpu-local", "loopback-local", (("loopback-local", 1, False),),
        node_prefix="local",
    ),
}


def did_you_mean(name, choices):
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _normalise(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def device_model(name, field=None, source=None):
    """``(canonical name, DeviceModel)`` for a model name or a known alias.

    Raises
    ------
    InputError
        Unknown model, with a did-you-mean.
    """
    found = find_device_model(name)
    if found is None:
        known = ", ".join(DEVICE_MODELS)
        raise InputError(
            f"unknown device model {name!r}{did_you_mean(name, DEVICE_MODELS)}; known: {known}",
            source=source,
            field=field,
        )
    return found


def find_device_model(name):
    """``(canonical name, DeviceModel)`` for a name or alias, None if unknown.

    Product strings as GPU feature discovery writes them (``NVIDIA-H100-80GB-HBM3``,
    ``Tesla-T4``, with an optional ``-SHARED`` suffix) are recognised.
    """
    key = _normalise(name).removesuffix("-shared")
    for canonical, model in DEVICE_MODELS.items():
        if key == _normalise(canonical) or key in model.aliases:
            return canonical, model
    return None


def link_preset(name, field=None, source=None):
    """The :class:`LinkSpec` preset called ``name`` (e.g. ``"ib-ndr"``, ``"pcie-gen4"``)."""
    try:
        return LINK_PRESETS[name]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown link preset {name!r}{did_you_mean(str(name), LINK_PRESETS)}; "
            f"known: {', '.join(LINK_PRESETS)}",
            source=source,
            field=field,
        ) from None


def machine(name, field=None, source=None):
    """The :class:`MachinePreset` called ``name``."""
    try:
        return MACHINES[name]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown preset {name!r}{did_you_mean(str(name), MACHINES)}; known: {', '.join(MACHINES)}",
            source=source,
            field=field,
        ) from None


def parse_preset_name(text):
    """Split ``"NAME[:N]"`` into ``(name, count)``; count is 1 without ``:N``."""
    name, sep, count = str(text).partition(":")
    if not sep:
        return name, 1
    if not count.isdigit() or not 1 <= int(count) <= MAX_NODES:
        message = f"node count must be an integer from 1 to {MAX_NODES}, got {text!r}"
        raise InputError(message, field="preset")
    return name, int(count)


def node_names(prefix, count):
    """Names of ``count`` identical nodes: ``prefix-0 .. prefix-(count-1)``."""
    return [f"{prefix}-{i}" for i in range(count)]
