"""Plan: building from real graphs, device strings, TF_CONFIG, round trips, bad plans."""

import json
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autodist.errors import InputError
from autodist.plan import Plan, job_name_for, without_idle_ps
from autodist.strategy import Strategy, VarSync
from tests.test_plan_fixtures import (  # noqa: F401  (fixtures)
    RDMA_PRESET,
    SOCKET_PRESET,
    allreduce_rdma_plan,
    allreduce_socket_plan,
    build_plan,
    cluster,
    cost_model,
    draw_plan,
    ps_plan,
)


def test_allreduce_plan_has_one_worker_per_node_and_worker0_as_chief(allreduce_rdma_plan, mlp_graph):
    plan = allreduce_rdma_plan
    spec = plan.resource_spec
    workers = plan.tasks_of("worker")
    assert [t["node"] for t in workers] == [n.name for n in spec.nodes]
    assert [t["devices"] for t in workers] == [[d.name for d in n.gpus()] for n in spec.nodes]
    assert not plan.tasks_of("chief") and not plan.tasks_of("ps")
    assert plan.collectives["inter_node"] == "rdma"
    assert plan.collectives["nccl_intra_node"] is True
    assert plan.collectives["gpudirect_rdma"] is True
    bucketed = sorted(v for b in plan.collectives["buckets"] for v in b["variables"])
    assert bucketed == sorted(v.name for v in mlp_graph.trainable_variables())
    assert sum(b["bytes"] for b in plan.collectives["buckets"]) == mlp_graph.parameter_bytes()


def test_ps_plan_has_chief_workers_and_ps_tasks(ps_plan, embedding_graph):
    plan = ps_plan
    assert len(plan.tasks_of("chief")) == 1 and plan.tasks_of("chief")[0]["devices"] == []
    assert len(plan.tasks_of("ps")) == len(plan.resource_spec.nodes)
    largest = max(embedding_graph.trainable_variables(), key=lambda v: v.bytes)
    entry = next(v for v in plan.variables if v["name"] == largest.name)
    assert entry["method"] == "ps" and len(entry["shards"]) == len(plan.tasks_of("ps"))
    assert entry["sparse"] is largest.sparse_gradient
    assert plan.variable_devices(largest.name) == [f"/job:ps/task:{k}/device:CPU:0" for k in range(len(entry["shards"]))]
    assert plan.collectives["buckets"] == [] and plan.collectives["inter_node"] == "socket"


def test_prediction_and_provenance_come_from_the_simulation(allreduce_socket_plan, mlp_graph):
    from placement import simulate

    plan = allreduce_socket_plan
    sim = simulate(mlp_graph, plan.resource_spec, plan.strategy, cost_model())
    pred = plan.prediction
    assert pred["step_time"] == sim.step_time > 0
    assert pred["compute_time"] == sim.compute_time
    assert pred["exposed_comm_time"] == sim.exposed_comm_time
    busiest = max(sim.link_busy.values())
    assert pred["busiest_link"]["busy_time"] == busiest and sim.link_busy[pred["busiest_link"]["link"]] == busiest
    prov = plan.provenance
    assert prov["graph_hash"] == mlp_graph.content_hash()
    assert prov["cluster_hash"] == cluster(SOCKET_PRESET).content_hash()
    assert prov["cost_model_id"] == cost_model().id and prov["seed"] == 0
    assert plan.graph["parameter_bytes"] == mlp_graph.parameter_bytes()


