"""``placement report`` on real captured graphs, every preset, the real cost model and search."""

import json
import re
from dataclasses import replace

import jsonschema
import pytest
from markdown_it import MarkdownIt

from autodist.cli import placement_main
from autodist.report import schema
from autodist.report.render import WIDTH, ms, table
from autodist.resource_spec.presets import MACHINES

NODES = {"cpu-local": 2}
PRESETS = [f"{name}:{NODES.get(name, 4)}" for name in MACHINES]
BUDGET = "0.3"
# A number no person should have to read: more than 2 decimals, or 7 digits and more.
LONG_NUMBER = re.compile(r"\d\.\d{3,}|\d{7,}")


def placement(capsys, *argv):
    """Run the real ``placement`` CLI in-process; returns (status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        placement_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory, mlp_graph):
    path = tmp_path_factory.mktemp("report") / "mlp.json"
    mlp_graph.save(path)
    return path


@pytest.fixture(scope="module")
def embedding_file(tmp_path_factory, embedding_graph):
    path = tmp_path_factory.mktemp("report") / "embedding.json"
    embedding_graph.save(path)
    return path


def _flat(text):
    return " ".join(text.split())


@pytest.mark.parametrize("preset", PRESETS)
def test_text_report_on_every_preset_fits_100_columns(capsys, mlp_file, embedding_file, preset):
    for graph in (mlp_file, embedding_file):
        status, out, err = placement(capsys, "report", graph, "--preset", preset, "--budget", BUDGET)
        assert status == 0, err
        assert max(len(line) for line in out.splitlines()) <= WIDTH
        assert not LONG_NUMBER.search(out), "numbers are rounded for people"
        for heading in ("Job", "Cluster", "Plan and baselines (predicted)", "Where the time goes", "Pods"):
            assert f"\n{heading}\n" in f"\n{out}"
        assert "greedy-ps" in out and "ring" in out


def test_a_long_reason_in_the_job_table_wraps_whole_within_100_columns(capsys, tmp_path, mlp_file):
    """The XLA row's reason is prose: it wraps onto lines of its own rather than losing its middle to ".." (a model
    with a layer XLA cannot compile, as Keras records it). Such a column gives way first: the other columns' cells
    are shortened only once it is down to its minimum (a cluster's devices stay whole, its NICs wrap)."""
    from autodist.graph.item import GraphItem
    from autodist.graph.xla import resolve_xla

    item = GraphItem.load(mlp_file)
    item.job = replace(item.job, jit_compile="auto", jit_supported=False)
    graph = tmp_path / "no_jit.json"
    item.save(graph)
    status, out, err = placement(capsys, "report", str(graph), "--preset", "dgx-h100:1", "--budget", BUDGET)
    assert status == 0, err
    job = out.split("\nCluster\n")[0]
    reason = resolve_xla(item.job, "GPU").reason
    assert len(reason) > WIDTH - 30 and _flat(reason) in _flat(job) and ".." not in job
    assert max(len(line) for line in job.splitlines()) <= WIDTH
    rows = [["a" * 30, "b " * 80]]
    assert table(["name", "why"], rows, width=40).count("..") == 2
    wrapped = table(["name", "why"], rows, width=40, wrap_last=True)
    assert wrapped.count("..") == 1 and wrapped.count("b") == 80 and max(map(len, wrapped.splitlines())) <= 40
    # The wrapped column gives way first: a p4d.24xlarge cluster's devices stay whole, its NICs wrap.
    cells = [["4 nodes (node-0..)", "8x A100-40GB, 1x xeon-8275cl-2s", "NVLink 300.0 GB/s",
              "4x Ethernet 12.5 GB/s RDMA+GDR"]]
    cluster = table(["nodes", "devices", "inside a node", "NICs"], cells, wrap_last=True)
    assert cells[0][1] in cluster and "RDMA+GDR" in cluster and max(map(len, cluster.splitlines())) <= WIDTH


def test_json_validates_and_agrees_with_text(capsys, embedding_file):
    args = ("report", embedding_file, "--preset", "dgx-a100:2", "--moves", "300", "--seed", "3")
    status, out, err = placement(capsys, *args, "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema())
    status, text, err = placement(capsys, *args)
    assert status == 0, err

    # Same seed, same search: the text shows the very numbers of the JSON.
    plan_row = next(line for line in text.splitlines() if line.startswith("autodist "))
    assert ms(doc["plan"]["step_time"]) in plan_row
    for baseline in doc["baselines"]:
        row = next(line for line in text.splitlines() if re.split(r"\s{2,}", line)[0] == baseline["name"])
        assert ms(baseline["step_time"]) in row
    assert _flat(doc["bottleneck"]["sentence"]) in _flat(text)
    assert f"{doc['plan']['speedup_over_greedy_ps']:.2f}x" in text
    greedy = next(b for b in doc["baselines"] if b["name"] == "greedy-ps")
    # Step times are of the global batch whatever the replica count: speed-ups compare them directly.
    assert doc["plan"]["speedup_over_greedy_ps"] == pytest.approx(greedy["step_time"] / doc["plan"]["step_time"])
    assert f"{doc['search']['moves_tried']} moves tried" in text
    for row in [doc["plan"]] + doc["baselines"]:  # after compute: transfers, or updates while none runs
        exposed = row["step_time"] - row["client_time"] - row["compute_time"]
        assert row["exposed_comm_time"] + row["update_time"] == pytest.approx(exposed, abs=1e-12)
    assert not LONG_NUMBER.search(text)
    assert {b["name"] for b in doc["baselines"]} >= {"greedy-ps", "ring", "hierarchical", "parallax"}
    assert doc["job"]["sparse_variables"] == [v for v in doc["job"]["sparse_variables"] if "embedding" in v]
    assert doc["job"]["sparse_variables"], "the embedding's gradient is sparse"


@pytest.mark.parametrize("preset", ["dgx-h100:4", "g4dn.12xlarge:4", "p3.16xlarge:2", "cpu-local:2"])
def test_bottleneck_sentence_follows_the_numbers(capsys, embedding_file, preset):
    status, out, err = placement(capsys, "report", embedding_file, "--preset", preset, "--budget", BUDGET, "--format", "json")
    assert status == 0, err
    b = json.loads(out)["bottleneck"]
    sentence, link, device = b["sentence"], b["busiest_link"], b["busiest_device"]
    saturated = max(device["busy_fraction"], link["busy_fraction"] if link else 0.0) >= 0.9
    assert ("latency dominates" in sentence) == (b["bound_by"] == "latency")
    if b["bound_by"] == "compute":
        assert sentence.startswith("Compute-bound") and device["resource"] in sentence
        assert saturated or b["exposed_comm_fraction"] <= 0.2
    elif b["bound_by"] == "latency":
        assert sentence.startswith("Communication-bound") and b["latency_share"] > 0.5
        assert b["exposed_comm_fraction"] > 0.2 and not saturated
    elif b["bound_by"] == "communication":
        assert sentence.startswith("Communication-bound") and link["resource"] in sentence
        assert link["busy_fraction"] >= 0.9 or b["latency_share"] <= 0.5
    elif b["bound_by"] == "client":
        assert sentence.startswith(("Client-bound", "Loop-bound")) and b["client_fraction"] > 0.2
    else:
        assert sentence.startswith("Update-bound")


def test_schema_rejects_a_document_missing_a_field(capsys, mlp_file):
    status, out, _ = placement(capsys, "report", mlp_file, "--preset", "dgx-h100:1", "--budget", BUDGET, "--format", "json")
    doc = json.loads(out)
    del doc["plan"]["step_time"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema())


def test_markdown_renders_tables(capsys, mlp_file):
    status, out, err = placement(
        capsys, "report", mlp_file, "--preset", "p3.16xlarge:2", "--budget", BUDGET, "--format", "markdown"
    )
    assert status == 0, err
    assert not LONG_NUMBER.search(out)
    tokens = MarkdownIt("commonmark").enable("table").parse(out)
    tables = [t for t in tokens if t.type == "table_open"]
    assert len(tables) >= 5
    html = MarkdownIt("commonmark").enable("table").render(out)
    for header in ("plan", "step", "samples/s", "compute", "exposed comm", "variable", "node"):
        assert f"<th>{header}</th>" in html
    assert "<td>greedy-ps</td>" in html


def test_timeline_is_a_chrome_trace(capsys, tmp_path, mlp_file):
    trace_file = tmp_path / "trace.json"
    status, _, err = placement(
        capsys, "report", mlp_file, "--preset", "dgx-h100:2", "--budget", BUDGET, "--timeline", trace_file
    )
    assert status == 0, err
    trace = json.loads(trace_file.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    devices = {n for n in names if "/GPU:" in n and "/fabric" not in n}
    assert devices, "a track per device"
    # A plan over several GPUs has a track per link; this small MLP's is one GPU (the fitted fixed cost of an
    # NCCL collective, cost_models.overlap, outlasts its step), which moves nothing.
    assert len(devices) == 1 or any("/nic" in n or "/fabric" in n for n in names), "a track per link"
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)


def test_report_of_a_plan_file_and_compare(capsys, tmp_path, mlp_graph):
    from autodist.api import make_plan as plan

    first = tmp_path / "first.json"
    other = tmp_path / "other.json"
    plan(mlp_graph, "dgx-h100:2", seed=0, budget_s=0.3).save(first)
    plan(mlp_graph, "p3.16xlarge:2", seed=1, budget_s=0.3).save(other)

    status, out, err = placement(capsys, "report", first, "--format", "json", "--compare", other)
    assert status == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema())
    assert doc["search"] is None and doc["plan"]["file"] == str(first)
    assert doc["compare"]["same_graph"] and not doc["compare"]["same_cluster"]
    stored = json.loads(first.read_text())["prediction"]
    assert doc["plan"]["step_time"] == stored["step_time"]

    status, text, err = placement(capsys, "report", first, "--preset", "dgx-h100:2", "--compare", other)
    assert status == 0, err
    assert "Read from a plan file" in text and "Compared plan" in text
    assert doc["counterfactuals"] is None and doc["plan"]["update_time"] is None
    for plan_file in (first, other):  # no timeline: only a saturated resource, never the wait, names the bound
        status, out, err = placement(capsys, "report", plan_file, "--format", "json")
        b = json.loads(out)["bottleneck"]
        link = b["busiest_link"]  # None when the plan moves nothing between devices (one replica)
        saturated = max(b["busiest_device"]["busy_fraction"], link["busy_fraction"] if link else 0.0) >= 0.9
        assert b["exposed_comm_fraction"] is None and b["latency_share"] is None
        # The client's dispatch is in the plan file (a PS plan, which a short search may return now that an NCCL
        # collective on GPUs has its fitted fixed cost), so it may name the bound too.
        assert saturated or b["bound_by"] in (None, "compute", "client")
        assert (b["bound_by"] is None) == ("Report on the job's graph" in b["sentence"])
    assert "Counterfactuals need the job's graph" in text and not LONG_NUMBER.search(text)


def _one_line_error(capsys, *argv):
    status, out, err = placement(capsys, *argv)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("placement: error:"), err
    return lines[0]


def test_bad_input_one_line_exit_2(capsys, tmp_path, mlp_file, mlp_graph):
    from autodist.api import make_plan as plan

    missing = tmp_path / "missing.json"
    assert "missing.json" in _one_line_error(capsys, "report", missing, "--preset", "dgx-h100:1")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{ not json")
    assert "corrupt.json" in _one_line_error(capsys, "report", corrupt, "--preset", "dgx-h100:1")
    assert "dgx-h900" in _one_line_error(capsys, "report", mlp_file, "--preset", "dgx-h900:1")
    assert "--cluster" in _one_line_error(capsys, "report", mlp_file)
    assert "--budget" in _one_line_error(capsys, "report", mlp_file, "--preset", "dgx-h100:1", "--budget", "0")

    plan_file = tmp_path / "plan.json"
    plan(mlp_graph, "dgx-h100:1", budget_s=0.2).save(plan_file)
    assert "--timeline" in _one_line_error(capsys, "report", plan_file, "--timeline", tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
    assert "cluster" in _one_line_error(capsys, "report", plan_file, "--preset", "dgx-a100:1")
    assert "nope.json" in _one_line_error(capsys, "report", plan_file, "--compare", tmp_path / "nope.json")
    assert re.search(r"version", _one_line_error(capsys, "report", _plan_of_version(tmp_path, plan_file, 99)))


def _plan_of_version(tmp_path, plan_file, version):
    data = json.loads(plan_file.read_text())
    data["version"] = version
    path = tmp_path / f"plan-v{version}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_report_on_resnet50_every_preset(capsys, tmp_path, resnet50_graph):
    path = tmp_path / "resnet50.json"
    resnet50_graph.save(path)
    for preset in PRESETS:
        status, out, err = placement(capsys, "report", path, "--preset", preset, "--budget", "0.2", "--format", "json")
        assert status == 0, f"{preset}: {err}"
        doc = json.loads(out)
        jsonschema.validate(doc, schema())
        assert doc["plan"]["step_time"] >= doc["lower_bound"] * (1 - 1e-9)


@pytest.mark.parametrize("preset, gpu, runs_as", [("p3.16xlarge:1", "V100-16GB", "fp32"),
                                                  ("dgx-h100:1", "H100-SXM", "tf32")])
def test_a_tf32_job_is_reported_at_the_precision_each_gpu_runs_it(capsys, mlp_file, preset, gpu, runs_as):
    """TensorFlow allows TF32 by default, so a captured float32 job says tf32; a V100 has no TF32 and runs it in
    float32 (as the GPU kernel model prices it), which the report says rather than 'tf32'."""
    status, out, _ = placement(capsys, "report", mlp_file, "--preset", preset, "--budget", BUDGET, "--format", "json")
    assert status == 0
    costs = json.loads(out)["costs"]
    assert costs["precision"] == "tf32"
    assert next(d for d in costs["devices"] if d["model"] == gpu)["precision"] == runs_as
    status, out, _ = placement(capsys, "report", mlp_file, "--preset", preset, "--budget", BUDGET)
    row = next(line for line in out.splitlines() if line.startswith("precision"))
    assert ("runs as fp32 on V100-16GB" in row) == (runs_as == "fp32") and "xeon" not in row


def test_every_number_of_a_row_comes_from_one_simulation(capsys, embedding_file, monkeypatch):
    """The plan's step time, exposed split and client time are those of one traced simulation of its strategy,
    and so are each baseline's: the search's own, which the report reads without simulating any of them again.
    Counted on the real Simulator and report, which still run."""
    import autodist.report
    from autodist.report.bottleneck import exposed_split
    from placement.simulator import Simulator

    traced, depth, reporting = [], [0], [False]
    simulate, build_report = Simulator.simulate, autodist.report.build_report

    def counted(self, strategy, trace=False, overlap=True, give_up=None):
        depth[0] += 1  # a share of the batch is simulated by a Simulator of its own: count the outer call
        try:
            result = simulate(self, strategy, trace, overlap, give_up)
        finally:
            depth[0] -= 1
        if trace and not depth[0]:
            traced.append((reporting[0], result))
        return result

    def report(*args, **kwargs):
        reporting[0] = True
        return build_report(*args, **kwargs)

    monkeypatch.setattr(Simulator, "simulate", counted)
    monkeypatch.setattr(autodist.report, "build_report", report)
    status, out, err = placement(capsys, "report", embedding_file, "--preset", "dgx-a100:2", "--moves", "300",
                                 "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert traced and not any(while_reporting for while_reporting, _ in traced), "the report simulated again"
    for row in [doc["plan"]] + doc["baselines"]:
        result = next(r for _, r in traced if r.step_time == row["step_time"])
        assert row["client_time"] == result.client_time and row["compute_time"] == result.compute_time
        assert (row["exposed_comm_time"], row["update_time"]) == exposed_split(result)


def test_references_price_the_job_as_other_systems_run_it(capsys, tmp_path, cnn_graph):
    """``--references`` adds the job as Horovod, TensorFlow 1's PS and AutoDist's PartitionedPS run it on the same
    cluster (the systems published comparisons are made against), and as TensorFlow 2's MultiWorkerMirroredStrategy
    runs it by default: on two 25 GbE nodes a CNN's step under
    TensorFlow's PS, every GPU pushing and pulling for itself, is slower than under Horovod's ring.  Without the
    flag, no such section."""
    from autodist.api import make_plan

    cnn_file = tmp_path / "cnn.json"
    cnn_graph.save(cnn_file)
    args = ("report", cnn_file, "--preset", "p3.16xlarge:2", "--budget", BUDGET)
    status, out, err = placement(capsys, *args, "--references", "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema())
    steps = {r["name"]: r["step_time"] for r in doc["references"]}
    assert set(steps) == {"horovod", "tensorflow-ps", "autodist-ps", "tensorflow-mwms"} and min(steps.values()) > 0
    assert steps["tensorflow-ps"] > steps["horovod"]
    # MultiWorkerMirroredStrategy's default: one pack after the backward pass over gRPC, where Horovod's NCCL
    # buckets overlap it (tests/test_mwms_reference.py)
    assert steps["tensorflow-mwms"] > steps["horovod"]
    status, out, err = placement(capsys, *args, "--references")
    assert status == 0 and "\nOther systems (predicted)\n" in out and "tensorflow-ps" in out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    status, out, err = placement(capsys, *args)
    assert status == 0 and "Other systems" not in out
    plan_file = tmp_path / "plan.json"
    make_plan(cnn_graph, "p3.16xlarge:2", budget_s=0.2).save(plan_file)
    assert "--references" in _one_line_error(capsys, "report", plan_file, "--references")
