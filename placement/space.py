"""The strategy space: local moves that keep a Strategy valid.

Each move changes one decision and returns a short label (for statistics):

- ``flip``: a variable from PS to allreduce or back;
- ``shard``: one shard of a PS variable to another PS task;
- ``partition``: a PS variable's shard count up or down by one (at most one
  shard per PS task, at most one per row of the split axis);
- ``algorithm``: a whole fusion bucket to another allreduce algorithm, among
  those that run differently on the replicas' nodes
  (autodist.collective_stages.distinct_algorithms: none but the ring on one
  node or one replica per node, no hierarchical on nodes of uneven replica
  counts);
- ``bucket``: an allreduce variable to the neighbouring bucket or a new one;
- ``split`` / ``merge``: a fusion bucket cut in two at its middle in
  gradient-ready order, or one bucket's variables moved into another
  (taking its algorithm);
- ``group``: an op group unit to another device of its replica (model
  parallelism; only when replicas span several devices);
- ``compression``: a whole fusion bucket to another wire format (none,
  fp16, bf16; only when the caller allows compression);
- ``sparse_sync``: an allreduced sparse gradient between gathering its
  rows and summing its densified table (only for jobs with sparse
  gradients);
- ``micro_batches``: twice or half the micro-batches each replica cuts its
  slice of the batch into (only when the caller allows it; at least one row
  per micro-batch);
- ``replicas``: the replica count one up or down, halved, doubled, one or
  every compute device (one-device replicas only; the replicas are the first
  compute devices in cluster order, so nodes fill one after another; not
  where every replica runs the script's batch, whose global batch the count
  sets: ``JobInfo.batch_per_replica``); a bucket whose algorithm cannot run
  on the new replicas becomes a ring;
- ``ps_count``: add a PS task (on a node without one, taking half the
  shards of the busiest task) or remove the last one (its shards move to
  the others).

Every move changes only the fields it names: a VarSync is copied with
``dataclasses.replace``, keeping its wire format and sparse sync
(tests/test_space_moves.py).

The replica count changes the work each replica does (its slice of the
global batch); the search compares candidates by the step time of the
global batch.
"""

from __future__ import annotations

from dataclasses import replace

from autodist.collective_stages import distinct_algorithms
from autodist.strategy import Strategy, VarSync


def copy_strategy(strategy):
    """A copy that moves may change without touching ``strategy`` (VarSync is frozen)."""
    return Strategy(
        replicas=strategy.replicas,
        sync=dict(strategy.sync),
        ps_devices=list(strategy.ps_devices),
        group_slots=dict(strategy.group_slots),
        micro_batches=strategy.micro_batches,
    )