def test_device_strings_use_task_local_indices(mlp_graph):
    spec = cluster(SOCKET_PRESET)
    # Two replicas on the upper GPUs of each node: the pod sees them as GPU:0 and GPU:1.
    replicas = [[f"{n.name}/GPU:{i}"] for n in spec.nodes for i in (6, 7)]
    strategy = Strategy(replicas, {v.name: VarSync("allreduce") for v in mlp_graph.trainable_variables()})
    from placement import simulate

    plan = Plan.from_strategy(mlp_graph, spec, strategy, simulate(mlp_graph, spec, strategy, cost_model()), "cm", 0)
    node1 = spec.nodes[1].name
    assert plan.device_string(f"{node1}/GPU:7") == "/job:worker/task:1/device:GPU:1"
    assert plan.device_string(f"{node1}/GPU:6") == "/job:worker/task:1/device:GPU:0"
    with pytest.raises(InputError, match="belongs to no task"):
        plan.device_string(f"{node1}/GPU:0")


def test_tf_config_of_every_task(ps_plan):
    for task in ps_plan.tasks:
        config = ps_plan.tf_config(task["job"], task["index"], namespace="team-a")
        assert config["task"] == {"type": task["job"], "index": task["index"]}
        assert {job: len(hosts) for job, hosts in config["cluster"].items()} == {"chief": 1, "worker": 2, "ps": 2}
        assert config["cluster"]["ps"][1] == f"{ps_plan.name}-ps-1.team-a.svc:2222"
    local = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "ps": ["localhost:4", "localhost:5"]}
    assert ps_plan.tf_config("ps", 1, addresses=local)["cluster"] == local
    with pytest.raises(InputError, match="no task ps:2"):
        ps_plan.tf_config("ps", 2)


def test_save_load_round_trip_is_byte_identical(tmp_path, ps_plan):
    path = tmp_path / "plan.json"
    ps_plan.save(path)
    loaded = Plan.load(path)
    assert loaded == ps_plan
    assert loaded.strategy.to_dict() == ps_plan.strategy.to_dict()
    assert loaded.resource_spec == ps_plan.resource_spec
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_same_inputs_same_plan_bytes(mlp_graph, allreduce_rdma_plan):
    again = build_plan(mlp_graph, RDMA_PRESET, "allreduce")
    assert again.to_json() == allreduce_rdma_plan.to_json()


def test_plan_loads_without_tensorflow(tmp_path, ps_plan):
    path = tmp_path / "plan.json"
    ps_plan.save(path)
    code = (
        "import sys; from autodist.plan import Plan; p = Plan.load(sys.argv[1]); "
        "print(p.device_string(p.tasks_of('worker')[1]['devices'][0])); "
        "assert 'tensorflow' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "/job:worker/task:1/device:GPU:0"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_round_trip_property(mlp_graph, data):
    """Any valid strategy on the real graph gives a plan that survives JSON unchanged."""
    plan, strategy = draw_plan(data, mlp_graph)
    text = plan.to_json()
    again = Plan.from_dict(json.loads(text))
    assert again == plan and again.to_json() == text
    assert again.strategy.to_dict() == without_idle_ps(strategy).to_dict()
    for replica in strategy.replicas:
        assert again.device_string(replica[0], job="worker").startswith("/job:worker/task:")


def test_unknown_version_is_rejected(tmp_path, ps_plan):
    data = ps_plan.to_dict()
    data["version"] = 99
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"plan.json: version: unsupported plan version 99"):
        Plan.load(path)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["tasks"][1]["devices"].__setitem__(0, "node-9/GPU:0"), "tasks[1].devices[0]"),
        (lambda d: d["strategy"]["replicas"][0].__setitem__(0, "node-0/GPU:99"), "strategy.replicas[0][0]"),
        (lambda d: d["strategy"]["ps_devices"].__setitem__(1, "ghost/CPU:0"), "strategy.ps_devices[1]"),
    ],
)
def test_devices_missing_from_the_cluster_are_rejected(ps_plan, edit, field):
    data = ps_plan.to_dict()
    edit(data)
    with pytest.raises(InputError, match=re.escape(field) + ": device .* is not in the (plan.s )?cluster") as err:
        Plan.from_dict(data, where="p.json")
    assert str(err.value).startswith("p.json: ")


