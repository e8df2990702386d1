"""Plan: the output of autodist, as a versioned JSON document.

A plan says which tasks to start (chief, workers, parameter servers), on which
node and with which devices; how every variable (or shard) is synchronised and
where it lives; which device runs each op group; how collectives are done; what
step time the simulator predicts; and where it all came from.  It embeds the
ResourceSpec it was made for, so it is self-contained, and it loads without
TensorFlow.

Task layout (the all-GPU model): one worker task per node that holds replica
devices, owning all of that node's planned devices; one PS task per entry of
``strategy.ps_devices``.  The chief is worker 0 when every variable is
allreduced: MultiWorkerMirroredStrategy treats worker 0 as chief, and a
separate chief would only idle.  When any variable lives on a parameter
server, a separate CPU-only chief task (on the first worker's node) runs the
training loop, because TensorFlow's ParameterServerStrategy needs a
coordinator that is neither a worker nor a PS.

Op groups: ``op_groups`` maps each op group the strategy moves off a
replica's first device to its device in every replica; every other op runs on
its replica's first device.

Device strings: inside a task, devices of one kind are numbered from 0 in the
order the task lists them (a Kubernetes pod sees its granted GPUs as GPU:0 ..
GPU:n-1), so ``"node-1/GPU:3"`` becomes ``/job:worker/task:1/device:GPU:1``
when the task on node-1 holds GPUs 2 and 3.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import replace

from autodist.errors import InputError
from autodist.io import check_document, read_json, write_json_atomic
from autodist.graph.xla import plan_xla
from autodist.plan_checks import plan_problems
from autodist.plan_layout import JOBS, device_assignments, task_device_strings
from autodist.resource_spec.spec import ResourceSpec
from autodist.strategy import Strategy

FORMAT = "autodist.plan"
VERSION = 1

DEFAULT_PORT = 2222  # the TF operator's default port for a TFJob's "tfjob-port"

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", "plan.schema.json")


@functools.lru_cache(maxsize=1)
def plan_schema():
    """The JSON Schema of a version-1 plan (``autodist/schemas/plan.schema.json``)."""
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return json.load(fh)


def check_schema(data, where):
    """Raise InputError naming the first field of ``data`` that breaks the plan schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(plan_schema()).iter_errors(data))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or None
        raise InputError(error.message, source=where, field=field)


def job_name_for(model_name):
    """A DNS-1035 label derived from a model name (``"ResNet_50"`` -> ``"resnet-50"``)."""
    name = re.sub(r"[^a-z0-9]+", "-", (model_name or "").lower()).strip("-")
    if not name[:1].isalpha():
        name = f"autodist-{name}".rstrip("-")
    return name[:40].rstrip("-")


def without_idle_ps(strategy):
    """The same strategy without PS devices that hold no variable (PS tasks renumbered)."""
    used = sorted({t for s in strategy.sync.values() if s.method == "ps" for t in s.ps_tasks})
    if used == list(range(len(strategy.ps_devices))):
        return strategy
    renumber = {old: new for new, old in enumerate(used)}
    sync = {
        name: replace(s, ps_tasks=tuple(renumber[t] for t in s.ps_tasks)) if s.method == "ps" else s
        for name, s in strategy.sync.items()
    }
    return replace(strategy, sync=sync, ps_devices=[strategy.ps_devices[t] for t in used])


def _task(job, index, node, devices):
    return {"job": job, "index": index, "node": node, "devices": list(devices)}


def layout_tasks(strategy, resource_spec):
    """Tasks of a strategy on a cluster (see the module docstring).

    Returns
    -------
    list of dict
        Each with ``job``, ``index``, ``node`` and ``devices`` (logical names).
    """
    used = {d for replica in strategy.replicas for d in replica}
    tasks = []
    for node in resource_spec.nodes:
        devices = [d.name for d in node.devices if d.name in used]
        if devices:
            tasks.append(_task("worker", len(tasks), node.name, devices))
    if not tasks:
        raise InputError("strategy has no replica devices", field="strategy.replicas")
    ps = [
        _task("ps", k, resource_spec.device(dev).node, [dev]) for k, dev in enumerate(strategy.ps_devices)
    ]
    if any(s.method == "ps" for s in strategy.sync.values()):
        return [_task("chief", 0, tasks[0]["node"], [])] + tasks + ps
    return tasks + ps


