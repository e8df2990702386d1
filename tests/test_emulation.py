"""Emulated clusters: what the spec says a node is, the namespaces and links `autodist run` builds, and their teardown.

The network tests build real namespaces, veths, a bridge and tc qdiscs
(they need root, which this machine's tests run as; elsewhere they skip);
the runs are real TensorFlow tasks of benchmarks/models/run_small_mlp.py
under the allreduce plan of tests/test_run.py, made for ``emu-1gbit:2``.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from autodist.errors import InputError, LaunchError
from autodist.resource_spec import load_cluster
from autodist.resource_spec.cluster_file import dump_cluster, parse_cluster
from autodist.resource_spec.spec import ResourceSpec
from launcher.emulation import TOOLS, EmulatedNetwork, node_address, run_namespaces
from tests.test_run import SCRIPT, _children, _gone, _processes_naming, _strategies, small_job  # noqa: F401

# An unprivileged user (uid nobody) who can still read the checkout and its venv: a clone may sit in a folder only
# root can read (root's home, mktemp -d), so the user keeps the one capability that reads files and nothing else:
# it cannot write where root's files are, and its effective uid is not root's.
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
          "--inh-caps", "-all,+dac_read_search", "--ambient-caps", "+dac_read_search"]
_MISSING_TOOLS = [tool for tool in TOOLS if shutil.which(tool) is None]
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or bool(_MISSING_TOOLS),
    reason="network namespaces and tc need root" if os.geteuid() != 0 else
    f"{', '.join(_MISSING_TOOLS)} not on PATH (iproute2, util-linux: often in /sbin, which a minimal PATH leaves out)")
EMULATED = """\
network: {emulate: true}
nodes:
  - {name: a, preset: cpu-local, nics: [{kind: ethernet, speed: 100 Mb/s}]}
  - {name: b, preset: cpu-local, nics: [{kind: ethernet, speed: 100 Mb/s}], delay: 2 ms}
