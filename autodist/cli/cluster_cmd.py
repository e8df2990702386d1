"""``autodist cluster show``: print a cluster's nodes, devices, links and totals.

``autodist cluster calibrate``: fit a cluster's links to nccl-tests output measured on it.
"""

import json

from autodist.cli.cluster_args import add_cluster_arguments, cluster_from_args
from autodist.report.render import plural


def register(subparsers):
    parser = subparsers.add_parser("cluster", help="describe a cluster (file, preset or Kubernetes)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print nodes, devices, links and totals",
        description="autodist cluster show (CLUSTER_FILE | --preset NAME[:N] | --from-kubernetes) [--json | --yaml]",
    )
    add_cluster_arguments(show, positional=True)
    formats = show.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print the resource spec as JSON")
    formats.add_argument("--yaml", action="store_true", help="print it as an editable cluster.yaml")
    show.set_defaults(func=run_show)
    calibrate = actions.add_parser(
        "calibrate",
        help="fit a cluster's links to nccl-tests output measured on it",
        description="Read NVIDIA nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                    "broadcast_perf) measured on the cluster, fit the bandwidth and latency of the links each run "
                    "crossed (the fabric for a run on one node, the NICs for a run across nodes), and write a "
                    "cluster file that plan and placement report take with --cluster.  The measured curves are "
                    "kept in it: a collective of a measured shape is priced from its curve.",
    )
    add_cluster_arguments(calibrate)
    calibrate.add_argument("--nccl-tests", nargs="+", required=True, metavar="FILE",
                           help="nccl-tests output files, one run each (stdout as the binary prints it)")
    calibrate.add_argument("--op", choices=("allreduce", "allgather", "reducescatter", "broadcast"),
                           help="the collective, for files that do not name their binary")
    calibrate.add_argument("-o", "--output", required=True, metavar="FILE", help="the cluster file to write")
    calibrate.set_defaults(func=run_calibrate)


def run_show(args):
    spec = cluster_from_args(args)
    if args.json:
        print(json.dumps(spec.to_dict(), indent=1))
    elif args.yaml:
        from autodist.resource_spec.cluster_file import dump_cluster

        print(dump_cluster(spec), end="")
    else:
        print(format_cluster(spec))
    return 0


def run_calibrate(args):
    import statistics

    from autodist.io import check_output_file, write_text_atomic
    from autodist.resource_spec.cluster_file import dump_cluster
    from autodist.resource_spec.spec import ResourceSpec
    from cost_models import CostModel
    from cost_models.fitting.nccl_tests import busbw_errors, calibrate, measured_devices, read_nccl_tests

    check_output_file(args.output, field="--output")
    runs = [read_nccl_tests(path, op=args.op) for path in args.nccl_tests]
    spec = cluster_from_args(args)
    for run in runs:
        measured_devices(spec, run, run.source)  # a run the cluster cannot hold is refused before any fitting
    cost_model = CostModel.default()
    fitted, records = calibrate(spec, runs, cost_model.comm_model)
    links_only = cost_model.comm_model(ResourceSpec(fitted.nodes, fitted.name))  # the fitted links, no curves
    with_curves = cost_model.comm_model(fitted)
    for record in records:
        print(f"{record['tier']}-node {record['link']}: bandwidth {record['was']['bandwidth'] / 1e9:.4g} -> "
              f"{record['bandwidth'] / 1e9:.4g} GB/s, latency {record['was']['latency'] * 1e6:.3g} -> "
              f"{record['latency'] * 1e6:.3g} us")
    for run in runs:
        devices = measured_devices(fitted, run, run.source)
        fit = [abs(e) for e in busbw_errors(links_only, run, devices)]
        kept = [abs(e) for e in busbw_errors(with_curves, run, devices)]
        print(f"{run.source}: {run.op} on {plural(run.nodes, 'node')} x {run.ranks_per_node} GPUs, "
              f"{plural(len(run.sizes), 'size')}; busbw priced from the fitted links: median error "
              f"{statistics.median(fit):.1%}, worst {max(fit):.1%}; from the kept curve: worst {max(kept):.1%}")
    write_text_atomic(args.output, dump_cluster(fitted))
    print(f"wrote {args.output}")
    return 0


# -- text ------------------------------------------------------------------


def format_cluster(spec):
    """Text tables of ``spec``; 100 columns wide for node names up to about 28 characters."""
    lines = [f"cluster {spec.name or '(unnamed)'}: {len(spec.nodes)} node(s)", ""]
    if any(node.address for node in spec.nodes):
        lines += _addresses_table(spec) + [""]
    lines += _devices_table(spec) + [""] + _links_table(spec) + [""] + _totals(spec)
    if spec.emulated:
        lines += ["", "emulated on this machine (autodist run needs root): node, pinned cores, delay each way"]
        lines += [f"  {n.name}  cores {','.join(map(str, n.emulation.cores))}  {n.emulation.delay * 1e3:g} ms"
                  for n in spec.nodes]
    return "\n".join(line.rstrip() for line in lines)


