"""Numeric options checked at the edge: finite, in range, of the right type, named in the message.

The ``argparse`` types here raise ``ArgumentTypeError``, which the CLI's
parser reports as one line naming the option (``autodist plan: error:
argument --budget: must be a finite number of seconds from 0.001 to 86400,
got 'nan'``) with exit status 2.

Cluster size: setting up a search costs about :data:`SETUP_S_PER_DEVICE`
seconds per device on top of ``--budget`` (measured here: 18.6 s for 16,384
GPUs and 66 s for 65,536 with a 1 s budget), so a cluster of more than
:data:`WARN_DEVICES` compute devices gets a line saying how long, and one of more
than :data:`MAX_SEARCH_DEVICES` is refused.
"""

from __future__ import annotations

import argparse
import math
import sys

from autodist.errors import InputError

MIN_BUDGET_S = 0.001
MAX_BUDGET_S = 86_400.0  # a day
MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit
MAX_MOVES = 10**9
SETUP_S_PER_DEVICE = 1e-3
WARN_DEVICES = 8_192
MAX_SEARCH_DEVICES = 65_536


def seconds_between(low, high):
    """An argparse type: a finite number of seconds in [low, high]."""

    def seconds(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds from {low:g} to {high:g}, got {text!r}")
        return value

    return seconds


def integer_between(low, high):
    """An argparse type: a whole number in [low, high] (``low`` >= 0)."""

    def integer(text):
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {text!r}")
        return int(text)

    return integer


def add_search_arguments(parser):
    """``--seed`` and ``--budget`` or ``--moves``, shared by every command that searches a plan."""
    parser.add_argument("--seed", type=integer_between(0, MAX_SEED), default=0, help="search seed (default 0)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=seconds_between(MIN_BUDGET_S, MAX_BUDGET_S), default=10.0, metavar="SECONDS",
                        help=f"search for this many seconds of wall clock (default 10, at most {MAX_BUDGET_S:g})")
    budget.add_argument("--moves", type=integer_between(1, MAX_MOVES), metavar="N",
                        help="search exactly N moves instead: the same plan on any machine")


def search_budget(args):
    """``optimize``'s budget arguments from ``--budget`` / ``--moves``."""
    return {"budget_s": args.budget, "moves": args.moves}


def check_search_size(resource_spec, budget_s, prog="autodist", moves=None):
    """Refuse a cluster above MAX_SEARCH_DEVICES compute devices; above WARN_DEVICES say how long the search takes."""
    devices = len(resource_spec.compute_devices())
    if devices > MAX_SEARCH_DEVICES:
        raise InputError(
            f"{resource_spec.name!r} has {devices:,} compute devices; autodist searches clusters of at most "
            f"{MAX_SEARCH_DEVICES:,} (about {MAX_SEARCH_DEVICES * SETUP_S_PER_DEVICE / 60:.0f} min of set-up)",
            field="cluster",
        )
    if devices > WARN_DEVICES:
        if moves is None:
            print(f"{prog}: warning: {resource_spec.name!r} has {devices:,} compute devices: the search takes about "
                  f"{(devices * SETUP_S_PER_DEVICE + budget_s) / 60:.1f} min ({budget_s:g} s budget plus set-up)",
                  file=sys.stderr)
        else:
            print(f"{prog}: warning: {resource_spec.name!r} has {devices:,} compute devices: set-up alone takes "
                  f"about {devices * SETUP_S_PER_DEVICE / 60:.1f} min before the {moves:,} moves", file=sys.stderr)
