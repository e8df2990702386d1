"""Where the step's time goes: exposed communication against exposed updates, and what bounds the step.

The bound is the busiest resource when it is nearly always busy (a device:
compute, or a parameter server's updates; a link: bandwidth).  Otherwise it
is the longest wait of the step: transfers after compute (and then latency
only when the transfer model's latency terms outweigh its
bytes-over-bandwidth terms), optimizer updates after compute, or the loop
that drives the step before it (the client's dispatch, for plans that one
client drives; each replica's own fit or step loop, for plans on
collective ops).  Where the CPU of cores that the step's processes share
(an emulated node's, or this machine's) sets the step time
(``SimResult.cpu_bound``), that bounds it.
"""

from __future__ import annotations

from autodist.report.render import ms

# A resource busy for at least this fraction of the step bounds it.
SATURATED = 0.9
# A wait that takes more than this fraction of the step bounds it.
SIGNIFICANT = 0.2
# Latency dominates when it is more than this share of the transfers' modelled seconds.
LATENCY_DOMINATES = 0.5
# A busy time over the step by less than this fraction of it is the float rounding of summing the device's ops.
ROUNDING = 1e-9


def _covered(intervals, start, end):
    """Seconds of ``[start, end]`` that the union of ``intervals`` covers."""
    total, reach = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def exposed_split(simulation):
    """``(communication, update)`` seconds of the step after compute ends.

    Update time is when an optimizer update runs and no transfer does; the
    rest (transfers, and the latency before them) is communication.  The
    client's dispatch, before compute, is neither.  Needs a traced
    simulation; None when there is a wait but no timeline.
    """
    start, end = simulation.client_time + simulation.compute_time, simulation.step_time
    if end <= start:
        return 0.0, 0.0
    if not simulation.events:
        return None
    spans = {"sync": [], "update": []}
    for _, category, _, a, b in simulation.events:
        if category in spans:
            spans[category].append((a, b))
    transfers = _covered(spans["sync"], start, end)
    update = _covered(spans["sync"] + spans["update"], start, end) - transfers
    return end - start - update, update


def _ps_role(data, link):
    """How much of the PS-held bytes sit on the node behind ``link``."""
    node = link.split("/", 1)[0]
    ps_nodes = {t["index"]: t["node"] for t in data["tasks"] if t["job"] == "ps"}
    total = held = 0
    tasks = set()
    for var in data["variables"]:
        if var["method"] != "ps":
            continue
        shard_bytes = var["bytes"] / len(var["shards"])
        for shard in var["shards"]:
            total += shard_bytes
            if ps_nodes.get(shard["ps_task"]) == node:
                held += shard_bytes
                tasks.add(shard["ps_task"])
    if not held:
        return None
    names = ", ".join(str(t) for t in sorted(tasks))
    if len(tasks) > 1:
        return f"the PS tasks {names} on {node} hold {held / total:.0%} of the PS bytes"
    return f"the PS task {names} on {node} holds {held / total:.0%} of the PS bytes"


