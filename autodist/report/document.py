"""The report as one plain document (the JSON format; text and markdown render it).

Everything comes from a :class:`~autodist.plan.Plan` (tasks, variables,
prediction, cluster) plus, when a search just ran, the search result's
baseline simulations and statistics.  Numbers are SI (seconds, bytes); the
renderers convert at the edge.
"""

from __future__ import annotations

from autodist.graph.semantics import describe
from autodist.report.bottleneck import bottleneck, exposed_split
from autodist.report.counterfactuals import explain
from autodist.report.pricing import Pricing
from autodist.report.references import reference_steps
from autodist.throughput import samples_per_second

FORMAT = "autodist.report"
VERSION = 1

LARGEST_VARIABLES = 10
GREEDY = "greedy-ps"


def _ratio(slow, fast):
    return slow / fast if slow and fast else None


def _job(data, graph_item, plan):
    summary = data["graph"]
    sparse = sorted(v["name"] for v in data["variables"] if v.get("sparse"))
    return {
        "model_name": summary["model_name"],
        "batch_size": summary["batch_size"],
        "optimizer": summary["optimizer"],
        "ops": summary["ops"],
        "trainable_variables": summary["trainable_variables"],
        "parameters": graph_item.parameter_count() if graph_item is not None else None,
        "parameter_bytes": summary["parameter_bytes"],
        "flops_per_step": summary["flops"],
        "sparse_variables": sparse,
        "batch_semantics": describe(summary["batch_size"], summary.get("script_batch", 0),
                                    summary.get("batch_per_replica", False), summary.get("batch_pinned", ""),
                                    len(plan.resource_spec.compute_devices()), plan.micro_batches),
        **({"unknown_trips": summary["unknown_trips"]} if summary.get("unknown_trips") else {}),
        **({"input_pipeline": graph_item.job.input_pipeline}
           if graph_item is not None and graph_item.job.input_pipeline else {}),
        **({"updates_per_step": dict(sorted(graph_item.job.updates_per_step.items()))}
           if graph_item is not None and graph_item.job.updates_per_step else {}),
    }


def _link_dict(link):
    return {
        "kind": link.kind,
        "bandwidth": link.bandwidth,
        "latency": link.latency,
        "rdma": link.rdma,
        "gpudirect": link.gpudirect,
    }


def _cluster(spec):
    """Nodes grouped by identical hardware, with totals."""
    groups = {}
    for node in spec.nodes:
        models = {}
        for d in node.devices:
            models[d.model] = models.get(d.model, 0) + 1
        devices = ", ".join(f"{n}x {m}" for m, n in sorted(models.items()))
        nics = [_link_dict(n) for n in node.nics]
        key = (devices, repr(_link_dict(node.fabric)), repr(nics))
        group = groups.setdefault(
            key, {"nodes": [], "devices": devices, "fabric": _link_dict(node.fabric), "nics": nics}
        )
        group["nodes"].append(node.name)
    inter = [n for node in spec.nodes for n in node.nics]
    return {
        "name": spec.name,
        "nodes": len(spec.nodes),
        "gpus": len(spec.gpus()),
        "cpus": len(spec.devices("CPU")),
        "rdma": len(spec.nodes) > 1 and bool(inter) and all(n.rdma for n in inter),
        "node_groups": list(groups.values()),
    }


def _memory(peak, spec):
    """Peak bytes per device against each device's capacity, and whether they all fit."""
    peak = {d: int(b) for d, b in sorted(peak.items())}
    limit = {d: int(spec.device(d).memory_bytes) for d in peak}
    return {"peak_bytes": peak, "limit_bytes": limit, "fits": all(peak[d] <= limit[d] for d in peak)}


def _costs(data, spec, micro_batches, cost_model=None, graph_item=None):
    """The job's precision and accumulation, and how each device model's costs were obtained (by ``cost_model``,
    else the shipped one; with ``graph_item``, whether its step was timed whole on a CPU model, and what share of a
    GPU's kernel time cuDNN spends transposing NCHW convolutions)."""
    from cost_models import CostModel
    from cost_models.gpu import architecture_of, runs_as

    model = cost_model or CostModel.default()
    precision = data["graph"].get("precision") or "fp32"
    devices = []
    for kind, name in sorted({(d.kind, d.model) for d in spec.devices()}):
        one = next(d for d in spec.devices() if (d.kind, d.model) == (kind, name))
        entry = {"model": name, "kind": kind, "precision": runs_as(precision, one)}
        if kind == "GPU" and model.gpu.calibrated(architecture_of(name)):
            assumed = model.assumed_gpu_kernels(graph_item, one) if graph_item is not None else {}
            entry.update({"basis": "partly-calibrated", "assumed_kernels": assumed} if assumed
                         else {"basis": "calibrated"})
        elif kind == "GPU":
            entry["basis"] = "assumed"
        elif graph_item is not None and model.measured_step(graph_item, name) is not None:
            entry["basis"] = "step-measured"
        else:
            entry["basis"] = "measured" if name in model.learned_devices else "assumed"
        if kind == "GPU" and graph_item is not None:
            share, why = model.conv_transposes(graph_item, one)
            entry.update({"nchw_transposes": {"share": share, "why": why}} if share > 0 else {})
        devices.append(entry)
    xla = {"xla": data["graph"]["xla"], "xla_reason": data["graph"]["xla_reason"]} if "xla_reason" in data["graph"] else {}
    return {"precision": precision, "micro_batches": micro_batches, "devices": devices, **xla}


