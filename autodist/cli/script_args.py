"""Arguments after ``--`` belong to the training script, untouched, for every command that runs one."""

import argparse


def pass_script_args(parser, dest="script_args"):
    """Make ``parser`` hand everything after the first ``--`` to the script, as the list ``dest``."""

    def parse_known_args(args=None, namespace=None):
        args = list(args or [])
        script_args = []
        if "--" in args:
            cut = args.index("--")
            args, script_args = args[:cut], args[cut + 1:]
        namespace, unknown = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
        setattr(namespace, dest, script_args)
        return namespace, unknown

    parser.parse_known_args = parse_known_args


def add_script_command(subparsers, name, help, add_options, func):
    """Subcommand ``name`` with ``add_options``' options, the training script, then (in ``rest``) more of
    those options, ``--`` and the script's arguments (see :func:`parse_after_script`)."""
    parser = subparsers.add_parser(name, help=help)
    add_options(parser)
    parser.add_argument("script", help="the training script (.py), unchanged")
    parser.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                        help="more of the options above, then -- and the script's own arguments")
    parser.set_defaults(func=func)


def parse_after_script(args, add_options, prog):
    """Options given after the script (in ``args.rest``), parsed into ``args``; what follows ``--`` goes to the script.

    ``add_options(parser)`` adds the command's options, as for the options before the script.
    """
    from autodist.cli import OneLineParser, add_verbose

    rest = list(args.rest)
    cut = rest.index("--") if "--" in rest else len(rest)
    parser = OneLineParser(prog=prog)
    add_options(parser)
    add_verbose(parser)
    _, unknown = parser.parse_known_args(rest[:cut], namespace=args)
    if unknown:
        script = getattr(args, "script", "SCRIPT")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}; the script's own arguments go after --: "
                     f"{prog.split()[0]} {prog.split()[1]} {script} -- {' '.join(unknown)}")
    args.script_args = rest[cut + 1:]
