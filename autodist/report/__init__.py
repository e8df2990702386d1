"""``placement report``: what autodist would do with a job on a cluster, how fast, and why.

:func:`build_report` turns a plan (and, when a search just ran, its result)
into one document; :func:`render` prints it as text or markdown; the JSON
format is the document itself, valid against
``autodist/schemas/report.schema.json``.
"""

from autodist.report.document import build_report
from autodist.report.render import render

__all__ = ["build_report", "render", "schema"]


def schema():
    """The committed JSON schema of the report document."""
    import json
    from importlib import resources

    return json.loads(resources.files("autodist").joinpath("schemas/report.schema.json").read_text())