def _table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [header] + rows]


def _tflops(device, dtype):
    value = device.peak_flops.get(dtype)
    return f"{value / 1e12:.3g}" if value else "?"


def _device_rows(node):
    """One row per run of identical devices: ``GPU:0-7  H100-SXM ...``."""
    rows, run = [], []
    for device in node.devices + [None]:
        if run and (device is None or _figures(device) != _figures(run[0])):
            first, last = run[0], run[-1]
            span = f"{first.kind}:{first.index}" + (f"-{last.index}" if len(run) > 1 else "")
            rows.append([
                node.name, span, first.model, len(run),
                _tflops(first, "float32"), _tflops(first, "bfloat16"),
                f"{first.memory_bytes / 1e9:.4g}" if first.memory_bytes else "?",
                f"{first.memory_bandwidth / 1e9:.4g}" if first.memory_bandwidth else "?",
            ])
            run = []
        if device is not None:
            run.append(device)
    return rows


def _figures(device):
    return device.kind, device.model, device.peak_flops, device.memory_bytes, device.memory_bandwidth


def _addresses_table(spec):
    rows = [[node.name, node.address or "-"] for node in spec.nodes]
    return ["nodes"] + _table(["node", "address"], rows)


def _devices_table(spec):
    header = ["node", "devices", "model", "n", "FP32 TF/s", "BF16 TF/s", "mem GB", "mem GB/s"]
    rows = [row for node in spec.nodes for row in _device_rows(node)]
    return ["devices"] + _table(header, rows)


def _link_row(node, role, link, n, serves):
    return [
        node.name, role, link.kind + (" via CPU" if link.via_cpu else ""), n, f"{link.bandwidth / 1e9:.4g}",
        f"{link.latency * 1e6:.3g}",
        "yes" if link.rdma else "no", "yes" if link.gpudirect else "no", serves,
    ]


def _nic_runs(node):
    """Runs of consecutive NICs with equal figures serving equally many devices."""
    kind = "GPU" if node.gpus() else None
    runs = []
    for k, nic in enumerate(node.nics):
        serves = sum(kind is None or d.kind == kind for d in node.devices_on_nic(k))
        if runs and runs[-1][2] == nic and runs[-1][3] == serves:
            runs[-1][1] = k
        else:
            runs.append([k, k, nic, serves])
    noun = kind or "device"
    return [(f"nic{a}" + (f"-{b}" if b > a else ""), b - a + 1, nic, f"{plural(n, noun)} each")
            for a, b, nic, n in runs]


def _links_table(spec):
    header = ["node", "link", "kind", "n", "GB/s/dir", "lat us", "RDMA", "GPUDirect", "serves"]
    rows = []
    for node in spec.nodes:
        rows.append(_link_row(node, "fabric", node.fabric, 1, plural(len(node.devices), "device")))
        if node.host_link is not None:
            rows.append(_link_row(node, "host", node.host_link, 1, "CPU <-> GPUs"))
        if node.bridge is not None:
            pairs = len(node.gpus()) // 2
            rows.append(_link_row(node, "bridge", node.bridge, pairs, "GPU pairs 0-1, 2-3, ..."))
        rows += [_link_row(node, name, nic, n, serves) for name, n, nic, serves in _nic_runs(node)]
    return ["links (bandwidth per direction)"] + _table(header, rows)


def _total_flops(devices, dtype):
    values = [d.peak_flops[dtype] for d in devices if dtype in d.peak_flops]
    return f"{sum(values) / 1e12:.4g} TFLOP/s" if values else "-"


def _totals(spec):
    gpus = spec.gpus()
    compute = spec.compute_devices()
    unknown = sum(not d.peak_flops for d in compute)
    memory = sum(d.memory_bytes for d in compute)
    nic = sum(n.nic_bandwidth() for n in spec.nodes)
    note = f" ({unknown} device(s) with unknown FLOP/s)" if unknown else ""
    return [
        "totals",
        f"  nodes {len(spec.nodes)}, GPUs {len(gpus)}, CPUs {len(spec.devices('CPU'))}; "
        f"replicas run on {len(compute)} {compute[0].kind if compute else '-'} device(s)",
        f"  peak FP32 {_total_flops(compute, 'float32')}, BF16 {_total_flops(compute, 'bfloat16')}{note}",
        f"  {'GPU' if gpus else 'CPU'} memory {memory / 1e9:.4g} GB, NIC bandwidth {nic / 1e9:.4g} GB/s per direction",
    ]
