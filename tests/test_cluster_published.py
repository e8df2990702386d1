"""``cluster_published``: multi-GPU throughput against the published scaling rows (Table 2 of the calibration set),
priced through the code ``placement report --global-batch N`` runs (issue 42)."""

import json
import os
import subprocess
import sys

import pytest

from cost_models.fitting import cluster_published as cp
from cost_models.fitting.published import captured_graph
from cost_models.overlap import OVERLAP_FILE, NcclOverlap, lockstep_pace
from placement.baselines import AllreducePricer

RESULTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "costmodel_eval.json")


# ResNet-50 on DGX-1s and on p3.16xlarge nodes (25 GbE): two systems, one scaling series; and the validation points
# (VGG-16 on one DGX-1 P100, Horovod's 512 GPUs): a subset whose problems build in seconds (BERT-large's at 256 GPUs
# take minutes for the whole table: benchmarks/costmodel_eval.py runs it).
SUBSET = ("M1", "M2", "M42", "TFB1", "HVD1")


@pytest.fixture(scope="module")
def section():
    out = subprocess.run([sys.executable, "-m", "autodist", "costmodel", "eval", "--section", "cluster_published",
                          "--json", "--cluster-rows", *SUBSET], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["cluster_published"]


def _row(section, id_):
    return next(r for r in section["rows"] if r["id"] == id_)


def test_every_row_is_priced_or_skipped_with_a_reason(section):
    table2 = {f"M{i}" for i in list(range(1, 17)) + list(range(35, 43))}
    skipped = {s.split("/")[0] for row, why in cp.SKIPPED for s in row.split(", ") if why}
    assert table2 <= {run.row for run in cp.ROWS} | skipped
    assert [r["id"] for r in section["rows"]] == [run.id for run in cp.ROWS if run.row in SUBSET]
    assert [s["row"] for s in section["skipped"]] == [row for row, _ in cp.SKIPPED]
    for r in section["rows"]:
        assert r["predicted"] > 0 and r["predicted_left_out"] > 0
        assert 0 < r["predicted_efficiency"] <= 1 + 1e-9
        assert r["gpus"] >= 8 and r["global_batch"] == r["batch"] * r["micro_batches"] * r["gpus"]
    assert "placement report" in section["how"]


def test_validation_points_are_priced_with_the_shipped_constants_and_never_fitted(section):
    """TensorFlow's 2017 DGX-1 P100 figures and Horovod's 512-GPU ones judge the pricing from outside the calibration
    set: no fit sees them, and they are priced as they ran: TensorFlow's own NCCL all-reduce (no Horovod cost per
    collective) on 2 to 8 GPUs of one node, efficiency over the source's one-GPU figure; Horovod on 128 nodes of 4,
    its stated efficiency alone (no throughput published)."""
    validation = section["validation"]
    ids = [r["id"] for r in validation["rows"]]
    assert ids == [run.id for run in cp.VALIDATION] and len(ids) == 10
    fits = [section["fitted_on_all_rows"], *section["fitted_without_system"].values()]
    assert not set(ids) & {i for fitted in fits for i in fitted["fitted_on"]}
    assert not set(ids) & set(NcclOverlap.load(OVERLAP_FILE).fitted_on)
    eight = next(r for r in validation["rows"] if r["id"] == "TFB1/vgg16-b64-8gpu")
    assert (eight["nodes"], eight["gpus"], eight["global_batch"], eight["horovod"]) == (1, 8, 512, False)
    assert eight["published_efficiency"] == pytest.approx(1081 / (8 * 154))
    summary = validation["summary"]
    assert "predicted_left_out" not in eight
    assert (summary["rows_with_published_efficiency"], summary["rows_with_published_throughput"]) == (10, 6)
    vgg_512 = next(r for r in validation["rows"] if r["id"] == "HVD1/vgg16-512gpu")
    assert (vgg_512["nodes"], vgg_512["gpus"], vgg_512["horovod"], vgg_512["published_efficiency"]) == (
        128, 512, True, 0.68)
    assert vgg_512["published"] is None and vgg_512["error"] is None and 0 < vgg_512["predicted_efficiency"] < 1
    shipped = NcclOverlap.load(OVERLAP_FILE)
    pricer = cp.Pricer(AllreducePricer)
    run = next(run for run in cp.VALIDATION if run.id == eight["id"])
    assert eight["predicted"] == pytest.approx(pricer.predict(run, shipped)[0], rel=1e-9)
    no_fixed_cost = NcclOverlap(0.0, shipped.contention, shipped.speed_spread)
    assert shipped.collective_seconds > 0
    assert pricer.step_seconds(run, shipped) == pricer.step_seconds(run, no_fixed_cost)


def test_rows_that_publish_an_efficiency_alone_are_evaluated_on_their_own():
    """Horovod's 128- and 512-GPU rows state no throughput: evaluated alone (``--cluster-rows HVD1``) their summary has no
    throughput error, and the command failed in its median ("no median for empty data")."""
    out = subprocess.run([sys.executable, "-m", "autodist", "costmodel", "eval", "--section", "cluster_published",
                          "--cluster-rows", "HVD1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  validation: efficiency on 4 rows: median" in out.stdout


def test_an_unknown_row_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "autodist", "costmodel", "eval", "--section", "cluster_published",
                          "--cluster-rows", "M99"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "M99" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not out.stdout


def test_left_out_fit_never_sees_the_system(section):
    for system, fitted in section["fitted_without_system"].items():
        own = {run.id for run in cp.ROWS if run.system == system}
        assert own and not own & set(fitted["fitted_on"])
    scored = {r["id"] for r in section["rows"] if r["published_efficiency"] is not None}
    assert set(section["fitted_on_all_rows"]["fitted_on"]) == scored
    assert section["summary"]["rows_with_published_efficiency"] == len(scored)


def test_efficiency_falls_with_nodes(section):
    """More p3.16xlarge nodes: a slower ring over more 25 GbE NICs, and a slower GPU to wait for."""
    points = sorted((r for r in section["rows"] if r["id"].startswith("M42/fp16-")), key=lambda r: r["nodes"])
    effs = [r["predicted_efficiency"] for r in points]
    assert len(effs) == 4 and effs == sorted(effs, reverse=True), effs
    # 25 GbE between p3.16xlarge nodes costs far more than NVLink inside one.
    assert _row(section, "M42/fp16-2n")["predicted_efficiency"] < _row(section, "M42/fp16-1n")["predicted_efficiency"] - 0.05


def test_published_efficiency_is_the_stated_speedup_or_the_same_sources_single_gpu_figure():
    by_id = {run.id: run for run in cp.ROWS}
    assert by_id["M1/fp32"].efficiency == pytest.approx(7.69 / 8)
    assert by_id["M7/amp"].efficiency == pytest.approx(1001.39 / (8 * 134.34))
    assert by_id["M9/amp-32n"].efficiency == pytest.approx(77479.87 / (256 * 356.845))
    assert by_id["M12/amp-4n"].efficiency is None


def _run(id_):
    return next(r for r in cp.ROWS if r.id == id_)


def test_horovod_is_the_ring_baseline_plus_its_fixed_cost_per_fused_collective():
    """M1/amp (ResNet-50 AMP on a DGX-1): Horovod's step is the ring baseline's plan; without a fixed cost per
    collective it is what the simulator gives autodist's ring; with one, each fused bucket pays it in turn."""
    from placement import Simulator
    from placement.baselines import named

    run = _run("M1/amp")
    pricer = cp.Pricer(AllreducePricer)
    shipped = NcclOverlap.load(OVERLAP_FILE)
    free = NcclOverlap(0.0, shipped.contention, shipped.speed_spread)
    problem = pricer.problem(run)
    problem.comm.overlap = free
    problem.prices.reset()
    strategy = named("ring").build(problem)
    assert pricer.step_seconds(run, free) == pytest.approx(Simulator(problem).simulate(strategy).step_time, rel=1e-12)
    buckets = len({s.bucket for s in strategy.sync.values()})
    assert buckets >= 2
    slow = NcclOverlap(1.0, shipped.contention, shipped.speed_spread)
    assert pricer.step_seconds(run, slow) >= buckets * 1.0 > pricer.step_seconds(run, free)


@pytest.mark.parametrize("run_id", ["M1/amp", "M2/fp32", "M42/fp16-2n"])
def test_a_row_is_priced_by_the_code_placement_report_runs(run_id, tmp_path):
    """The user's commands for a row: a cluster file of its nodes, ``placement report --global-batch N --xla X``
    on the captured script: the ring baseline the report prints is the row's Horovod step less Horovod's fixed cost
    per collective (one DGX-1 under XLA and without; two p3.16xlarge over 25 GbE)."""
    from autodist.api import make_plan

    run = _run(run_id)
    model, gpus, nics = cp.SYSTEMS[run.system]
    cluster = tmp_path / "cluster.yaml"  # JSON is YAML
    cluster.write_text(json.dumps({"name": run.system, "nodes": [
        {"name": "n", "count": run.nodes, "gpus": {"model": model, "count": gpus}, "nics": nics}]}))
    plan = make_plan(captured_graph(run.config), str(cluster), moves=1, xla="on" if run.xla else "off",
                     micro_batches=run.micro_batches, global_batch=run.batch * run.micro_batches * run.nodes * gpus)
    shipped = NcclOverlap.load(OVERLAP_FILE)
    free = NcclOverlap(0.0, shipped.contention, shipped.speed_spread)
    horovod_less = cp.Pricer(AllreducePricer).step_seconds(run, free)
    assert plan.prediction["baselines"]["ring"] == pytest.approx(horovod_less, rel=1e-9)


def test_the_slowest_gpu_sets_the_pace_even_when_accumulation_hides_the_allreduce():
    """BERT-large on one DGX-1 allreduces once per 1024 micro-batches (M7/fp32), yet every micro-batch of the
    eight GPUs waits for the slowest of them: that alone sets its predicted efficiency."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    spread = shipped.speed_spread
    assert 0 < spread < 0.1
    assert 1 == lockstep_pace(1, spread) < lockstep_pace(8, spread) < lockstep_pace(16, spread) < lockstep_pace(
        256, spread)
    run = _run("M7/fp32")
    pricer = cp.Pricer(AllreducePricer)
    _, efficiency = pricer.predict(run, shipped)
    assert efficiency == pytest.approx(1 / lockstep_pace(8, spread), rel=0.005)
    level = NcclOverlap(shipped.collective_seconds, shipped.contention, 0.0)
    assert pricer.predict(run, level)[1] > 0.995


def test_the_shipped_overlap_is_the_fit_on_the_m_rows():
    """One overlap model: the package data is the fit on every Table 2 point with a published efficiency, as the
    committed evaluation (benchmarks/results/costmodel_eval.json, the whole section) found it."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    assert shipped.fitted_on == [run.id for run in cp.ROWS if run.efficiency is not None]
    assert "published-training-figures.md" in shipped.source
    with open(RESULTS) as f:
        committed = json.load(f)["evaluation"]["cluster_published"]
    fresh = committed["fitted_on_all_rows"]
    assert (shipped.collective_seconds, shipped.contention, shipped.speed_spread) == (
        fresh["collective_seconds"], fresh["contention"], fresh["speed_spread"])
    assert committed["shipped"]["contention"] == shipped.contention
