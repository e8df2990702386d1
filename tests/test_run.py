"""`autodist run`: real local jobs (2 workers, PS tasks, a chief) under PS, allreduce and hybrid plans.

Every plan is made from the real captured step of benchmarks/models/run_small_mlp.py
and the real simulator; every run starts real TensorFlow processes on
localhost.  The allreduce plan runs on TensorFlow's collective ops, every
worker a client, with model.fit and with the example's custom loops (an
@autodist.function step, and a plain @tf.function step found without it); the
PS and hybrid plans run from one client.  The zoo's custom_loop.py (raw
tf.Variables, nothing of autodist in it) is captured, planned and run as is.
The checks read what the tasks built (variable devices, the collectives or
the cross-device edges of the traced step) and the trained weights.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.conftest import ZOO

SCRIPT = os.path.join(ZOO, "run_small_mlp.py")
STEPS, BATCH = 4, 16
CLUSTER = "cpu-local:2"
REPLICAS = [["local-0/CPU:0"], ["local-1/CPU:0"]]
TWO_PER_TASK = [["local/CPU:0"], ["local/CPU:1"]]
MODEL_PARALLEL = [["node-0/CPU:0", "node-0/CPU:1"], ["node-1/CPU:0", "node-1/CPU:1"]]
PS_DEVICES = ["local-0/CPU:0", "local-1/CPU:0"]
# 2 nodes x 2 replicas: ring, master and hierarchical buckets run their stages over sub-groups
TWO_NODES_TWO_REPLICAS = [["node-0/CPU:0"], ["node-0/CPU:1"], ["node-1/CPU:0"], ["node-1/CPU:1"]]


def _strategies():
    """Per plan kind: (sync per variable, PS devices).  Shards, axes, buckets and algorithms all vary."""
    from autodist.strategy import VarSync

    ps = {
        "embedding/embeddings": VarSync("ps", ps_tasks=(0, 1), axis=0),
        "hidden/kernel": VarSync("ps", ps_tasks=(1, 0), axis=1),
        "hidden/bias": VarSync("ps", ps_tasks=(1,)),
        "logits/kernel": VarSync("ps", ps_tasks=(0,)),
        "logits/bias": VarSync("ps", ps_tasks=(1,)),
    }
    allreduce = {
        "embedding/embeddings": VarSync("allreduce", algorithm="ring", bucket=0),
        "hidden/kernel": VarSync("allreduce", algorithm="ring", bucket=0),
        "hidden/bias": VarSync("allreduce", algorithm="master", bucket=1),
        "logits/kernel": VarSync("allreduce", algorithm="master", bucket=1),
        "logits/bias": VarSync("allreduce", algorithm="hierarchical", bucket=2),
    }
    # Hybrid: the embedding in two shards on one PS task, the rest allreduced.
    hybrid = dict(allreduce, **{"embedding/embeddings": VarSync("ps", ps_tasks=(0, 0), axis=0)})
    # The embedding's sparse gradient densified and summed with its bucket instead of its rows gathered.
    densified = dict(allreduce, **{"embedding/embeddings": VarSync("allreduce", bucket=0, sparse_sync="dense")})
    return {"ps": (ps, PS_DEVICES), "allreduce": (allreduce, []), "hybrid": (hybrid, PS_DEVICES[:1]),
            "custom": (allreduce, []), "tf-function": (allreduce, []), "two-per-task": (densified, []),
            "model-parallel": (allreduce, []), "stages": (allreduce, [])}


def _later_layers_on_second_device(graph_item):
    """Op groups: the hidden and logits layers' scopes on each replica's second device."""
    from placement.grouping import group_ops

    return {unit: 1 for unit in group_ops(graph_item).units if "/hidden" in unit or "/logits" in unit}


@pytest.fixture(scope="session")
def small_job():
    """The example's training step, captured in this process."""
    from run_small_mlp import build_model, make_train_step

    from autodist.graph.capture import capture_step

    x = np.zeros((BATCH, 4), np.int32)
    y = np.zeros((BATCH,), np.int32)
    return capture_step(make_train_step(build_model(0)), x, y, model_name="small_mlp")


