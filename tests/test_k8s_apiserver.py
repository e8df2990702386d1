"""Emitted jobs against a real kube-apiserver (1.20.2, etcd 3.4, the shipped CRDs): ``pytest -m k8s_apiserver``.

Every plan kind (allreduce over RDMA on dgx-h100:2, PS on p3.16xlarge:2, CPU
allreduce on cpu-2s-25g:2) x format x gang option is applied server-side;
what the server stored is compared with what was sent (only server defaults
may differ: a 1.20 server prunes unknown fields silently); the PodGroup and
Pods the operator would make (launcher.operators) are created, so the
server checks the pods in full.  ``emit --submit`` is run twice, and made to
fail part-way.  No operator, scheduler or kubelet runs: nothing here starts
a container.  Left unchecked by a 1.20 server: CEL rules
(``x-kubernetes-validations``) and the Trainer CRDs' empty-name defaults
(tests/kube_apiserver.py).

Skipped, with the reason, where the server's binaries are not built
(tests/kube_apiserver.py).  Each test works in a namespace of its own and
removes what it made.
"""

import json

import pytest

from autodist.errors import InputError, LaunchError
from launcher.manifests import build_manifests
from launcher.operators import mounted_file
from launcher.options import EmitOptions
from launcher.resources import quantity_value
from launcher.runtime.mpi import DEFAULT_HOSTFILE
from launcher.server_check import (
    check_on_server,
    fresh_namespace,
    remove_namespace,
    stored_object,
    stored_pods,
    unexpected,
)
from launcher.submit import PLURALS, _api_client, submit
from tests import kube_apiserver
from tests.test_emit import run_cli
from tests.test_plan_fixtures import allreduce_rdma_plan, build_plan, ps_plan  # noqa: F401  (fixtures)

pytestmark = pytest.mark.k8s_apiserver

GANGS = [None, "volcano", "coscheduling"]
FORMATS = ["tfjob", "mpijob", "trainjob"]
PLANS = ["allreduce_rdma_plan", "ps_plan", "cpu_plan"]
RUNTIMES = ("autodist-tensorflow", "autodist-tensorflow-volcano", "autodist-tensorflow-coscheduling")


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory):
    try:
        path, started = kube_apiserver.start(str(tmp_path_factory.mktemp("crds")))
    except kube_apiserver.Unavailable as exc:
        pytest.skip(str(exc))
    yield path
    _delete_runtimes(path)
    if started:
        kube_apiserver.stop()


def _delete_runtimes(path):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = _api_client(path)
    try:
        for name in RUNTIMES:
            try:
                client.CustomObjectsApi(api).delete_cluster_custom_object(
                    "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", name)
            except ApiException:
                pass
    finally:
        api.close()


@pytest.fixture
def namespace(kubeconfig):
    """A fresh namespace; everything in it is deleted afterwards, then the namespace."""
    name = fresh_namespace("autodist", kubeconfig)
    yield name
    remove_namespace(name, kubeconfig)


@pytest.fixture(scope="session")
def cpu_plan(mlp_graph):
    return build_plan(mlp_graph, "cpu-2s-25g:2", "allreduce")


def _requests(pod):
    """What a pod asks the scheduler for: requests, extended resources from limits."""
    totals = {}
    for c in pod["spec"]["containers"]:
        wanted = {**{k: v for k, v in c["resources"].get("limits", {}).items() if "/" in k}, **c["resources"]["requests"]}
        for key, value in wanted.items():
            totals[key] = totals.get(key, 0) + quantity_value(value)
    return totals


def _env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _check_pods_read_what_they_need(plan, fmt, pods, job_name, namespace):
    """On the pods as the server stored them: the hostfile every rank reads, each task's TF_CONFIG."""
    if fmt == "mpijob":
        for pod in pods.values():
            volume, key = mounted_file(pod, pod["spec"]["containers"][0], DEFAULT_HOSTFILE)
            assert volume["configMap"]["name"] == f"{job_name}-config" and key == "hostfile"
    elif fmt == "tfjob":
        for pod in pods.values():
            config = json.loads(_env(pod["spec"]["containers"][0])["TF_CONFIG"])
            assert config["cluster"] == plan.cluster_spec(namespace=namespace)  # the plan's tasks, by their Services
    else:
        workers = [f"{p['spec']['hostname']}.{p['spec']['subdomain']}.{namespace}.svc:2222"
                   for p in sorted(pods.values(), key=lambda p: int(_env(p["spec"]["containers"][0])["JOB_COMPLETION_INDEX"]))]
        for pod in pods.values():
            env = _env(pod["spec"]["containers"][0])
            # what the pod's command makes of its variables (launcher.trainjob.ENTRY)
            config = {"cluster": json.loads(env["AUTODIST_TF_CLUSTER"]),
                      "task": {"type": "worker", "index": int(env["JOB_COMPLETION_INDEX"])}}
            addresses = {"worker": workers}
            assert config == plan.tf_config("worker", config["task"]["index"], addresses=addresses)


