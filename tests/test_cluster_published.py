"""``cluster_published``: multi-GPU throughput against the published scaling rows (Table 2 of the calibration set)."""

import json
import subprocess
import sys

import pytest

from cost_models.fitting import cluster_published as cp
from cost_models.overlap import OVERLAP_FILE, NcclOverlap, lockstep_pace
from cost_models.fitting.published import step_at


@pytest.fixture(scope="module")
def section():
    out = subprocess.run([sys.executable, "-m", "autodist", "costmodel", "eval", "--section", "cluster_published",
                          "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["cluster_published"]


def _row(section, id_):
    return next(r for r in section["rows"] if r["id"] == id_)


def test_every_row_is_priced_or_skipped_with_a_reason(section):
    assert [r["id"] for r in section["rows"]] == [run.id for run in cp.ROWS]
    evaluated = {run.row for run in cp.ROWS}
    skipped = {s["row"].split("/")[0] for s in section["skipped"]}
    table2 = {f"M{i}" for i in list(range(1, 17)) + list(range(35, 43))}
    assert table2 <= evaluated | skipped
    assert all(s["reason"] for s in section["skipped"])
    for r in section["rows"]:
        assert r["predicted"] > 0 and r["predicted_left_out"] > 0
        assert 0 < r["predicted_efficiency"] <= 1 + 1e-9
        assert r["gpus"] >= 8


def test_left_out_fit_never_sees_the_system(section):
    for system, fitted in section["fitted_without_system"].items():
        own = {run.id for run in cp.ROWS if run.system == system}
        assert own and not own & set(fitted["fitted_on"])
    scored = {run.id for run in cp.ROWS if run.efficiency is not None}
    assert set(section["fitted_on_all_rows"]["fitted_on"]) == scored
    assert section["summary"]["rows_with_published_efficiency"] == len(scored)


def test_efficiency_falls_with_nodes_and_accumulation_hides_the_allreduce(section):
    """More nodes: a slower ring over more NICs; fewer micro-batches per allreduce: less to hide it behind."""
    for row in ("M9/amp", "M10/tf32", "M13/amp", "M13/tf32", "M42/fp16"):
        points = sorted((r for r in section["rows"] if r["id"].startswith(row + "-")), key=lambda r: r["nodes"])
        effs = [r["predicted_efficiency"] for r in points]
        assert len(effs) >= 3 and effs == sorted(effs, reverse=True), (row, effs)
    # 25 GbE between p3.16xlarge nodes costs far more than NVLink inside one.
    assert _row(section, "M42/fp16-2n")["predicted_efficiency"] < _row(section, "M42/fp16-1n")["predicted_efficiency"] - 0.05


def test_published_efficiency_is_the_stated_speedup_or_the_same_sources_single_gpu_figure():
    by_id = {run.id: run for run in cp.ROWS}
    assert by_id["M1/fp32"].efficiency == pytest.approx(7.69 / 8)
    assert by_id["M7/amp"].efficiency == pytest.approx(1001.39 / (8 * 134.34))
    assert by_id["M9/amp-32n"].efficiency == pytest.approx(77479.87 / (256 * 356.845))
    assert by_id["M12/amp-4n"].efficiency is None


def test_one_stream_serialises_buckets_and_each_collective_costs_its_fixed_time():
    """The step of M9 at 32 nodes: 20 buckets of BERT-large's gradients in order on one stream."""
    run = next(r for r in cp.ROWS if r.id == "M9/amp-32n")
    step = cp._step(run)
    table, scalars = step_at(run.config, run.batch)
    assert len(step.buckets) == -(-int(scalars["parameter_bytes"]) // cp.FUSION_BYTES)
    compute = run.micro_batches * step.micro_batch + step.update
    bare, _ = cp._collectives(run, 0.0)
    assert cp.multi_gpu_step(step, run.micro_batches, bare, 0.0) >= compute
    # A fixed cost per collective longer than the backward pass: the buckets queue one after another.
    fixed = step.micro_batch
    slow, takes_compute = cp._collectives(run, fixed)
    assert takes_compute and slow == pytest.approx([s + fixed for s in bare])
    serial = cp.multi_gpu_step(step, run.micro_batches, slow, 0.0)
    assert serial >= (run.micro_batches - 1) * step.micro_batch + step.backward_start + len(step.buckets) * fixed
    # Compute that loses time to collectives beside it only gets slower.
    assert cp.multi_gpu_step(step, run.micro_batches, bare, 1.0) > cp.multi_gpu_step(step, run.micro_batches, bare, 0.0)


def test_the_slowest_gpu_sets_the_pace_even_when_accumulation_hides_the_allreduce():
    """BERT-large on one DGX-1 allreduces once per 1024 micro-batches (M7/fp32), yet every micro-batch of the
    eight GPUs waits for the slowest of them: that alone sets its predicted efficiency."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    spread = shipped.speed_spread
    assert 0 < spread < 0.1
    assert 1 == lockstep_pace(1, spread) < lockstep_pace(8, spread) < lockstep_pace(16, spread) < lockstep_pace(
        256, spread)
    run = next(r for r in cp.ROWS if r.id == "M7/fp32")
    _, efficiency = cp.predict(run, shipped)
    assert efficiency == pytest.approx(1 / lockstep_pace(8, spread), rel=0.005)
    level = NcclOverlap(shipped.collective_seconds, shipped.contention, 0.0)
    assert cp.predict(run, level)[1] > 0.995


def test_efficiency_is_priced_at_the_published_single_gpu_speed():
    """M42's script trains ResNet-50 at 740 img/s on one V100, slower than the GPU model's step: its scaling is
    judged on a step of the published single-GPU speed, its throughput on the model's."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    run = next(r for r in cp.ROWS if r.id == "M42/fp16-2n")
    anchored, modelled = cp._anchored_step(run), cp._step(run)
    assert run.batch / (anchored.micro_batch + anchored.update) == pytest.approx(740)
    assert modelled.micro_batch < anchored.micro_batch
    throughput, efficiency = cp.predict(run, shipped)
    assert throughput > 16 * 740 * efficiency
    # Rows without a published efficiency keep the model's step.
    unknown = next(r for r in cp.ROWS if r.efficiency is None)
    assert cp._anchored_step(unknown) is cp._step(unknown)


def test_the_shipped_overlap_is_a_fresh_fit_on_the_m_rows(section):
    """One overlap model: the package data is what the fit on Table 2 gives, and the section scores with it."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    fresh = cp.fit(cp.ROWS)
    assert (shipped.collective_seconds, shipped.contention, shipped.speed_spread) == (
        fresh.collective_seconds, fresh.contention, fresh.speed_spread)
    assert shipped.fitted_on == fresh.fitted_on and all(r.startswith("M") for r in shipped.fitted_on)
    assert "published-training-figures.md" in shipped.source
    assert section["shipped"]["contention"] == shipped.contention
    run = next(r for r in cp.ROWS if r.id == "M9/amp-32n")
    assert _row(section, run.id)["predicted"] == pytest.approx(cp.predict(run, shipped)[0])
