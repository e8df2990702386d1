"""Event-driven simulation of one training step under a Strategy.

The package, by concern: ``taskgraph`` lowers a strategy into its step as
plain data (compute per replica class, one collective per fused bucket, PS
variables, input feeds, client dispatch); ``compute`` runs one replica's op
groups; ``links`` is the link calendar and ``engine`` the event heap that
runs transfers and collectives on it; ``run`` (with ``collectives`` and
``ps``) the synchronisation accounting on that engine, ``stream`` a plan on
collective ops without it; ``memory`` the peak
bytes; ``result`` the :class:`SimResult`; ``step`` the :class:`Simulator`
that ties them and caches what a move leaves unchanged.  The Chrome trace
is written from a result by autodist.report.timeline.

What one step does, as simulated:

1. **Compute.**  Each replica runs its op groups (``placement.grouping``) in
   dependency order; a device runs the groups that are ready on it in the
   order they became ready (ties by topological index).  A tensor crossing
   devices inside a replica costs its ``CommModel.transfer_phases``, queued
   on that replica's links.  Replicas on GPUs step together, so each
   group takes the slowest GPU's time (``CommModel.lockstep_pace``: the
   spread of GPU speed cost_models.overlap fits on published scaling).
2. **Synchronisation.**  A variable's gradient is ready when its gradient
   group ends; its sync starts then, so it overlaps the rest of the backward
   pass.  Allreduce: the gradients of one fusion bucket go as one collective
   once the bucket's last gradient is ready, on collective ops (NCCL) when
   the plan allreduces everything, else summed by the runtime's ordinary
   ops over gRPC (``CommModel.graph_allreduce_phases``).  The collective
   ops of one group of devices run one at a time, on one stream, in the order
   they are issued: each, its fixed latency included, starts once the one
   before it ended, so many small buckets pay their fixed costs one after
   another and can outlast the backward pass they overlap.  autodist's
   runtime also averages each replica's step outputs (loss, metrics) with
   the others: one more tiny collective a step on that stream, ready once
   the loss is computed (``CollectiveSync.outputs_plan``).  NCCL
   collectives on GPUs take the share of the compute they run beside that
   cost_models.overlap fits on published scaling (not the fixed cost per
   bucket fitted beside it: that is Horovod's, which TensorFlow's
   collective ops do not pay; ``Simulator(horovod=True)`` charges it, to
   price a job as Horovod runs it: ``placement.baselines.horovod_step``): the step grows by what the slowed compute outlasts
   (``contention_delay``, counted as exposed communication).  ``Simulator(ring_reduce=True)`` sums them as
   TensorFlow's own ring implementation does, its chunks over gRPC (``placement.baselines.mwms_step``:
   MultiWorkerMirroredStrategy's default).  PS, as the
   runtime (launcher.runtime.trainer) runs it: every worker task (one per
   node) sums its replicas' gradient of each shard on its first replica
   device and pushes it once over gRPC, and the PS applies the update when
   all pushes of that shard are in (the update of a sparse one runs on
   every replica's rows).  The pulls are the next step's reads: they start
   once the step's last update has ended (one step is one function call),
   every task pulls each dense shard once and copies it to its other
   replicas, and every replica gathers its own rows of a sparse one on the
   PS.  The next step's compute waits for a pull only where it first reads
   the pull's variable (``Schedule.pull_needed``): TensorFlow runs each op
   once its inputs are in, so a CNN's first layers run while its large
   dense layers are still being pulled; the step ends when the last pull
   ends less how long its variable is not yet needed, but no sooner than
   every link has carried the step's bytes.  (The published systems autodist
   is judged beside ran PS otherwise: ``Simulator(tower_ps=True)`` prices
   TensorFlow 1's towers, every GPU pushing and pulling for itself, and
   ``Simulator(proxy_pulls=True)`` AutoDist's proxies, each shard pulled as
   soon as it is updated: placement.baselines.tensorflow_ps_step and
   autodist_ps_step.)  A variable's
   pushes are all in flight at once in the runtime, and
   so are the pulls: the simulator takes them in turns (``ParameterServerSync._turn``)
   in which every node sends to a different node, as concurrent streams keep
   every NIC busy, rather than in an order that queues every task's first
   push on one PS.
   Transfers are taken in request order, and every phase of one runs in
   the first window, once it is ready, in which every link resource it
   occupies (one per direction of each port: links are full duplex) is
   free, possibly a gap that earlier reservations left; this models
   contention on NVLink/PCIe ports, NICs and PS servers.
   Where every replica process has one core (Problem.overlaps_compute), no
   allreduce starts before the replica's compute has ended; PS pushes and
   pulls still overlap it (gRPC moves them, not the replica's kernels), and
   their gRPC CPU beside it takes the replicas' cores from the compute
   (``SyncRun.compute_delay``).
3. **Updates.**  After an allreduce, each replica device applies the
   optimizer update of the bucket's variables (after its own compute);
   a PS applies its shards' updates one at a time.  A replica CPU's update
   beside the next bucket's collective loses that collective's share of
   its cores, as compute does (``SyncRun.update_contention``).

The step ends when the last compute, update or pull ends, and a plan one
client drives takes at least what the processes that share a few cores (an
emulated node's, or this machine's) spend on them
(``Simulator._cpu_floor``): their devices' compute, updates and
serving, plus the client's and each task's CPU per step and every gRPC
tensor's ends, as measured.

Costs: op seconds come from ``cost_model.op_costs`` (once per device model):
each op's share of a one-device step (``OpCost.step_seconds``), so that a
CPU device whose executor overlaps ops (cost_models.executor) runs its
groups in the overlapped step's time (a replica split over several such
devices uses the shares of the one-device schedule: an approximation); on a
GPU a share is the op's time.
Optimizer-update ops are charged to their variable (its own and its slots'
update ops) plus a byte-proportional share of unattributed update ops.

Batch: the job's batch is the global batch of a step.  A strategy of ``R``
replicas and ``m`` micro-batches (``Strategy.micro_batches``, else
``JobInfo.micro_batches``) runs, as the runtime does, each replica's slice
cut into ``m`` parts, forward and backward on each, one after another, then
synchronises and updates once.  It is simulated on the problem of one such
part (``Problem.at_replicas``: the step re-scaled to ``ceil(batch / R / m)``
samples, autodist.graph.rebatch), whose compute runs ``m`` times; gradients
become ready only during the last part, and the live tensors are a part's.

Plans that one client drives (any PS variable, or a replica over several
devices) pay its measured dispatch to every task before the step runs
(``Problem.client_time``); plans on collective ops have every worker run
its own step.

Memory (``Simulator.memory``): parameters and optimizer slots where they
live, plus the peak of the live tensors of the ops each device runs
(cost_models.memory: outputs held until their last reader), with
accumulation a gradient buffer, and on a GPU the framework reserve and
cuDNN's workspace.

Incremental evaluation: replicas whose devices have the same model and whose
groups sit on the same slots have identical compute schedules, so a schedule
is computed once per *replica class* and cached, keyed by the device models
(one-device replicas) or the devices and group slots (model parallel).  The
replica classes, the devices of each slot and the wide link sets (see
:class:`~placement.simulator.links.LinkQueue`) are cached per Simulator too,
and so is what each fusion bucket and each PS variable costs under one set of
replica classes (its ready time, phase lists, update seconds:
``Simulator.plans``); the memory is cached by what it depends on (replicas,
slots, micro-batches, and which variables each PS task holds).  A move is
evaluated from the evaluation before it (FlexFlow's delta simulation): the
lowering (``taskgraph.Lowering``) moves only the variables whose
synchronisation changed and builds again only the collectives they left or
joined, so the others keep their priced plans; a plan on collective ops is
one stream of collectives that never waits for a link, which
``placement.simulator.stream`` runs again only from the first collective the
move changed, from the state it logged there.  Elsewhere contention couples
every transfer to those queued before it, and the link queue is run whole (a
transfer's next phase bypasses the heap when nothing queued is ready before
it).  ``Simulator(problem, incremental=False)`` evaluates every strategy in
full, with the same results to the bit.  The busy seconds of every link and
device are expanded only when read, so an evaluation inside a search costs
in proportion to the transfers of the strategy, not to the cluster's
devices.  The local sum of a
task's ``k`` replicas is one transfer that occupies the links as long as
``k - 1`` copies into the first replica device one after another (they all
arrive on its port, so the queue would serialise them anyway), and likewise
the copies out after the pull.

A phase occupies its links for its duration less TensorFlow's per-tensor
overhead (``CommModel.per_tensor_overhead``), which is spent at the
endpoints before the bytes move: concurrent RPCs of different workers pay
it in parallel, so it delays a transfer without holding the link.
Phase lists from the CommModel are cached too (in the Problem).
``tests/test_simulator.py``, ``tests/test_incremental.py`` and
``tests/test_placement_properties.py`` check that the cached and incremental
results equal a full simulation.
"""

from placement.simulator.result import SimResult
from placement.simulator.step import Simulator, simulate

__all__ = ["SimResult", "Simulator", "simulate"]
