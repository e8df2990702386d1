"""Text and markdown renderings of a report document.

Both renderers walk the same sections; only the table and heading styles
differ.  Text fits a 100-column terminal: long cells are shortened in the
middle (``abc..xyz``) so names stay recognisable.
"""

from __future__ import annotations

import textwrap

WIDTH = 100


def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def size(nbytes):
    if nbytes is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def rate(bytes_per_s):
    return f"{bytes_per_s / 1e9:.1f} GB/s"


def count(n):
    if n is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.4g}" if isinstance(n, float) else str(n)


def factor(x):
    return "-" if x is None else f"{x:.2f}x"


def percent(x):
    return "-" if x is None else f"{x:.0%}"


def plural(n, noun):
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 replica", "2 replicas")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _shorten(text, width):
    if len(text) <= width:
        return text
    keep = max(width - 2, 0)
    return (text[: keep // 2] + ".." + text[len(text) - (keep - keep // 2) :])[:width]


WRAPPED_MIN = 20  # characters a wrapped last column keeps before the other columns shrink


def table(header, rows, markdown=False, width=WIDTH, wrap_last=False):
    """Rows of strings as a table; in text mode, the widest column shrinks to fit ``width``.

    A cell too wide for its column is shortened in the middle, or, in the
    last column with ``wrap_last`` (prose, such as a reason), wrapped onto
    lines of its own below the row; that column gives way first, down to
    :data:`WRAPPED_MIN` characters, so that the others keep their cells whole.
    """
    rows = [[str(c) for c in row] for row in rows]
    if markdown:
        cells = lambda r: "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"  # noqa: E731
        return "\n".join([cells(header), "|" + "|".join("---" for _ in header) + "|"] + [cells(r) for r in rows])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        wrapped_gives = wrap_last and widths[-1] > WRAPPED_MIN
        shrinking = len(widths) - 1 if wrapped_gives else widths.index(max(widths))
        widths[shrinking] -= 1
    line = lambda r: "  ".join(_shorten(c, w).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    lines = [line(header), line(["-" * w for w in widths])]
    for row in rows:
        parts = textwrap.wrap(row[-1], widths[-1]) if wrap_last and len(row[-1]) > widths[-1] else [row[-1]]
        lines += [line(row[:-1] + parts[:1])] + [line([""] * (len(row) - 1) + [part]) for part in parts[1:]]
    return "\n".join(lines)


def _paragraph(text, markdown):
    return text if markdown else textwrap.fill(text, WIDTH)


def _heading(title, markdown):
    return f"## {title}" if markdown else f"{title}\n{'=' * len(title)}"


def _job(doc, md):
    job = doc["job"]
    rows = [
        ["model", job["model_name"] or "-"],
        ["batch size", str(job["batch_size"])],
        ["optimizer", job["optimizer"] or "-"],
        ["ops", str(job["ops"])],
        ["parameters", f"{count(job['parameters'])} ({size(job['parameter_bytes'])})"],
        ["FLOPs per step", count(job["flops_per_step"])],
        ["sparse variables", ", ".join(job["sparse_variables"]) or "none"],
    ]
    costs = doc["costs"]
    accumulation = costs["micro_batches"]
    compute = "GPU" if any(d["kind"] == "GPU" for d in costs["devices"]) else "CPU"  # where replicas run
    other = sorted({(d["precision"], d["model"]) for d in costs["devices"]
                    if d["kind"] == compute and d.get("precision", costs["precision"]) != costs["precision"]})
    runs_as = "; ".join(f"{p} on {', '.join(m for q, m in other if q == p)}" for p in dict.fromkeys(q for q, _ in other))
    rows.append(["precision", costs["precision"]
                 + (f" (runs as {runs_as}: no {costs['precision']} tensor cores there)" if runs_as else "")
                 + (f", {accumulation} micro-batches per step" if accumulation > 1 else "")])
    if "xla" in costs:
        rows.append(["XLA", f"{'on' if costs['xla'] else 'off'} ({costs['xla_reason']})"])
    rows += [[f"costs on {d['model']}", _basis(d)] for d in costs["devices"]]
    transposing = [d for d in costs["devices"] if "nchw_transposes" in d]
    rows += [[f"layout on {d['model']}",
              f"NCHW: cuDNN transposes ({_share(d['nchw_transposes']['share'])} of kernel time)"] for d in transposing]
    semantics = job.get("batch_semantics")
    batch = f"\n\n{_paragraph(f'Batch: {semantics}.', md)}" if semantics else ""
    for d in transposing:
        batch += "\n\n" + _paragraph(f"Layout on {d['model']}: {d['nchw_transposes']['why']}; cuDNN transposes each "
                                     "tensor-core convolution's operands and result in and out of NHWC.", md)
    if job.get("input_pipeline"):
        batch += "\n\n" + _paragraph(
            f"Input: the script's tf.data pipeline runs {', '.join(job['input_pipeline'])} on the host CPUs for every "
            "batch. It is not priced: the plan assumes each step's batch is ready when the step starts, which a "
            "slower host would not make true.", md)
    if job.get("updates_per_step"):
        batch += "\n\n" + _paragraph(_repeated_updates(job["updates_per_step"]), md)
    for op in job.get("unknown_trips", []):
        batch += "\n\n" + _paragraph(f"Warning: the trip count of loop {op} is not known from the graph; its body "
                                     "is priced once per step.", md)
    return table(["job", ""], rows, md, wrap_last=True) + batch


def _repeated_updates(updates):
    """The warning that the step updates some variables more than once and is priced with one sum of each."""
    how_often = " or ".join(map(str, sorted(set(updates.values()))))
    return (f"Warning: the step's optimizers update {len(updates)} variable{'s' if len(updates) > 1 else ''} "
            f"{how_often} times a step (e.g. {min(updates)}), and a run sums their gradients over the replicas at "
            "each update; the prediction prices one sum of each a step, so with several replicas it is low by the "
            "others.")


def _share(fraction):
    """A fraction as a whole percentage, "<1%" where it rounds to nothing."""
    return "<1%" if 0 < fraction < 0.005 else f"{fraction:.0%}"


BASIS = {"measured": "measured", "step-measured": "measured, this step timed whole",
         "calibrated": "calibrated on published figures",
         "assumed": "ASSUMED (neither measured nor calibrated)"}


def _basis(device):
    """How a device model's costs were obtained, in words (on a GPU calibrated only in part, which kernel classes no
    published figure of its architecture runs, with their share of the kernel time)."""
    if device["basis"] != "partly-calibrated":
        return BASIS[device["basis"]]
    assumed = ", ".join(f"{c} ({share:.0%} of kernel time)" for c, share in device["assumed_kernels"].items())
    return f"calibrated, but ASSUMED for {assumed}"


def _memory(memory):
    """The peak memory of the device fullest for its capacity, "OVER" when a device overflows ("-" when unknown)."""
    if memory is None or not memory["peak_bytes"]:
        return "-"
    device = max(memory["peak_bytes"], key=lambda d: (memory["peak_bytes"][d] / max(memory["limit_bytes"][d], 1), d))
    text = size(memory["peak_bytes"][device])
    return text if memory["fits"] else f"{text} OVER"


LINK_NAMES = {"infiniband": "IB", "ethernet": "Ethernet", "roce": "RoCE", "nvlink": "NVLink", "pcie": "PCIe"}


def _link(link):
    text = f"{LINK_NAMES.get(link['kind'], link['kind'])} {rate(link['bandwidth'])}"
    if link["rdma"]:
        text += " RDMA" + ("+GDR" if link["gpudirect"] else "")
    return text


def _cluster(doc, md):
    c = doc["cluster"]
    rows = []
    for g in c["node_groups"]:
        nics = g["nics"]
        nic_text = f"{len(nics)}x {_link(nics[0])}" if nics else "none"
        nodes = g["nodes"][0] if len(g["nodes"]) == 1 else f"{len(g['nodes'])} nodes ({g['nodes'][0]}..)"
        rows.append([nodes, g["devices"], _link(g["fabric"]), nic_text])
    head = (
        f"Cluster {c['name'] or '-'}: {plural(c['nodes'], 'node')}, {plural(c['gpus'], 'GPU')}, "
        f"{plural(c['cpus'], 'CPU')}; "
        f"RDMA between nodes: {'yes' if c['rdma'] else 'no'}."
    )
    legend = "\n\nGDR: GPUDirect RDMA." if any(n["gpudirect"] for g in c["node_groups"] for n in g["nics"]) else ""
    return head + "\n\n" + table(["nodes", "devices", "inside a node", "NICs"], rows, md, wrap_last=True) + legend


def _comparison(doc, md):
    p = doc["plan"]
    rows = [
        [
            "autodist",
            ms(p["step_time"]),
            count(p["samples_per_s"]),
            ms(p["compute_time"]),
            ms(p["exposed_comm_time"]),
            ms(p["update_time"]),
            _memory(p["memory"]),
            "1.00x",
        ]
    ]
    for b in sorted(doc["baselines"], key=lambda b: (b["step_time"], b["name"])):
        ratio = b["samples_per_s"] / p["samples_per_s"] if b["samples_per_s"] and p["samples_per_s"] else None
        rows.append(
            [b["name"], ms(b["step_time"]), count(b["samples_per_s"]), ms(b["compute_time"]),
             ms(b["exposed_comm_time"]), ms(b["update_time"]), _memory(b["memory"]), factor(ratio)]
        )
    if doc["compare"]:
        o = doc["compare"]
        rows.append([f"compared: {o['name']}", ms(o["step_time"]), count(o["samples_per_s"]), "-", "-", "-", "-",
                     factor(1 / o["speedup_of_this_plan"] if o["speedup_of_this_plan"] else None)])
    lines = [
        table(["plan", "step", "samples/s", "compute", "exposed comm", "update", "peak memory", "throughput"], rows,
              md),
        "",
        _paragraph(
            "After compute, exposed comm is the time the step waits on transfers and update the time it applies "
            "optimizer updates while no transfer runs"
            + ("." if p["update_time"] is not None else " (a plan file holds no timeline to tell them apart).")
            + (f" Besides, the loop that drives the step takes {ms(p['client_time'])} (a plan with PS: its client "
               "dispatching the step to every task; on collective ops: each replica's own fit or step loop)."
               if p["client_time"] else "")
            + f" autodist's plan {p['name']}: {plural(p['replicas'], 'replica')}, "
            f"{plural(p['ps_tasks'], 'PS task')}. "
            + (f"No plan with PS can run this job ({p['ps_not_offered']}): no PS baseline. Speed-up "
               if p.get("ps_not_offered") else f"Speed-up over greedy PS: {factor(p['speedup_over_greedy_ps'])}; ")
            + f"over the best baseline ({p['best_baseline'] or '-'}): "
            f"{factor(p['speedup_over_best_baseline'])}. Lower bound {ms(doc['lower_bound'])}, "
            f"gap to it {percent(doc['gap_to_lower_bound'])}.",
            md,
        ),
    ]
    if doc.get("scaling"):
        lines += ["", _paragraph(_scaling(doc["scaling"]), md)]
    if doc["compare"]:
        o = doc["compare"]
        note = "" if o["same_graph"] and o["same_cluster"] else " (made for a different graph or cluster)"
        lines += ["", _paragraph(
            f"Compared plan {o['plan']}{note}: {o['variables_with_other_sync']} variables synchronised "
            f"differently; this plan is {factor(o['speedup_of_this_plan'])} its throughput.", md)]
    return "\n".join(lines)


def _scaling(s):
    """The plan's weak scaling (placement.scaling) in one sentence."""
    return (f"Weak scaling: one {s['device']} alone runs a replica's {count(s['replica_batch'])} samples in "
            f"{ms(s['one_device_step_time'])} ({count(s['one_device_samples_per_s'])} samples/s); the plan's "
            f"{s['replicas']} replicas give {factor(s['speedup'])} that, an efficiency of {s['efficiency']:.1%}.")


def _vs_one_device(scaling):
    """A reference's speed-up over one device and its efficiency, "-" without one."""
    return f"{factor(scaling['speedup'])} ({scaling['efficiency']:.1%})" if scaling else "-"


def _references(doc, md):
    """The job as other systems run it (``--references``); None (no section) when not asked for."""
    if doc["references"] is None:
        return None
    rows = [[r["name"], ms(r["step_time"]), count(r["samples_per_s"]), factor(r["throughput_vs_plan"]),
             _vs_one_device(r.get("scaling"))] for r in doc["references"]]
    notes = "\n".join(f"- {r['system']}" if md else
                      textwrap.fill(r["system"], WIDTH, initial_indent="- ", subsequent_indent="  ")
                      for r in doc["references"])
    return "\n".join([
        _paragraph("The same job as systems autodist does not run would run it on this cluster, as published "
                   "comparisons are made (throughput against this plan's; vs one device: over one device "
                   "running one replica's share alone, and the weak-scaling efficiency):", md),
        "", table(["system", "step", "samples/s", "throughput", "vs one device"], rows, md), "", notes])


def _bottleneck(doc, md):
    b = doc["bottleneck"]
    rows = []
    if b["busiest_link"]:
        link = b["busiest_link"]
        rows.append(["busiest link", link["resource"], ms(link["busy_time"]), percent(link["busy_fraction"])])
    if b["busiest_device"]:
        dev = b["busiest_device"]
        rows.append(["busiest device", dev["resource"], ms(dev["busy_time"]), percent(dev["busy_fraction"])])
    text = _paragraph(b["sentence"], md)
    return text + ("\n\n" + table(["", "resource", "busy", "of the step"], rows, md) if rows else "")


def _pods(doc, md):
    rows = []
    for pod in doc["pods"]:
        for t in pod["tasks"]:
            devices = t["devices"]
            shown = ", ".join(devices) if len(devices) <= 2 else f"{devices[0]} .. {devices[-1]} ({len(devices)})"
            rows.append([pod["node"], f"{t['job']}:{t['index']}", shown or "(CPU only)"])
    return table(["node", "task", "devices"], rows, md)


def _variables(doc, md):
    rows = [[v["name"], size(v["bytes"]), v["sync"], v["where"]] for v in doc["largest_variables"]]
    return table(["variable", "size", "sync", "where"], rows, md)


def _counterfactuals(doc, md):
    c = doc["counterfactuals"]
    if c is None:
        return _paragraph("Counterfactuals need the job's graph: report on train.py or graph.json, not a plan file.",
                          md)
    items = c["items"]
    shown = {kind: sum(i["subject"] == kind for i in items) for kind in ("variable", "bucket")}
    buckets = f"the {shown['bucket']} largest of {c['buckets']} allreduce buckets" if c["buckets"] else "no bucket"
    not_offered = doc["plan"].get("ps_not_offered")
    variables = f"the {shown['variable']} largest of {c['variables']} variables"
    if not_offered:
        variables = (f"{variables} with another way to synchronise" if shown["variable"] else "no variable") + \
            f" (PS is not offered: {not_offered})"
    head = _paragraph(
        f"Each line re-simulates the plan with one decision changed, against the next-best alternative: "
        f"{variables} and {buckets}."
        + (" A variable moved to PS also moves the plan's other allreduces off collective ops (onto ordinary "
           "TensorFlow ops, as a plan with PS runs them); its delta includes that."
           if any(i["leaves_collective_ops"] for i in items) else ""),
        md,
    )
    lines = [f"- {i['sentence']}" if md else textwrap.fill(i["sentence"], WIDTH, initial_indent="- ",
                                                               subsequent_indent="  ") for i in items]
    return head + ("\n\n" + "\n".join(lines) if lines else "")


def _search(doc, md):
    s = doc["search"]
    if s is None:
        return "Read from a plan file; no search ran."
    left_out = f" Left out: {s['left_out']}." if s.get("left_out") else ""
    warning = f" Warning: {s['warning']}." if s.get("warning") else ""
    return _paragraph(
        f"Searched {s['seconds']:.1f} s (seed {s['seed']}): {s['moves_tried']} moves tried, "
        f"{s['moves_accepted']} accepted, starting from the {s['started_from']} baseline.{left_out}{warning}",
        md,
    )


SECTIONS = (
    ("Job", _job),
    ("Cluster", _cluster),
    ("Plan and baselines (predicted)", _comparison),
    ("Other systems (predicted)", _references),
    ("Where the time goes", _bottleneck),
    ("Pods", _pods),
    ("Largest variables", _variables),
    ("Why this plan", _counterfactuals),
    ("Search", _search),
)


def render(doc, fmt="text"):
    """The report as text (100 columns) or markdown."""
    md = fmt == "markdown"
    parts = []
    if md:
        parts.append(f"# autodist placement report: {doc['job']['model_name'] or 'job'}")
    for title, section in SECTIONS:
        text = section(doc, md)
        if text is not None:
            parts += [_heading(title, md), text]
    return "\n\n".join(parts) + "\n"
