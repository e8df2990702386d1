"""A simulated step's timeline as a Chrome trace (``chrome://tracing``, Perfetto)."""

from __future__ import annotations


def chrome_trace(result):
    """The events of ``result`` (a traced placement.simulator.SimResult) in Chrome trace format."""
    resources = sorted({e[2] for e in result.events})
    tid = {r: i for i, r in enumerate(resources)}
    trace = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[r], "args": {"name": r}} for r in resources]
    for name, category, resource, start, end in result.events:
        trace.append({"name": name, "cat": category, "ph": "X", "pid": 0, "tid": tid[resource],
                      "ts": start * 1e6, "dur": (end - start) * 1e6})
    return {"traceEvents": trace, "displayTimeUnit": "ms"}
