"""Baseline strategies the search starts from and is compared with.

- ``greedy-ps``: every variable on one parameter server, chosen greedily by
  bytes in variable order, as TensorFlow 1's GreedyLoadBalancingStrategy
  (``tf.contrib.training``) and AutoDist's default PS strategy do; one PS
  task per node.
- ``partitioned-ps``: as TensorFlow 2's ``ParameterServerStrategy`` with a
  ``MinSizePartitioner(max_shards=<PS tasks>)``: every variable split along
  axis 0 into shards of at least 256 KiB, at most one per PS task, and
  variables and shards given to the PS tasks round-robin in creation order.
- ``ring`` / ``hierarchical``: every gradient allreduced with that
  algorithm, fused into buckets in gradient-ready order.
- ``parallax``: sparse gradients to greedy-balanced PS, dense gradients by
  ring allreduce (Parallax, EuroSys 2019).
- each data-parallel baseline also on fewer whole nodes (1, 2, 4, ...), as
  a user whose global batch is small for the cluster would run it: named
  "2-node ring" and the like, and kept where one of those scales beats
  the baseline on every node (a plan's gain is over the best of them).
- ``greedy-op-placer``: for models whose one-device replica does not fit
  memory, one replica per node whose op groups are placed, in topological
  order, on the device where each would finish first and that still has
  room (TensorFlow's original greedy placer), synchronised through greedy
  PS so that GPUs hold no weights or optimizer slots.

Besides them, :func:`horovod_step` prices the job as Horovod runs it, the
reference the published multi-GPU runs are priced as, and
:func:`tensorflow_ps_step` as TensorFlow 1's distributed parameter servers
ran it in the published comparisons with Horovod, and :func:`autodist_ps_step`
as AutoDist's (petuum/autodist) PartitionedPS ran it in its own: not
baselines, since autodist's runtime runs none of them.

The named baselines are :class:`Baseline` records of options of
:func:`data_parallel`, listed once in :data:`BASELINES`; the CLI, the report
and the benchmarks read that list.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace

from autodist.errors import PlacementError
from autodist.strategy import Strategy, VarSync
from placement.problem import ps_candidates

# Horovod's default tensor-fusion threshold (HOROVOD_FUSION_THRESHOLD,
# 64 MiB; horovod.readthedocs.io, "Tensor Fusion").
FUSION_BYTES = 64 * 2**20
# tf.distribute.experimental.partitioners.MinSizePartitioner's default
# min_shard_bytes (256 << 10).
MIN_SHARD_BYTES = 256 << 10


@dataclass
class Candidate:
    """A named strategy with its simulated step (and the seconds that simulation took)."""

    name: str
    strategy: Strategy
    simulation: object
    seconds: float = 0.0


def fused_buckets(problem, names, limit=FUSION_BYTES):
    """Bucket ids for ``names``: consecutive in ready order, at most ``limit`` bytes each."""
    chosen = set(names)
    buckets, bucket, filled = {}, 0, 0
    for name in problem.ready_order:
        if name not in chosen:
            continue
        nbytes = problem.dense_bytes[name]
        if filled and filled + nbytes > limit:
            bucket, filled = bucket + 1, 0
        buckets[name] = bucket
        filled += nbytes
    return buckets


def greedy_ps_tasks(problem, names, tasks):
    """Each variable, in variable order, to the PS task holding the fewest bytes."""
    load = [0] * tasks
    out = {}
    for name in problem.dense_bytes:
        if name in names:
            k = min(range(tasks), key=lambda t: (load[t], t))
            out[name] = k
            load[k] += problem.sparse_bytes[name]
    return out


def node_scales(spec):
    """How many of the nodes holding compute devices a data-parallel baseline may run on: 1, 2, 4, ... and all."""
    total = len(_compute_nodes(spec))
    return sorted({min(2**i, total) for i in range(total.bit_length() + 1)} - {0})


def _compute_nodes(spec):
    """Names of the nodes that hold compute devices, in cluster order."""
    return list(dict.fromkeys(d.node for d in spec.compute_devices()))


def data_parallel(problem, ps_names=(), algorithm="ring", nodes=None):
    """One replica per compute device of the first ``nodes`` nodes that hold one (default: every node), at most
    ``problem.max_replicas`` of them (one per sample of the global batch); ``ps_names`` on greedy PS over the nodes
    of those replicas, the rest allreduced."""
    spec = problem.resource_spec
    nodes_used = set(_compute_nodes(spec)[:nodes])
    replicas = [[d.name] for d in spec.compute_devices() if d.node in nodes_used][:problem.max_replicas]
    used = {spec.device(r[0]).node for r in replicas}
    if not replicas:
        raise PlacementError(f"cluster {spec.name!r} has no compute device")
    ps_names = set(ps_names)
    ps_devices = [d for d in ps_candidates(spec) if spec.device(d).node in used] if ps_names else []
    tasks = greedy_ps_tasks(problem, ps_names, len(ps_devices)) if ps_names else {}
    buckets = fused_buckets(problem, [v for v in problem.dense_bytes if v not in ps_names])
    sync = {}
    for name in problem.dense_bytes:
        if name in ps_names:
            sync[name] = VarSync("ps", ps_tasks=(tasks[name],))
        else:
            sync[name] = VarSync("allreduce", algorithm=algorithm, bucket=buckets[name])
    return Strategy(replicas=replicas, sync=sync, ps_devices=ps_devices)


@dataclass(frozen=True)
class Baseline:
    """A named baseline as a record of options of :func:`data_parallel`.

    ``ps``: which variables go through parameter servers (``none``, ``all``
    or ``sparse``: those with sparse gradients), the rest allreduced with
    ``algorithm``; ``partitioned``: PS variables split by
    :func:`min_size_shards` over the PS tasks, all placed round-robin (else
    each whole on the greedy-balanced task).
    """

    name: str
    ps: str = "none"
    algorithm: str = "ring"
    partitioned: bool = False

    def build(self, problem, nodes=None):
        """The strategy on the first ``nodes`` compute nodes (default: all of them)."""
        ps_names = {"none": (), "all": problem.dense_bytes,
                    "sparse": [v.name for v in problem.variables if v.sparse_gradient]}[self.ps]
        strategy = data_parallel(problem, ps_names=ps_names, algorithm=self.algorithm, nodes=nodes)
        if self.partitioned:
            _partition(problem, strategy)
        return strategy


# Every named baseline, in the order the CLI, the report and the benchmarks list them.
BASELINES = (
    Baseline("greedy-ps", ps="all"),
    Baseline("partitioned-ps", ps="all", partitioned=True),
    Baseline("ring"),
    Baseline("hierarchical", algorithm="hierarchical"),
    Baseline("parallax", ps="sparse"),
)
BASELINE_NAMES = tuple(b.name for b in BASELINES)


def named(name):
    """The baseline called ``name`` (a KeyError names the known ones)."""
    for baseline in BASELINES:
        if baseline.name == name:
            return baseline
    raise KeyError(f"unknown baseline {name!r} (one of {', '.join(BASELINE_NAMES)})")


def greedy_ps(problem, nodes=None):
    return named("greedy-ps").build(problem, nodes)


def partitioned_ps(problem, nodes=None):
    return named("partitioned-ps").build(problem, nodes)


def parallax(problem, nodes=None):
    return named("parallax").build(problem, nodes)


def sparse_as_dense(strategy, names):
    """``strategy`` with the allreduced gradients among ``names`` summed as dense tensors (``sparse_sync: dense``,
    as Horovod's ``DistributedOptimizer(sparse_as_dense=True)`` sums them) instead of their rows all-gathered."""
    sync = {name: replace(s, sparse_sync="dense") if name in names and s.method == "allreduce" else s
            for name, s in strategy.sync.items()}
    return replace(strategy, sync=sync)


def horovod_step(problem, nodes=None, dense=False):
    """The simulated step (a SimResult) of ``problem``'s job as Horovod runs it on the first ``nodes`` compute nodes.

    The ``ring`` baseline's strategy, every gradient fused in gradient-ready
    order into buckets of Horovod's default 64 MiB and allreduced by NCCL
    (its ring, or its tree across nodes where faster), on a simulator that
    charges each fused collective Horovod's fixed cost
    (``Simulator(horovod=True)``): a bucket's allreduce, and the gather of
    its sparse gradients' rows.  The ``ring`` baseline is the same plan
    without that cost: autodist's runtime sums the buckets with TensorFlow's
    collective ops, which do not coordinate each tensor between ranks.
    ``dense``: sparse gradients summed as dense tensors (:func:`sparse_as_dense`),
    else their rows all-gathered (Horovod's default).
    """
    return _ring_step(problem, nodes, dense, horovod=True)


def mwms_step(problem, nodes=None):
    """The simulated step (a SimResult) of ``problem``'s job as TensorFlow 2's ``MultiWorkerMirroredStrategy`` runs
    it with its default ``CommunicationOptions`` on the first ``nodes`` compute nodes: one replica per GPU, as the
    ``ring`` baseline, but every gradient in one bucket, summed by TensorFlow's ring over gRPC.

    Its default ``bytes_per_pack`` of 0 puts every dense gradient in one pack
    (``group_by_size`` in tensorflow/python/distribute/cross_device_utils.py),
    which ``CollectiveReplicaLauncher.batch_all_reduce`` concatenates into one
    tensor, so the sum starts once the backward pass has ended; and its
    default implementation, ``AUTO``, makes TensorFlow's collective executor
    run its own ``RingReduce`` (gRPC between workers) unless NCCL is asked
    for (``CollectiveParamResolverLocal::AssignCollectiveType``):
    ``Simulator(ring_reduce=True)``.  autodist's runtime asks for NCCL and
    sums the ``ring`` baseline's buckets as their gradients are ready.  The
    step is priced as Keras compiles it under the strategy: its default
    ``jit_compile="auto"`` turns XLA off there (autodist.graph.xla).
    """
    from placement.problem import Problem
    from placement.simulator import Simulator

    item = problem.graph_item
    if not item.job.distribute_strategy:
        item = copy.copy(item)
        item.job = replace(item.job, distribute_strategy="MultiWorkerMirroredStrategy")
        problem = Problem(item, problem.resource_spec, problem.cost_model)
    strategy = named("ring").build(problem, nodes)
    one_pack = {name: replace(s, bucket=0) if s.method == "allreduce" else s for name, s in strategy.sync.items()}
    return Simulator(problem, ring_reduce=True).simulate(replace(strategy, sync=one_pack))


def _ring_step(problem, nodes, dense, horovod):
    """The simulated step of the ``ring`` baseline's plan (``dense``: see :func:`horovod_step`), with Horovod's fixed
    cost per fused collective or without it."""
    from placement.simulator import Simulator

    strategy = named("ring").build(problem, nodes)
    if dense:
        strategy = sparse_as_dense(strategy, problem.sparse_gradients)
    return Simulator(problem, horovod=horovod).simulate(strategy)


def tensorflow_ps_step(problem, nodes=None):
    """The simulated step (a SimResult) of ``problem``'s job as TensorFlow 1's distributed parameter servers ran it
    on the first ``nodes`` compute nodes, the "Distributed TensorFlow" of the published comparisons with Horovod.

    tf_cnn_benchmarks' ``--variable_update=parameter_server`` (tensorflow/benchmarks,
    ``VariableMgrDistributedFetchFromPS``): ``replica_device_setter`` with a
    ``GreedyLoadBalancingStrategy`` by bytes over the PS tasks (the ``greedy-ps``
    baseline's placement), and every tower's gradient summed on its
    variable's PS (``aggregate_gradients_using_copy_with_variable_colocation``):
    each GPU pushes its own gradient and reads the variable itself, with no sum
    inside its node (``Simulator(tower_ps=True)``), where autodist's runtime sums
    a node's replicas first and pushes once.
    """
    from placement.simulator import Simulator

    return Simulator(problem, tower_ps=True).simulate(named("greedy-ps").build(problem, nodes))


def autodist_ps_step(problem, nodes=None):
    """The simulated step (a SimResult) of ``problem``'s job as AutoDist's (petuum/autodist) ``PartitionedPS`` with
    its default local proxy variables ran it on the first ``nodes`` compute nodes, in its published comparison with
    Horovod (its examples/benchmark scripts, ``PartitionedPS(local_proxy_variable=True)``).

    The ``partitioned-ps`` baseline's shards and node sums, but each worker's
    proxy of a shard is refreshed right after the shard's update, inside the
    step (``ProxyVariable.get_all_update_ops``: an assign of the updated value,
    after that variable's update alone), so the pulls overlap the step's other
    pushes and updates and the next step reads its proxies
    (``Simulator(proxy_pulls=True)``); autodist's runtime reads every PS
    variable at the next step's start.  AutoDist sums a node's replicas on its
    CPU where the runtime sums them on the first replica device; that stays
    as the runtime does it.
    """
    from placement.simulator import Simulator

    return Simulator(problem, proxy_pulls=True).simulate(named("partitioned-ps").build(problem, nodes))


class AllreducePricer:
    """The seconds of ``item``'s data-parallel step on ``cluster`` for any NCCL overlap constants, its Problem built
    once: what the calibration of cost_models.fitting.cluster_published is handed.

    ``horovod``: the step as Horovod runs it (:func:`horovod_step`), else as
    the ``ring`` baseline's plan runs on TensorFlow's own NCCL all-reduce,
    without Horovod's fixed cost per fused collective; ``dense``: see
    :func:`horovod_step`.
    """

    def __init__(self, item, cluster, cost_model, dense=False, horovod=True):
        from placement.problem import Problem

        self.problem = Problem(item, cluster, cost_model)
        self.dense = dense
        self.horovod = horovod

    def seconds(self, overlap=None):
        """The step's seconds with ``overlap``'s constants (cost_models.overlap.NcclOverlap; None: as they are)."""
        if overlap is not None:
            self.problem.comm.overlap = overlap
            self.problem.prices.reset()
        return _ring_step(self.problem, None, self.dense, self.horovod).step_time


def min_size_shards(shape, nbytes, max_shards, min_shard_bytes=MIN_SHARD_BYTES):
    """How many axis-0 shards ``MinSizePartitioner(min_shard_bytes, max_shards)`` makes of a variable.

    ``ceil(bytes / min_shard_bytes)``, at most ``max_shards`` and at most
    one per row; a scalar is one shard.
    """
    if not shape or not shape[0]:
        return 1
    return max(1, min(int(shape[0]), max_shards, -(-int(nbytes) // min_shard_bytes)))


def _partition(problem, strategy):
    """Split every variable by :func:`min_size_shards` over ``strategy``'s PS tasks, placed round-robin."""
    tasks = len(strategy.ps_devices)
    turn = 0
    for variable in problem.variables:
        shards = min_size_shards(variable.shape, problem.dense_bytes[variable.name], tasks)
        strategy.sync[variable.name] = VarSync("ps", ps_tasks=tuple((turn + i) % tasks for i in range(shards)))
        turn += shards


def greedy_op_placer(problem):
    """One replica per node; op groups placed where they would finish first."""
    spec = problem.resource_spec
    compute = {d.name for d in spec.compute_devices()}
    replicas = [[d.name for d in node.devices if d.name in compute] for node in spec.nodes]
    replicas = [r for r in replicas if r]
    width = min(len(r) for r in replicas)
    replicas = [r[:width] for r in replicas]
    first = replicas[0]
    devices = [spec.device(d) for d in first]
    costs = [problem.at_replicas(len(replicas), one_client=True).device_costs(d)[0] for d in devices]
    groups = problem.groups
    preds = groups.predecessors()
    capacity = [d.memory_bytes - problem.runtime_reserve(d) for d in devices]
    var_bytes = {}
    for name, unit in problem.var_unit.items():
        var_bytes[unit] = var_bytes.get(unit, 0) + problem.sparse_bytes[name]
    # What a group's ops allocate in all bounds what they hold at once; the updates run on the first device.
    group_bytes, update_bytes = problem.allocated_bytes()
    used = [update_bytes] + [0] * (width - 1)
    free = [0.0] * width
    end = [0.0] * len(groups.groups)
    slot_of_unit, slot_of_group = {}, []
    for g, group in enumerate(groups.groups):
        def finish(slot):
            ready = 0.0
            for p, nbytes in preds[g]:
                arrive = end[p]
                if slot_of_group[p] != slot:
                    phases = problem.prices.transfer_phases(first[slot_of_group[p]], first[slot], nbytes)
                    arrive += sum(ph.seconds for ph in phases)
                ready = max(ready, arrive)
            return max(ready, free[slot]) + costs[slot][g]

        if group.unit not in slot_of_unit:
            need = group_bytes[g] + var_bytes.get(group.unit, 0)
            fitting = [s for s in range(width) if used[s] + need <= capacity[s]] or list(range(width))
            slot_of_unit[group.unit] = min(fitting, key=lambda s: (finish(s), s))
        slot = slot_of_unit[group.unit]
        used[slot] += group_bytes[g] + (var_bytes.pop(group.unit, 0))
        slot_of_group.append(slot)
        end[g] = finish(slot)
        free[slot] = end[g]
    strategy = greedy_ps(problem)
    strategy.replicas = replicas
    strategy.group_slots = dict(sorted(slot_of_unit.items()))
    return strategy


def all_baselines(simulator, trace=False):
    """Every applicable baseline of ``simulator.problem``, simulated (with its timeline where ``trace``, which a
    report reads rather than simulate it again): a list of :class:`Candidate`.

    Each data-parallel baseline runs on every node; where it is faster on
    fewer whole nodes (:func:`node_scales`), the fastest of those joins as
    "<k>-node <name>".  The model-parallel greedy op placer joins when
    no data-parallel baseline fits device memory.  Where every replica runs
    the script's batch (``JobInfo.batch_per_replica``), the replica count
    sets the global batch: only the baselines on every compute device.
    """
    problem = simulator.problem
    fixed = problem.graph_item.job.batch_per_replica
    out, scaled = [], []
    for baseline in BASELINES:
        name = baseline.name
        everywhere = _candidate(simulator, name, baseline.build(problem), trace)
        out.append(everywhere)
        fewer = [_candidate(simulator, f"{k}-node {name}", baseline.build(problem, nodes=k), trace)
                 for k in ([] if fixed else node_scales(problem.resource_spec)[:-1])]
        best = min(fewer, key=_speed, default=None)
        if best is not None and _speed(best) < _speed(everywhere):
            scaled.append(best)
    out += scaled
    if not fixed and not any(c.simulation.fits for c in out):
        out.append(_candidate(simulator, "greedy-op-placer", greedy_op_placer(problem), trace))
    return out


def _candidate(simulator, name, strategy, trace):
    started = time.perf_counter()
    simulation = simulator.simulate(strategy, trace=trace)
    return Candidate(name, strategy, simulation, time.perf_counter() - started)


def _speed(candidate):
    """Fitting first, then the shorter step."""
    return (not candidate.simulation.fits, candidate.simulation.step_time)