@pytest.fixture(scope="session")
def plans(small_job, tmp_path_factory):
    """kind -> (Plan, path) for the three plan kinds, predicted by the real simulator."""
    from autodist.plan import Plan
    from autodist.resource_spec import load_cluster
    from autodist.strategy import Strategy
    from cost_models import CostModel
    from placement import simulate

    folder = tmp_path_factory.mktemp("plans")
    spec = load_cluster(preset=CLUSTER)
    # Nodes with two CPU devices: one worker task holding both replicas; two tasks of two-device replicas.
    clusters = {"two-per-task": "name: one-node-two-cpus\nnodes:\n"
                                "  - {name: local, preset: cpu-local, cpus: {model: cpu-local, count: 2}}\n",
                "model-parallel": "name: two-nodes-two-cpus\nnodes:\n"
                                  "  - {name: node, count: 2, preset: cpu-local, cpus: {model: cpu-local, count: 2}}\n"}
    clusters["stages"] = clusters["model-parallel"]
    replicas = {"two-per-task": TWO_PER_TASK, "model-parallel": MODEL_PARALLEL, "stages": TWO_NODES_TWO_REPLICAS}
    cost_model = CostModel.default()
    out = {}
    for kind, (sync, ps_devices) in _strategies().items():
        where = spec
        if kind in clusters:
            (folder / f"{kind}.yaml").write_text(clusters[kind])
            where = load_cluster(str(folder / f"{kind}.yaml"))
        groups = _later_layers_on_second_device(small_job) if kind == "model-parallel" else {}
        strategy = Strategy(replicas=replicas.get(kind, REPLICAS), sync=sync, ps_devices=ps_devices,
                            group_slots=groups)
        plan = Plan.from_strategy(small_job, where, strategy, simulate(small_job, where, strategy, cost_model),
                                  cost_model.id, 0)
        path = str(folder / f"plan_{kind}.json")
        plan.save(path)
        out[kind] = (plan, path)
    return out


@pytest.fixture(scope="session")
def reference_weights():
    """The example's model trained by plain Keras in this process, on the same global batches."""
    from run_small_mlp import build_model, make_data, trained_weights

    x, y = make_data(STEPS, BATCH, seed=0)
    model = build_model(0)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return trained_weights(model)


class _Runs:
    """Each plan kind is run once per session, on first use."""

    def __init__(self, plans, folder):
        self.plans, self.folder, self.done = plans, folder, {}

    def get(self, kind):
        if kind not in self.done:
            self.done[kind] = self._run(kind)
        return self.done[kind]

    def _run(self, kind):
        plan, plan_path = self.plans[kind]
        report = str(self.folder / f"report_{kind}.json")
        weights = str(self.folder / f"weights_{kind}.npz")
        script_args = ["--steps", str(STEPS), "--batch-size", str(BATCH), "--save-weights", weights]
        script_args += {"custom": ["--custom-loop"], "tf-function": ["--tf-function-loop"]}.get(kind, [])
        output = ""
        # Three entry points: the CLI, the launcher's API, and `autodist worker` per task as in pods.
        if kind == "allreduce":
            done = subprocess.run(
                [sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan_path, "--report", report, "--",
                 *script_args],
                capture_output=True, text=True, timeout=400,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            output = done.stdout
        elif kind == "hybrid":
            from launcher.local import run_local

            run_local(plan, plan_path, SCRIPT, script_args, report_path=report)
        else:
            _run_as_pods(plan, plan_path, report, script_args)
        with open(report) as fh:
            return {"plan": plan, "report": json.load(fh), "weights": dict(np.load(weights)), "output": output}


def _run_as_pods(plan, plan_path, report, script_args):
    """Every task as `autodist worker --plan` with its own TF_CONFIG, the way the pods start them."""
    from launcher.local import local_cluster
    from launcher.runtime.client import client_tasks
    from launcher.runtime.worker import merge_records

    cluster = local_cluster(plan)
    clients = client_tasks(plan)
    servers, scripts, reports = [], [], []
    try:
        for job, addresses in cluster.items():
            for index in range(len(addresses)):
                env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": job, "index": index}}))
                argv = [sys.executable, "-m", "autodist", "worker", "--plan", plan_path]
                if (job, index) in clients:
                    reports.append(report if len(clients) == 1 else f"{report}.{job}-{index}")
                    argv += ["--report", reports[-1], SCRIPT, "--", *script_args]
                    scripts.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                    text=True))
                else:
                    servers.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL))
        for process in scripts:
            _, err = process.communicate(timeout=400)
            assert process.returncode == 0, err[-3000:]
    finally:
        for process in servers + scripts:
            process.kill()
            process.wait()
    if len(clients) > 1:
        merge_records(reports, report)


