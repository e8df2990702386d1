"""A summary of a GraphItem for people and scripts (``autodist inspect``)."""

from __future__ import annotations

from collections import Counter

from autodist.graph.item import PHASES

MIB = 1024 * 1024


def summarize(item, top=10):
    """Plain-data summary: ops by phase, parameters, sparse and largest variables, FLOPs.

    Parameters
    ----------
    item : GraphItem
    top : int
        How many of the largest variables and most common op types to list.

    Returns
    -------
    dict
        JSON-ready; bytes and FLOPs as ints.
    """
    ops = item.ops.values()
    flops_by_phase = {p: 0 for p in PHASES}
    for op in ops:
        flops_by_phase[op.phase] += op.flops
    slots = item.slot_variables()
    variables = sorted(item.variables.values(), key=lambda v: (-v.bytes, v.name))
    return {
        "model": item.job.model_name,
        "source": item.job.source,
        "tf_version": item.job.tf_version,
        "optimizer": item.job.optimizer,
        "batch_size": item.job.batch_size,
        "input_shapes": item.job.input_shapes,
        "content_hash": item.content_hash(),
        "ops": len(item.ops),
        "ops_by_phase": item.ops_by_phase(),
        "top_op_types": [
            {"type": t, "count": n}
            for t, n in sorted(Counter(op.type for op in ops).items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        ],
        "variables": len(item.variables),
        "trainable_variables": len(item.trainable_variables()),
        "parameters": item.parameter_count(),
        "parameter_bytes": item.parameter_bytes(),
        "model_weight_bytes": sum(v.bytes for v in item.model_weights()),
        "slot_variables": len(slots),
        "slot_bytes": sum(v.bytes for v in slots),
        "sparse_variables": [
            {
                "name": v.name,
                "shape": v.shape,
                "bytes": v.bytes,
                "sparse_update": v.sparse_update,
                "rows_touched": v.rows_touched,
            }
            for v in item.trainable_variables()
            if v.sparse_gradient
        ],
        "largest_variables": [
            {"name": v.name, "shape": v.shape, "bytes": v.bytes, "trainable": v.trainable} for v in variables[:top]
        ],
        "flops_per_step": item.total_flops(),
        "flops_by_phase": flops_by_phase,
        "loops": [{"op": loop.op, "trips": loop.trips if loop.trips_known else None, "body_ops": len(loop.ops),
                   "flops": loop.flops()} for loop in item.loops.values()],
    }


def _mib(nbytes):
    return f"{nbytes / MIB:,.2f} MiB"


def render(summary):
    """The summary as text lines for a terminal."""
    s = summary
    lines = [
        f"model        {s['model'] or '-'}   (TensorFlow {s['tf_version'] or '?'}, source {s['source'] or '-'})",
        f"job          batch size {s['batch_size']}, optimizer {s['optimizer'] or '-'}, inputs {s['input_shapes']}",
        f"ops          {s['ops']:,}: " + ", ".join(f"{p} {n:,}" for p, n in s["ops_by_phase"].items()),
        "op types     " + ", ".join(f"{t['type']} {t['count']}" for t in s["top_op_types"]),
        f"parameters   {s['parameters']:,} in {s['trainable_variables']} trainable variables"
        f" ({_mib(s['parameter_bytes'])}); model weights {_mib(s['model_weight_bytes'])}",
        f"slots        {s['slot_variables']} optimizer slot variables ({_mib(s['slot_bytes'])});"
        f" {s['variables']} variables in all",
        f"FLOPs/step   {s['flops_per_step'] / 1e9:,.3f} GFLOP ("
        + ", ".join(f"{p} {f / 1e9:,.3f}" for p, f in s["flops_by_phase"].items())
        + ")",
    ]
    for loop in s["loops"]:
        trips = f"{loop['trips']:,} trips" if loop["trips"] is not None else "trip count UNKNOWN: body priced once"
        lines.append(f"loop         {loop['op']}: {trips} of {loop['body_ops']:,} ops ({loop['flops'] / 1e9:,.3f} GFLOP)")
    if s["sparse_variables"]:
        lines.append("sparse       gradient is sparse (gathered rows) for:")
        for v in s["sparse_variables"]:
            update = "sparse update" if v["sparse_update"] else "dense update (optimizer densifies)"
            rows = f", <= {v['rows_touched']:,} rows/step" if v["rows_touched"] is not None else ""
            lines.append(f"               {v['name']} {v['shape']} {_mib(v['bytes'])}: {update}{rows}")
    else:
        lines.append("sparse       no sparse gradients")
    lines.append("largest variables")
    for v in s["largest_variables"]:
        kind = "trainable" if v["trainable"] else "state"
        lines.append(f"               {_mib(v['bytes']):>14}  {v['name']} {v['shape']} ({kind})")
    lines.append(f"content hash {s['content_hash']}")
    return lines
