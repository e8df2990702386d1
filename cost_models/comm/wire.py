"""What a gradient puts on the wire: its bytes (sparse rows, compression) and the cast that compresses it."""

from __future__ import annotations

import math


def gradient_bytes(variable):
    """Bytes one replica sends to synchronise ``variable`` (a VariableInfo).

    A sparse gradient moves only the touched rows (values plus int64 row
    indices) when ``rows_touched`` is known; anything else moves the whole
    variable.
    """
    if variable.sparse_gradient and variable.rows_touched is not None and variable.shape:
        rows = max(int(variable.shape[0]), 1)
        row_bytes = variable.bytes // rows
        return int(min(variable.rows_touched, rows) * (row_bytes + 8))
    return int(variable.bytes)


# Bytes per element of a gradient compressed on the wire (fp16 or bf16, Horovod's Compression.fp16).
COMPRESSED_ITEMSIZE = 2


def wire_bytes(variable, compression="none"):
    """Bytes of ``variable``'s dense gradient on the wire: its own dtype, or 2 bytes per element when compressed.

    A gradient already at 2 bytes or fewer per element is sent as it is.
    """
    if compression == "none":
        return int(variable.bytes)
    elements = math.prod(int(d) for d in variable.shape)
    return min(int(variable.bytes), elements * COMPRESSED_ITEMSIZE)


def cast_seconds(from_bytes, to_bytes, memory_bandwidth):
    """An elementwise cast on a device of ``memory_bandwidth`` (bytes/s): it streams its input and output once."""
    return (from_bytes + to_bytes) / memory_bandwidth
