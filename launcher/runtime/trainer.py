"""Training a compiled Keras model with its variables where the plan puts them.

One client (the chief) builds one step graph with explicit devices:

- PS variables are split into their planned shards, one Keras variable per
  shard on its PS task; each worker task pulls every shard once onto its
  first replica device, where its other replicas copy it from; rows looked
  up with ``keras.ops.take`` (an ``Embedding``) are gathered on the PS
  instead, so that only the rows a replica touches travel (TensorFlow prunes
  a whole-shard pull that nothing reads); every replica takes its gradient
  per shard (an IndexedSlices of the touched rows for a sparse one); a task
  sums its replicas' gradients on its first replica device and pushes that
  sum once; the tasks' sums are summed on the shard's PS, and the shard's
  optimizer update runs there.
- Allreduce variables get one copy per replica on the replica's device; the
  gradients of one bucket are flattened together and summed across replicas
  with the planned algorithm (see :mod:`launcher.runtime.allreduce`); each
  replica updates its own copy.
- Each replica runs forward and backward on its device over its slice of the
  global batch (cut on the client, so that its task receives only its rows),
  with ``model.stateless_call`` on the placed values.

Every replica's loss is its slice's mean loss scaled by the slice's share of
the global batch, so the summed gradient equals single-process training on
the global batch.  Each location gets a clone of the user's optimizer (same
class and config) holding the slots of the variables that live there.
"""

from __future__ import annotations

import functools

import numpy as np

from autodist.errors import LaunchError
from autodist.loops.fit import custom_train_step
from launcher.runtime.layout import canonical_device


def _clone_optimizer(optimizer):
    config = optimizer.get_config()
    if config.get("global_clipnorm"):
        raise LaunchError("global_clipnorm needs every gradient in one place; clip per variable (clipnorm) instead",
                          field="optimizer")
    return type(optimizer).from_config(config)


