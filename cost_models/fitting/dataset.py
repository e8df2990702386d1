"""Measured op timings as compact rows (CSV, gzip-compressed).

One row per (op, device): the raw features of cost_models.features, the
device it ran on (``device_model``, ``device_kind``, ``peak_flops``,
``memory_bandwidth``), where it came from (``origin``: ``micro`` for
micro-benchmarks or the zoo model's name), the op name, the ops it waits
for (``inputs``: space-separated indices among its model's rows, data and
control inputs; empty for micro-benchmarks) and the measured median
``seconds`` (empty for ops of a profiled step that ran no timed kernel:
folded constants, fused-away ops) and ``seconds_one_thread``, the same
kernel's median with one intra-op thread (empty where not measured): how
much an op gains from the cores beside the first (cost_models.executor).
Rows measured on a GPU are the same format with a GPU ``device_model``.

A JSON sidecar holds the step-level measurements (per zoo model: step
seconds with ops one at a time, as profiled, and under TensorFlow's default
executor; batch size; device) and a description of how the data was taken.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass

import numpy as np

from autodist.errors import CostModelError
from autodist.io import read_json, write_bytes_atomic, write_json_atomic
from cost_models.features import NUMERIC_RAW, RAW_COLUMNS, to_arrays

DEVICE_COLUMNS = ("device_model", "device_kind", "peak_flops", "memory_bandwidth")
_ROW_FIELDS = DEVICE_COLUMNS + ("origin", "op_name", "inputs", "seconds", "seconds_one_thread")
COLUMNS = _ROW_FIELDS + RAW_COLUMNS
META_FORMAT = "autodist.op_timings"


@dataclass
class Timings:
    """Columns of a timing table (numpy arrays, one entry per row)."""

    raw: dict
    device_model: np.ndarray
    device_kind: np.ndarray
    peak_flops: np.ndarray
    memory_bandwidth: np.ndarray
    origin: np.ndarray
    op_name: np.ndarray
    inputs: np.ndarray
    seconds: np.ndarray
    seconds_one_thread: np.ndarray

    def __len__(self):
        return len(self.seconds)

    def subset(self, mask):
        """The rows where ``mask`` is true."""
        return Timings(
            {k: v[mask] for k, v in self.raw.items()},
            *(getattr(self, name)[mask] for name in _ROW_FIELDS),
        )

    def predecessors(self):
        """Per row, the indices (among these rows) of the rows it waits for; rows must be one model's, in order."""
        return [[int(j) for j in text.split()] for text in self.inputs]

    def timed(self):
        """Rows with a measured time."""
        return self.subset(np.isfinite(self.seconds) & (self.seconds > 0))

    @classmethod
    def concat(cls, parts):
        parts = [p for p in parts if len(p)]
        if not parts:
            raise CostModelError("no timing rows")
        raw = {k: np.concatenate([p.raw[k] for p in parts]) for k in RAW_COLUMNS}
        rest = [np.concatenate([getattr(p, name) for p in parts]) for name in _ROW_FIELDS]
        return cls(raw, *rest)


def make_rows(names, raw, device, origin, seconds, predecessors=None, seconds_one_thread=None):
    """Timing rows for ops ``names`` with ``raw`` features measured on ``device``.

    ``device`` is a dict with the DEVICE_COLUMNS keys; ``seconds`` (and
    ``seconds_one_thread``, default all NaN) hold NaN for ops that were not
    timed; ``predecessors`` (per op, the indices of the ops it waits for) is
    kept for whole steps.
    """
    n = len(names)
    one_thread = np.full(n, np.nan) if seconds_one_thread is None else seconds_one_thread
    return Timings(
        raw,
        np.full(n, device["device_model"], dtype=object),
        np.full(n, device["device_kind"], dtype=object),
        np.full(n, float(device["peak_flops"])),
        np.full(n, float(device["memory_bandwidth"])),
        np.full(n, origin, dtype=object),
        np.asarray(names, dtype=object),
        np.array([" ".join(map(str, p)) for p in predecessors] if predecessors is not None else [""] * n, dtype=object),
        np.asarray(seconds, dtype=np.float64),
        np.asarray(one_thread, dtype=np.float64),
    )


def write_timings(path, timings):
    """Write rows as gzip-compressed CSV, atomically (fixed gzip mtime: same rows, same bytes)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for i in range(len(timings)):
        row = []
        for column in COLUMNS:
            value = timings.raw[column][i] if column in timings.raw else getattr(timings, column)[i]
            if isinstance(value, float):
                value = "" if not np.isfinite(value) else repr(float(value))
            row.append(value)
        writer.writerow(row)
    write_bytes_atomic(path, gzip.compress(buf.getvalue().encode(), mtime=0))


def read_timings(path):
    """Read rows written by :func:`write_timings` (any device)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            rows = list(reader)
    except (OSError, EOFError, StopIteration) as exc:
        raise CostModelError(f"cannot read timing data ({exc})", source=path) from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise CostModelError("missing column", source=path, field=missing[0])
    cols = {c: [r[header.index(c)] for r in rows] for c in COLUMNS}

    def floats(column):
        try:
            return [float(v) if v != "" else float("nan") for v in cols[column]]
        except ValueError as exc:
            raise CostModelError(f"bad number ({exc})", source=path, field=column) from None

    raw = to_arrays({c: (floats(c) if c in NUMERIC_RAW else cols[c]) for c in RAW_COLUMNS})
    return Timings(
        raw,
        np.asarray(cols["device_model"], dtype=object),
        np.asarray(cols["device_kind"], dtype=object),
        np.asarray(floats("peak_flops")),
        np.asarray(floats("memory_bandwidth")),
        np.asarray(cols["origin"], dtype=object),
        np.asarray(cols["op_name"], dtype=object),
        np.asarray(cols["inputs"], dtype=object),
        np.asarray(floats("seconds")),
        np.asarray(floats("seconds_one_thread")),
    )


def write_meta(path, meta):
    write_json_atomic(path, dict(meta, format=META_FORMAT))


def read_meta(path):
    meta = read_json(path)
    if meta.get("format") != META_FORMAT:
        raise CostModelError(f"not an op timings description (expected format {META_FORMAT!r})", source=path)
    return meta

