"""Command-line entry points: ``autodist`` and ``placement``.

Each subcommand lives in its own module under ``autodist.cli`` and exposes
``register(subparsers)``; the module adds its parser and sets ``func`` to a
callable taking the parsed arguments and returning an exit status.  Modules
are imported only when the CLI starts, so importing autodist stays cheap.
"""

import argparse
import contextlib
import importlib
import os
import sys
import warnings

from autodist.errors import AutoDistError

# Subcommand modules of ``autodist``, in help order.  A module that is not
# written yet is simply skipped, so the CLI grows one module at a time.
AUTODIST_COMMANDS = (
    "capture_cmd",
    "inspect_cmd",
    "cluster_cmd",
    "profile_cmd",
    "costmodel_cmd",
    "plan_cmd",
    "emit_cmd",
    "run_cmd",
    "bench_cmd",
    "worker_cmd",
    "validate_cmd",
)
PLACEMENT_COMMANDS = ("report_cmd",)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit status 2, like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog.split()[0]}: error: {message} (see {self.prog} --help)\n")


def _build_parser(prog, modules):
    parser = OneLineParser(prog=prog)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in modules:
        try:
            module = importlib.import_module(f"autodist.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"autodist.cli.{name}":
                continue
            raise
        module.register(sub)
    for command in sub.choices.values():
        add_verbose(command)
    return parser


def add_verbose(parser):
    """``--verbose``: TensorFlow's own log lines are shown (see :mod:`autodist.cli.tf_logs`)."""
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's own log lines (start-up notices, servers), hidden by default")


# Packages whose warnings a command prints as one line of its own (no source line), each text once.
OWN_PACKAGES = ("autodist", "cost_models", "placement", "launcher")


@contextlib.contextmanager
def _one_line_warnings(prog):
    """While a command runs, autodist's own warnings print as ``<prog>: warning: ...``, each text once;
    anything else's as Python prints it."""
    shown, python_shows = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] not in OWN_PACKAGES:
            python_shows(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"{prog}: warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = python_shows


def _run(prog, modules, argv):
    parser = _build_parser(prog, modules)
    args = parser.parse_args(argv)
    try:
        with _one_line_warnings(prog):
            return int(args.func(args) or 0)
    except AutoDistError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``autodist ... | head``): stop quietly, and keep
        # Python from failing again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _logs_as_asked():
    """At a command's start from its command line (``sys.argv``): TensorFlow's log lines hidden for it and the
    processes it starts, unless ``--verbose`` comes before ``--`` (or ``AUTODIST_VERBOSE=1``)."""
    from autodist.cli.tf_logs import VERBOSE_ENV, quiet_tensorflow_logs

    argv = sys.argv[1:]
    if "--verbose" in argv[: argv.index("--") if "--" in argv else len(argv)]:
        os.environ[VERBOSE_ENV] = "1"
    quiet_tensorflow_logs()


def main(argv=None):
    """Entry point of the ``autodist`` command (from the command line when ``argv`` is None)."""
    if argv is None:
        _logs_as_asked()
    sys.exit(_run("autodist", AUTODIST_COMMANDS, argv))


def placement_main(argv=None):
    """Entry point of the ``placement`` command (from the command line when ``argv`` is None)."""
    if argv is None:
        _logs_as_asked()
    sys.exit(_run("placement", PLACEMENT_COMMANDS, argv))