def test_malformed_plans_are_input_errors():
    with pytest.raises(InputError, match="not an autodist plan"):
        Plan.from_dict({"format": "something else"})
    with pytest.raises(InputError, match="is a required property"):
        Plan.from_dict({"format": "autodist.plan", "version": 1})


def test_plan_schema_accepts_built_plans_and_names_bad_fields(ps_plan, allreduce_rdma_plan):
    import jsonschema

    from autodist.plan import plan_schema

    for plan in (ps_plan, allreduce_rdma_plan):
        jsonschema.Draft202012Validator(plan_schema()).validate(plan.to_dict())
    data = ps_plan.to_dict()
    data["tasks"][2]["index"] = "one"
    with pytest.raises(InputError, match=r"^p.json: tasks.2.index: 'one' is not of type 'integer'$"):
        Plan.from_dict(data, where="p.json")
    data = ps_plan.to_dict()
    data["prediction"]["surprise"] = 1
    with pytest.raises(InputError, match=r"^p.json: prediction: Additional properties"):
        Plan.from_dict(data, where="p.json")


def test_job_name_for_model_names():
    assert job_name_for("ResNet_50") == "resnet-50"
    assert job_name_for("3d-unet") == "autodist-3d-unet"
    assert job_name_for("") == "autodist"
    assert job_name_for("a" * 80) == "a" * 40


def test_device_assignments_and_variable_locations(ps_plan):
    assignments = ps_plan.to_dict()["device_assignments"]
    assert len(assignments) == sum(len(t["devices"]) for t in ps_plan.tasks)
    for a in assignments:
        assert ps_plan.device_string(a["device"], job=a["job"]) == a["tf_device"]
    for entry in ps_plan.variables:
        assert [s["tf_device"] for s in entry["shards"]] == ps_plan.variable_devices(entry["name"])
        assert [s["device"] for s in entry["shards"]] == [ps_plan.strategy.ps_devices[s["ps_task"]] for s in entry["shards"]]


def test_public_make_plan_beside_the_plan_module(mlp_graph):
    import autodist
    import autodist.plan  # noqa: F401  (the submodule is a package attribute too)

    plan = autodist.make_plan(mlp_graph, "p3.16xlarge:2", seed=3, moves=100)
    assert isinstance(plan, Plan) and plan.provenance["seed"] == 3
    assert plan.resource_spec == cluster("p3.16xlarge:2")
    assert plan.to_json() == autodist.make_plan(mlp_graph, cluster("p3.16xlarge:2"), seed=3, moves=100).to_json()


def test_idle_ps_devices_get_no_task(embedding_graph):
    from placement import simulate

    spec = cluster(SOCKET_PRESET)
    cpus = [d.name for d in spec.devices("CPU")]
    variables = sorted(v.name for v in embedding_graph.trainable_variables())
    # PS 0 holds nothing; PS 1 holds the first variable; the rest are allreduced.
    sync = {name: VarSync("allreduce") for name in variables}
    sync[variables[0]] = VarSync("ps", ps_tasks=(1,))
    strategy = Strategy([[d.name] for d in spec.gpus()], sync, ps_devices=cpus)
    plan = Plan.from_strategy(embedding_graph, spec, strategy, simulate(embedding_graph, spec, strategy, cost_model()), "cm", 0)
    assert plan.strategy.ps_devices == [cpus[1]]
    assert plan.strategy.sync[variables[0]].ps_tasks == (0,)
    assert [t["devices"] for t in plan.tasks_of("ps")] == [[cpus[1]]]
    assert plan.variable_devices(variables[0]) == ["/job:ps/task:0/device:CPU:0"]
    allreduce_only = Strategy(strategy.replicas, {n: VarSync("allreduce") for n in variables}, ps_devices=cpus)
    plan = Plan.from_strategy(embedding_graph, spec, allreduce_only, {"step_time": 1.0}, "cm", 0)
    assert not plan.has_ps() and not plan.tasks_of("chief")
