"""Weak scaling in ``placement report`` (placement.scaling): a step's throughput over one device of its replicas'
model running one replica's share of the global batch alone, the denominator the published scaling rows of
``costmodel eval`` divide by, on real captured graphs, the real cost model and simulator."""

import gzip
import json
import os

import jsonschema
import pytest

from autodist.cli import placement_main
from autodist.graph.rebatch import at_batch
from autodist.report import schema
from autodist.resource_spec import from_preset, load_cluster
from cost_models import CostModel
from placement import Problem
from placement.scaling import one_device, weak_scaling

# The node of cluster_published's "DGX-1" system (8x V100 16GB, NVLink, 4x EDR InfiniBand) as a user writes it.
DGX1 = """name: one DGX-1
nodes:
  - name: n
    count: 1
    gpus: {model: V100-16GB, count: 8}
    nics: [ib-edr, ib-edr, ib-edr, ib-edr]
"""


def _report(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        placement_main(["report", *(str(a) for a in argv), "--format", "json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema())
    return doc


def test_one_device_is_what_placement_report_prints_for_a_replica_s_share_on_one_gpu(capsys, tmp_path, cnn_graph):
    """The denominator is a user's own one-GPU report: ``placement report`` of the job at one replica's share of
    the global batch, on a cluster file of one GPU of the model beside the node's CPUs, prints the step the
    16-GPU report's references divide by."""
    graph = tmp_path / "cnn.json"
    cnn_graph.save(graph)
    doc = _report(capsys, graph, "--preset", "p3.16xlarge:2", "--global-batch", 16 * 64, "--references",
                  "--moves", 5)
    scalings = [r["scaling"] for r in doc["references"]]
    assert all(s is not None and s["replicas"] == 16 and s["replica_batch"] == 64 for s in scalings)
    assert len({s["one_device_step_time"] for s in scalings}) == 1
    share = tmp_path / "share.json"
    at_batch(cnn_graph, 64).save(share)
    one_gpu = tmp_path / "one-gpu.yaml"
    one_gpu.write_text("name: one V100\nnodes:\n  - name: n\n    count: 1\n    cpus: {model: xeon-e5-2686v4-2s}\n"
                       "    gpus: {model: V100-16GB, count: 1}\n")
    alone = _report(capsys, share, "--cluster", one_gpu, "--moves", 1)
    assert alone["plan"]["replicas"] == 1 and alone["scaling"] is None
    assert scalings[0]["one_device_step_time"] == pytest.approx(alone["plan"]["step_time"], rel=1e-9)
    for r, s in zip(doc["references"], scalings):
        assert s["speedup"] == pytest.approx(r["samples_per_s"] / s["one_device_samples_per_s"], rel=1e-12)
        assert s["efficiency"] == pytest.approx(s["speedup"] / 16, rel=1e-12)
    if doc["plan"]["replicas"] > 1:
        assert doc["scaling"]["replicas"] == doc["plan"]["replicas"]


def test_the_report_s_horovod_efficiency_is_costmodel_eval_s_for_a_published_row(capsys, tmp_path):
    """Row M1/amp (NVIDIA's ResNet-50 AMP with XLA on a DGX-1, Horovod): ``placement report --references`` of the
    zoo's capture at the row's global batch on the row's cluster prints, for Horovod, the weak-scaling efficiency
    ``costmodel eval --section cluster_published`` predicts for the row."""
    from cost_models.fitting.cluster_published import ROWS, shared_pricer
    from cost_models.fitting.published import GRAPHS_DIR
    from cost_models.overlap import OVERLAP_FILE, NcclOverlap
    from placement.baselines import AllreducePricer

    run = next(r for r in ROWS if r.id == "M1/amp")
    graph = tmp_path / "resnet50-mp.json"
    with gzip.open(os.path.join(GRAPHS_DIR, f"{run.config}.json.gz"), "rt") as f:
        graph.write_text(f.read())
    cluster = tmp_path / "dgx1.yaml"
    cluster.write_text(DGX1)
    doc = _report(capsys, graph, "--cluster", cluster, "--global-batch", 8 * run.batch, "--xla", "on",
                  "--references", "--moves", 1)
    horovod = next(r for r in doc["references"] if r["name"] == "horovod")
    _, efficiency = shared_pricer(AllreducePricer).predict(run, NcclOverlap.load(OVERLAP_FILE))
    assert horovod["scaling"]["efficiency"] == pytest.approx(efficiency, rel=1e-9)


def test_no_weak_scaling_for_one_replica_or_replicas_of_different_models(tmp_path, cnn_graph):
    """One replica has nothing to scale over; replicas on two GPU models have no one device to divide by."""
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("name: mixed\nnodes:\n  - name: a\n    gpus: {model: V100-16GB, count: 1}\n    nics: [eth-25g]\n"
                     "  - name: b\n    gpus: {model: T4, count: 1}\n    nics: [eth-25g]\n")
    spec = load_cluster(str(mixed))
    problem = Problem(cnn_graph, spec, CostModel.default())
    assert one_device(problem, [d.name for d in spec.gpus()]) is None
    problem = Problem(cnn_graph, from_preset("p3.16xlarge:1"), CostModel.default())
    assert one_device(problem, ["node-0/GPU:0"]) is None
    alone = one_device(problem, ["node-0/GPU:0", "node-0/GPU:1"])
    assert alone["replica_batch"] == -(-cnn_graph.job.batch_size // 2)
    assert weak_scaling(alone, None) is None
    assert weak_scaling(alone, 2 * alone["one_device_samples_per_s"])["efficiency"] == pytest.approx(1.0)

