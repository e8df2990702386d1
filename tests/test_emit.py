"""`autodist emit` and `autodist plan --emit-k8s`: files, bad input, submission.

Submission is tested here against a small fake API server on 127.0.0.1 (an
outer boundary) that records the requests the official client sends; it
checks what we send.  What a real API server does with it is tested in
tests/test_k8s_apiserver.py.
"""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from autodist.cli import main
from launcher.plan_data import read_plan_json
from tests.test_plan_fixtures import allreduce_rdma_plan, ps_plan  # noqa: F401  (fixtures)


def run_cli(*argv):
    """Run ``autodist`` in-process; returns its exit status (output goes to capsys)."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    return exit_info.value.code


@pytest.fixture
def plan_file(tmp_path, allreduce_rdma_plan):
    path = tmp_path / "plan.json"
    allreduce_rdma_plan.save(path)
    return path


@pytest.fixture
def ps_plan_file(tmp_path, ps_plan):
    path = tmp_path / "ps-plan.json"
    ps_plan.save(path)
    return path


def test_emit_writes_validated_files(tmp_path, plan_file, capsys):
    out = tmp_path / "k8s"
    assert run_cli("emit", plan_file, "-o", out, "--gang", "volcano", "--namespace", "ml", "--name", "bert-run") == 0
    assert sorted(p.name for p in out.iterdir()) == ["configmap.yaml", "tfjob.yaml"]
    tfjob = yaml.safe_load((out / "tfjob.yaml").read_text())
    assert tfjob["metadata"] == {"name": "bert-run", "namespace": "ml", "labels": {"autodist.io/job": "bert-run"}}
    config_maps = list(yaml.safe_load_all((out / "configmap.yaml").read_text()))
    assert json.loads(read_plan_json(config_maps)) == json.loads(plan_file.read_text())
    # no PodGroup of ours: the operator makes the job's, named after it, from schedulingPolicy
    policy = tfjob["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy["minAvailable"] == 2 and policy["minResources"]["nvidia.com/gpu"] == "16"
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "bert-run"
    assert capsys.readouterr().out.splitlines() == [str(out / f) for f in ("configmap.yaml", "tfjob.yaml")]


def test_emit_passes_the_training_script_to_every_task(ps_plan_file, capsys):
    argv = ["emit", ps_plan_file, "--script", "/app/train.py", "--script-args", "--epochs 2 --name 'a b'"]
    assert run_cli(*argv) == 0
    tfjob = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    expected = ["autodist", "worker", "--plan", "/etc/autodist/plan.json", "/app/train.py", "--epochs", "2", "--name", "a b"]
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        assert replica["template"]["spec"]["containers"][0]["command"] == expected
    # the in-task entry point parses the command as emitted
    from autodist.cli import AUTODIST_COMMANDS, _build_parser

    args = _build_parser("autodist", AUTODIST_COMMANDS).parse_args(expected[1:])
    assert (args.plan, args.script, args.script_args) == (expected[3], expected[4], expected[5:])


def test_emit_to_stdout_is_deterministic(plan_file, capsys):
    assert run_cli("emit", plan_file, "--format", "mpijob") == 0
    first = capsys.readouterr().out
    assert run_cli("emit", plan_file, "--format", "mpijob") == 0
    assert capsys.readouterr().out == first
    assert [d["kind"] for d in yaml.safe_load_all(first)] == ["ConfigMap", "MPIJob"]


def _bad_version(path):
    data = json.loads(path.read_text())
    data["version"] = 7
    path.write_text(json.dumps(data))
    return r"plan.json: version: unsupported plan version 7"


def _missing_device(path):
    data = json.loads(path.read_text())
    data["tasks"][0]["devices"][3] = "node-5/GPU:3"
    path.write_text(json.dumps(data))
    return r"plan.json: tasks\[0\].devices\[3\]: device 'node-5/GPU:3' is not in the plan's cluster"


@pytest.mark.parametrize(
    "edit_plan, extra, message",
    [
        (_bad_version, [], None),
        (_missing_device, [], None),
        (None, ["--image", "Bad Image!"], "--image: 'Bad Image!' is not a valid container image reference"),
        (None, ["--namespace", "Not_A_Label"], "--namespace: 'Not_A_Label' is not a DNS-1123 label"),
        (None, ["--namespace", "x" * 64], "is not a DNS-1123 label"),
        (None, ["--name", "Job.Name"], "--name: 'Job.Name' is not a DNS-1035 label"),
        (None, ["--dry-run"], "--dry-run needs --submit"),
        (None, ["--script-args", "--x 1"], "--script-args: script arguments given without a script"),
        (None, ["--script", "t.py", "--script-args", "'unclosed"], "--script-args: cannot split"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, plan_file, capsys, edit_plan, extra, message):
    import re

    if edit_plan is not None:
        message = edit_plan(plan_file)
    out = tmp_path / "k8s"
    assert run_cli("emit", plan_file, "-o", out, *extra) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autodist: error: ")
    assert re.search(message, lines[0]), lines[0]
    assert not out.exists()


def test_mpijob_of_a_ps_plan_is_refused(tmp_path, ps_plan_file, capsys):
    out = tmp_path / "k8s"
    assert run_cli("emit", ps_plan_file, "--format", "mpijob", "-o", out) == 2
    assert "allreduce plans only" in capsys.readouterr().err
    assert not out.exists()


class _FakeApiServer(ThreadingHTTPServer):
    """Records every request: namespaces exist, objects do not until applied; kinds in ``refused`` get 422."""

    def __init__(self):
        self.requests = []
        self.refused = set()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body=None):
        url = urlparse(self.path)
        self.server.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                                     "content_type": self.headers.get("Content-Type"), "body": body})

    def do_GET(self):
        self._record()
        if self.path.count("/") == 4 and self.path.startswith("/api/v1/namespaces/"):
            self._answer(200, {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": self.path.rsplit("/", 1)[1]}})
        else:
            self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def do_PATCH(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        if body["kind"] in self.server.refused:
            self._answer(422, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
                               "message": f"{body['kind']} is invalid"})
        else:
            self._answer(201, {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}})

    def do_DELETE(self):
        self._record()
        self._answer(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def log_message(self, *args):
        pass


def _kubeconfig(tmp_path, server_url):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        "current-context": "fake",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def fake_api_server():
    server = _FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("dry_run", [True, False])
def test_submit_applies_every_object_in_order(tmp_path, ps_plan_file, fake_api_server, capsys, dry_run):
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{fake_api_server.server_port}")
    flags = ["--submit", "--kubeconfig", kubeconfig] + (["--dry-run"] if dry_run else [])
    assert run_cli("emit", ps_plan_file, "--namespace", "team-a", "--gang", "coscheduling", *flags) == 0
    patches = [r for r in fake_api_server.requests if r["method"] == "PATCH"]
    assert [r["path"] for r in patches] == [
        "/api/v1/namespaces/team-a/configmaps/embedding-plan-0",
        "/apis/kubeflow.org/v1/namespaces/team-a/tfjobs/embedding",
    ]
    assert fake_api_server.requests[0]["path"] == "/api/v1/namespaces/team-a"  # the namespace is checked first
    for r in patches:  # server-side apply
        assert r["content_type"] == "application/apply-patch+yaml"
        assert r["query"]["fieldManager"] == ["autodist"] and r["query"]["force"] == ["true"]
        assert r["query"].get("dryRun") == (["All"] if dry_run else None)
    assert patches[-1]["body"]["spec"]["tfReplicaSpecs"]["PS"]["replicas"] == 2
    assert capsys.readouterr().out.splitlines()[-1] == f"TFJob/embedding created{' (dry run)' if dry_run else ''}"


def test_refused_object_is_one_line_and_the_created_ones_are_removed(tmp_path, plan_file, fake_api_server, capsys):
    fake_api_server.refused.add("TFJob")
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{fake_api_server.server_port}")
    assert run_cli("emit", plan_file, "--submit", "--kubeconfig", kubeconfig) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["autodist: error: TFJob/mlp: API server refused it: 422 Unprocessable Entity: TFJob is invalid; "
                   "removed the 1 object(s) this submit had created"]
    deletes = [r["path"] for r in fake_api_server.requests if r["method"] == "DELETE"]
    assert deletes == ["/api/v1/namespaces/default/configmaps/mlp-plan-0"]


def test_unreachable_cluster_is_one_line(tmp_path, plan_file, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{port}")
    assert run_cli("emit", plan_file, "--submit", "--dry-run", "--kubeconfig", kubeconfig) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"autodist: error: cannot reach the Kubernetes API server at http://127.0.0.1:{port}")


def test_missing_kubeconfig_is_one_line(tmp_path, plan_file, capsys):
    assert run_cli("emit", plan_file, "--submit", "--kubeconfig", tmp_path / "nope") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no usable Kubernetes credentials" in err[0]


def test_plan_command_searches_and_emits(tmp_path, mlp_graph, capsys):
    graph = tmp_path / "graph.json"
    mlp_graph.save(graph)
    plan_path, out = tmp_path / "plan.json", tmp_path / "k8s"
    argv = ["plan", graph, "--preset", "dgx-h100:2", "-o", plan_path, "--moves", "100", "--emit-k8s", out]
    assert run_cli(*argv) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{plan_path}: predicted step ")
    from autodist.plan import Plan

    plan = Plan.load(plan_path)
    assert plan.provenance["graph_hash"] == mlp_graph.content_hash()
    assert plan.prediction["baselines"] and plan.prediction["lower_bound"] <= plan.prediction["step_time"]
    tfjob = yaml.safe_load((out / "tfjob.yaml").read_text())
    replicas = {k.lower(): v["replicas"] for k, v in tfjob["spec"]["tfReplicaSpecs"].items()}
    assert replicas == {job: len(plan.tasks_of(job)) for job in ("chief", "worker", "ps") if plan.tasks_of(job)}
    first = plan_path.read_bytes()
    assert run_cli(*argv) == 0
    assert plan_path.read_bytes() == first  # same inputs and seed, same bytes


def test_plan_command_bad_namespace_fails_before_search(tmp_path, mlp_graph, capsys):
    graph = tmp_path / "graph.json"
    mlp_graph.save(graph)
    plan_path = tmp_path / "plan.json"
    argv = ["plan", graph, "--preset", "dgx-h100:2", "-o", plan_path, "--emit-k8s", tmp_path / "k8s", "--namespace", "A_B"]
    assert run_cli(*argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["autodist: error: --namespace: 'A_B' is not a DNS-1123 label "
                                         "(lowercase letters, digits and '-', starting with a letter or digit, "
                                         "ending alphanumeric, at most 63 characters)"]
    assert not plan_path.exists() and not (tmp_path / "k8s").exists()


def test_emit_does_not_import_tensorflow(tmp_path, plan_file):
    code = (
        "import sys; from autodist.cli import main\n"
        "try:\n    main(['emit', sys.argv[1], '-o', sys.argv[2], '--format', 'mpijob'])\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'tensorflow' not in sys.modules"
    )
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code, str(plan_file), str(tmp_path / "k8s")], check=True, capture_output=True)
    assert (tmp_path / "k8s" / "mpijob.yaml").exists()


@pytest.mark.slow
def test_plan_command_on_a_zoo_script(tmp_path, zoo_dir, capsys):
    import os

    script = os.path.join(zoo_dir, "mlp.py")
    out, plan_path = tmp_path / "k8s", tmp_path / "plan.json"
    argv = ["plan", script, "--script-args", "--steps 2 --batch-size 32", "--preset", "g4dn.12xlarge:2",
            "--budget", "0.5", "-o", plan_path, "--emit-k8s", out]
    assert run_cli(*argv) == 0
    from autodist.plan import Plan

    plan = Plan.load(plan_path)
    assert plan.graph["model_name"] and plan.graph["batch_size"] == 32
    tfjob = yaml.safe_load((out / "tfjob.yaml").read_text())
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        command = replica["template"]["spec"]["containers"][0]["command"]
        # the pod runs the script from the image's code folder, never from this machine's path
        assert command[4:] == ["/workspace/mlp.py", "--steps", "2", "--batch-size", "32"]


def test_re_emission_into_a_used_folder_leaves_exactly_the_new_set(tmp_path, plan_file, capsys):
    out = tmp_path / "k8s"
    assert run_cli("emit", plan_file, "-o", out, "--format", "mpijob") == 0
    assert sorted(p.name for p in out.iterdir()) == ["configmap.yaml", "mpijob.yaml"]
    assert run_cli("emit", plan_file, "-o", out, "--format", "trainjob") == 0
    assert sorted(p.name for p in out.iterdir()) == ["clustertrainingruntime.yaml", "configmap.yaml", "trainjob.yaml"]
    assert run_cli("emit", plan_file, "-o", out, "--format", "tfjob") == 0
    assert sorted(p.name for p in out.iterdir()) == ["configmap.yaml", "tfjob.yaml"]
    assert run_cli("emit", plan_file, "-o", out, "--format", "mpijob") == 0
    assert sorted(p.name for p in out.iterdir()) == ["configmap.yaml", "mpijob.yaml"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left
    capsys.readouterr()
    # a file autodist did not write: refused, one line, nothing changed
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert run_cli("emit", plan_file, "-o", out) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"autodist: error: {out}: holds 'notes.txt', which autodist did not emit; "
                   "give --force to replace the folder's content"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert run_cli("emit", plan_file, "-o", out, "--force") == 0
    assert sorted(p.name for p in out.iterdir()) == ["configmap.yaml", "tfjob.yaml"]


def test_plan_command_refuses_a_foreign_folder_before_the_search(tmp_path, mlp_graph, capsys):
    graph, out, plan_path = tmp_path / "graph.json", tmp_path / "k8s", tmp_path / "plan.json"
    mlp_graph.save(graph)
    out.mkdir()
    (out / "README").write_text("mine")
    assert run_cli("plan", graph, "--preset", "dgx-h100:2", "-o", plan_path, "--emit-k8s", out) == 2
    assert "holds 'README', which autodist did not emit" in capsys.readouterr().err
    assert not plan_path.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--code-from", "pvc:claim"], "--code-from: 'pvc:claim' is not image, configmap or pvc:CLAIM:PATH (with a path)"),
        (["--toleration", "a=b=c:NoSchedule"], "--toleration: 'a=b=c:NoSchedule' is not KEY[=VALUE][:EFFECT] or 'all'"),
        (["--env", "JUSTANAME"], "--env: 'JUSTANAME' is not NAME=VALUE"),
        (["--priority", "Urgent!"], "--priority: 'Urgent!' is not a DNS-1123 label"),
        (["--shm-size", "lots"], "--shm-size: 'lots' is not a Kubernetes quantity"),
        (["--running-timeout", "2 weeks"], "--running-timeout: '2 weeks' is not a positive duration"),
        (["--node-selector", "pool"], "--node-selector: 'pool' is not a node label key=value"),
        (["--code-from", "configmap", "--script", "missing.py"], "missing.py: no such file"),
    ],
)
def test_bad_manifest_options_one_line_exit_2_nothing_written(tmp_path, plan_file, capsys, extra, message):
    out = tmp_path / "k8s"
    assert run_cli("emit", plan_file, "-o", out, *extra) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith(f"autodist: error: {message}"), lines
    assert not out.exists()


def test_code_from_configmap_packs_the_local_script_folder(tmp_path, ps_plan_file, capsys):
    code = tmp_path / "proj"
    code.mkdir()
    (code / "train.py").write_text("import helpers\n")
    (code / "helpers.py").write_text("X = 1\n")
    out = tmp_path / "k8s"
    assert run_cli("emit", ps_plan_file, "-o", out, "--code-from", "configmap", "--script", code / "train.py") == 0
    config_maps = list(yaml.safe_load_all((out / "configmap.yaml").read_text()))
    (packed,) = [c for c in config_maps if c["metadata"]["name"].endswith("-code")]
    assert packed["data"] == {"helpers.py": "X = 1\n", "train.py": "import helpers\n"}
    tfjob = yaml.safe_load((out / "tfjob.yaml").read_text())
    assert tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["command"][4] == "/workspace/train.py"
