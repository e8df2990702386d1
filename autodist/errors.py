"""The one exception family of autodist.

Every user mistake raises a subclass of :class:`AutoDistError`.  The CLI turns
it into one line (``autodist: error: <message>``) and exit status 2.  Messages
name the file, field or op that is wrong.
"""


class AutoDistError(Exception):
    """Base of every error autodist raises for bad input or a failed step."""

    def __init__(self, message, *, source=None, field=None):
        self.source = source
        self.field = field
        parts = []
        if source:
            parts.append(str(source))
        if field:
            parts.append(str(field))
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class InputError(AutoDistError):
    """A file, field or argument given by the user is missing or invalid."""


class CaptureError(AutoDistError):
    """A training step could not be captured from a script, function or file."""


class CostModelError(AutoDistError):
    """A cost model or its data is missing, stale or unusable."""


class PlacementError(AutoDistError):
    """No valid placement exists, or a strategy is inconsistent with its job."""


class LaunchError(AutoDistError):
    """A plan could not be emitted, validated, submitted or run."""


def first_line(exc):
    """``"<ExceptionType>: <first line of its message>"``, for one-line error reports."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
