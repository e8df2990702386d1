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


def parse_after_script(args, add_options, prog):
    """Options given after the script (in ``args.rest``), parsed into ``args``; what follows ``--`` goes to the script.

    ``add_options(parser)`` adds the command's options, as for the options before the script.
    """
    from autodist.cli import OneLineParser

    rest = list(args.rest)
    cut = rest.index("--") if "--" in rest else len(rest)
    parser = OneLineParser(prog=prog)
    add_options(parser)
    parser.parse_args(rest[:cut], namespace=args)
    args.script_args = rest[cut + 1:]