@pytest.fixture(scope="session")
def runs(plans, tmp_path_factory):
    return _Runs(plans, tmp_path_factory.mktemp("runs"))


def _same_device(a, b):
    import tensorflow as tf

    spec_a, spec_b = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
    return (spec_a.job, spec_a.task, spec_a.device_type, spec_a.device_index) == (
        spec_b.job, spec_b.task, spec_b.device_type, spec_b.device_index)


KINDS = ["ps", "allreduce", "hybrid", "custom", "tf-function", "two-per-task", "model-parallel", "stages"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_variables_live_where_the_plan_says(runs, kind):
    run = runs.get(kind)
    plan, placed = run["plan"], run["report"]["variable_devices"]
    assert sorted(placed) == sorted(plan.strategy.sync)
    for name in plan.strategy.sync:
        planned = plan.variable_devices(name)
        assert len(placed[name]) == len(planned), name
        for got, want in zip(placed[name], planned):
            assert _same_device(got, want), (name, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "custom", "tf-function", "two-per-task"])
def test_allreduce_plans_sum_gradients_with_collective_ops_in_the_planned_buckets(runs, small_job, kind):
    run = runs.get(kind)
    plan, report = run["plan"], run["report"]
    sizes = {v.name: int(np.prod(v.shape)) for v in small_job.trainable_variables()}
    buckets = {}
    for name, sync in plan.strategy.sync.items():
        buckets.setdefault(sync.bucket, []).append(name)
    assert report["transfers"] == []  # no variable is read or written across replicas
    assert [r["replica"] for r in report["replicas"]] == list(range(len(plan.strategy.replicas)))
    assert {v.name for v in small_job.trainable_variables() if v.sparse_gradient} == {"embedding/embeddings"}
    sparse = {"embedding/embeddings"} - {n for n, s in plan.strategy.sync.items() if s.sparse_sync == "dense"}
    for task in report["replicas"]:
        summed = {c["bucket"]: c for c in task["collectives"] if c["op_type"] == "CollectiveReduceV2"}
        # A sparse gradient's rows are all-gathered (as MultiWorkerMirroredStrategy does), not summed densely.
        gathered = {c["variables"][0]: c for c in task["collectives"] if c["op_type"] == "CollectiveGatherV2"}
        assert len(task["collectives"]) == len(summed) + len(gathered) and set(gathered) == sparse & set(sizes)
        for bucket, names in buckets.items():
            dense = [n for n in names if n not in sparse]
            collective = summed[bucket]
            assert collective["group_size"] == 2 and sorted(collective["variables"]) == sorted(dense)
            assert collective["elements"] == sum(sizes[n] for n in dense)
            assert collective["communication_hint"] == "ring"
        for name, collective in gathered.items():
            assert collective["bucket"] == plan.strategy.sync[name].bucket and collective["group_size"] == 2
        assert task["steps"] == STEPS