def _exposed(simulation):
    """``{"exposed_comm_time", "update_time"}`` of a simulation (None each without a timeline)."""
    comm, update = (exposed_split(simulation) if simulation is not None else None) or (None, None)
    return {"exposed_comm_time": comm, "update_time": update}


def _client_time(prediction):
    """The client's dispatch in a stored prediction: what its step holds besides compute and the wait after it."""
    return max(prediction["step_time"] - prediction["compute_time"] - prediction["exposed_comm_time"], 0.0)


def _baselines(data, candidates, batch_size, spec):
    """Every baseline with its breakdown (from the search) or its stored step time.

    Every number of a row is its search's simulation of the baseline (placement.search.optimize keeps their
    timelines, which split the exposed time).  Returns the entries and each baseline's step time (of the
    global batch, whatever its replica count).
    """
    if candidates:
        simulated = [(c.name, c.simulation) for c in candidates]
        entries = [
            {
                "name": name,
                "step_time": sim.step_time,
                "samples_per_s": samples_per_second(batch_size, sim.step_time),
                "compute_time": sim.compute_time,
                "client_time": sim.client_time,
                **_exposed(sim),
                "memory": _memory(sim.memory, spec),
            }
            for name, sim in simulated
        ]
        return entries, {name: sim.step_time for name, sim in simulated}
    stored = data["prediction"].get("baselines", {})
    entries = [
        {
            "name": name,
            "step_time": t,
            "samples_per_s": samples_per_second(batch_size, t),
            "compute_time": None,
            "client_time": None,
            "exposed_comm_time": None,
            "update_time": None,
            "memory": None,
        }
        for name, t in stored.items()
    ]
    return entries, dict(stored)


def _latency_share(pricing, strategy):
    latency, bandwidth = pricing.transfer_terms(strategy)
    return latency / (latency + bandwidth) if latency + bandwidth else None


def _pods(data):
    pods = {}
    for task in data["tasks"]:
        pods.setdefault(task["node"], []).append(
            {"job": task["job"], "index": task["index"], "devices": task["devices"]}
        )
    return [{"node": node, "tasks": tasks} for node, tasks in pods.items()]


def _largest_variables(data):
    ps_devices = data["strategy"]["ps_devices"]
    rows = []
    for var in sorted(data["variables"], key=lambda v: (-v["bytes"], v["name"]))[:LARGEST_VARIABLES]:
        if var["method"] == "ps":
            tasks = sorted({s["ps_task"] for s in var["shards"]})
            where = ", ".join(f"ps:{t} ({ps_devices[t].split('/')[0]})" for t in tasks[:2])
            where += f" +{len(tasks) - 2} more" if len(tasks) > 2 else ""
            how = f"PS, {len(var['shards'])} shard{'s' if len(var['shards']) > 1 else ''}"
        else:
            where = "every replica"
            how = f"allreduce {var['algorithm']}, bucket {var['bucket']}"
        rows.append({"name": var["name"], "bytes": var["bytes"], "sync": how, "where": where})
    return rows


def _compare(data, other, batch_size):
    """The other plan's stored prediction beside this plan's, and what differs."""
    theirs_data = other.to_dict()
    mine = {v["name"]: v for v in data["variables"]}
    theirs = {v["name"]: v for v in theirs_data["variables"]}
    differing = sorted(
        n for n in mine.keys() & theirs.keys() if mine[n].get("method") != theirs[n].get("method")
        or mine[n].get("algorithm") != theirs[n].get("algorithm")
        or mine[n].get("shards") != theirs[n].get("shards")
    )
    step = theirs_data["prediction"]["step_time"]
    this = data["prediction"]["step_time"]
    return {
        "plan": other.where,
        "name": theirs_data["name"],
        "step_time": step,
        "samples_per_s": samples_per_second(batch_size, step),
        "speedup_of_this_plan": _ratio(step, this),
        "same_graph": theirs_data["provenance"]["graph_hash"] == data["provenance"]["graph_hash"],
        "same_cluster": theirs_data["provenance"]["cluster_hash"] == data["provenance"]["cluster_hash"],
        "variables_with_other_sync": len(differing),
    }


