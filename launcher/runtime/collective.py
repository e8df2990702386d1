"""Allreduce plans on TensorFlow's collective ops: every replica is a process.

TensorFlow 2.21 refuses remote execution and collective ops in one client
(``Cannot enable remote execution as well as collective ops at the moment``,
``tensorflow/python/eager/context.py``), so a plan whose variables are all
allreduced runs the way ``MultiWorkerMirroredStrategy`` runs one device per
worker: every replica is a process (a worker task with several devices runs
one per device, each seeing only its GPU) that runs the user's script, holds
its replica's variables, takes its slice of every global batch and sums the
gradients with ``CollectiveReduceV2`` (ring on CPUs, NCCL on GPUs), one
collective per planned bucket, before the optimizer applies them; a sparse
gradient's rows are all-gathered (``CollectiveGatherV2``) instead, as
``MultiWorkerMirroredStrategy`` does.  The
replica processes form their own cluster: replica ``i`` of a task listens on
the task's port plus ``i``.

The script must build the same global batches on every replica (seed its
data, and Keras' shuffling): every step checks it, at no extra collective,
by summing a checksum of the global batch along with the first bucket.
Where the plan has every replica run the script's own batch
(``RunLayout.per_replica``, Horovod's semantics), nothing is sliced or
checked: each replica's batch is its own (seeded apart, see
``launcher.runtime.client.seed_replica``; a dataset given to ``model.fit``
dealt out batch by batch and its arrays row by row, see
``launcher.runtime.fit.replica_share`` and ``replica_rows``; a custom loop's
first batches compared once, :meth:`CollectiveGroup.copies_of_first`) and
counts for an equal share.
Float outputs of a step (the loss, Keras' metrics) are averaged over the
replicas, weighted by each one's share of the batch, so they equal the
global batch's.
"""

from __future__ import annotations

import contextlib

import numpy as np

from autodist.collective_stages import group_keys, stages
from autodist.errors import LaunchError, PlacementError
from autodist.graph.batch import is_batched
from autodist.strategy import WIRE_DTYPES

GRADIENT_GROUP, SETUP_GROUP = 1, 2
# A sparse gradient's gathers at its n-th capacity use their trace-time keys plus n times this (instance keys are
# int32: 2**20 keys per step, 2**11 capacities).
GATHER_KEY_STRIDE = 2**20
BATCH_MISMATCH = ("the replicas built different global batches; the script must make the same data, "
                  "in the same order, in every replica process (seed it; a tf.data shuffle that reshuffles each "
                  "iteration, as by default, can draw another order in each replica even seeded, its iterators "
                  "sharing one generator at their own pace: give it reshuffle_each_iteration=False)")