"""


def _namespaces(prefix):
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def _links():
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.count("\n")


# -- the spec ----------------------------------------------------------------


def test_emulated_links_are_priced_from_what_was_measured_for_their_rate():
    """Transfers between emulated nodes run at the fraction of the rate measured for it; collectives take what was
    measured at their size on their rate's link (log-log between sizes, noise made to grow with size, geometric
    between rates), as the comm model prices them."""
    from autodist.errors import CostModelError
    from cost_models import CostModel
    from cost_models.comm import CommModel
    from cost_models.emulated_link import EmulatedLinkCalibration

    def curve(*seconds):
        return [{"bytes": 4096 * 16**k, "seconds": t, "repeats": 5} for k, t in enumerate(seconds)]

    measured = EmulatedLinkCalibration([
        {"rate_bytes": 1e7, "efficiency": 0.9, "allreduces": curve(0.002, 0.012, 0.18)},
        {"rate_bytes": 1e9, "efficiency": 0.3, "allreduces": curve(0.003, 0.002, 0.02)}])
    assert measured.efficiency(1e8) == pytest.approx(0.6)  # halfway in log rate
    assert (measured.efficiency(1e6), measured.efficiency(1e10)) == (0.9, 0.3)  # the nearest measured rate
    assert measured.allreduce_seconds(1e7, 65536) == pytest.approx(0.012)
    assert measured.allreduce_seconds(1e7, 16384) == pytest.approx((0.002 * 0.012) ** 0.5)  # log-log between sizes
    # beyond the largest size, at the rate of the two largest
    assert measured.allreduce_seconds(1e7, 2**21) == pytest.approx(0.18 + 2**20 * 0.168 / (2**20 - 2**16))
    assert measured.allreduce_seconds(1e9, 40) == measured.allreduce_seconds(1e9, 65536) == pytest.approx(0.0025)
    assert measured.allreduce_seconds(1e8, 2**20) == pytest.approx((0.18 * 0.02) ** 0.5)  # halfway in log rate
    assert measured.allreduce_seconds(1e10, 2**20) == pytest.approx(0.02)  # the cores bind above the fastest
    assert measured.allreduce_seconds(1e6, 2**20) == pytest.approx(0.002 + 0.178 * 10)  # the link below the slowest
    cost_model = CostModel.default()
    spec = load_cluster(preset="emu-100mbit:2")
    comm = cost_model.comm_model(spec)
    bandwidth, latency, _ = comm.effective_path("emu-0/CPU:0", "emu-1/CPU:0")
    assert bandwidth == pytest.approx(12.5e6 * cost_model.comm.emulated_link.efficiency(12.5e6))
    [push] = comm.ps_phases("emu-0/CPU:0", "emu-1/CPU:0", 2**20)
    assert push.seconds == pytest.approx(latency + comm.per_tensor_overhead + 2**20 / bandwidth)
    [ring] = comm.allreduce_phases(2**22, ["emu-0/CPU:0", "emu-1/CPU:0"], collective_ops=True)
    assert ring.seconds == pytest.approx(2 * latency + cost_model.comm.emulated_link.allreduce_seconds(12.5e6, 2**22))
    assert ring.seconds > 2**22 / 12.5e6  # the whole tensor each way, at most the rate
    with pytest.raises(CostModelError, match="emulated-links"):
        CommModel(spec).effective_path("emu-0/CPU:0", "emu-1/CPU:0")


@pytest.mark.parametrize("preset, rate", [("emu-100mbit", 12.5e6), ("emu-1gbit", 125e6), ("emu-10gbit", 1.25e9)])
def test_an_emulated_preset_is_n_nodes_with_the_rate_and_a_share_of_the_cores(preset, rate):
    spec = load_cluster(preset=f"{preset}:2")
    cores = sorted(os.sched_getaffinity(0))
    assert spec.emulated and [n.name for n in spec.nodes] == ["emu-0", "emu-1"]
    assert [n.nics[0].bandwidth for n in spec.nodes] == [rate, rate]
    shares = [n.emulation.cores for n in spec.nodes]
    assert all(len(s) == max(1, len(cores) // 2) for s in shares)
    if len(cores) >= 2:
        assert not set(shares[0]) & set(shares[1])
    # A node's CPU is the measured machine's, of which it gets its cores, and its share of the memory.
    whole = load_cluster(preset="cpu-local").nodes[0].devices[0]
    node_cpu = spec.nodes[0].devices[0]
    assert node_cpu.peak_flops == whole.peak_flops and node_cpu.memory_bytes == whole.memory_bytes // 2
    assert spec.cores_of("emu-0/CPU:0") == len(shares[0])
    assert load_cluster(preset="cpu-local:2").cores_of("local-0/CPU:0") is None
    assert ResourceSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_cluster_show_lists_each_emulated_node_s_cores_and_delay():
    from autodist.cli.cluster_cmd import format_cluster

    text = format_cluster(parse_cluster(EMULATED))
    assert text.splitlines()[-2:] == [f"  a  cores {_cores(0)}  0 ms", f"  b  cores {_cores(1)}  2 ms"]


def _cores(k):
    from autodist.resource_spec.emulated import core_shares

    return ",".join(map(str, core_shares(2)[k]))


def test_a_real_cluster_is_written_without_the_emulation_field():
    spec = load_cluster(preset="cpu-local:2")
    assert not spec.emulated and all("emulation" not in n for n in spec.to_dict()["nodes"])


def test_a_cluster_file_says_emulate_and_gives_a_node_a_delay():
    spec = parse_cluster(EMULATED)
    a, b = spec.nodes
    assert spec.emulated and (a.emulation.delay, b.emulation.delay) == (0.0, 0.002)
    assert a.nics[0].bandwidth == 12.5e6 and b.nics[0].latency == pytest.approx(0.002 + a.nics[0].latency)
    assert parse_cluster(dump_cluster(spec)) == spec


@pytest.mark.parametrize("text, message", [
    ("nodes: [{name: a, preset: cpu-local, delay: 1 ms}]", "nodes[0].delay: only a node of an emulated cluster"),
    ("network: {emulate: 1}\nnodes: [{name: a, preset: cpu-local}]", "network.emulate: expected true or false"),
    ("network: {emulat: true}\nnodes: [{name: a, preset: cpu-local}]", "network: unknown key 'emulat' (did you mean 'emulate'?)"),
    ("network: {emulate: true}\nnodes: [{name: a, preset: cpu-local, nics: [eth-10g, eth-10g]}]",
     "nodes[0].nics: an emulated node has one link"),
])
def test_bad_emulated_cluster_files_name_the_field(text, message):
    with pytest.raises(InputError, match="^" + re.escape(f"<cluster>: {message}")):
        parse_cluster(text)


def test_a_spec_half_emulated_is_refused():
    data = load_cluster(preset="emu-1gbit:2").to_dict()
    del data["nodes"][1]["emulation"]
    with pytest.raises(InputError, match="either every node is emulated"):
        ResourceSpec.from_dict(data)


@pytest.fixture
def shared_folder():
    """A folder anyone may write to (pytest's own are root's alone), and the prefix that drops root, if we have it."""
    with tempfile.TemporaryDirectory(prefix="autodist-test-") as folder:
        os.chmod(folder, 0o777)
        yield folder, (NOBODY if os.geteuid() == 0 else [])


def test_run_without_root_on_an_emulated_cluster_is_one_line_exit_2(shared_folder):
    folder, as_nobody = shared_folder
    done = subprocess.run([*as_nobody, sys.executable, "-m", "autodist", "run", SCRIPT, "--preset", "emu-100mbit:2"],
                          capture_output=True, text=True, timeout=120, cwd=folder)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert "autodist: error: cluster: cluster 'emu-100mbit:2' is emulated on this machine, which needs root" \
        in done.stderr
    assert not os.listdir(folder)


# -- the network ------------------------------------------------------------


def _in(network, node, code):
    """Run python ``code`` on ``node`` of ``network``: its output."""
    argv = network.command(node, [sys.executable, "-c", textwrap.dedent(code)])
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


@needs_root
def test_namespaces_come_up_linked_shaped_and_pinned_and_are_removed():
    spec = load_cluster(preset="emu-100mbit:2")
    links = _links()
    with EmulatedNetwork(spec) as network:
        names = _namespaces(run_namespaces())
        assert sorted(names) == sorted(network.namespaces) and len(names) == 3  # the hub and two nodes
        qdiscs = subprocess.run(["tc", "-n", network.namespace("emu-0"), "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True, check=True).stdout
        assert "tbf" in qdiscs and "rate 100Mbit" in qdiscs
        # Node 1 listens; node 0 reaches it at its address, pinned to its own cores.
        server = subprocess.Popen(network.command("emu-1", [
            sys.executable, "-c", "import socket; s = socket.create_server(('', 2222)); c, _ = s.accept(); "
                                  "c.sendall(b'hello')"]))
        try:
            out = _in(network, "emu-0", f"""
                import os, socket, time
                for _ in range(100):
                    try:
                        c = socket.create_connection(("{node_address(1)}", 2222)); break
                    except OSError:
                        time.sleep(0.05)
                print(c.recv(5).decode(), sorted(os.sched_getaffinity(0)))""")
        finally:
            server.kill()
            server.wait()
        assert out.split(" ", 1) == ["hello", f"{spec.nodes[0].emulation.cores}\n"]
        assert _links() == links  # nothing in this machine's own namespace: the traffic stays in the run's
    assert not _namespaces(run_namespaces())


@needs_root
def test_a_delay_needs_netem_or_says_so_and_leaves_nothing():
    spec = parse_cluster(EMULATED)
    try:
        with EmulatedNetwork(spec) as network:
            qdiscs = subprocess.run(["tc", "-n", network.namespace("b"), "qdisc", "show", "dev", "eth0"],
                                    capture_output=True, text=True, check=True).stdout
            assert "netem" in qdiscs and "delay 2ms" in qdiscs
    except LaunchError as exc:  # this kernel has no netem (CONFIG_NET_SCH_NETEM)
        assert "node 'b' has a delay, which needs the kernel's netem qdisc" in str(exc)
    assert not _namespaces(run_namespaces())


@needs_root
def test_a_killed_launcher_leaves_no_namespace():
    code = ("import sys, time; from autodist.resource_spec import load_cluster; "
            "from launcher.emulation import EmulatedNetwork; from launcher.supervision import Watchdog; "
            "EmulatedNetwork(load_cluster(preset='emu-1gbit:2'), Watchdog()).create(); print('up', flush=True); "
            "time.sleep(600)")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout.readline() == "up\n"
    assert len(_namespaces(run_namespaces(launcher.pid))) == 3
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while _namespaces(run_namespaces(launcher.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _namespaces(run_namespaces(launcher.pid))


# -- runs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def emulated_plan(small_job, tmp_path_factory):  # noqa: F811
    """The allreduce plan of tests/test_run.py on emu-1gbit:2, predicted by the real simulator."""
    from autodist.plan import Plan
    from autodist.strategy import Strategy
    from cost_models import CostModel
    from placement import simulate

    spec = load_cluster(preset="emu-1gbit:2")
    sync, _ = _strategies()["allreduce"]
    strategy = Strategy(replicas=[["emu-0/CPU:0"], ["emu-1/CPU:0"]], sync=sync, ps_devices=[])
    cost_model = CostModel.default()
    plan = Plan.from_strategy(small_job, spec, strategy, simulate(small_job, spec, strategy, cost_model),
                              cost_model.id, 0)
    path = str(tmp_path_factory.mktemp("emulated") / "plan.json")
    plan.save(path)
    return plan, path


@needs_root
@pytest.mark.slow
def test_a_killed_task_stops_the_run_and_leaves_nothing(emulated_plan):
    from launcher.local import run_local

    plan, path = emulated_plan
    started = {}

    def kill_a_replica(run):
        started["pids"] = run.pids()
        started["namespaces"] = _namespaces(run_namespaces())
        os.kill(run.tasks[1].process.pid, signal.SIGKILL)

    with pytest.raises(LaunchError, match=r"task worker:1 \(pid \d+\) died with exit status -9"):
        run_local(plan, path, SCRIPT, ["--steps", "1000"], on_start=kill_a_replica)
    assert len(started["namespaces"]) == 3
    assert all(_gone(pid) for pid in started["pids"]) and not _processes_naming(path)
    assert not _namespaces(run_namespaces())


@needs_root
@pytest.mark.slow
def test_ctrl_c_stops_an_emulated_run_and_leaves_nothing(emulated_plan):
    _, path = emulated_plan
    cli = subprocess.Popen([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", path, "--", "--steps", "1000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in cli.stdout:
        if line.startswith("step 2"):  # trained over the emulated link
            break
    tasks = _children(cli.pid)
    assert len(_namespaces(run_namespaces(cli.pid))) == 3
    cli.send_signal(signal.SIGINT)
    assert cli.wait(timeout=60) == 130
    assert all(_gone(pid) for pid in tasks) and not _processes_naming(path)
    assert not _namespaces(run_namespaces(cli.pid))




@needs_root
@pytest.mark.slow
def test_a_100_mbit_link_carries_its_rate_through_tensorflow_grpc():
    """A bandwidth measurement of the emulator (not a timing of autodist): within 10% of 100 Mbit/s.

    The rate is the wire's (Ethernet, IP and TCP headers included), so TensorFlow's bytes see about 95% of it;
    ``autodist profile emulated-links`` measures the same way what the cost model prices.
    """
    from cost_models.profiling.emulated_link import measure_emulated_link

    nbytes = 16 * 2**20
    transfer = measure_emulated_link(EmulatedNetwork, "emu-100mbit", nbytes, [], repeats=3)["transfer"]
    assert nbytes / transfer["seconds"] == pytest.approx(100e6 / 8, rel=0.10)
