"""Run a measurement in a fresh Python process and read back its JSON result.

Some measurements need a process of their own: TensorFlow fixes its thread
pools when it starts, and a whole measurement session carries process state
(gRPC channels, allocator) that later sessions should not inherit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from autodist.errors import CostModelError

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(code, args, what, source=None, timeout=600, prefix=()):
    """Run ``code`` with ``args`` (``sys.argv[1:]``) in a new interpreter (as ``prefix + argv``: in a network
    namespace, say); the JSON value of its last output line.

    Raises
    ------
    CostModelError
        Naming ``what`` failed and the child's last error line.
    """
    done = subprocess.run([*prefix, sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          cwd=_PACKAGE_ROOT, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CostModelError(f"{what} failed: {last}", source=source)
    return json.loads(lines[-1])