def _variable_entries(graph_item, strategy, tasks, resource_spec):
    """Per variable: its synchronisation and location (each PS shard's task and device)."""
    ps_tasks = [t for t in tasks if t["job"] == "ps"]
    out = []
    for name, sync in sorted(strategy.sync.items()):
        var = graph_item.variables[name]
        entry = {"name": name, "bytes": var.bytes, "method": sync.method, "sparse": var.sparse_gradient}
        if sync.method == "ps":
            entry["axis"] = sync.axis
            entry["shards"] = [
                {
                    "shard": i,
                    "ps_task": t,
                    "device": strategy.ps_devices[t],
                    "tf_device": task_device_strings(ps_tasks[t], resource_spec)[strategy.ps_devices[t]],
                }
                for i, t in enumerate(sync.ps_tasks)
            ]
        else:
            entry["algorithm"] = sync.algorithm
            entry["bucket"] = sync.bucket
            entry["location"] = "mirrored on every replica"
        out.append(entry)
    return out


def _bucket_entry(graph_item, key, names):
    """One collective (autodist.strategy.CollectiveKey) of the plan; its ``compression`` only where it is not
    ``none`` (older plans stay byte-identical)."""
    entry = {"bucket": key.bucket, "algorithm": key.algorithm, "variables": names,
             "bytes": sum(graph_item.variables[name].bytes for name in names)}
    if key.compression != "none":
        entry["compression"] = key.compression
    return entry


def _collectives(graph_item, resource_spec, strategy, tasks):
    """Collective settings: buckets, NCCL inside a node, RDMA between nodes."""
    buckets = [_bucket_entry(graph_item, key, names) for key, names in strategy.collectives().items()]
    workers = [t for t in tasks if t["job"] == "worker"]
    nodes = [resource_spec.node(t["node"]) for t in workers]
    multi_gpu_node = any(
        sum(resource_spec.device(d).kind == "GPU" for d in t["devices"]) > 1 for t in workers
    )
    nics = [nic for node in nodes for nic in node.nics]
    inter = len(nodes) > 1
    rdma = inter and bool(nics) and all(nic.rdma for nic in nics)
    kinds = sorted({nic.kind for nic in nics}) if inter else []
    return {
        "buckets": buckets,
        "nccl_intra_node": bool(buckets) and multi_gpu_node,
        "inter_node": "none" if not inter else ("rdma" if rdma else "socket"),
        "inter_node_link_kinds": kinds,
        "gpudirect_rdma": rdma and all(nic.gpudirect for nic in nics),
    }