@contextlib.contextmanager
def batch_mismatch_is_a_launch_error():
    """A step's batch check fails inside TensorFlow (:data:`BATCH_MISMATCH`); say it as a LaunchError."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.InvalidArgumentError as exc:
        if BATCH_MISMATCH in str(exc):
            raise LaunchError(BATCH_MISMATCH, field="data") from None
        raise


def why_not_collective(plan):
    """Why the plan cannot run on collectives (a PS variable, a replica over several devices), or None."""
    on_ps = sorted(name for name, s in plan.strategy.sync.items() if s.method == "ps")
    if on_ps:
        return f"it puts {on_ps[0]!r} on a parameter server"
    if any(len(replica) > 1 for replica in plan.strategy.replicas):
        return "it splits a replica over several devices"
    return None


def collective_mode(plan):
    """True when the plan runs on collectives: no PS variable and one device per replica."""
    return plan.strategy.allreduces_everything()


def replica_places(plan):
    """Per replica, in plan order: (worker task index, the replica's index among that task's devices)."""
    out = []
    for replica in plan.strategy.replicas:
        task = next(t for t in plan.tasks_of("worker") if replica[0] in t["devices"])
        out.append((task["index"], task["devices"].index(replica[0])))
    return out


def replica_cluster(plan, cluster):
    """The replicas' own cluster from the tasks' (``TF_CONFIG``'s): replica ``i`` of a task on its port + ``i``."""
    addresses = []
    for task, local in replica_places(plan):
        host, port = cluster["worker"][task].rsplit(":", 1)
        addresses.append(f"{host}:{int(port) + local}")
    return {"worker": addresses}


class CollectiveGroup:
    """This replica's place in the group of replicas and the collectives it builds.

    Parameters
    ----------
    layout : RunLayout
        The plan's replicas and buckets.
    rank : int
        This process's replica (its place in the plan's replica order, and
        its task index in the replicas' cluster).
    """

    def __init__(self, layout, rank):
        import tensorflow as tf

        if not 0 <= rank < len(layout.replica_devices):
            raise LaunchError(f"replica {rank} is not in the plan, which has {len(layout.replica_devices)}",
                              field="replica")
        self.layout = layout
        self.rank = rank
        self.size = len(layout.replica_devices)
        self.device_type = tf.DeviceSpec.from_string(layout.replica_devices[rank]).device_type or "CPU"
        self.relayout(layout)
        self._next_key = 1
        self._capacities = {}  # sparse gradient -> (its gathers' row capacity, how often it grew): see _capacity
        self.collectives = []  # what the traced steps built: one record per collective
        self.micro_batches_per_step = 1  # the traced step's calls of the script's step (applies deferred + 1)
        self.traces = 0  # times TensorFlow traced a replica step (a new batch shape traces it again)
        self.variables = {}  # path -> variable, every variable whose gradient went through a collective

    def relayout(self, layout):
        """From now on, sum gradients as ``layout`` says (a later phase's plan, on the same replicas)."""
        if len(layout.replica_devices) != self.size:
            raise LaunchError(f"a plan of {len(layout.replica_devices)} replicas cannot run on a group of {self.size}",
                              field="strategy.replicas")
        self.layout = layout
        self.bucket_of = {name: b for b, _, names in layout.buckets() for name in names}
        self.sub_groups = group_keys(layout.replica_nodes)
        try:
            self.stages = {a: stages(a, layout.replica_nodes) for a in {v.algorithm for v in layout.variables.values()}}
        except PlacementError as exc:
            raise LaunchError(str(exc), field="strategy.sync") from None

    @property
    def hint(self):
        return "nccl" if self.device_type == "GPU" else "ring"

    def _instance_key(self):
        """A new key per collective, handed out in trace order (the same order in every replica)."""
        key, self._next_key = self._next_key, self._next_key + 1
        return key

    def all_sum(self, tensor, group_key=GRADIENT_GROUP, name="allreduce", group_size=None, instance_key=None):
        """The sum of ``tensor`` over every replica, or over the group ``group_key`` of ``group_size`` replicas
        (one ``CollectiveReduceV2``)."""
        import tensorflow as tf

        return tf.raw_ops.CollectiveReduceV2(
            input=tensor, group_size=group_size or self.size, group_key=group_key,
            instance_key=instance_key or self._instance_key(), ordering_token=[], merge_op="Add", final_op="Id",
            communication_hint=self.hint, name=name)

    def _group_key(self, group):
        return GRADIENT_GROUP if len(group) == self.size else self.sub_groups[group]

    def allreduce(self, flat, algorithm, name):
        """The sum of vector ``flat`` over every replica by ``algorithm``: its stages (autodist.collective_stages),
        one collective per group this replica is in, each with its group's own key; ``(sum, [the collective
        ops this replica issued, with their stage and group])``.

        Every replica draws an instance key for every group of every stage, in
        the same order, whether it is in the group or not.  A reduce-scatter
        cuts ``flat`` (zero-padded to a multiple of the shards) into one part
        per member, in the group's rank order; TensorFlow has no reduce-scatter
        on CPUs, where it is an allreduce inside the group of which each member
        keeps its part.
        """
        import tensorflow as tf

        value, issued = flat, []
        length = tf.size(flat)
        shards = max((stage.shards for stage in self.stages[algorithm]), default=1)
        if shards > 1:
            value = tf.pad(flat, [[0, (shards - length % shards) % shards]])
        for k, stage in enumerate(self.stages[algorithm]):
            keys = [self._instance_key() for _ in stage.groups]
            for group, key in zip(stage.groups, keys):
                if self.rank in group:
                    value, op = getattr(self, f"_{stage.op}")(value, group, key, f"{name}_{k}_{stage.op}")
                    issued.append((op, k, group))
        if shards > 1:
            value = value[:length]
        return value, issued

    def _allreduce(self, value, group, key, name):
        out = self.all_sum(value, self._group_key(group), name, len(group), key)
        return out, out.op

    def _reduce_scatter(self, value, group, key, name):
        import tensorflow as tf

        if self.device_type == "GPU":
            out = tf.raw_ops.CollectiveReduceScatterV2(
                input=value, group_size=len(group), group_key=self._group_key(group), instance_key=key,
                ordering_token=[], merge_op="Add", final_op="Id", communication_hint=self.hint, name=name)
            return out, out.op
        summed = self.all_sum(value, self._group_key(group), name, len(group), key)
        part = tf.size(value) // len(group)
        return summed[group.index(self.rank) * part:(group.index(self.rank) + 1) * part], summed.op

    def _all_gather(self, value, group, key, name):
        import tensorflow as tf

        out = tf.raw_ops.CollectiveGatherV2(
            input=value, group_size=len(group), group_key=self._group_key(group), instance_key=key,
            ordering_token=[], communication_hint=self.hint, name=name)
        return out, out.op

    def _broadcast(self, value, group, key, name):
        import tensorflow as tf

        common = dict(group_size=len(group), group_key=self._group_key(group), instance_key=key,
                      communication_hint=self.hint, name=name)
        if self.rank == group[0]:
            out = tf.raw_ops.CollectiveBcastSendV2(input=value, **common)
        else:
            out = tf.raw_ops.CollectiveBcastRecvV2(shape=tf.shape(value), T=value.dtype, **common)
        return out, out.op

    # -- gradients -----------------------------------------------------------------
    def sum_gradients(self, grads, variables, share, checksum):
        """Every gradient times ``share``, summed over the replicas: one collective per planned bucket and wire dtype
        (none for one replica, whose gradients are the sum, as the simulator prices it).

        A bucket the plan compresses goes as float16 or bfloat16 (cast after
        the ``share`` scaling, cast back to each gradient's dtype after the
        sum).  A sparse gradient (``IndexedSlices``) is not summed but
        all-gathered, as ``MultiWorkerMirroredStrategy`` does: every
        replica's rows, concatenated, update the variable
        (:meth:`_gathered`), unless the plan says ``sparse_sync: dense``.
        Collectives run one after the other in bucket order, the same on
        every replica.  One of the sums (the first in 32 bits or more, else
        the first) also carries ``checksum`` (of the global batch; None: no
        check, where every replica runs its own batch); its sum must be the
        replica count times this replica's checksum.
        """
        import tensorflow as tf

        from autodist.graph.naming import variable_name

        names = [variable_name(v) for v in variables]
        unknown = [n for n in names if n not in self.bucket_of]
        if unknown:
            raise LaunchError(f"variable {unknown[0]!r} of the step is not allreduced by the plan "
                              "(was the plan made for this script?)", field="strategy.sync")
        out = list(grads)
        if self.size == 1:  # one replica's gradients are the sum: no collective, and sparse ones stay sparse
            self.variables.update((n, v) for n, v, g in zip(names, variables, grads) if g is not None)
            return out
        groups = {}
        for i, (g, name) in enumerate(zip(grads, names)):
            if g is not None:
                gather = isinstance(g, tf.IndexedSlices) and self.layout.variables[name].sparse_sync == "gather"
                wire = "gather" if gather else self._wire_dtype(name, g.dtype).name
                groups.setdefault((self.bucket_of[name], self.layout.variables[name].algorithm, wire), []).append(i)
        order = sorted(groups.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] == "gather", item[0][2]))
        # The checksum rides with the first bucket summed in 32 bits or more where there is one (fp16 overflows).
        summed_keys = [k for k, ((_, _, wire), _) in enumerate(order) if wire != "gather"]
        wide = [k for k in summed_keys if tf.as_dtype(order[k][0][2]).size > 2]
        carrier = (wide or summed_keys or [None])[0] if checksum is not None else None
        previous = []
        for k, ((bucket, algorithm, wire), members) in enumerate(order):
            if wire == "gather":
                for i in members:
                    with tf.control_dependencies(previous):
                        out[i], last = self._gathered(grads[i], share, f"bucket{bucket}_allgather", names[i])
                    previous = [last]
                    self.variables[names[i]] = variables[i]
                    self.collectives.append({
                        "graph": last.graph, "op": last.op.name, "bucket": bucket, "compression": "none",
                        "variables": [names[i]], "elements": None,
                    })
                continue
            with tf.control_dependencies(previous):
                parts = []
                for i in members:
                    g = tf.reshape(tf.convert_to_tensor(grads[i]), [-1])
                    parts.append(tf.cast(g * tf.cast(share, g.dtype), wire))
                flat = tf.concat(parts, axis=0)
                if k == carrier:
                    flat = tf.concat([flat, tf.reshape(tf.cast(checksum, flat.dtype), [1])], axis=0)
                summed, issued = self.allreduce(flat, algorithm, f"bucket{bucket}_{algorithm}")
                if k == carrier:
                    summed = self._checked(summed, checksum)
            previous = [summed]
            sizes = [int(np.prod(variables[i].shape)) for i in members]
            for i, piece in zip(members, tf.split(summed, sizes)):
                out[i] = tf.cast(tf.reshape(piece, variables[i].shape), grads[i].dtype)
                self.variables[names[i]] = variables[i]
            for op, stage, group in issued:
                self.collectives.append({
                    "graph": summed.graph, "op": op.name, "bucket": bucket, "algorithm": algorithm,
                    "stage": stage, "group": list(group),
                    "compression": self.layout.variables[names[members[0]]].compression,
                    "variables": [names[i] for i in members], "elements": int(sum(sizes)),
                })
        return out

    def _gathered(self, slices, share, name, variable):
        """Every replica's rows of ``variable``'s sparse gradient ``slices`` (values times ``share``):
        ``(IndexedSlices, the values' gather)``.

        Replicas may hold different numbers of rows (uneven batch slices),
        while ``CollectiveGatherV2`` concatenates equal shapes: the counts
        are summed first (each replica adds its own in its place), every
        replica pads its rows to the gradient's capacity (:meth:`_capacity`),
        and the padding is dropped from the gathered rows.
        """
        import tensorflow as tf

        values = slices.values * tf.cast(share, slices.values.dtype)
        indices = tf.cast(slices.indices, tf.int64)
        count = tf.shape(indices, out_type=tf.int64)[0]
        counts = self.all_sum(tf.one_hot(self.rank, self.size, dtype=tf.int64) * count, name=f"{name}_counts")
        capacity, key_offset = self._capacity(variable, tf.reduce_max(counts))
        pad = capacity - count
        values = tf.pad(values, tf.concat([[[0, pad]], tf.zeros([tf.rank(values) - 1, 2], tf.int64)], axis=0))
        indices = tf.pad(indices, [[0, pad]])
        gathered_indices = self._gather(indices, f"{name}_indices", key_offset)
        gathered_values = self._gather(values, f"{name}_values", key_offset)
        kept = tf.reshape(tf.sequence_mask(counts, capacity), [-1])
        rows = tf.IndexedSlices(tf.boolean_mask(gathered_values, kept), tf.boolean_mask(gathered_indices, kept),
                                dense_shape=slices.dense_shape)
        return rows, gathered_values

    def _capacity(self, variable, longest):
        """The rows every replica pads ``variable``'s sparse gradient to this step, and the offset of the instance
        keys its gathers use at that size.

        TensorFlow keeps the shape a collective instance key first ran with,
        for the life of the process, and refuses another (a step of the
        epoch's last, partial batch stopped with "Shape mismatch in the
        collective instance").  So the rows are padded to a capacity, the
        most any replica held so far (a partial batch pads to a full
        batch's rows, as the simulator prices every step), grown by at
        least a quarter when a step holds more, and each capacity gathers
        under keys of its own.  Every replica computes the same capacity
        from the summed counts.
        """
        import tensorflow as tf

        if variable not in self._capacities:
            with tf.init_scope():
                self._capacities[variable] = (tf.Variable(0, dtype=tf.int64, trainable=False),
                                              tf.Variable(0, dtype=tf.int32, trainable=False))
        capacity, growths = self._capacities[variable]
        held = capacity.read_value()
        grows = longest > held
        rows = tf.where(grows, tf.where(held > 0, tf.maximum(longest, held + held // 4), longest), held)
        with tf.control_dependencies([capacity.assign(rows)]):
            grown = growths.assign_add(tf.cast(grows, tf.int32))
        return rows, grown * GATHER_KEY_STRIDE

    def _gather(self, tensor, name, key_offset):
        """Every replica's ``tensor`` concatenated along its first dimension, in replica order
        (one ``CollectiveGatherV2``, under this call's instance key plus ``key_offset``)."""
        import tensorflow as tf

        key = self._instance_key()
        if key >= GATHER_KEY_STRIDE:
            raise LaunchError(f"the step needs more than {GATHER_KEY_STRIDE} collectives", field="strategy.sync")
        return tf.raw_ops.CollectiveGatherV2(
            input=tensor, group_size=self.size, group_key=GRADIENT_GROUP, instance_key=key + key_offset,
            ordering_token=[], communication_hint=self.hint, name=name)

    def _wire_dtype(self, name, dtype):
        """The dtype variable ``name``'s gradient (of ``dtype``) is summed in: 16 bits where the plan compresses it."""
        import tensorflow as tf

        dtype = tf.as_dtype(dtype)
        compression = self.layout.variables[name].compression
        if compression == "none" or not dtype.is_floating or dtype.size <= 2:
            return dtype
        return tf.as_dtype(WIRE_DTYPES[compression])

    def _checked(self, summed, checksum):
        """``summed`` without its last element, once that element (the summed checksums) matches this replica's."""
        import tensorflow as tf

        mine = tf.cast(checksum, summed.dtype) * self.size
        tolerance = 8 * self.size * float(np.finfo(summed.dtype.as_numpy_dtype).eps)
        check = tf.debugging.assert_near(summed[-1], mine, rtol=tolerance, atol=tolerance, message=BATCH_MISMATCH)
        with tf.control_dependencies([check]):
            return tf.identity(summed[:-1])

    def barrier(self):
        """Return once every replica has joined (one scalar collective)."""
        import tensorflow as tf

        self.all_sum(tf.constant(0.0), SETUP_GROUP, name="join")

    def broadcast_from_first(self, variables):
        """Give every replica the first replica's values of ``variables`` (a sum where only the first one adds)."""
        import tensorflow as tf

        variables = list(variables)
        if not variables:
            return

        @tf.function
        def broadcast():
            keep = tf.constant(1.0 if self.rank == 0 else 0.0)
            for v in variables:
                value = tf.convert_to_tensor(v)
                v.assign(self.all_sum(value * tf.cast(keep, value.dtype), SETUP_GROUP, name="initial_broadcast"))

        broadcast()

    def copies_of_first(self, batch):
        """How many replicas besides the first got the first's batch (by a checksum of ``batch``'s batch tensors);
        two collectives, every replica at once."""
        import tensorflow as tf

        tensors = [t for t in tf.nest.flatten(batch) if is_batched(t)]
        if not tensors:
            return 0

        @tf.function
        def copies():
            mine = tf.add_n([_checksum(t) for t in tensors])
            first = self.all_sum(mine * (1.0 if self.rank == 0 else 0.0), SETUP_GROUP, name="first_batch")
            alike = tf.constant(0.0 if self.rank == 0 else 1.0, tf.float64) * tf.cast(tf.equal(mine, first), tf.float64)
            return self.all_sum(alike, SETUP_GROUP, name="copies_of_first")

        return int(copies().numpy())

    # -- the replica's step --------------------------------------------------------
    def replica_step(self, func):
        """``func`` run on this replica's slice of the global batch, gradients summed before they are applied.

        The returned function is meant to be traced (inside ``tf.function``).
        Every argument that is a tensor or array with the batch's leading
        dimension is sliced; ``optimizer.apply`` / ``apply_gradients`` called
        inside ``func`` get the summed gradients.  With ``m`` micro-batches
        (``layout.micro_batches``) the slice is cut into ``m`` parts and
        ``func`` runs on each in turn: the first ``m - 1`` applies only
        accumulate their gradients (weighted by the part's share of the
        slice), the last one sums the accumulated gradients over the replicas
        and applies them; float outputs are the parts' weighted mean.
        """
        import tensorflow as tf

        parts = self.layout.micro_batches

        def step(*args, **kwargs):
            self.traces += 1  # Python runs here only while TensorFlow traces the step
            batch = [t for t in tf.nest.flatten((args, kwargs)) if is_batched(t)]
            if not batch:
                raise LaunchError("the training step got no batch (no tensor or array argument)", field="step")
            rows = batch[0].shape[0]
            n = tf.shape(batch[0])[0]
            if self.layout.per_replica:  # every replica runs its own batch whole: an equal share, nothing to check
                checksum, lo, hi = None, 0, n
                share = tf.constant(1.0 / self.size, tf.float64)
            else:
                checksum = tf.add_n([_checksum(t) for t in batch])
                lo, hi = n * self.rank // self.size, n * (self.rank + 1) // self.size
                share = tf.cast(hi - lo, tf.float64) / tf.cast(n, tf.float64)

            def cut(start, stop):
                return lambda t: t[start:stop] if is_batched(t) and t.shape[0] == rows else t

            outs, weights = [], []
            with self._summing_gradients(share, checksum) as seen:
                for k in range(parts):
                    start, stop = lo + (hi - lo) * k // parts, lo + (hi - lo) * (k + 1) // parts
                    weights.append(1.0 if parts == 1 else tf.math.divide_no_nan(tf.cast(stop - start, tf.float64),
                                                                                 tf.cast(hi - lo, tf.float64)))
                    seen["weight"], seen["last"] = weights[-1], k == parts - 1
                    part_args, part_kwargs = tf.nest.map_structure(cut(start, stop), (args, kwargs))
                    outs.append(func(*part_args, **part_kwargs))
            if not seen["applied"]:
                raise LaunchError("the training step never called optimizer.apply or apply_gradients, so its "
                                  "gradients cannot be summed over the replicas", field="step")
            self.micro_batches_per_step = seen["deferred"] + 1
            return self._averaged(_weighted_mean(outs, weights), share)

        return step

    def _averaged(self, out, share):
        """``out`` with its float tensors averaged over the replicas (weighted by ``share``), in one collective."""
        import tensorflow as tf

        flat = tf.nest.flatten(out)
        floats = [i for i, t in enumerate(flat) if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating]
        if not floats or self.size == 1:
            return out
        values = [tf.cast(tf.reshape(flat[i], [-1]), tf.float64) for i in floats]
        summed = self.all_sum(tf.concat(values, axis=0) * share, name="output_average")
        pieces = tf.split(summed, tf.stack([tf.size(v) for v in values]), num=len(values))
        for i, piece in zip(floats, pieces):
            flat[i] = tf.cast(tf.reshape(piece, tf.shape(flat[i])), flat[i].dtype)
        return tf.nest.pack_sequence_as(out, flat)

    @contextlib.contextmanager
    def _summing_gradients(self, share, checksum):
        """While tracing the step: the outermost ``optimizer.apply`` receives summed gradients.

        ``seen["weight"]`` scales the gradients of the current micro-batch;
        unless ``seen["last"]``, they are kept (``seen["pending"]``) instead
        of applied.
        """
        from autodist import hooks

        seen = {"applied": False, "depth": 0, "deferred": 0, "weight": 1.0, "last": True, "pending": None}
        group = self

        def apply(original, optimizer, grads, trainable_variables):
            if seen["depth"]:  # a wrapper optimizer (loss scaling) calling its inner one
                return original(optimizer, grads, trainable_variables)
            variables = list(trainable_variables) if trainable_variables is not None else optimizer._trainable_variables
            grads = _accumulated(seen["pending"], grads, seen["weight"])
            if not seen["last"]:  # an earlier micro-batch: keep its gradients for the last one's apply
                seen["pending"], seen["deferred"] = grads, seen["deferred"] + 1
                return None
            grads = group.sum_gradients(grads, variables, share, checksum)
            seen["applied"], seen["depth"] = True, seen["depth"] + 1
            try:
                return original(optimizer, grads, trainable_variables)
            finally:
                seen["depth"] -= 1

        with hooks.optimizer_apply(apply):
            yield seen

    # -- what was built ------------------------------------------------------------
    def collective_ops(self):
        """The distinct collectives found in the traced step graphs: op type, attributes, bucket and variables."""
        import tensorflow as tf

        out = []
        for record in self.collectives:
            op = record["graph"].get_operation_by_name(record["op"])
            size = op.inputs[0] if op.type == "CollectiveBcastRecvV2" else op.inputs[1]
            entry = {
                "op_type": op.type,  # CollectiveReduceV2, or CollectiveGatherV2 for a sparse gradient's rows; and
                # the stages of hierarchical and master allreduces (autodist.collective_stages)
                "group_size": int(tf.get_static_value(size)),
                "algorithm": record.get("algorithm", "ring"), "stage": record.get("stage", 0),
                "group": record.get("group"),
                "communication_hint": op.get_attr("communication_hint").decode(),
                "bucket": record["bucket"],
                "dtype": op.get_attr("T").name,  # what the collective really sums
                "compression": record["compression"],
                "elements": record["elements"],
                "variables": record["variables"],
            }
            if entry not in out:
                out.append(entry)
        return out


def _accumulated(pending, grads, weight):
    """``pending`` (None: nothing yet) plus ``grads`` times ``weight``, as dense tensors (None stays None)."""
    import tensorflow as tf

    if pending is None and isinstance(weight, float) and weight == 1.0:
        return list(grads)  # one micro-batch: the gradients as they are
    out = []
    for i, g in enumerate(grads):
        if g is not None:
            g = tf.convert_to_tensor(g)
            g = g * tf.cast(weight, g.dtype)
            if pending is not None and pending[i] is not None:
                g = pending[i] + g
        out.append(g)
    return out


def _weighted_mean(outs, weights):
    """The micro-batches' step outputs: float tensors weighted by ``weights`` and summed, the rest the last's."""
    import tensorflow as tf

    if len(outs) == 1:
        return outs[0]
    flats = [tf.nest.flatten(out) for out in outs]
    last = list(flats[-1])
    for i, t in enumerate(last):
        if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating:
            last[i] = tf.add_n([tf.cast(w, t.dtype) * flat[i] for flat, w in zip(flats, weights)])
    return tf.nest.pack_sequence_as(outs[-1], last)


def _checksum(t):
    """A float64 summary of one batch tensor: the mean of its values (of their hashes for strings)."""
    import tensorflow as tf

    t = tf.convert_to_tensor(t)
    if t.dtype == tf.string:
        t = tf.strings.to_hash_bucket_fast(t, 2**24)
    return tf.reduce_mean(tf.cast(t, tf.float64))


def join(cluster, index, device_type="CPU"):
    """Make this process worker ``index`` of the replicas' ``cluster`` with collective ops enabled.

    ``MultiWorkerMirroredStrategy``'s constructor is TensorFlow's public way
    to do it: it starts this process's server and configures the collective
    runtime (group leader worker 0, NCCL on GPUs); the strategy itself is not
    entered.  Call before the script creates any tensor.
    """
    import tensorflow as tf

    implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if device_type == "GPU"
                      else tf.distribute.experimental.CommunicationImplementation.RING)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="worker", task_id=index, rpc_layer="grpc")
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))
