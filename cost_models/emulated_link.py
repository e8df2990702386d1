"""What TensorFlow's gRPC achieves over this machine's emulated links, measured.

An emulated node's NIC (autodist.resource_spec.emulated) is a veth pair
shaped by ``tc`` to the NIC's rate.  The rate is the wire's: Ethernet, IP and
TCP headers take their share of it, and at high rates this machine's cores,
not the shaper, limit what one gRPC transfer moves.  This module measures
it: for each emulated preset, two namespaces of ``launcher.emulation`` and a
tensor pulled from one task's server into the other through TensorFlow's
gRPC (medians of several pulls), and stores the achieved fraction of the
rate per rate (``cost_models/data/emulated_link_calibration.json``).  The
communication model prices every transfer between emulated nodes at the
fraction measured for its rate (interpolated in log rate between measured
rates, the nearest measured one outside them).  Measuring needs root.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field

from autodist.errors import CostModelError
from cost_models.calibration import VersionedRecord, machine_description

FORMAT = "autodist.emulated_link_calibration"
VERSION = 1
PRESETS = ("emu-100mbit", "emu-1gbit", "emu-10gbit")
MAX_PULL_BYTES = 256 * 2**20

# Runs in emulated node 0: pulls ``nbytes`` from a variable on task 1 (node 1) ``repeats`` times through gRPC and
# prints the bytes per second of each pull.
GRPC_PULL = """
import json, sys, time
import tensorflow as tf

cluster, nbytes, repeats = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0)
with tf.device("/job:worker/replica:0/task:1/device:CPU:0"):
    remote = tf.Variable(tf.zeros([nbytes // 4]))

@tf.function
def pull():
    with tf.device("/job:worker/replica:0/task:0/device:CPU:0"):
        return tf.reduce_sum(tf.identity(remote.read_value()))

pull().numpy()  # traces, and warms the connection
rates = []
for _ in range(repeats):
    start = time.perf_counter()
    pull().numpy()
    rates.append(nbytes / (time.perf_counter() - start))
print(json.dumps(rates))
"""


@dataclass
class EmulatedLinkCalibration(VersionedRecord):
    """The fraction of an emulated link's rate that TensorFlow's gRPC achieves, per measured rate.

    ``points``: ``{"rate_bytes", "bytes", "bytes_per_second", "efficiency", "pulls"}`` per preset, by rate.
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "an emulated link calibration"

    points: list
    command: str = ""
    machine: dict = field(default_factory=dict)

    def efficiency(self, rate_bytes):
        """The achieved fraction of a link of ``rate_bytes`` bytes/s: interpolated in log rate, clamped."""
        points = sorted((p["rate_bytes"], p["efficiency"]) for p in self.points)
        if not points:
            raise CostModelError("an emulated link calibration without measurements")
        if rate_bytes <= points[0][0]:
            return points[0][1]
        for (r0, e0), (r1, e1) in zip(points, points[1:]):
            if rate_bytes <= r1:
                w = math.log(rate_bytes / r0) / math.log(r1 / r0)
                return e0 + w * (e1 - e0)
        return points[-1][1]


def measure_emulated_link(preset, nbytes, repeats=5):
    """Bytes per second of each of ``repeats`` gRPC pulls of ``nbytes`` between the two nodes of ``preset``:2."""
    from autodist.resource_spec import load_cluster
    from launcher.emulation import EmulatedNetwork

    spec = load_cluster(preset=f"{preset}:2")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with EmulatedNetwork(spec) as network:
        cluster = {"worker": [network.address(spec.nodes[0].name), network.address(spec.nodes[1].name)]}
        config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
        server = subprocess.Popen(network.command(spec.nodes[1].name, [sys.executable, "-m", "launcher.runtime.server"]),
                                  env=dict(env, TF_CONFIG=config))
        try:
            out = subprocess.run(network.command(spec.nodes[0].name, [sys.executable, "-c", GRPC_PULL,
                                                                      json.dumps(cluster), str(nbytes), str(repeats)]),
                                 capture_output=True, text=True, timeout=600, env=env)
        finally:
            server.kill()
            server.wait()
    if out.returncode != 0:
        raise CostModelError(f"the gRPC pull over {preset} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def calibrate_emulated_links(presets=PRESETS, repeats=5, command=""):
    """Measure each preset's link (about a second of bytes per pull, at most MAX_PULL_BYTES)."""
    from autodist.resource_spec.emulated import EMULATED_RATES

    load_before = os.getloadavg()[0]
    points = []
    for preset in presets:
        rate = EMULATED_RATES[preset] / 8
        nbytes = int(min(rate, MAX_PULL_BYTES)) // 4 * 4
        pulls = measure_emulated_link(preset, nbytes, repeats)
        achieved = statistics.median(pulls)
        points.append({"rate_bytes": rate, "bytes": nbytes, "bytes_per_second": achieved,
                       "efficiency": achieved / rate, "pulls": pulls})
    machine = {**machine_description(), "load_average": {"before": round(load_before, 2),
                                                           "after": round(os.getloadavg()[0], 2)}}
    return EmulatedLinkCalibration(points, command, machine)