def _prediction(simulation, lower_bound=None, candidates=()):
    """Predicted step time and its breakdown from a SimResult-like object or dict."""

    def get(name, default=None):
        if isinstance(simulation, dict):
            return simulation.get(name, default)
        return getattr(simulation, name, default)

    link_busy = {k: float(v) for k, v in sorted((get("link_busy") or {}).items())}
    busiest = max(link_busy.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    return {
        "step_time": float(get("step_time")),
        "compute_time": float(get("compute_time", 0.0)),
        "exposed_comm_time": float(get("exposed_comm_time", 0.0)),
        "link_busy": link_busy,
        "busiest_link": {"link": busiest[0], "busy_time": busiest[1]} if busiest else None,
        "device_busy": {k: float(v) for k, v in sorted((get("device_busy") or {}).items())},
        "memory": {k: int(v) for k, v in sorted((get("memory") or {}).items())},
        "lower_bound": None if lower_bound is None else float(lower_bound),
        "baselines": {c.name: float(c.simulation.step_time) for c in candidates},
    }


def _graph_summary(graph_item, resource_spec, strategy):
    xla = plan_xla(graph_item.job, "GPU" if resource_spec.gpus() else "CPU", not strategy.allreduces_everything(),
                   len(strategy.replicas))
    return {
        "model_name": graph_item.job.model_name,
        "batch_size": graph_item.job.batch_size,
        "optimizer": graph_item.job.optimizer,
        "ops": len(graph_item.ops),
        "variables": len(graph_item.variables),
        "trainable_variables": len(graph_item.trainable_variables()),
        "parameter_bytes": graph_item.parameter_bytes(),
        "flops": graph_item.total_flops(),
        "precision": graph_item.job.precision,
        "xla": xla.on,
        "xla_reason": xla.reason,
        "micro_batches": int(graph_item.job.micro_batches),
        "script_batch": int(graph_item.job.script_batch or graph_item.job.batch_size),
        "batch_per_replica": bool(graph_item.job.batch_per_replica),
        "batch_pinned": graph_item.job.batch_pinned,
        **({"unknown_trips": unknown} if (unknown := graph_item.unknown_trips()) else {}),
    }


def _search_provenance(stats):
    """Which budget a search had (``budget_s`` seconds or ``moves``), how many moves it made, and its warning
    when the budget ran out before the first move."""
    if not stats:
        return None
    out = {"budget_s": stats.get("budget_s"), "moves": stats.get("moves"), "moves_made": int(stats["moves_tried"])}
    if stats.get("warning"):
        out["warning"] = stats["warning"]
    return out


class Plan:
    """A placement ready to run: tasks, device assignments, predictions, provenance.

    Build one with :meth:`build` (from a search result) or :meth:`from_strategy`;
    read one with :meth:`load` or :meth:`from_dict`.  The JSON document is
    :meth:`to_dict`; every field is plain data.
    """

    def __init__(self, data, where="<plan>"):
        self._data = data
        self.where = where
        try:
            self.resource_spec = ResourceSpec.from_dict(data["cluster"], where=f"{where}: cluster")
            self.strategy = Strategy.from_dict(data["strategy"], where=where)
            self._check()
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"malformed plan ({type(exc).__name__}: {exc})", source=where) from None

    # -- building --------------------------------------------------------
    @classmethod
    def build(cls, graph_item, resource_spec, search_result, cost_model_id, seed, name=None):
        """A plan from the result of ``placement.optimize`` (its strategy and simulation)."""
        return cls.from_strategy(
            graph_item,
            resource_spec,
            search_result.strategy,
            search_result.simulation,
            cost_model_id,
            seed,
            name=name,
            lower_bound=getattr(search_result, "lower_bound", None),
            candidates=getattr(search_result, "candidates", ()),
            search=_search_provenance(getattr(search_result, "stats", None)),
        )

    @classmethod
    def from_strategy(
        cls, graph_item, resource_spec, strategy, prediction, cost_model_id, seed, name=None, lower_bound=None,
        candidates=(), search=None,
    ):
        """A plan from a Strategy and a SimResult-like prediction (attributes or a dict).

        PS devices that hold no variable get no task: they are dropped and the
        others renumbered in order.  ``search``: the search's budget and moves
        made, recorded in the provenance.
        """
        from autodist import __version__

        strategy.validate(graph_item, resource_spec)
        strategy = without_idle_ps(strategy)
        tasks = layout_tasks(strategy, resource_spec)
        data = {
            "format": FORMAT,
            "version": VERSION,
            "name": name or job_name_for(graph_item.job.model_name),
            "provenance": {
                "autodist_version": __version__,
                "cost_model_id": str(cost_model_id),
                "graph_hash": graph_item.content_hash(),
                "cluster_hash": resource_spec.content_hash(),
                "seed": int(seed),
                **({"search": search} if search else {}),
            },
            "graph": _graph_summary(graph_item, resource_spec, strategy),
            "tasks": tasks,
            "strategy": strategy.to_dict(),
            "device_assignments": device_assignments(tasks, resource_spec),
            "variables": _variable_entries(graph_item, strategy, tasks, resource_spec),
            "op_groups": {g: strategy.devices_of(g) for g in sorted(strategy.group_slots)},
            "collectives": _collectives(graph_item, resource_spec, strategy, tasks),
            "prediction": _prediction(prediction, lower_bound, candidates),
            "cluster": resource_spec.to_dict(),
        }
        # Normalise through JSON so a built plan equals its saved-and-loaded self.
        return cls(json.loads(json.dumps(data)))

    # -- reading ---------------------------------------------------------
    @classmethod
    def from_dict(cls, data, where="<plan>"):
        check_document(data, FORMAT, VERSION, "plan", where)
        check_schema(data, where)
        return cls(data, where=where)

    @classmethod
    def load(cls, path):
        return cls.from_dict(read_json(path), where=str(path))

    def _check(self):
        for field, message in plan_problems(self._data, self.resource_spec, self.strategy):
            raise InputError(message, source=self.where, field=field)

    # -- writing ---------------------------------------------------------
    def to_dict(self):
        return json.loads(json.dumps(self._data))

    def to_json(self):
        """The canonical text of the plan (what :meth:`save` writes)."""
        return json.dumps(self._data, indent=1) + "\n"

    def save(self, path):
        """Write the plan atomically (temp file, then rename)."""
        write_json_atomic(path, self._data)

    # -- views -----------------------------------------------------------
    @property
    def name(self):
        return self._data["name"]

    @property
    def tasks(self):
        return self._data["tasks"]

    @property
    def provenance(self):
        return self._data["provenance"]

    @property
    def prediction(self):
        return self._data["prediction"]

    @property
    def collectives(self):
        return self._data["collectives"]

    @property
    def variables(self):
        return self._data["variables"]

    @property
    def graph(self):
        return self._data["graph"]

    @property
    def micro_batches(self):
        """The micro-batches each step accumulates: the strategy's count, else the job's."""
        return int(self.strategy.micro_batches or self.graph.get("micro_batches") or 1)

    def tasks_of(self, job):
        return [t for t in self.tasks if t["job"] == job]

    def has_ps(self):
        return bool(self.tasks_of("ps"))

    def task(self, job, index):
        for t in self.tasks_of(job):
            if t["index"] == index:
                return t
        raise InputError(f"plan has no task {job}:{index}", source=self.where)

    def device_string(self, logical_device, job=None):
        """The TensorFlow device string of a logical device.

        Parameters
        ----------
        logical_device : str
            ``"<node>/<KIND>:<i>"``.
        job : str, optional
            Resolve within this job only (a node's CPU may serve a worker and a PS).

        Returns
        -------
        str, e.g. ``"/job:worker/task:1/device:GPU:3"``.
        """
        self.resource_spec.device(logical_device)
        for task in self.tasks:
            if (job is None or task["job"] == job) and logical_device in task["devices"]:
                return task_device_strings(task, self.resource_spec)[logical_device]
        raise InputError(f"device {logical_device!r} belongs to no task of the plan", source=self.where)

    def variable_devices(self, name):
        """TensorFlow device strings of a variable's shards (PS) or its replicas (allreduce)."""
        sync = self.strategy.sync[name]
        if sync.method == "ps":
            return [
                task_device_strings(self.task("ps", t), self.resource_spec)[self.strategy.ps_devices[t]]
                for t in sync.ps_tasks
            ]
        return [self.device_string(replica[0], job="worker") for replica in self.strategy.replicas]

    def cluster_spec(self, addresses=None, namespace=None, port=DEFAULT_PORT):
        """Job name -> list of ``host:port``, one per task, in task order.

        By default the hosts are the Service names the Kubeflow training operator
        gives a TFJob's replicas (``<name>-<job>-<index>``, plus ``.<namespace>.svc``
        when a namespace is given).  ``addresses`` (job -> list of ``host:port``)
        overrides that, e.g. for processes on localhost.
        """
        spec = {}
        for job in JOBS:
            tasks = self.tasks_of(job)
            if not tasks:
                continue
            if addresses is not None:
                hosts = list(addresses.get(job, []))
                if len(hosts) != len(tasks):
                    raise InputError(f"{len(hosts)} addresses for {len(tasks)} {job} tasks", field="addresses")
                spec[job] = hosts
            else:
                suffix = f".{namespace}.svc" if namespace else ""
                spec[job] = [f"{self.name}-{job}-{t['index']}{suffix}:{port}" for t in tasks]
        return spec

    def tf_config(self, job, index, addresses=None, namespace=None, port=DEFAULT_PORT):
        """The ``TF_CONFIG`` dict of task ``job:index`` (see :meth:`cluster_spec`)."""
        self.task(job, index)
        return {"cluster": self.cluster_spec(addresses, namespace, port), "task": {"type": job, "index": index}}

    def __eq__(self, other):
        return isinstance(other, Plan) and self._data == other._data

    def __repr__(self):
        jobs = ", ".join(f"{j}={len(self.tasks_of(j))}" for j in JOBS if self.tasks_of(j))
        return f"Plan({self.name!r}, {jobs}, step_time={self.prediction['step_time']:.6g}s)"