class StrategySpace:
    """Applies random valid moves to strategies of one job on one cluster.

    Parameters
    ----------
    problem : placement.problem.Problem
        For variable sizes, shapes and op group units.
    rng : random.Random
        The only source of randomness (seeded by the caller).
    allow_ps : bool
        False keeps every variable allreduced (no move puts one on a PS).
    compressions : tuple of str
        The wire formats a bucket may take (``autodist.strategy.COMPRESSIONS``);
        one (the default, ``none``) disables the ``compression`` move.
    allow_micro_batches : bool
        Let the ``micro_batches`` move change the gradient accumulation.
    """

    def __init__(self, problem, rng, allow_ps=True, compressions=("none",), allow_micro_batches=False):
        self.rng = rng
        self.variables = sorted(problem.dense_bytes)
        self.ready_order = problem.ready_order
        self.bytes = problem.sparse_bytes
        shapes = {v.name: v.shape for v in problem.variables}
        self.max_shards = {name: max(1, int(shapes[name][0]) if shapes[name] else 1) for name in self.variables}
        self.units = list(problem.groups.units)
        self.candidates = list(problem.ps_candidates) if allow_ps else []
        self.compressions = tuple(compressions)
        self.batch_rows = problem.graph_item.job.batch_size if allow_micro_batches else 0
        self.job_micro_batches = problem.micro_batches
        self.compute_devices = [d.name for d in problem.resource_spec.compute_devices()]
        self.max_replicas = problem.max_replicas
        self.fixed_replicas = problem.graph_item.job.batch_per_replica
        self.sparse = sorted(problem.sparse_gradients)
        self._replica_lists = {}  # count -> the one replica list of that count this space hands out
        self._node_of = {d.name: d.node for d in problem.resource_spec.devices()}
        self._offered = {}  # replicas' nodes -> the algorithms that run differently on them

    def algorithms(self, replicas):
        """The allreduce algorithms that run differently on ``replicas`` (their first devices' nodes)."""
        nodes = tuple(self._node_of[r[0]] for r in replicas)
        if nodes not in self._offered:
            self._offered[nodes] = distinct_algorithms(nodes)[0]
        return self._offered[nodes]

    def applicable(self, strategy):
        moves = ["flip", "bucket", "split", "merge"]
        if len(self.algorithms(strategy.replicas)) > 1:
            moves.append("algorithm")
        if any(s.method == "ps" for s in strategy.sync.values()):
            moves += ["shard", "partition"]
        if self.candidates:
            moves.append("ps_count")
        if len(self.compressions) > 1:
            moves.append("compression")
        if any(strategy.sync[v].method == "allreduce" for v in self.sparse):
            moves.append("sparse_sync")
        if self.max_replicas > 1 and all(len(replica) == 1 for replica in strategy.replicas) \
                and not self.fixed_replicas:
            moves.append("replicas")
        if self.batch_rows // len(strategy.replicas) >= 2:
            moves.append("micro_batches")
        if len(strategy.replicas[0]) > 1 and self.units:
            moves.append("group")
        return moves

    def move(self, strategy):
        """Apply one random move to ``strategy`` in place; return its label."""
        name = self.rng.choice(self.applicable(strategy))
        getattr(self, f"_{name}")(strategy)
        return name

    # -- helpers -----------------------------------------------------------
    def _pick(self, strategy, method):
        names = [v for v in self.variables if strategy.sync[v].method == method]
        return self.rng.choice(names) if names else None

    def _task_load(self, strategy):
        load = [0] * len(strategy.ps_devices)
        for name, s in strategy.sync.items():
            if s.method == "ps":
                for task in s.ps_tasks:
                    load[task] += self.bytes[name] // s.shards
        return load

    def _ensure_ps(self, strategy):
        if not strategy.ps_devices:
            strategy.ps_devices.append(self.candidates[0])

    # -- moves -------------------------------------------------------------
    def _flip(self, strategy):
        name = self.rng.choice(self.variables)
        s = strategy.sync[name]
        if s.method == "allreduce" and self.candidates:
            self._ensure_ps(strategy)
            load = self._task_load(strategy)
            task = min(range(len(load)), key=lambda t: (load[t], t))
            strategy.sync[name] = VarSync("ps", ps_tasks=(task,))
        elif s.method == "ps":
            used = sorted({(x.algorithm, x.bucket) for x in strategy.sync.values() if x.method == "allreduce"})
            if used:
                algorithm, bucket = self.rng.choice(used)
            else:
                algorithm, bucket = self.rng.choice(self.algorithms(strategy.replicas)), 0
            strategy.sync[name] = VarSync("allreduce", algorithm=algorithm, bucket=bucket)

    def _shard(self, strategy):
        name = self._pick(strategy, "ps")
        s = strategy.sync[name]
        free = [t for t in range(len(strategy.ps_devices)) if t not in s.ps_tasks]
        if not free:
            return
        tasks = list(s.ps_tasks)
        tasks[self.rng.randrange(len(tasks))] = self.rng.choice(free)
        strategy.sync[name] = replace(s, ps_tasks=tuple(tasks))

    def _partition(self, strategy):
        name = self._pick(strategy, "ps")
        s = strategy.sync[name]
        tasks = list(s.ps_tasks)
        limit = min(len(strategy.ps_devices), self.max_shards[name])
        grow = self.rng.random() < 0.5
        if (grow or len(tasks) == 1) and len(tasks) < limit:
            load = self._task_load(strategy)
            free = [t for t in range(len(load)) if t not in tasks]
            tasks.append(min(free, key=lambda t: (load[t], t)))
        elif len(tasks) > 1:
            tasks.pop(self.rng.randrange(len(tasks)))
        strategy.sync[name] = replace(s, ps_tasks=tuple(tasks))

    def _algorithm(self, strategy):
        name = self._pick(strategy, "allreduce")
        if name is None:
            return
        s = strategy.sync[name]
        algorithm = self.rng.choice([a for a in self.algorithms(strategy.replicas) if a != s.algorithm])
        for other, x in strategy.sync.items():
            if x.method == "allreduce" and (x.algorithm, x.bucket) == (s.algorithm, s.bucket):
                strategy.sync[other] = replace(x, algorithm=algorithm)

    def _compression(self, strategy):
        name = self._pick(strategy, "allreduce")
        if name is None:
            return
        s = strategy.sync[name]
        compression = self.rng.choice([c for c in self.compressions if c != s.compression])
        for other, x in strategy.sync.items():
            if x.method == "allreduce" and (x.algorithm, x.bucket, x.compression) == (s.algorithm, s.bucket, s.compression):
                strategy.sync[other] = replace(x, compression=compression)

    def _sparse_sync(self, strategy):
        name = self.rng.choice([v for v in self.sparse if strategy.sync[v].method == "allreduce"])
        s = strategy.sync[name]
        strategy.sync[name] = replace(s, sparse_sync="dense" if s.sparse_sync == "gather" else "gather")

    def _replicas(self, strategy):
        count, most = len(strategy.replicas), self.max_replicas
        steps = (count - 1, count + 1, count // 2, 2 * count, 1, most)  # both ends too: one replica syncs nothing
        self._set_replicas(strategy, self.rng.choice(sorted({min(max(c, 1), most) for c in steps} - {count})))

    def _set_replicas(self, strategy, count):
        strategy.replicas = self._first_replicas(count)
        offered = self.algorithms(strategy.replicas)
        for name, s in strategy.sync.items():
            if s.method == "allreduce" and s.algorithm not in offered:
                strategy.sync[name] = replace(s, algorithm="ring")
        if strategy.micro_batches:  # every replica keeps a row per micro-batch
            strategy.micro_batches = min(strategy.micro_batches, max(1, self.batch_rows // count))

    def one_replica(self, strategy):
        """A copy of ``strategy`` on one replica (training undistributed), or None where its replica count cannot
        change (replicas that span several devices, or one compute device)."""
        if "replicas" not in self.applicable(strategy):
            return None
        single = copy_strategy(strategy)
        self._set_replicas(single, 1)
        return single

    def _first_replicas(self, count):
        """One-device replicas on the first ``count`` compute devices, the same list object for each count (the
        Simulator caches per replica list, so a count the walk returns to hits its caches)."""
        if count not in self._replica_lists:
            self._replica_lists[count] = [[d] for d in self.compute_devices[:count]]
        return self._replica_lists[count]

    def _micro_batches(self, strategy):
        current = strategy.micro_batches or self.job_micro_batches
        rows = self.batch_rows // len(strategy.replicas)
        options = sorted({min(max(m, 1), rows) for m in (current // 2, current * 2)} - {current})
        strategy.micro_batches = self.rng.choice(options)

    def _bucket(self, strategy):
        name = self._pick(strategy, "allreduce")
        if name is None:
            return
        s = strategy.sync[name]
        top = max(x.bucket for x in strategy.sync.values() if x.method == "allreduce")
        bucket = max(0, min(top + 1, s.bucket + self.rng.choice((-1, 1))))
        strategy.sync[name] = replace(s, bucket=bucket)

    def _buckets(self, strategy):
        """(algorithm, bucket) -> allreduce variables in gradient-ready order."""
        out = {}
        for name in self.ready_order:
            s = strategy.sync[name]
            if s.method == "allreduce":
                out.setdefault((s.algorithm, s.bucket), []).append(name)
        return out

    def _split(self, strategy):
        buckets = {k: v for k, v in self._buckets(strategy).items() if len(v) > 1}
        if not buckets:
            return
        algorithm, bucket = self.rng.choice(sorted(buckets))
        names = buckets[(algorithm, bucket)]
        new = 1 + max(x.bucket for x in strategy.sync.values() if x.method == "allreduce")
        for name in names[len(names) // 2:]:
            strategy.sync[name] = replace(strategy.sync[name], bucket=new)

    def _merge(self, strategy):
        buckets = self._buckets(strategy)
        keys = sorted(buckets)
        if len(keys) < 2:
            return
        (algorithm, bucket), other = self.rng.sample(keys, 2)
        for name in buckets[other]:
            strategy.sync[name] = replace(strategy.sync[name], algorithm=algorithm, bucket=bucket)

    def _group(self, strategy):
        unit = self.rng.choice(self.units)
        width = len(strategy.replicas[0])
        slot = strategy.group_slots.get(unit, 0)
        strategy.group_slots[unit] = self.rng.choice([k for k in range(width) if k != slot])

    def _ps_count(self, strategy):
        unused = [c for c in self.candidates if c not in strategy.ps_devices]
        if unused and (len(strategy.ps_devices) < 2 or self.rng.random() < 0.5):
            self._add_ps(strategy, unused[0])
        elif len(strategy.ps_devices) >= 2:
            self._remove_last_ps(strategy)

    def _add_ps(self, strategy, device):
        strategy.ps_devices.append(device)
        new = len(strategy.ps_devices) - 1
        load = self._task_load(strategy)
        busiest = max(range(new), key=lambda t: (load[t], -t)) if new else None
        holders = [v for v in self.variables if strategy.sync[v].method == "ps" and busiest in strategy.sync[v].ps_tasks]
        for name in holders[::2]:
            s = strategy.sync[name]
            tasks = tuple(new if t == busiest else t for t in s.ps_tasks)
            strategy.sync[name] = replace(s, ps_tasks=tasks)

    def _remove_last_ps(self, strategy):
        last = len(strategy.ps_devices) - 1
        strategy.ps_devices.pop()
        for name in self.variables:
            s = strategy.sync[name]
            if s.method != "ps" or last not in s.ps_tasks:
                continue
            kept = [t for t in s.ps_tasks if t != last]
            if not kept:
                kept = [self.rng.randrange(last)]
            strategy.sync[name] = replace(s, ps_tasks=tuple(kept))


def changes(strategy, moved):
    """What ``moved``, a move's copy of ``strategy``, changes of it: a hashable record, empty when nothing."""
    sync = strategy.sync
    changed = tuple((name, s) for name, s in moved.sync.items() if s is not sync[name] and s != sync[name])
    if moved.replicas is not strategy.replicas and moved.replicas != strategy.replicas:
        changed += (("replicas", tuple(map(tuple, moved.replicas))),)
    if moved.ps_devices != strategy.ps_devices:
        changed += (("ps_devices", tuple(moved.ps_devices)),)
    if moved.group_slots != strategy.group_slots:
        changed += (("group_slots", tuple(sorted(moved.group_slots.items()))),)
    if moved.micro_batches != strategy.micro_batches:
        changed += (("micro_batches", moved.micro_batches),)
    return changed
