"""hypothesis properties of cluster files and paths."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from autodist.resource_spec.cluster_file import cluster_from_dict, dump_cluster, parse_cluster
from autodist.resource_spec.presets import DEVICE_MODELS, LINK_PRESETS
from autodist.resource_spec.spec import LINK_KINDS

GPU_MODELS = sorted(n for n, m in DEVICE_MODELS.items() if m.kind == "GPU")
CPU_MODELS = sorted(n for n, m in DEVICE_MODELS.items() if m.kind == "CPU")
NIC_PRESETS = sorted(n for n, link in LINK_PRESETS.items() if link.kind not in ("nvlink", "pcie"))

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
unit_strings = st.sampled_from(["GB/s", "Gb/s", "MiB/s", "B/s"])


def _opposite(link):
    """The other direction of the same port."""
    port, direction = link.rsplit("/", 1)
    return f"{port}/{'rx' if direction == 'tx' else 'tx'}"


@st.composite
def bandwidths(draw):
    """A bandwidth as the file may write it: a bare number (GB/s) or with a unit."""
    value = draw(positive)
    return value if draw(st.booleans()) else f"{value!r} {draw(unit_strings)}"


@st.composite
def explicit_links(draw, kinds):
    rdma = draw(st.booleans())
    link = {"kind": draw(st.sampled_from(kinds)), "bandwidth": draw(bandwidths()), "rdma": rdma}
    if draw(st.booleans()):
        link["latency"] = draw(positive)
    if rdma:
        link["gpudirect"] = draw(st.booleans())
    return link


def links(kinds, preset_names):
    return st.one_of(st.sampled_from(preset_names), explicit_links(kinds))


@st.composite
def device_groups(draw, models):
    group = {"model": draw(st.sampled_from(models)), "count": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        group["model"] = draw(st.sampled_from(["accel-x", "cpu-y"]))
        group["peak_flops"] = draw(st.dictionaries(st.sampled_from(["float32", "bfloat16"]), positive))
        group["memory"] = draw(st.integers(1, 2**40))
        group["memory_bandwidth"] = draw(positive)
    return group


@st.composite
def cluster_docs(draw):
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        node = {"name": f"n{i}", "count": draw(st.integers(1, 2))}
        gpus = draw(st.lists(device_groups(GPU_MODELS), max_size=2))
        if gpus:
            node["gpus"] = gpus
        if not gpus or draw(st.booleans()):
            node["cpus"] = draw(device_groups(CPU_MODELS))
        if draw(st.booleans()):
            node["fabric"] = draw(links(["nvlink", "pcie", "loopback"], ["nvlink-h100", "pcie-gen4"]))
        if draw(st.booleans()):
            node["host_link"] = draw(links(["pcie"], ["pcie-gen3", "pcie-gen5"]))
        nic_kinds = [k for k in LINK_KINDS if k not in ("nvlink", "pcie")]
        node["nics"] = draw(st.lists(links(nic_kinds, NIC_PRESETS), min_size=1, max_size=3))
        nodes.append(node)
    return {"name": "generated", "nodes": nodes}


@settings(max_examples=60, deadline=None)
@given(cluster_docs())
def test_parse_dump_round_trip(doc):
    spec = cluster_from_dict(doc)
    text = dump_cluster(spec)
    again = parse_cluster(text)
    assert again == spec
    assert dump_cluster(again) == text


@settings(max_examples=60, deadline=None)
@given(cluster_docs(), st.data())
def test_path_symmetric_and_within_its_slowest_link(doc, data):
    spec = cluster_from_dict(doc)
    names = [d.name for d in spec.devices()]
    link_bandwidths = spec.link_bandwidths()
    for _ in range(5):
        a = data.draw(st.sampled_from(names))
        b = data.draw(st.sampled_from(names))
        forward, backward = spec.path(a, b), spec.path(b, a)
        # The same route both ways, on the opposite direction of each port (links are full duplex).
        assert replace(forward, links=()) == replace(backward, links=())
        assert backward.links == tuple(_opposite(link) for link in reversed(forward.links))
        assert all(link.endswith("/tx") for link in forward.links[:1])
        if a == b:
            assert forward.kind == "same-device" and forward.links == ()
            continue
        assert forward.links and all(link in link_bandwidths for link in forward.links)
        assert 0 < forward.bandwidth <= min(link_bandwidths[link] for link in forward.links)
        assert forward.latency > 0 and forward.medium in LINK_KINDS
