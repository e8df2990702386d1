"""Measure the figures behind the ``cpu-local`` preset on this machine.

Loopback TCP bandwidth (one stream, large writes), loopback round-trip latency
(1-byte ping-pong) float32 matmul throughput and memory copy bandwidth of numpy in one process.
Each is measured ``--repeats`` times; the best run of each (highest
throughput, lowest latency: the least disturbed by other jobs on a shared
machine) gives the figures of the ``cpu-local`` preset.  Writes benchmarks/results/cluster_local_machine.json.

Usage: python benchmarks/cluster_local_machine.py [--mib 1024] [--pings 2000] [--repeats 5]
"""

import argparse
import json
import os
import platform
import socket
import threading
import time

import numpy as np

RESULT = os.path.join(os.path.dirname(__file__), "results", "cluster_local_machine.json")
CHUNK = 4 << 20


def _listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return server


def loopback_bandwidth(total_bytes):
    """Bytes per second of one TCP stream over 127.0.0.1."""
    server = _listener()
    received = []

    def sink():
        conn, _ = server.accept()
        got = 0
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            got += len(data)
        received.append(got)
        conn.close()

    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(server.getsockname())
    payload = b"\0" * CHUNK
    start = time.perf_counter()
    for _ in range(total_bytes // CHUNK):
        client.sendall(payload)
    client.close()
    thread.join()
    seconds = time.perf_counter() - start
    server.close()
    return received[0] / seconds


def loopback_latency(pings):
    """One-way latency in seconds: half the median 1-byte TCP round trip."""
    server = _listener()

    def echo():
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(1):
            conn.sendall(data)
        conn.close()

    thread = threading.Thread(target=echo)
    thread.start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(pings):
        start = time.perf_counter()
        client.sendall(b"x")
        client.recv(1)
        rtts.append(time.perf_counter() - start)
    client.close()
    thread.join()
    server.close()
    return float(np.median(rtts)) / 2


def matmul_flops(n=2048, repeats=5):
    """Best float32 FLOP/s of an n x n matmul in numpy."""
    a = np.ones((n, n), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def memory_bandwidth(nbytes=256 << 20, repeats=5):
    """Best bytes per second moved (read plus write) by one large numpy copy."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    measures = {
        "loopback_bandwidth_bytes_per_s": lambda: loopback_bandwidth(args.mib << 20),
        "loopback_latency_s": lambda: loopback_latency(args.pings),
        "matmul_float32_flops": matmul_flops,
        "memory_copy_bytes_per_s": memory_bandwidth,
    }
    load_before = os.getloadavg()[0]
    samples = {name: [measure() for _ in range(args.repeats)] for name, measure in measures.items()}
    result = {
        "command": f"python benchmarks/cluster_local_machine.py --mib {args.mib} --pings {args.pings} "
        f"--repeats {args.repeats}",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
        f"{platform.system()} {platform.release()} (shared with other jobs while measured)",
        "load_average_1min_before": load_before,
        "median": {name: float(np.median(values)) for name, values in samples.items()},
        # the least disturbed run: the machine's own figure when others share it
        "best": {name: float(min(v) if "latency" in name else max(v)) for name, v in samples.items()},
        "samples": samples,
    }
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