@pytest.mark.slow
def test_each_bucket_runs_its_algorithms_stages_over_sub_groups(runs, small_job):
    """2 nodes x 2 replicas: ring is one allreduce of all four; master an allreduce inside each node, one between
    the masters, a broadcast inside each node; hierarchical (on CPUs, an allreduce inside each node of which each
    replica keeps its half) an allreduce of each half across the nodes and an all-gather inside each node."""
    from autodist.collective_stages import stages

    run = runs.get("stages")
    plan = run["plan"]
    nodes = [plan.resource_spec.device(r[0]).node for r in plan.strategy.replicas]
    expected_ops = {"allreduce": "CollectiveReduceV2", "reduce_scatter": "CollectiveReduceV2",
                    "all_gather": "CollectiveGatherV2"}
    for task in run["report"]["replicas"]:
        rank = task["replica"]
        for bucket, algorithm in ((0, "ring"), (1, "master"), (2, "hierarchical")):
            # the sparse embedding's rows are gathered over every replica apart (no stage group)
            issued = sorted((c["stage"], c["op_type"], tuple(c["group"])) for c in task["collectives"]
                            if c["bucket"] == bucket and c["group"] is not None)
            assert {c["algorithm"] for c in task["collectives"] if c["bucket"] == bucket and c["group"]} == {algorithm}
            want = []
            for k, stage in enumerate(stages(algorithm, nodes)):
                for group in stage.groups:
                    if rank in group:
                        op = expected_ops.get(stage.op) or (
                            "CollectiveBcastSendV2" if group[0] == rank else "CollectiveBcastRecvV2")
                        want.append((k, op, group))
            assert issued == sorted(want), (rank, bucket)
            assert len(want) == (1 if algorithm == "ring" else 3 if algorithm == "hierarchical" else
                                 3 if rank in (0, 2) else 2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ps", "hybrid", "model-parallel"])
def test_gradients_travel_through_the_planned_channels(runs, kind):
    run = runs.get(kind)
    plan = run["plan"]
    edges = {(k, src, dst) for k, _, src, dst in run["report"]["transfers"]}
    workers = [plan.device_string(r[0], job="worker") for r in plan.strategy.replicas]

    def has(kind_, src, dst):
        return any(k == kind_ and _same_device(s, src) and _same_device(d, dst) for k, s, d in edges)

    ps_shards = {dev for name, s in plan.strategy.sync.items() if s.method == "ps" for dev in plan.variable_devices(name)}
    for shard_device in ps_shards:
        for worker in workers:
            assert has("ps-push", worker, shard_device), (worker, shard_device)
            assert has("ps-pull", shard_device, worker), (shard_device, worker)
    uses_allreduce = any(s.method == "allreduce" for s in plan.strategy.sync.values())
    assert has("allreduce", workers[0], workers[1]) == uses_allreduce
    assert has("allreduce", workers[1], workers[0]) == uses_allreduce
    assert bool(ps_shards) == any(k.startswith("ps-") for k, _, _ in edges)
    pushes = {op for k, op, _, _ in run["report"]["transfers"] if k == "ps-push"}
    if plan.strategy.sync["embedding/embeddings"].method == "ps":
        assert "ConcatV2" in pushes  # the embedding's sparse rows, not a dense sum
    dense_ps = [n for n, s in plan.strategy.sync.items() if s.method == "ps" and not n.startswith("embedding")]
    assert ("AddN" in pushes) == bool(dense_ps)
    # Op groups on a replica's second device: activations (forward) and their gradients cross inside the replica.
    activations = {(src, dst, op) for k, op, src, dst in run["report"]["transfers"] if k == "activation"}
    for replica in plan.strategy.replicas:
        first, second = (plan.device_string(d, job="worker") for d in (replica + replica)[:2])
        crossing = {op for src, dst, op in activations if _same_device(src, first) and _same_device(dst, second)}
        back = {op for src, dst, op in activations if _same_device(src, second) and _same_device(dst, first)}
        assert bool(crossing) == bool(back) == bool(plan.strategy.group_slots), (crossing, back)
    assert run["report"]["steps"] == STEPS


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_same_weights_as_single_process_training(runs, reference_weights, kind):
    weights = runs.get(kind)["weights"]
    assert sorted(weights) == sorted(reference_weights)
    for name, expected in reference_weights.items():
        np.testing.assert_allclose(weights[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_a_plain_tf_function_loop_with_raw_variables_is_captured_planned_and_run_unchanged(tmp_path):
    """The held-out case: benchmarks/models/custom_loop.py, searched and run by `autodist run` on 2 processes."""
    from custom_loop import train

    weights, plan_path = tmp_path / "weights.npz", tmp_path / "plan.json"
    done = subprocess.run(
        [sys.executable, "-m", "autodist", "run", os.path.join(ZOO, "custom_loop.py"), "--preset", CLUSTER,
         "--budget", "2", "-o", str(plan_path), "--", "--steps", str(STEPS), "--batch-size", str(BATCH),
         "--save-weights", str(weights)],
        capture_output=True, text=True, timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "custom training loop runs on collective ops only" in out  # why the search kept to allreduce plans
    assert f"step {STEPS}" in out and "measured step time" in out
    from autodist.plan import Plan

    plan = Plan.load(str(plan_path))
    # The search may keep fewer replicas than devices for so small a step (the 'tf-function' kind of the
    # weight tests above runs a custom loop on two processes under fixed plans).
    assert 1 <= len(plan.strategy.replicas) <= 2 and plan.strategy.allreduces_everything()
    expected = {v.name[:-2]: v.numpy() for v in train(STEPS, BATCH, seed=0, report=lambda line: None)}
    got = dict(np.load(weights))
    assert sorted(got) == sorted(expected) == sorted(plan.strategy.sync)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_cli_reports_progress_against_the_prediction(runs):
    run = runs.get("allreduce")
    out = run["output"]
    assert f"step {STEPS}/{STEPS}" in out and "samples/s" in out and "predicted" in out
    predicted_ms = f"{run['plan'].prediction['step_time'] * 1e3:.2f} ms"
    assert f"vs predicted {predicted_ms}" in out
    assert "plan " in out and out.rstrip().endswith(".json")


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _port_free(address):
    """Nothing listens on the port (connections the run closed may linger in TIME_WAIT, as TCP requires)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("localhost", int(address.rsplit(":", 1)[1])))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_killed_worker_stops_the_run_and_leaves_nothing_behind(plans):
    from autodist.errors import LaunchError
    from launcher.local import last_lines, run_local

    plan, plan_path = plans["allreduce"]  # the fewest processes: worker:0 is the client, worker:1 a server
    started = {}

    def kill_worker_once_serving(run):
        started["run"] = run
        worker = next(t for t in run.tasks if t.name == "worker:1")

        def killer():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any("serving" in line for line in last_lines(worker.log_path)):
                time.sleep(0.2)
            time.sleep(1)
            started["killed_at"] = time.monotonic()
            os.kill(worker.process.pid, signal.SIGKILL)

        threading.Thread(target=killer, daemon=True).start()

    with pytest.raises(LaunchError) as info:
        run_local(plan, plan_path, SCRIPT, ["--steps", "1000", "--batch-size", str(BATCH)], on_start=kill_worker_once_serving)
    assert time.monotonic() - started["killed_at"] < 10
    message = str(info.value)
    assert "task worker:1" in message and "died" in message and "serving at" in message
    run = started["run"]
    assert all(_gone(pid) for pid in run.pids())
    assert all(_port_free(a) for addresses in run.cluster.values() for a in addresses)
    assert not os.path.exists(run._logdir)


@pytest.mark.parametrize("algorithm", ["ring", "master", "hierarchical"])
def test_allreduce_algorithms_give_every_replica_the_same_sum(algorithm):
    import tensorflow as tf

    from launcher.runtime.allreduce import allreduce

    rng = np.random.default_rng(1)
    values = [rng.standard_normal(11).astype(np.float32) for _ in range(3)]
    devices = ["/device:CPU:0"] * 3
    out = allreduce([tf.constant(v) for v in values], devices, ["a", "a", "b"], algorithm)
    for tensor in out:
        np.testing.assert_allclose(tensor.numpy(), np.sum(values, axis=0), rtol=1e-6)
    assert all(np.array_equal(out[0].numpy(), t.numpy()) for t in out)


def _children(pid):
    """Child processes of ``pid``: a launcher's tasks and its watchdog."""
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def _tasks(pid):
    """A launcher's task processes (its children but the watchdog)."""
    return [p for p in _children(pid) if p not in _processes_naming("launcher.supervision")]


@pytest.mark.slow
def test_ctrl_c_stops_every_task(plans):
    _, plan_path = plans["hybrid"]
    cli = subprocess.Popen([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan_path, "--", "--steps", "1000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    children = []
    while len(children) < len(plans["hybrid"][0].tasks) and time.monotonic() < deadline:
        time.sleep(0.1)
        children = _tasks(cli.pid)
    cli.send_signal(signal.SIGINT)
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert len(children) == len(plans["hybrid"][0].tasks)
    assert all(_gone(pid) for pid in children)
    assert not _processes_naming(plan_path)  # nor any task started after the children were counted


def _processes_naming(text):
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if text.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _cli(argv, env=None):
    return subprocess.run([sys.executable, "-m", "autodist", *argv], capture_output=True, text=True, timeout=120,
                          env=env)


def _plan_on_gpus(graph_item, preset):
    """An all-allreduce plan over every GPU of a preset, predicted by the real simulator."""
    from autodist.plan import Plan
    from autodist.resource_spec import load_cluster
    from autodist.strategy import Strategy, VarSync
    from cost_models import CostModel
    from placement import simulate

    spec = load_cluster(preset=preset)
    strategy = Strategy(replicas=[[g.name] for g in spec.gpus()],
                        sync={v.name: VarSync("allreduce") for v in graph_item.trainable_variables()})
    cost_model = CostModel.default()
    return Plan.from_strategy(graph_item, spec, strategy, simulate(graph_item, spec, strategy, cost_model),
                              cost_model.id, 0)


def test_cli_errors_are_one_line(plans, small_job, tmp_path):
    _, plan_path = plans["ps"]
    missing = _cli(["run", str(tmp_path / "nope.py"), "--plan", plan_path])
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "nope.py: no such training script" in missing.stderr
    other_cluster = _cli(["run", SCRIPT, "--plan", plan_path, "--preset", "cpu-local:3"])
    assert other_cluster.returncode == 2 and "Traceback" not in other_cluster.stderr
    assert f"{plan_path}: the plan was made for cluster 'cpu-local:2'" in other_cluster.stderr
    gpu_plan = str(tmp_path / "gpu_plan.json")
    _plan_on_gpus(small_job, "dgx-h100:2").save(gpu_plan)
    too_big = _cli(["run", SCRIPT, "--plan", str(gpu_plan)])
    assert too_big.returncode == 2 and "GPUs and this machine has" in too_big.stderr and "autodist emit" in too_big.stderr
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    no_config = _cli(["worker", "--plan", plan_path], env=env)
    assert no_config.returncode == 2 and "TF_CONFIG" in no_config.stderr and "Traceback" not in no_config.stderr
    from launcher.local import local_cluster

    cluster = local_cluster(plans["ps"][0])
    env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    no_script = _cli(["worker", "--plan", plan_path], env=env)
    assert no_script.returncode == 2 and "chief:0 runs the training script" in no_script.stderr


# -- the runtime in this process: two replicas on this process's CPU (fast) ---------------

LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _local_hybrid_layout(model):
    """The embedding in two PS shards, the rest allreduced in two buckets; every device is this CPU."""
    from launcher.runtime.layout import RunLayout, VariablePlacement

    variables = {}
    for i, w in enumerate(model.trainable_weights):
        if w.path.startswith("embedding"):
            variables[w.path] = VariablePlacement(w.path, "ps", (LOCAL_CPU, LOCAL_CPU), axis=0)
        else:
            variables[w.path] = VariablePlacement(w.path, "allreduce", (LOCAL_CPU, LOCAL_CPU), bucket=i % 2)
    return RunLayout((LOCAL_CPU, LOCAL_CPU), ("n0", "n1"), variables, predicted_step_time=1e-3, plan_name="local")


def _fit_under_plan(model, x, y, **kwargs):
    import io

    import keras

    from launcher.runtime.fit import PlacedFit

    original = keras.Model.fit
    out = io.StringIO()
    with PlacedFit(_local_hybrid_layout(model), "local-plan.json", out=out):
        model.fit(x, y, batch_size=BATCH, shuffle=False, **kwargs)
    assert keras.Model.fit is original
    return out.getvalue()


def test_checkpoints_from_callbacks_hold_the_trained_weights_and_resume(tmp_path):
    import keras
    from run_small_mlp import build_model, make_data, trained_weights

    x, y = make_data(STEPS, BATCH, seed=3)
    checkpoint = str(tmp_path / "ckpt.weights.h5")
    model = build_model(0)
    out = _fit_under_plan(model, x, y, callbacks=[keras.callbacks.ModelCheckpoint(checkpoint, save_weights_only=True)])
    assert f"step {STEPS}/{STEPS}" in out and "plan local-plan.json" in out
    reference = build_model(0)
    reference.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0)
    restored = build_model(1)
    restored.load_weights(checkpoint)
    for name, value in trained_weights(reference).items():
        np.testing.assert_allclose(trained_weights(restored)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # A rerun that loads the checkpoint continues from it, as plain Keras does.
    resumed, plain = build_model(2), build_model(2)
    resumed.load_weights(checkpoint)
    plain.load_weights(checkpoint)
    _fit_under_plan(resumed, x, y)
    plain.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0)
    for name, value in trained_weights(plain).items():
        np.testing.assert_allclose(trained_weights(resumed)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_compiled_metrics_are_logged_per_epoch_as_keras_logs_them():
    """Found on keras-io's ViT under a plan with PS: the epoch's logs held the loss alone, so a script reading
    ``history.history["top-5-accuracy"]`` (or a callback watching ``accuracy``) failed.  With a learning rate of 0
    the weights stay, so the epoch's accuracy is Keras' own evaluation of the same batches."""
    import keras
    from run_small_mlp import build_model, make_data

    x, y = make_data(STEPS, BATCH, seed=4)
    model = build_model(0)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(2, name="top-2")])
    _fit_under_plan(model, x, y, epochs=2)
    history = model.history.history
    expected = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    assert set(history) == {"loss", "accuracy", "top-2"}
    for name in ("accuracy", "top-2"):
        assert len(history[name]) == 2  # reset each epoch: both epochs see the same unchanged model
        np.testing.assert_allclose(history[name], [expected[name]] * 2, rtol=1e-6, err_msg=name)


def test_unsupported_fit_arguments_are_named():
    from run_small_mlp import build_model, make_data

    from autodist.errors import LaunchError

    x, y = make_data(1, BATCH, seed=0)
    with pytest.raises(LaunchError, match="class_weight"):
        _fit_under_plan(build_model(0), x, y, class_weight={0: 1.0})


def test_models_with_added_losses_are_refused():
    import keras

    from autodist.errors import LaunchError
    from launcher.runtime.trainer import PlacedTrainer

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, kernel_regularizer="l2", name="reg")])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(LaunchError, match="model.losses"):
        PlacedTrainer(model, _local_hybrid_layout(model))


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["--custom-loop", "--tf-function-loop"])
def test_custom_loops_under_a_one_client_plan_are_refused_not_run_undistributed(plans, loop):
    _, plan_path = plans["ps"]
    done = _cli(["run", SCRIPT, "--plan", plan_path, "--", "--steps", "2", loop])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "custom training loops run only" in done.stderr and "parameter server" in done.stderr
    assert "step 1:" not in done.stdout


