"""Why the plan decided what it did: each decision against its next-best alternative.

A counterfactual re-simulates the plan's strategy with one decision changed
(one variable's method, or one fusion bucket's algorithm) and reports the
difference in step time.  For a variable on PS the alternatives are
allreduce with each algorithm, in a bucket of its own; for an allreduced
variable, PS on the task holding the fewest PS bytes, where a plan with PS
can run the job (not where it runs on collective ops only, a custom loop's:
such a variable with a dense gradient has no alternative and no item).  A
sparse gradient allreduced has both ways of travelling as alternatives: its
rows gathered, or its table densified and summed.  For a bucket they are
the other values of each bucket-wide choice in :data:`BUCKET_CHOICES`; of
the algorithms, those that run differently on the plan's replicas
(autodist.collective_stages.distinct_algorithms), each one's counterfactual
listed, and the others named with why they are not offered.  The
alternative shown is the fastest one that fits memory (else the fastest).
"""

from __future__ import annotations

import dataclasses

from autodist.collective_stages import distinct_algorithms
from autodist.report.render import ms, size
from autodist.strategy import ALLREDUCE_ALGORITHMS, SPARSE_SYNCS

VARIABLES_EXPLAINED = 6
BUCKETS_EXPLAINED = 6
# Fields of VarSync that every variable of one fusion bucket shares, and their values.
BUCKET_CHOICES = {"algorithm": ALLREDUCE_ALGORITHMS}
# A delta smaller than this prints as "under 0.01 ms".
SAME_TIME = 5e-6


def _with_sync(strategy, changes, ps_devices=None):
    """``strategy`` with the VarSync of each variable in ``changes`` replaced."""
    return dataclasses.replace(
        strategy,
        sync={**strategy.sync, **changes},
        ps_devices=list(strategy.ps_devices if ps_devices is None else ps_devices),
    )


def _fresh_bucket(strategy):
    return 1 + max((s.bucket for s in strategy.sync.values() if s.method == "allreduce"), default=-1)


def _lightest_ps_task(pricing, strategy):
    """``(ps_devices, task)``: the PS task holding the fewest PS bytes (the first candidate, added, when there is
    none: an idle PS task would still cost its client a dispatch)."""
    ps_devices = list(strategy.ps_devices) or pricing.ps_candidates()[:1]
    load = [0] * len(ps_devices)
    sparse_bytes = pricing.sparse_bytes(strategy)
    for name, s in strategy.sync.items():
        if s.method == "ps":
            for task in s.ps_tasks:
                load[task] += sparse_bytes[name] / s.shards
    return ps_devices, min(range(len(ps_devices)), key=lambda t: (load[t], t))


def _variable_alternatives(pricing, strategy, name):
    """``(label, strategy)`` for each alternative way to synchronise ``name``."""
    s = strategy.sync[name]
    modes = SPARSE_SYNCS if name in pricing.sparse_gradients else ("gather",)
    if s.method == "ps":
        bucket = _fresh_bucket(strategy)
        for algorithm in ALLREDUCE_ALGORITHMS:
            for mode in modes:
                changed = dataclasses.replace(s, method="allreduce", ps_tasks=(), algorithm=algorithm, bucket=bucket,
                                              sparse_sync=mode)
                yield _chosen_variable(changed, len(modes) > 1), _with_sync(strategy, {name: changed})
    else:
        if pricing.ps_not_offered is None:
            ps_devices, task = _lightest_ps_task(pricing, strategy)
            changed = dataclasses.replace(s, method="ps", ps_tasks=(task,), axis=0, compression="none",
                                          sparse_sync="gather")
            yield f"PS on {ps_devices[task]}", _with_sync(strategy, {name: changed}, ps_devices)
        for mode in modes:
            if mode != s.sparse_sync:
                changed = dataclasses.replace(s, sparse_sync=mode)
                yield _chosen_variable(changed, True), _with_sync(strategy, {name: changed})


def _offered_algorithms(pricing, strategy):
    """``(algorithms that run differently on the strategy's replicas, {the others: why})``."""
    return distinct_algorithms([pricing.resource_spec.device(r[0]).node for r in strategy.replicas])


def _bucket_alternatives(strategy, names, offered):
    """``(label, strategy)`` for each other value of each bucket-wide choice, the bucket kept whole (of the
    algorithms, the ``offered`` ones)."""
    first = strategy.sync[names[0]]
    bucket = _fresh_bucket(strategy)  # so the changed bucket fuses with no other
    for field, values in BUCKET_CHOICES.items():
        for value in values:
            if value != getattr(first, field) and (field != "algorithm" or value in offered):
                changes = {n: dataclasses.replace(strategy.sync[n], **{field: value, "bucket": bucket}) for n in names}
                yield str(value), _with_sync(strategy, changes)


def _priced(pricing, alternatives):
    return [(label, strategy, pricing.simulate(strategy)) for label, strategy in alternatives]


def _next_best(priced):
    """``(label, strategy, SimResult)`` of the priced alternative that fits memory and is fastest (None: none)."""
    return min(priced, key=lambda p: (not p[2].fits, p[2].step_time), default=None)


