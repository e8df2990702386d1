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


def _umask():
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def check_output_file(path, field=None):
    """Raise InputError unless ``path`` can be written as a file: not a directory, in an
    existing writable folder, with a name the file system takes.

    Commands call this for their output options before they compute anything.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    if not name or os.path.isdir(path):
        raise InputError("is a directory, expected a file name", source=path, field=field)
    if not os.path.isdir(folder):
        raise InputError(f"folder {folder} does not exist", source=path, field=field)
    longest = os.pathconf(folder, "PC_NAME_MAX")
    if len(os.fsencode(name)) > longest:
        raise InputError(f"file name is longer than {longest} bytes", source=path, field=field)
    if not os.access(folder, os.W_OK):
        raise InputError(f"folder {folder} is not writable", source=path, field=field)


def write_bytes_atomic(path, data):
    """Write bytes to ``path`` through a temp file in the same folder (created if missing), then rename.

    The file gets the mode a plain ``open`` would give it (0666 less the
    umask).  Any failure is an InputError naming the file; no temp file is left.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError("is a directory, expected a file name", source=path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror or exc})", source=path) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


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
