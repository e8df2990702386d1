"""File helpers shared by every writer: errors name the file; writes are atomic."""

import json
import os
import tempfile

from autodist.errors import InputError


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def read_json(path):
    """Read a JSON file; any failure (NaN and Infinity included) is an InputError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, parse_constant=_refuse_constant)
    except FileNotFoundError:
        raise InputError("no such file", source=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a JSON file", source=path) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError or a constant
        raise InputError(f"not valid JSON ({exc})", source=path) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=path) from None


def write_bytes_atomic(path, data):
    """Write bytes to ``path`` through a temp file in the same folder, then rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", source=path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text):
    """Write text (UTF-8) to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, data):
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def check_document(data, fmt, version, what, where):
    """Raise InputError unless ``data`` is a ``fmt`` document of ``version`` (``what`` names it)."""
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise InputError(f"not an autodist {what} (expected format {fmt!r})", source=where)
    if data.get("version") != version:
        raise InputError(
            f"unsupported {what} version {data.get('version')!r} (this autodist reads {version})",
            source=where,
            field="version",
        )