def _effect(delta, fits):
    """What an alternative would do to the step, in words."""
    if abs(delta) < SAME_TIME:
        text = f"would change the step by under {ms(2 * SAME_TIME)}"
    else:
        text = f"would {'add' if delta > 0 else 'save'} {ms(abs(delta))}"
    return text if fits else text + " and not fit in memory"


def _chosen_variable(s, sparse=False):
    """How ``s`` synchronises its variable, in words (``sparse``: say how a sparse gradient travels)."""
    if s.method == "ps":
        return f"PS ({s.shards} shards)" if s.shards > 1 else "PS"
    how = {"gather": " (rows gathered)", "dense": " (densified)"}[s.sparse_sync] if sparse else ""
    return f"allreduce {s.algorithm}{how}"


def _variable_item(pricing, strategy, base, name):
    best = _next_best(_priced(pricing, _variable_alternatives(pricing, strategy, name)))
    if best is None:
        return None  # a dense gradient where PS is not offered: allreduce is its only way
    label, changed, alt = best
    touched = name in pricing.sparse_gradients
    chosen = _chosen_variable(strategy.sync[name], touched)
    dense, sparse = pricing.dense_bytes[name], pricing.sparse_bytes(strategy)[name]
    delta = alt.step_time - base.step_time
    figures = f"{size(dense)} dense vs {size(sparse)} of touched rows" if touched else f"{size(dense)} gradient"
    return {
        "subject": "variable",
        "name": name,
        "chosen": chosen,
        "alternative": label,
        "delta_seconds": delta,
        "alternative_fits": alt.fits,
        "leaves_collective_ops": strategy.allreduces_everything() and not changed.allreduces_everything(),
        "variables": 1,
        "dense_bytes": dense,
        "sparse_bytes": sparse if touched else None,
        "sentence": f"{chosen} for {name}: {label} {_effect(delta, alt.fits)} ({figures}).",
    }


def _bucket_item(pricing, strategy, base, key, names):
    algorithm, bucket, slot = key.algorithm, key.bucket, key.slot
    offered, left_out = _offered_algorithms(pricing, strategy)
    priced = _priced(pricing, _bucket_alternatives(strategy, names, offered))
    chosen = " ".join(str(getattr(strategy.sync[names[0]], f)) for f in BUCKET_CHOICES)
    name = (f"{algorithm} bucket {bucket}" + (f" {key.compression}" if key.compression != "none" else "")
            + (f" (slot {slot})" if slot else ""))
    dense = sum(pricing.dense_bytes[n] for n in names)
    count = f"{len(names)} variable{'s' if len(names) > 1 else ''}"
    others = "; ".join(f"{a} not offered: {why}" for a, why in sorted(left_out.items()))
    item = {
        "subject": "bucket", "name": name, "chosen": chosen, "alternative": None, "delta_seconds": None,
        "alternative_fits": True, "leaves_collective_ops": False, "variables": len(names), "dense_bytes": dense,
        "sparse_bytes": None,
        # every other algorithm the bucket could take: its step time against the plan's
        "each": {label: alt.step_time - base.step_time for label, _, alt in priced},
        "not_offered": dict(sorted(left_out.items())),
    }
    best = _next_best(priced)
    if best is None:
        return dict(item, sentence=f"{name} ({count}, {size(dense)}): no other choice ({others}).")
    label, _, alt = best
    delta = alt.step_time - base.step_time
    rest = "; ".join(f"{other} {_effect(d, True)}" for other, d in item["each"].items() if other != label)
    sentence = f"{name} ({count}, {size(dense)}): {label} {_effect(delta, alt.fits)}"
    sentence += "".join(f"; {part}" for part in (rest, others) if part) + "."
    return dict(item, alternative=label, delta_seconds=delta, alternative_fits=alt.fits, sentence=sentence)


def explain(pricing, strategy, base):
    """Counterfactuals for the largest variables and fusion buckets of ``strategy``.

    Parameters
    ----------
    pricing : autodist.report.pricing.Pricing
    strategy : autodist.strategy.Strategy
        The plan's strategy.
    base : SimResult
        ``strategy`` simulated by ``pricing`` (the deltas are against it).

    Returns
    -------
    dict
        ``variables`` and ``buckets`` (how many the plan has) and ``items``, one
        per explained decision, largest first (no variable whose only way is
        the allreduce it has: a dense gradient where PS is not offered).
    """
    largest = sorted(strategy.sync, key=lambda n: (-pricing.dense_bytes[n], n))[:VARIABLES_EXPLAINED]
    items = [item for item in (_variable_item(pricing, strategy, base, name) for name in largest) if item]
    buckets = pricing.buckets(strategy)
    by_size = sorted(buckets.items(), key=lambda kv: (-sum(pricing.dense_bytes[n] for n in kv[1]), kv[0]))
    items += [_bucket_item(pricing, strategy, base, key, names) for key, names in by_size[:BUCKETS_EXPLAINED]]
    return {"variables": len(strategy.sync), "buckets": len(buckets), "items": items}
