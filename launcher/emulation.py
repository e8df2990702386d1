"""An emulated cluster on this machine: one network namespace per node, joined through a bridge by shaped links.

What one run creates (every name carries the launcher's pid, so concurrent
runs never meet, and nothing is created in the machine's own namespace, so
the run's traffic stays among its namespaces):

- a namespace ``autodist-<pid>-hub`` holding the bridge ``br0``;
- per node ``i``, a namespace ``autodist-<pid>-<i>`` with ``lo`` and
  ``eth0`` (address ``10.77.x.y``), a veth whose peer ``n<i>`` is a port
  of the bridge;
- ``tc``: a token bucket (``tbf``) at the node's NIC rate on ``eth0`` (what
  the node sends) and on ``n<i>`` (what it receives), with a ``netem``
  delay under it when the node has one.

Each task runs as ``ip netns exec <its node's namespace> taskset -c <the
node's cores> <command>``: both exec the command in place, so the launcher
supervises the task's own process (launcher.local, launcher.supervision).
Deleting the namespaces removes the links, the bridge, the qdiscs and the
ports with them; :class:`EmulatedNetwork` does it on exit, however the run
ended, and the launcher's watchdog does it if the launcher is killed.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess

from autodist.errors import LaunchError

NAMESPACE_PREFIX = "autodist-"
SUBNET = ipaddress.ip_network("10.77.0.0/16")
FIRST_PORT = 2222  # the TF operator's default task port; every node has its own
# A token bucket holds at least 64 KiB (one GSO segment of a veth) and 1 ms of the rate;
# its queue 100 ms of the rate (at least 256 KiB), so TCP sees a link, not a wall of drops.
MIN_BURST_BYTES = 64 * 1024
BURST_S = 1e-3
MIN_QUEUE_BYTES = 256 * 1024
QUEUE_S = 0.1
TOOLS = ("ip", "tc", "taskset")


def run_namespaces(pid=None):
    """The prefix of every namespace of the run launched by process ``pid`` (default: this one)."""
    return f"{NAMESPACE_PREFIX}{os.getpid() if pid is None else pid}-"


def node_address(k):
    """The address of the ``k``-th node (0-based)."""
    return str(SUBNET.network_address + k + 1)


def check_can_emulate(resource_spec):
    """Raise LaunchError unless this process can build the emulated nodes here (root, ip, tc, taskset, the cores)."""
    where = f"cluster {resource_spec.name!r}" if resource_spec.name else "the cluster"
    if os.geteuid() != 0:
        raise LaunchError(f"{where} is emulated on this machine, which needs root (network namespaces and tc); "
                          "run as root", field="cluster")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise LaunchError(f"{where} is emulated on this machine, which needs {', '.join(missing)} "
                          "(iproute2, util-linux)", field="cluster")
    cores = set(os.sched_getaffinity(0))
    for node in resource_spec.nodes:
        if not set(node.emulation.cores) <= cores:
            raise LaunchError(f"node {node.name!r} is pinned to cores {node.emulation.cores} and this process may "
                              f"run on {sorted(cores)} only (was the plan made on another machine?)", field="cluster")


def _sh(*argv):
    """Run one ``ip``/``tc`` command; a LaunchError with its message when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise LaunchError(f"`{' '.join(argv)}` failed: {why[-1] if why else f'exit status {done.returncode}'}")


class EmulatedNetwork:
    """The namespaces, links and qdiscs of one emulated run; a context manager that always removes them.

    Parameters
    ----------
    resource_spec : ResourceSpec
        An emulated cluster (``resource_spec.emulated``).
    watchdog : launcher.supervision.Watchdog, optional
        Told every namespace before it is created, so it removes them if the launcher dies.
    """

    def __init__(self, resource_spec, watchdog=None):
        check_can_emulate(resource_spec)
        self.spec = resource_spec
        self.watchdog = watchdog
        self.prefix = run_namespaces()
        self.hub = f"{self.prefix}hub"
        self._index = {node.name: k for k, node in enumerate(resource_spec.nodes)}
        self._ports = {}
        self.namespaces = []

    def namespace(self, node):
        return f"{self.prefix}{self._index[node]}"

    def address(self, node):
        """A new ``host:port`` for a task on ``node`` (each node's ports count up from FIRST_PORT)."""
        port = self._ports[node] = self._ports.get(node, FIRST_PORT - 1) + 1
        return f"{node_address(self._index[node])}:{port}"

    def command(self, node, argv):
        """``argv`` run on ``node``: in its namespace, pinned to its cores."""
        cores = ",".join(str(c) for c in self.spec.node(node).emulation.cores)
        return ["ip", "netns", "exec", self.namespace(node), "taskset", "-c", cores, *argv]

    def create(self):
        """Build the hub, every node's namespace, link and qdiscs; on any failure remove what was built."""
        try:
            self._add_namespace(self.hub)
            _sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.hub, "link", "set", "br0", "up")
            for node in self.spec.nodes:
                self._add_node(node)
        except BaseException:
            self.remove()
            raise

    def __enter__(self):
        self.create()
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def _add_namespace(self, name):
        if self.watchdog is not None:
            self.watchdog.namespace(name)
        self.namespaces.append(name)
        _sh("ip", "netns", "add", name)
        _sh("ip", "-n", name, "link", "set", "lo", "up")

    def _add_node(self, node):
        k = self._index[node.name]
        ns, port = self.namespace(node.name), f"n{k}"
        self._add_namespace(ns)
        _sh("ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _sh("ip", "-n", self.hub, "link", "set", port, "master", "br0", "up")
        _sh("ip", "-n", ns, "addr", "add", f"{node_address(k)}/{SUBNET.prefixlen}", "dev", "eth0")
        _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        if node.nics:
            for where, device in ((ns, "eth0"), (self.hub, port)):
                self._shape(where, device, node.nics[0].bandwidth, node.emulation.delay, node.name)

    def _shape(self, namespace, device, rate, delay, node):
        """A token bucket at ``rate`` bytes/s on ``device``, and ``delay`` seconds of netem under it when positive."""
        burst = max(MIN_BURST_BYTES, int(rate * BURST_S))
        limit = max(MIN_QUEUE_BYTES, int(rate * QUEUE_S))
        _sh("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "handle", "1:", "tbf",
            "rate", f"{int(rate * 8)}bit", "burst", str(burst), "limit", str(limit))
        if delay > 0:
            try:
                _sh("tc", "-n", namespace, "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", "netem",
                    "delay", f"{delay * 1e6:.0f}us", "limit", "100000")
            except LaunchError as exc:
                raise LaunchError(f"node {node!r} has a delay, which needs the kernel's netem qdisc: {exc}",
                                  field="cluster") from None

    def sent_bytes(self):
        """Per node, the bytes its link has sent so far (its ``eth0``'s transmit counter): what crossed the
        emulated network from it; a node whose counter cannot be read is left out."""
        import json

        out = {}
        for node in self.spec.nodes:
            done = subprocess.run(["ip", "-n", self.namespace(node.name), "-s", "-j", "link", "show", "dev", "eth0"],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if done.returncode == 0:
                out[node.name] = int(json.loads(done.stdout)[0]["stats64"]["tx"]["bytes"])
        return out

    def remove(self):
        """Delete every namespace this run created (with its links, bridge and qdiscs); what is gone is skipped."""
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, stdin=subprocess.DEVNULL)
        self.namespaces = []