def _split_sizes(length, parts):
    return [length * (i + 1) // parts - length * i // parts for i in range(parts)]


def _rows_joined(parts):
    """Predictions of consecutive rows (each a tensor or a nest of them, alike), joined in order."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda *pieces: tf.concat(pieces, axis=0), *parts)


def _sum_gradients(grads, name):
    """The sum of gradients of one shard: their rows concatenated when all are sparse, else added."""
    import tensorflow as tf

    if len(grads) == 1:
        return grads[0]
    if all(isinstance(g, tf.IndexedSlices) for g in grads):
        return tf.IndexedSlices(tf.concat([g.values for g in grads], axis=0, name=f"{name}_rows"),
                                tf.concat([g.indices for g in grads], axis=0), grads[0].dense_shape)
    return tf.add_n([tf.convert_to_tensor(g) for g in grads], name=name)


def _shard_gradient(copied, looked_up, name):
    """A shard's gradient through its pulled copy plus through rows gathered on its PS (either may be None)."""
    present = [g for g in (copied, looked_up) if g is not None]
    return _sum_gradients(present, name) if present else None


def _gather_rows(shards, devices, sizes, ids):
    """``ids``' rows of a variable split along axis 0 into ``shards`` (tensors on ``devices``, ``sizes`` rows
    each), each shard's rows gathered on its own device; negative ids count from the end, as in Keras."""
    import tensorflow as tf

    ids = tf.convert_to_tensor(ids)
    rows = sum(sizes)
    flat = tf.reshape(ids, [-1])
    flat = tf.where(flat < 0, flat + tf.cast(rows, flat.dtype), flat)
    if len(shards) == 1:
        with tf.device(devices[0]):
            found = tf.gather(shards[0], flat)
    else:
        ends = np.cumsum(sizes)
        owner = tf.searchsorted(tf.constant(ends[:-1], flat.dtype), flat, side="right")
        local = flat - tf.gather(tf.constant(ends - np.asarray(sizes), flat.dtype), owner)
        wanted = tf.dynamic_partition(local, owner, len(shards))
        positions = tf.dynamic_partition(tf.range(tf.size(flat)), owner, len(shards))
        pieces = []
        for shard, device, want in zip(shards, devices, wanted):
            with tf.device(device):
                pieces.append(tf.gather(shard, want))
        found = tf.dynamic_stitch(positions, pieces)
    return tf.reshape(found, tf.concat([tf.shape(ids), tf.shape(shards[0])[1:]], axis=0))


class PlacedTrainer:
    """Runs synchronous training steps of ``model`` under a :class:`RunLayout`.

    Parameters
    ----------
    model : keras.Model
        Built and compiled (its optimizer and loss are used).
    layout : launcher.runtime.layout.RunLayout
    """

    def __init__(self, model, layout):
        if model.optimizer is None:
            raise LaunchError("model.fit needs a compiled model (call model.compile first)", field="model")
        custom = custom_train_step(model)
        if custom:
            raise LaunchError(f"{custom} overrides train_step, and PS and hybrid plans run Keras' own step from one "
                              "client, not the model's: make a plan that allreduces every variable (autodist plan "
                              "--allreduce-only)", field="strategy.sync")
        if model.losses:
            raise LaunchError("models with regularization or added losses are not supported under a plan yet "
                              "(their loss would read the unplaced weights)", field="model.losses")
        self.model = model
        self.layout = layout
        self.devices = list(layout.replica_devices)
        self._weights = list(model.trainable_variables)
        self._names = [w.path for w in self._weights]
        missing = [n for n in self._names if n not in layout.variables]
        if missing:
            raise LaunchError(f"variable {missing[0]!r} of the model is not in the plan (was the plan made for this script?)",
                              field="strategy.sync")
        self._tasks = layout.replicas_by_task()
        self._hub = {r: members[0] for members in self._tasks for r in members}
        self._pulled = {}
        self._create_variables()
        self._step = None
        self.traces = 0  # times TensorFlow traced the step (a new batch shape traces it again)

    # -- variables -------------------------------------------------------
    def _create_variables(self):
        import keras
        import tensorflow as tf

        self.copies = {}  # allreduce: name -> one Keras variable per replica
        self._copy_of = {}  # id of an allreduce copy -> (variable index, replica)
        self.shards = {}  # ps: name -> one Keras variable per shard
        by_location = {}
        for i, (weight, name) in enumerate(zip(self._weights, self._names)):
            place = self.layout.variables[name]
            value = np.asarray(weight.numpy())
            if place.method == "ps":
                if value.ndim == 0 and len(place.devices) > 1:
                    raise LaunchError(f"cannot shard a scalar over {len(place.devices)} PS tasks", field=f"strategy.sync.{name}")
                if value.ndim and value.shape[place.axis] < len(place.devices):
                    raise LaunchError(
                        f"axis {place.axis} of size {value.shape[place.axis]} cannot make {len(place.devices)} shards",
                        field=f"strategy.sync.{name}",
                    )
                pieces = (np.split(value, np.cumsum(_split_sizes(value.shape[place.axis], len(place.devices)))[:-1],
                                   axis=place.axis) if value.ndim else [value])
                made = []
                for k, (piece, dev) in enumerate(zip(pieces, place.devices)):
                    with tf.device(dev):
                        var = keras.Variable(piece, dtype=weight.dtype, name=f"{weight.name}_shard{k}")
                    by_location.setdefault(dev, []).append(var)
                    made.append(var)
                self.shards[name] = made
            else:
                made = []
                for r, dev in enumerate(self.devices):
                    with tf.device(dev):
                        var = keras.Variable(value, dtype=weight.dtype, name=weight.name)
                    by_location.setdefault(dev, []).append(var)
                    self._copy_of[id(var)] = (i, r)
                    made.append(var)
                self.copies[name] = made
        self.optimizers = {}
        for dev, variables in by_location.items():
            with tf.device(dev):
                opt = _clone_optimizer(self.model.optimizer)
                opt.build(variables)
            self.optimizers[dev] = (opt, variables)
        with tf.device(self.devices[0]):
            self._state = [tf.Variable(v.numpy(), trainable=False) for v in self.model.non_trainable_variables]

    def variable_devices(self):
        """Name -> the devices its placed variables actually live on."""
        out = {}
        for name in self._names:
            placed = self.shards.get(name) or self.copies[name]
            out[name] = [canonical_device(v.value.device) for v in placed]
        return out

    # -- the step ----------------------------------------------------------
    def _read(self, name, replica, tape):
        """The variable's value on this replica, the watched tensors its gradient is taken for, and, for a PS
        variable split along its rows, the function that gathers rows of it on its PS tasks (else None).

        An allreduce copy is read where it lives; a PS variable's shards are
        read on their PS tasks, pulled from there once per worker task (onto
        its first replica device), copied to the replica and joined there.
        Its gradient is taken per shard, through the copy and through the rows
        gathered on the PS, so a sparse gradient stays an IndexedSlices
        holding only the rows this replica touched.
        """
        import tensorflow as tf

        if name in self.copies:
            value = tf.convert_to_tensor(self.copies[name][replica])
            tape.watch(value)
            return value, [value], None
        place = self.layout.variables[name]
        hub, index = self._hub[replica], self._names.index(name)
        remote, parts = [], []
        for k, (var, dev) in enumerate(zip(self.shards[name], place.devices)):
            if (name, k) not in self._pulled:
                with tf.device(dev):
                    self._pulled[(name, k)] = tf.identity(tf.convert_to_tensor(var), name=f"ps_pull_v{index}_s{k}")
            remote.append(self._pulled[(name, k)])
            if (name, k, hub) not in self._pulled:
                with tf.device(self.devices[hub]):
                    self._pulled[(name, k, hub)] = tf.identity(remote[k], name=f"ps_pulled_v{index}_s{k}")
            with tf.device(self.devices[replica]):
                parts.append(tf.identity(self._pulled[(name, k, hub)], name="ps_local_copy"))
        tape.watch(parts + remote)
        value = parts[0] if len(parts) == 1 else tf.concat(parts, axis=place.axis)
        lookup = None
        if value.shape.rank and (place.axis == 0 or len(parts) == 1):
            sizes = [int(var.shape[0]) for var in self.shards[name]]
            lookup = functools.partial(_gather_rows, remote, place.devices, sizes)
        return value, parts + remote, lookup

    @staticmethod
    def _rows_on_ps(lookups):
        """The ``keras.ops.take`` hook: rows of the variables in ``lookups`` (path -> gather) come from their PS."""
        import keras
        import tensorflow as tf

        def take(original, x, indices, axis):
            lookup = lookups.get(x.path) if isinstance(x, keras.Variable) else None
            if lookup is None or axis != 0 or isinstance(indices, (tf.SparseTensor, tf.RaggedTensor)):
                return original(x, indices, axis=axis)
            return lookup(indices)

        return take

    def _replica_gradients(self, xs, ys, n, replica):
        """Loss share (``xs``' rows of a global batch of ``n``), gradients (a dense tensor per allreduce variable, a
        list, one per shard, dense or IndexedSlices, per PS variable), the model's new state and the predictions of
        one replica."""
        import tensorflow as tf

        from autodist.hooks import keras_take
        from launcher.runtime.groups import layers_on_devices

        state = [tf.convert_to_tensor(v) for v in self._state]
        slots = self.layout.replica_slots[replica] if self.layout.replica_slots else (self.devices[replica],)
        # Only the watched reads: a shard's variable, watched too, would join its pulled copy to its PS read.
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            reads = [self._read(name, replica, tape) for name in self._names]
            lookups = {name: lookup for name, (_, _, lookup) in zip(self._names, reads) if lookup}
            with layers_on_devices(self.model, slots, self.layout.group_slots), keras_take(self._rows_on_ps(lookups)):
                y_pred, new_state = self.model.stateless_call([value for value, _, _ in reads], state, xs,
                                                              training=True)
            share = tf.cast(tf.shape(xs)[0], y_pred.dtype) / tf.cast(n, y_pred.dtype)
            loss = self.model.compute_loss(x=xs, y=ys, y_pred=y_pred, training=True) * share
        grads = tape.gradient(loss, [sources for _, sources, _ in reads])
        out = []
        for name, g in zip(self._names, grads):
            if name not in self.shards:
                out.append(tf.convert_to_tensor(g[0]))
                continue
            count = len(self.shards[name])
            out.append([_shard_gradient(g[k], g[count + k], "ps_shard_gradient") for k in range(count)])
        return loss, out, new_state, y_pred

    def _accumulated_gradients(self, xs, ys, n, replica):
        """:meth:`_replica_gradients` of the replica's rows ``xs``, ``ys`` cut into the layout's micro-batches, one
        after the other, summed (each loss is already scaled by its rows' share of the global batch).  The
        model's state (batch-norm statistics) is the last micro-batch's; the predictions are the micro-batches'
        in order."""
        import tensorflow as tf

        parts = self.layout.micro_batches
        if parts == 1:
            return self._replica_gradients(xs, ys, n, replica)
        rows = tf.shape(xs)[0]
        runs = [self._replica_gradients(xs[rows * k // parts:rows * (k + 1) // parts],
                                        ys[rows * k // parts:rows * (k + 1) // parts], n, replica)
                for k in range(parts)]
        grads = []
        for i, name in enumerate(self._names):
            if name in self.shards:
                grads.append([_sum_gradients([run[1][i][k] for run in runs], "accumulate")
                              for k in range(len(self.shards[name]))])
            else:
                grads.append(tf.add_n([run[1][i] for run in runs], name="accumulate"))
        return tf.add_n([run[0] for run in runs]), grads, runs[-1][2], _rows_joined([run[3] for run in runs])

    def _sum_allreduce(self, grads):
        """Replace, per replica, allreduce gradients by their sum across replicas; a sparse gradient
        (``IndexedSlices``) by every replica's rows, gathered on each replica's device (as on collective ops),
        unless the plan densifies it (``sparse_sync: dense``)."""
        import tensorflow as tf

        from launcher.runtime.allreduce import allreduce

        index = {name: i for i, name in enumerate(self._names)}
        for _, algorithm, names in self.layout.buckets():
            names = [nm for nm in names if nm in index]
            sparse = [nm for nm in names if isinstance(grads[0][index[nm]], tf.IndexedSlices)
                      and self.layout.variables[nm].sparse_sync == "gather"]
            if len(self.devices) > 1:
                for nm in sparse:
                    self._gather_rows(grads, index[nm])
            names = [nm for nm in names if nm not in sparse]
            if not names:
                continue
            # Flattened to the variables' sizes: a gradient's static shape can be unknown (one through a reshape
            # of a dynamic batch, as a ViT's patches), and the ring cuts the concatenation by its static length.
            sizes = [int(np.prod(self.copies[nm][0].shape)) for nm in names]
            flat = []
            for r, dev in enumerate(self.devices):
                with tf.device(dev):
                    flat.append(tf.concat([tf.reshape(grads[r][index[nm]], [size])
                                           for nm, size in zip(names, sizes)], axis=0))
            sums = allreduce(flat, self.devices, list(self.layout.replica_nodes), algorithm,
                             self.layout.variables[names[0]].compression)
            for r, dev in enumerate(self.devices):
                with tf.device(dev):
                    for nm, piece in zip(names, tf.split(sums[r], sizes)):
                        grads[r][index[nm]] = tf.reshape(piece, self.copies[nm][0].shape)

    def _gather_rows(self, grads, i):
        """Every replica's rows of sparse gradient ``i``, concatenated on each replica's device."""
        import tensorflow as tf

        parts = [grads[r][i] for r in range(len(self.devices))]
        for r, dev in enumerate(self.devices):
            with tf.device(dev):
                grads[r][i] = tf.IndexedSlices(tf.concat([g.values for g in parts], axis=0, name="gathered_rows"),
                                               tf.concat([tf.cast(g.indices, tf.int64) for g in parts], axis=0),
                                               dense_shape=parts[r].dense_shape)

    def _sum_ps(self, grads):
        """Per PS shard: each task's replicas' gradients summed on its first replica device (one push per
        task), the pushes summed on the shard's PS (sparse stays sparse)."""
        import tensorflow as tf

        out = {}
        for i, name in enumerate(self._names):
            if name not in self.shards:
                continue
            for k, (var, ps_dev) in enumerate(zip(self.shards[name], self.layout.variables[name].devices)):
                pushed = []
                for members in self._tasks:
                    with tf.device(self.devices[members[0]]):
                        pushed.append(_sum_gradients([grads[r][i][k] for r in members], "ps_local_sum"))
                with tf.device(ps_dev):
                    out[id(var)] = _sum_gradients(pushed, "ps_push_sum")
        return out

    def _step_body(self, x, y):
        import tensorflow as tf

        self.traces += 1  # Python runs here only while TensorFlow traces the step
        n = tf.shape(x)[0]
        count = len(self.devices)
        self._pulled = {}  # this trace's shard reads on the PS, per (variable, shard), and pulls, per task
        losses, grads, states, predictions = [], [], [], []
        for r, dev in enumerate(self.devices):
            lo, hi = n * r // count, n * (r + 1) // count
            xs, ys = x[lo:hi], y[lo:hi]  # cut on the client: a replica's task receives only its rows
            with tf.device(dev):
                loss, g, state, y_pred = self._accumulated_gradients(xs, ys, n, r)
            losses.append(loss)
            grads.append(g)
            states.append(state)
            predictions.append(y_pred)
        ps_grads = self._sum_ps(grads)
        self._sum_allreduce(grads)
        for dev, (opt, variables) in self.optimizers.items():
            updates = []
            for var in variables:
                if id(var) in ps_grads:
                    updates.append(ps_grads[id(var)])
                else:
                    i, r = self._copy_of[id(var)]
                    updates.append(grads[r][i])
            with tf.device(dev):
                opt.apply(updates, variables)
        for var, value in zip(self._state, states[0]):
            var.assign(value)
        # The compiled metrics, on the client, over the global batch's predictions in the replicas' row order, as
        # Keras' own train step updates them (its loss tracker aside: the fit loop logs the loss it returns).
        self.model.compute_metrics(x, y, _rows_joined(predictions))
        return tf.add_n(losses)

    def _traced_step(self):
        import tensorflow as tf

        if self._step is None:
            self._step = tf.function(self._step_body, reduce_retracing=True)
        return self._step

    def step(self, x, y):
        """One synchronous step on a global batch; returns the loss (a float)."""
        return float(self._traced_step()(x, y))

    # -- results -----------------------------------------------------------
    def placed_values(self):
        """Name -> the current value of each trainable variable (shards joined)."""
        out = {}
        for name in self._names:
            if name in self.shards:
                parts = [v.numpy() for v in self.shards[name]]
                axis = self.layout.variables[name].axis
                out[name] = np.concatenate(parts, axis=axis) if parts[0].ndim else parts[0]
            else:
                out[name] = self.copies[name][0].numpy()
        return out

    def write_back(self):
        """Copy the trained values into the model's own variables (for saving, callbacks)."""
        values = self.placed_values()
        for weight, name in zip(self._weights, self._names):
            weight.assign(values[name])
        for weight, var in zip(self.model.non_trainable_variables, self._state):
            weight.assign(var.numpy())

    def running_ops(self, x, y):
        """The ops of the traced step that TensorFlow runs: those its outputs and its stateful ops need
        (it prunes the rest, e.g. a whole-shard pull whose rows were gathered on the PS instead)."""
        graph = self._traced_step().get_concrete_function(x, y).graph
        wanted = [t.op for t in graph.outputs] + list(graph.control_outputs)
        seen = {op.name for op in wanted}
        while wanted:
            op = wanted.pop()
            for dep in [t.op for t in op.inputs] + list(op.control_inputs):
                if dep.name not in seen:
                    seen.add(dep.name)
                    wanted.append(dep)
        return [op for op in graph.get_operations() if op.name in seen]

    def whole_pulls_of_sparse(self, x, y):
        """The sparse PS variables (as the plan priced them) whose whole shards the traced step pulls: their rows
        are read other than through ``keras.ops.take`` (e.g. ``tf.gather`` on the variable)."""
        pulls = {op.name.rsplit("/", 1)[-1] for op in self.running_ops(x, y)}
        return [name for i, name in enumerate(self._names)
                if name in self.shards and self.layout.variables[name].sparse
                and any(p.startswith(f"ps_pulled_v{i}_") for p in pulls)]

    def transfers(self, x, y):
        """Cross-device edges of the ops the traced step runs: (kind, op type, source device, destination device).

        ``kind`` is ``ps-pull`` (PS to worker), ``ps-push`` (worker to PS),
        ``allreduce`` (between replicas) or ``activation`` (between the
        devices of one replica); edges from the client's inputs are left out.
        """
        slots = self.layout.replica_slots or tuple((d,) for d in self.devices)
        replica_of = {canonical_device(d): r for r, devices in enumerate(slots) for d in devices}
        found = set()
        for op in self.running_ops(x, y):
            if not op.device:
                continue
            dst = canonical_device(op.device)
            for tensor in op.inputs:
                if not tensor.op.device:
                    continue
                src = canonical_device(tensor.op.device)
                if src == dst:
                    continue
                if src in replica_of and dst in replica_of:
                    kind = "activation" if replica_of[src] == replica_of[dst] else "allreduce"
                elif dst in replica_of:
                    kind = "ps-pull"
                elif src in replica_of:
                    kind = "ps-push"
                else:
                    continue
                found.add((kind, op.type, src, dst))
        return sorted(found)