def _busiest(busy, step, **extra):
    top = max(busy.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    if top is None:
        return None
    return {"resource": top[0], "busy_time": top[1], "busy_fraction": top[1] / step if step else 0.0, **extra}


def bottleneck(data, split, latency_share, client_time, collective_ops, cpu_bound=()):
    """The busiest link and device, what bounds the step, and one sentence a person can act on.

    Parameters
    ----------
    data : dict
        The plan as a dict (its prediction, tasks, variables and strategy).
    split : (float, float) or None
        The plan's exposed communication and update seconds; None when
        there is no timeline to split (a plan file).
    latency_share : float or None
        The latency share of the plan's transfers (``Pricing.transfer_terms``).
    client_time : float
        Seconds the loop that drives the step takes before it runs (``SimResult.client_time``).
    collective_ops : bool
        The plan runs on collective ops (``Strategy.allreduces_everything``): each replica drives its own loop.
    cpu_bound : tuple
        ``(pool, seconds)`` where the CPU of that pool of shared cores sets the step time
        (``SimResult.cpu_bound``), else ``()``.
    """
    prediction = data["prediction"]
    step = prediction["step_time"]
    links = prediction["link_busy"]
    link = _busiest(links, step, share_of_link_time=0.0)
    if link:
        link["share_of_link_time"] = link["busy_time"] / (sum(links.values()) or 1.0)
    device = _busiest(prediction["device_busy"], step)
    fraction = (lambda t: t / step if step else 0.0)  # noqa: E731
    out = {
        "busiest_link": link,
        "busiest_device": device,
        "exposed_comm_fraction": None if split is None else fraction(split[0]),
        "exposed_update_fraction": None if split is None else fraction(split[1]),
        "client_fraction": fraction(client_time),
        "latency_share": latency_share,
    }
    replica_devices = {d for replica in data["strategy"]["replicas"] for d in replica}
    # Without a timeline (a plan file), the wait after compute is transfers and updates together.
    after_compute = fraction(step - prediction["compute_time"] - client_time)
    waiting = after_compute if split is None else out["exposed_comm_fraction"]
    waits = {"communication" if split is not None else None: waiting, "client": out["client_fraction"]}
    if split is not None:
        waits["update"] = out["exposed_update_fraction"]
    longest, wait = max(waits.items(), key=lambda kv: (kv[1], str(kv[0])))
    link_fraction = link["busy_fraction"] if link else 0.0
    if cpu_bound:
        out["bound_by"] = "cpu"
    elif device and device["busy_fraction"] >= max(SATURATED, link_fraction):
        out["bound_by"] = "compute" if device["resource"] in replica_devices else "update"
    elif link and link_fraction >= SATURATED:
        out["bound_by"] = "communication"
    elif wait <= SIGNIFICANT:
        out["bound_by"] = "compute"
    elif longest == "communication":
        latency = latency_share is not None and latency_share > LATENCY_DOMINATES
        out["bound_by"] = "latency" if latency else "communication"
    else:
        out["bound_by"] = longest  # None: transfers or updates, only a timeline tells
    out["sentence"] = _sentence(data, out, waiting, split is not None, client_time, collective_ops, cpu_bound)
    return out


def _sentence(data, b, waiting, split, client_time, collective_ops, cpu_bound):
    link, device, bound = b["busiest_link"], b["busiest_device"], b["bound_by"]
    if bound == "cpu":
        pool, seconds = cpu_bound
        where = pool if pool == "this machine" else f"node {pool}"
        return (
            f"CPU-bound: the processes on {where} (the client where it runs there, the worker and PS tasks) "
            f"share its cores, and need {ms(seconds)} of them per step, the whole step: computing, updating, "
            "dispatching, and gRPC's sending and receiving of every tensor (measured by 'autodist profile "
            "remote-steps'). Fewer tasks or transfers on that node (fewer PS tasks, fewer and larger tensors), a "
            "plan on collective ops, or more cores per node would shorten the step."
        )
    waits = (f"{waiting:.0%} of the step waits on transfers" if split else
             f"{waiting:.0%} of the step follows compute (transfers and updates: a plan file holds no timeline "
             "to tell them apart)")
    if bound is None:
        busiest = ", ".join(f"the busiest {kind} is {r['resource']} ({r['busy_fraction']:.0%} busy)"
                            for kind, r in (("device", device), ("link", link)) if r)
        return (f"{waits[0].upper()}{waits[1:]}; {busiest}. Report on the job's graph to see whether transfers or "
                "updates bound the step.")
    if bound == "client" and collective_ops:
        return (
            f"Loop-bound: for {b['client_fraction']:.0%} of the step ({ms(client_time)}) each replica's own training "
            f"loop (Keras' fit loop, or the script's loop calling its step) runs around the step's ops, and {waits}. "
            "Fewer, larger steps (a larger batch per step) spread that fixed cost over more samples."
        )
    if bound == "client":
        return (
            f"Client-bound: for {b['client_fraction']:.0%} of the step ({ms(client_time)}) its client dispatches it "
            f"to every task before any of it runs (a plan with PS runs from one client), and {waits}. Fewer tasks "
            "(fewer PS tasks or nodes), or a plan that allreduces everything on collective ops, would shorten the "
            "step."
        )
    if bound in ("communication", "latency"):
        role = _ps_role(data, link["resource"]) if link and "/nic" in link["resource"] else None
        busiest = "" if not link else (
            f" The busiest link is {link['resource']}, busy {link['busy_fraction']:.0%} of the step "
            f"({link['share_of_link_time']:.0%} of all link time){'; ' + role if role else ''}."
        )
        if bound == "latency":
            return (
                f"Communication-bound: {waits}, and latency dominates: {b['latency_share']:.0%} of the transfers' "
                f"modelled time is per-transfer latency and overhead, not bytes.{busiest} Fewer, larger transfers "
                "(bigger fusion buckets, fewer PS round trips) would help more than faster links."
            )
        terms = "" if b["latency_share"] is None else (
            f" Bytes over bandwidth are {1 - b['latency_share']:.0%} of the transfers' modelled time.")
        return (f"Communication-bound: {waits}.{busiest}{terms} Faster links, or fewer bytes crossing the busiest "
                "ones, would shorten the step.")
    if bound == "update" and device and device["busy_fraction"] >= SATURATED:
        return (
            f"Update-bound: the parameter server {device['resource']} applies optimizer updates "
            f"{device['busy_fraction']:.0%} of the step. More PS tasks, or its largest variables partitioned "
            "over them, would shorten the step."
        )
    if bound == "update":
        return (
            f"Update-bound: {b['exposed_update_fraction']:.0%} of the step applies optimizer updates after compute "
            f"while no transfer runs, and {waits}. Cheaper updates (a sparse or fused optimizer update, or the "
            "update spread over PS tasks) would shorten the step."
        )
    if device:
        # A CPU's executor overlaps ops on its cores, so their seconds can add up to more than the step (beyond the
        # rounding of a device busy the whole step: a GPU's busy time summed over its ops).
        overlapping = device["busy_fraction"] > 1 + ROUNDING
        how = "its ops overlapping on its cores" if overlapping else "computing and applying updates"
        return (
            f"Compute-bound: {device['resource']} is busy {device['busy_fraction']:.0%} of the step ({how}), and "
            f"{waits}. More or faster devices, not faster links, would shorten the step."
        )
    return "No device or link activity was simulated."