@pytest.mark.parametrize("gang", GANGS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("plan_fixture", PLANS)
def test_every_variant_applies_and_the_operators_pods_are_accepted(request, kubeconfig, namespace, plan_fixture, fmt, gang):
    plan = request.getfixturevalue(plan_fixture)
    options = EmitOptions(namespace=namespace, gang=gang)
    if plan.has_ps() and fmt != "tfjob":
        with pytest.raises(LaunchError, match="emit a TFJob"):
            build_manifests(plan, fmt, options)
        return
    objects = build_manifests(plan, fmt, options)
    result = check_on_server(objects, fmt, gang, kubeconfig=kubeconfig)
    assert set(result["applied"].values()) <= {"created", "unchanged"}  # a shared runtime may be there already
    assert [o for o in result["applied"] if result["applied"][o] == "unchanged"] in ([], [f"ClusterTrainingRuntime/{objects[0]['metadata']['name']}"])
    assert {k: unexpected(v) for k, v in result["differences"].items() if unexpected(v)} == {}
    assert result["refused"] == []
    job_name = objects[-1]["metadata"]["name"]
    pods = stored_pods(namespace, kubeconfig)
    assert sorted(f"Pod/{name}" for name in pods) == sorted(result["pods"])
    expected = {"tfjob": len(plan.tasks), "mpijob": len(plan.tasks) + 1, "trainjob": len(plan.tasks)}[fmt]
    assert len(pods) == expected
    for pod in pods.values():
        assert pod["spec"]["restartPolicy"] in ("Never", "OnFailure")
    _check_pods_read_what_they_need(plan, fmt, pods, job_name, namespace)
    if gang:
        # one PodGroup, the operator's, named after the job; every pod names it; it asks for what they request
        (group,) = [o for o in result["operator_objects"] if o.startswith("PodGroup/")]
        assert group == f"PodGroup/{job_name}"
        api_version = {"volcano": "scheduling.volcano.sh/v1beta1", "coscheduling": "scheduling.x-k8s.io/v1alpha1"}[gang]
        api = _api_client(kubeconfig)
        try:
            stored = stored_object(api, {"apiVersion": api_version, "kind": "PodGroup",
                                         "metadata": {"name": job_name, "namespace": namespace}})
        finally:
            api.close()
        assert stored["spec"]["minMember"] == len(pods)
        totals = {}
        for pod in pods.values():
            meta = pod["metadata"]
            assert (meta.get("annotations", {}).get("scheduling.k8s.io/group-name")
                    or meta["labels"].get("scheduling.x-k8s.io/pod-group")) == job_name
            for key, value in _requests(pod).items():
                totals[key] = totals.get(key, 0) + value
        assert {k: quantity_value(v) for k, v in stored["spec"]["minResources"].items()} == totals


def test_trainjob_of_a_two_node_h100_plan(allreduce_rdma_plan, kubeconfig, namespace):
    """The issue's example: the server takes the TrainJob, and each pod's TF_CONFIG is the plan's task."""
    objects = build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(namespace=namespace))
    assert [o["kind"] for o in objects] == ["ClusterTrainingRuntime", "ConfigMap", "TrainJob"]
    result = check_on_server(objects, "trainjob", None, kubeconfig=kubeconfig)
    assert result["refused"] == [] and len(result["pods"]) == 2
    pods = stored_pods(namespace, kubeconfig)
    for pod in pods.values():
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
    _check_pods_read_what_they_need(allreduce_rdma_plan, "trainjob", pods, "mlp", namespace)


def _plan_file(tmp_path, plan):
    path = tmp_path / "plan.json"
    plan.save(path)
    return path