def build_report(plan, graph_item=None, search=None, other_plan=None, plan_file=None, budget_s=None,
                 cost_model=None, references=False):
    """The report document.

    Parameters
    ----------
    plan : autodist.plan.Plan
        The chosen plan (fresh from a search, or loaded from a file).
    graph_item : GraphItem, optional
        The job's graph, when at hand (adds the parameter count; with
        ``cost_model``, the exposed-time split and the counterfactuals).
    search : placement.SearchResult, optional
        When a search just ran: its baselines' breakdowns and its statistics
        (and its simulator, which prices the counterfactuals without a second
        Problem).
    other_plan : autodist.plan.Plan, optional
        A plan to compare with (``--compare``).
    plan_file : str, optional
        Where the chosen plan was read from or written to.
    budget_s : float, optional
        The search budget that was given.
    cost_model : cost_models.CostModel, optional
        The cost model the plan was priced with.
    references : bool
        With ``search``: also price the job as other systems run it (autodist.report.references).

    Returns
    -------
    dict
        A document valid against ``autodist/schemas/report.schema.json``.
    """
    data = plan.to_dict()
    prediction = data["prediction"]
    batch = data["graph"]["batch_size"]
    replicas = len(plan.strategy.replicas)
    pricing = None
    if graph_item is not None and cost_model is not None:
        pricing = Pricing(graph_item, plan.resource_spec, cost_model, simulator=search.simulator if search else None)
    # one simulation for every number of the plan shown: the search's own traced one, else the plan simulated
    simulation = search.simulation if search else pricing.simulate(plan.strategy, trace=True) if pricing else None
    step = simulation.step_time if simulation else prediction["step_time"]
    compute_time = simulation.compute_time if simulation else prediction["compute_time"]
    exposed = _exposed(simulation)
    split = None if simulation is None else (exposed["exposed_comm_time"], exposed["update_time"])
    latency_share = _latency_share(pricing, plan.strategy) if pricing else None
    client_time = simulation.client_time if simulation else _client_time(prediction)
    baselines, steps = _baselines(data, search.candidates if search else (), batch, plan.resource_spec)
    best = min(steps.items(), key=lambda kv: (kv[1], kv[0]), default=(None, None))
    lower = prediction.get("lower_bound")
    stats = search.stats if search else None
    return {
        "format": FORMAT,
        "version": VERSION,
        "job": _job(data, graph_item, plan),
        "cluster": _cluster(plan.resource_spec),
        "plan": {
            "name": data["name"],
            "file": plan_file,
            "step_time": step,
            "samples_per_s": samples_per_second(batch, step),
            "compute_time": compute_time,
            "client_time": client_time,
            **exposed,
            "replicas": replicas,
            "ps_tasks": len(plan.strategy.ps_devices),
            "speedup_over_greedy_ps": _ratio(steps.get(GREEDY), step),
            "ps_not_offered": graph_item.job.why_collective_only() if graph_item is not None else None,
            "best_baseline": best[0],
            "speedup_over_best_baseline": _ratio(best[1], step),
            "memory": _memory(prediction["memory"], plan.resource_spec),
        },
        "costs": _costs(data, plan.resource_spec, plan.micro_batches, cost_model, graph_item),
        "baselines": baselines,
        "lower_bound": lower,
        "gap_to_lower_bound": (step / lower - 1.0) if lower else None,
        "bottleneck": bottleneck(data, split, latency_share, client_time, plan.strategy.allreduces_everything(),
                                 simulation.cpu_bound if simulation else ()),
        "pods": _pods(data),
        "largest_variables": _largest_variables(data),
        "counterfactuals": explain(pricing, plan.strategy, simulation) if pricing else None,
        "search": None
        if stats is None
        else {
            "seconds": stats["seconds"],
            "moves_tried": stats["moves_tried"],
            "moves_accepted": stats["moves_accepted"],
            "started_from": stats.get("start"),
            "seed": data["provenance"]["seed"],
            "budget_s": budget_s,
            "left_out": stats.get("left_out"),
            "warning": stats.get("warning"),
        },
        "compare": None if other_plan is None else _compare(data, other_plan, batch),
        "scaling": pricing.weak_scaling(plan.strategy, samples_per_second(batch, step)) if pricing else None,
        "references": (reference_steps(pricing, search.simulator.problem, batch, step)
                       if references and search else None),
        "provenance": data["provenance"],
    }