@pytest.mark.slow
def test_workers_that_build_different_batches_stop_with_the_reason(plans):
    """Under collectives every replica runs the script: a script whose data differs per replica is caught."""
    from launcher.local import local_cluster
    from launcher.runtime.collective import BATCH_MISMATCH

    plan, plan_path = plans["allreduce"]
    cluster = local_cluster(plan)
    workers = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "autodist", "worker", "--plan", plan_path, SCRIPT, "--", "--seed", str(index)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for worker in workers:
        _, err = worker.communicate(timeout=200)
        assert worker.returncode == 2 and "Traceback" not in err, err[-2000:]
        assert err.strip().splitlines()[-1].endswith(BATCH_MISMATCH)


@pytest.mark.slow
def test_checkpoints_of_a_collective_run_hold_the_trained_weights_and_a_rerun_resumes(plans, tmp_path):
    """ModelCheckpoint runs on the chief only; a rerun loads it on every worker and goes on from there."""
    from run_small_mlp import build_model, make_data, trained_weights

    from launcher.local import run_local

    plan, plan_path = plans["allreduce"]
    checkpoint = str(tmp_path / "ckpt.weights.h5")
    args = ["--steps", str(STEPS), "--batch-size", str(BATCH), "--checkpoint", checkpoint]
    run_local(plan, plan_path, SCRIPT, args)
    run_local(plan, plan_path, SCRIPT, args + ["--save-weights", str(tmp_path / "resumed.npz")])
    x, y = make_data(STEPS, BATCH, seed=0)
    first, plain = build_model(0), build_model(0)  # plain Keras: train, save, load into a fresh model, train
    first.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0)
    first.save_weights(str(tmp_path / "first.weights.h5"))
    plain.load_weights(str(tmp_path / "first.weights.h5"))
    plain.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0)
    resumed = dict(np.load(tmp_path / "resumed.npz"))
    for name, value in trained_weights(plain).items():
        np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    restored = build_model(1)
    restored.load_weights(checkpoint)  # the second run's checkpoint: both runs' training
    for name, value in trained_weights(plain).items():
        np.testing.assert_allclose(trained_weights(restored)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_replicas_of_a_task_listen_on_its_port_plus_their_index(plans):
    from launcher.runtime.client import client_tasks
    from launcher.runtime.collective import collective_mode, replica_cluster, replica_places, why_not_collective

    two, _ = plans["two-per-task"]
    assert collective_mode(two) and client_tasks(two) == [("worker", 0)]
    assert replica_places(two) == [(0, 0), (0, 1)]
    assert replica_cluster(two, {"worker": ["pod-0.job:2222"]}) == {"worker": ["pod-0.job:2222", "pod-0.job:2223"]}
    one, _ = plans["allreduce"]
    assert replica_cluster(one, {"worker": ["a:1", "b:1"]}) == {"worker": ["a:1", "b:1"]}
    assert why_not_collective(plans["hybrid"][0]) == "it puts 'embedding/embeddings' on a parameter server"


def test_mpi_hostfiles_of_both_kinds_give_the_replicas_cluster(tmp_path):
    from autodist.errors import LaunchError
    from launcher.runtime.mpi import rank_and_cluster, read_hostfile

    openmpi, mpich, bad = tmp_path / "openmpi", tmp_path / "mpich", tmp_path / "bad"
    openmpi.write_text("# mpi-operator\njob-worker-0.job slots=2\njob-worker-1.job slots=2\n")
    mpich.write_text("job-worker-0.job:2\njob-worker-1.job:2\n")
    bad.write_text("job-worker-0.job slots=two\n")
    assert read_hostfile(openmpi) == read_hostfile(mpich) == [("job-worker-0.job", 2), ("job-worker-1.job", 2)]
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_MCA_orte_default_hostfile": str(mpich)}
    rank, local, cluster = rank_and_cluster(env)
    assert (rank, local) == (3, 1)
    assert cluster == {"worker": ["job-worker-0.job:2222", "job-worker-0.job:2223",
                                  "job-worker-1.job:2222", "job-worker-1.job:2223"]}
    with pytest.raises(LaunchError, match="line 1: slots must be an integer"):
        read_hostfile(bad)
    with pytest.raises(LaunchError, match="rank 9 has no slot"):
        rank_and_cluster(dict(env, OMPI_COMM_WORLD_RANK="9"))


@pytest.mark.slow
def test_ranks_started_by_mpirun_train_as_the_plans_replicas(plans, reference_weights, tmp_path):
    """What an MPIJob's mpirun starts: `autodist worker` per rank, placed by the MPI environment (no TF_CONFIG)."""
    from launcher.local import free_ports

    _, plan_path = plans["two-per-task"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    weights = tmp_path / "weights.npz"
    base = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    base.update(OMPI_MCA_orte_default_hostfile=str(hostfile), AUTODIST_REPLICA_PORT=str(free_ports(1)[0]))
    ranks = []
    for rank in range(2):
        env = dict(base, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_RANK=str(rank))
        ranks.append(subprocess.Popen(
            [sys.executable, "-m", "autodist", "worker", "--plan", plan_path, SCRIPT, "--", "--steps", str(STEPS),
             "--batch-size", str(BATCH), "--save-weights", str(weights)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for process in ranks:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    trained = dict(np.load(weights))
    for name, expected in reference_weights.items():
        np.testing.assert_allclose(trained[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_op_groups_name_the_layers_whose_scopes_they_are():
    from launcher.runtime.groups import layer_slots

    groups = {"small_mlp_1/hidden_1": 1, "small_mlp_1/hidden_1/MatMul": 0, "small_mlp_1/dense_1": 1,
              "small_mlp_1/embedding_1/GatherV2": 1, "compile_loss": 1}
    # "dense_1" is a layer's own name; "hidden_1" is the scope of layer "hidden"; the layer's own scope wins.
    assert layer_slots(["hidden", "dense_1", "embedding", "logits"], groups) == {"hidden": 1, "dense_1": 1,
                                                                              "embedding": 1}


@pytest.mark.slow
def test_a_partial_last_batch_gathers_the_sparse_rows_at_the_capacity_of_the_full_batches(plans, tmp_path):
    """The epoch's last batch is partial: each replica holds fewer rows of the embedding's sparse gradient than in
    the steps before, and TensorFlow keeps the shape each collective instance first ran with, so the gather
    stopped with "Shape mismatch in the collective instance" (two corpus scripts under bench).  The rows are
    padded to the full batches' capacity; the weights are plain Keras' on the same data."""
    from run_small_mlp import build_model, make_data, trained_weights

    _, plan_path = plans["allreduce"]
    weights = tmp_path / "weights.npz"
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan_path, "--",
                           "--steps", "2", "--batch-size", str(BATCH), "--last-batch", "8",
                           "--save-weights", str(weights)],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    x, y = make_data(2, BATCH, seed=0, last_batch=8)
    model = build_model(0)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    trained = dict(np.load(weights))
    for name, expected in trained_weights(model).items():
        np.testing.assert_allclose(trained[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)
