"""Fuzz: mutants of real graphs, plans and cluster files are accepted whole or refused with AutoDistError.

Hypothesis mutates real documents (the captured MLP and embedding steps,
plans of them simulated for real, the example cluster files and a preset's
resource spec): it deletes fields, duplicates entries, moves list entries,
flips signs and changes types, one to three times, 200 examples per kind.
A mutant goes through ``autodist validate``; it is either refused with an
AutoDistError, or accepted and then used the way the rest of autodist uses
it (which must hold the invariants).
No other exception escapes and no file is written.
"""

import copy
import functools
import glob
import json
import math
import os

import networkx as nx
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autodist.cli.validate_cmd import describe
from autodist.errors import AutoDistError
from autodist.graph.item import GraphItem
from autodist.plan import Plan
from autodist.resource_spec.cluster_file import parse_cluster
from tests.conftest import REPO
from tests.test_plan_fixtures import allreduce_rdma_plan, ps_plan  # noqa: F401  (fixtures)

EXAMPLES = 200
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ODD_VALUES = st.sampled_from(["x", "", None, True, False, 0, -1, 1.5, -2**63, 2**70, [], {}, ["x"], {"x": 1}])


def _children(node):
    return list(node) if isinstance(node, dict) else list(range(len(node)))


def _mutate_once(data, doc):
    """Walk from the root to a random field, then delete, duplicate, move (in a list), negate or retype it."""
    parent, key = None, None
    node = doc
    while isinstance(node, (dict, list)) and node and (parent is None or data.draw(st.integers(0, 3)) > 0):
        parent, key = node, data.draw(st.sampled_from(_children(node)))
        node = parent[key]
    if parent is None:
        return
    action = data.draw(st.sampled_from(["delete", "duplicate", "swap", "negate", "retype"]))
    if action == "delete":
        del parent[key]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(node))
    elif action == "swap" and isinstance(parent, list):
        other = data.draw(st.integers(0, len(parent) - 1))
        parent[key], parent[other] = parent[other], parent[key]
    elif action == "negate" and isinstance(node, (int, float)) and not isinstance(node, bool):
        parent[key] = -node if node else -1
    else:
        parent[key] = copy.deepcopy(data.draw(ODD_VALUES))


def _mutant(data, doc):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate_once(data, doc)
    return doc


def _accepted(tmp_path, name, text):
    """Whether ``autodist validate`` accepts the mutant file (False: refused with AutoDistError); it writes nothing."""
    path = tmp_path / name
    path.write_text(text)
    try:
        describe(str(path))
        event("accepted")
        return True
    except AutoDistError:
        event("refused")
        return False
    finally:
        assert os.listdir(tmp_path) == [name]
        path.unlink()


def _graph_holds_invariants(item, doc):
    assert len(item.ops) == len(doc["ops"]) and len(item.variables) == len(doc["variables"])
    assert item.ops and item.job.batch_size > 0 and item.trainable_variables()
    graph = item.graph
    assert nx.is_directed_acyclic_graph(graph)
    for var in item.variables.values():
        assert var.bytes >= 0 and all(d >= 0 for d in var.shape)
        assert not (var.trainable and var.update_ops) or var.gradients
        for tensor in var.gradients:
            assert tensor.rpartition(":")[0] in item.ops
    for op in item.ops.values():
        assert 0 <= op.flops and all(b >= 0 for b in op.output_bytes)
        for tensor in op.inputs:
            assert item.tensor_bytes(tensor) >= 0
    assert GraphItem.from_dict(item.to_dict()) == item


def _plan_holds_invariants(plan):
    names = [v["name"] for v in plan.variables]
    assert sorted(names) == sorted(plan.strategy.sync) and len(set(names)) == len(names)
    devices = [d for replica in plan.strategy.replicas for d in replica]
    assert len(devices) == len(set(devices))
    for task in plan.tasks:
        assert plan.tf_config(task["job"], task["index"])["task"] == {"type": task["job"], "index": task["index"]}
    for name in names:
        assert plan.variable_devices(name)
    in_buckets = [v for b in plan.collectives["buckets"] for v in b["variables"]]
    assert sorted(in_buckets) == sorted(n for n, s in plan.strategy.sync.items() if s.method == "allreduce")


def _cluster_holds_invariants(spec):
    devices = [d.name for d in spec.devices()]
    assert devices and len(devices) == len(set(devices))
    for bandwidth in spec.link_bandwidths().values():
        assert bandwidth > 0 and math.isfinite(bandwidth)
    for other in devices[1:]:
        path = spec.path(devices[0], other)
        assert path.bandwidth > 0 and path.latency >= 0


def _graph_documents(request):
    return [("graph.json", request.getfixturevalue(name).to_dict()) for name in ("mlp_graph", "embedding_graph")]


def _plan_documents(request):
    return [("plan.json", request.getfixturevalue(name).to_dict()) for name in ("allreduce_rdma_plan", "ps_plan")]


@functools.lru_cache(maxsize=1)
def _cluster_files():
    from autodist.resource_spec import load_cluster

    files = sorted(glob.glob(os.path.join(REPO, "benchmarks", "clusters", "*.yaml")))
    docs = [("cluster.yaml", yaml.safe_load(open(path, encoding="utf-8"))) for path in files]
    return docs + [("spec.json", load_cluster(preset="p3.16xlarge:2").to_dict())]


# kind -> (its real documents as (file name, document), the check of an accepted mutant (text, document))
KINDS = {
    "graph": (_graph_documents, lambda text, doc: _graph_holds_invariants(GraphItem.from_dict(doc), doc)),
    "plan": (_plan_documents, lambda text, doc: _plan_holds_invariants(Plan.from_dict(doc))),
    "cluster": (lambda request: _cluster_files(), lambda text, doc: _cluster_holds_invariants(parse_cluster(text))),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@FUZZ
@given(data=st.data())
def test_mutants_are_refused_or_hold_the_invariants(kind, request, data, tmp_path):
    documents, holds = KINDS[kind]
    name, doc = data.draw(st.sampled_from(documents(request)))
    doc = _mutant(data, doc)
    text = yaml.safe_dump(doc) if name.endswith(".yaml") else json.dumps(doc)
    if _accepted(tmp_path, name, text):
        holds(text, doc)