def test_submit_twice_changes_nothing(tmp_path, allreduce_rdma_plan, kubeconfig, namespace, capsys):
    plan_file = _plan_file(tmp_path, allreduce_rdma_plan)
    argv = ["emit", plan_file, "--format", "mpijob", "--gang", "volcano", "--namespace", namespace,
            "--submit", "--kubeconfig", kubeconfig]
    assert run_cli(*argv) == 0
    assert capsys.readouterr().out.splitlines() == ["ConfigMap/mlp-plan-0 created", "MPIJob/mlp created"]
    api = _api_client(kubeconfig)
    objects = build_manifests(allreduce_rdma_plan, "mpijob", EmitOptions(namespace=namespace, gang="volcano"))
    try:
        before = [stored_object(api, o)["metadata"]["resourceVersion"] for o in objects]
        assert run_cli(*argv) == 0
        assert capsys.readouterr().out.splitlines() == ["ConfigMap/mlp-plan-0 unchanged", "MPIJob/mlp unchanged"]
        assert [stored_object(api, o)["metadata"]["resourceVersion"] for o in objects] == before
        # a changed option updates the job in place
        assert run_cli(*argv, "--queue", "research") == 0
        assert capsys.readouterr().out.splitlines() == ["ConfigMap/mlp-plan-0 unchanged", "MPIJob/mlp configured"]
        assert stored_object(api, objects[-1])["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "research"
    finally:
        api.close()


def test_failure_part_way_leaves_nothing_behind(allreduce_rdma_plan, kubeconfig, namespace):
    objects = build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(namespace=namespace, name="partway"))
    objects[-1]["spec"]["trainer"]["numNodes"] = "two"  # the server refuses the last object
    objects[0]["metadata"]["name"] = f"autodist-partway-{namespace}"  # a runtime of this test's own
    objects[-1]["spec"]["runtimeRef"]["name"] = objects[0]["metadata"]["name"]
    with pytest.raises(LaunchError, match=r"TrainJob/partway: API server refused it: 422 .*removed the 2 object"):
        submit(objects, kubeconfig=kubeconfig)
    api = _api_client(kubeconfig)
    try:
        assert [stored_object(api, o) for o in objects] == [None, None, None]
    finally:
        api.close()


def test_failure_part_way_keeps_what_was_there(allreduce_rdma_plan, kubeconfig, namespace):
    objects = build_manifests(allreduce_rdma_plan, "tfjob", EmitOptions(namespace=namespace))
    submit(objects[:1], kubeconfig=kubeconfig)  # the plan's ConfigMap exists already
    objects[-1]["spec"]["runPolicy"]["backoffLimit"] = "many"
    with pytest.raises(LaunchError, match="TFJob/mlp: API server refused it") as info:
        submit(objects, kubeconfig=kubeconfig)
    assert "removed" not in str(info.value)
    api = _api_client(kubeconfig)
    try:
        assert stored_object(api, objects[0]) is not None and stored_object(api, objects[-1]) is None
    finally:
        api.close()


@pytest.mark.parametrize("argv, message", [
    (["--namespace", "no-such-namespace"], "--namespace: namespace 'no-such-namespace' does not exist in the cluster"),
    (["--format", "trainjob", "--runtime", "no-such-runtime"], "--runtime: the cluster has no ClusterTrainingRuntime 'no-such-runtime'"),
    (["--format", "pytorchjob"], "argument --format: invalid choice: 'pytorchjob'"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_created(tmp_path, allreduce_rdma_plan, kubeconfig, namespace, capsys,
                                                          argv, message):
    plan_file = _plan_file(tmp_path, allreduce_rdma_plan)
    if "--namespace" not in argv:
        argv = [*argv, "--namespace", namespace]
    assert run_cli("emit", plan_file, *argv, "--submit", "--kubeconfig", kubeconfig) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 1 and message in err[0], err
    assert captured.out == ""
    from kubernetes import client

    api = _api_client(kubeconfig)
    try:
        assert client.CoreV1Api(api).list_namespaced_config_map(namespace).items == []
        for plural in ("tfjobs", "trainjobs"):
            group, version = ("kubeflow.org", "v1") if plural == "tfjobs" else ("trainer.kubeflow.org", "v1alpha1")
            assert client.CustomObjectsApi(api).list_namespaced_custom_object(group, version, namespace, plural)["items"] == []
    finally:
        api.close()
    assert PLURALS["TrainJob"] == "trainjobs"


def test_dry_run_creates_nothing(tmp_path, ps_plan, kubeconfig, namespace, capsys):
    plan_file = _plan_file(tmp_path, ps_plan)
    argv = ["emit", plan_file, "--namespace", namespace, "--submit", "--dry-run", "--kubeconfig", kubeconfig]
    assert run_cli(*argv) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "TFJob/embedding created (dry run)"
    api = _api_client(kubeconfig)
    try:
        for obj in build_manifests(ps_plan, "tfjob", EmitOptions(namespace=namespace)):
            assert stored_object(api, obj) is None
    finally:
        api.close()
    with pytest.raises(InputError):
        submit([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "absent-ns"}}],
               kubeconfig=kubeconfig)
