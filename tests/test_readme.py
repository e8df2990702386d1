"""Every command the README and docs/ show parses, and runs against small inputs.

The commands are read out of the shell blocks of the README, then of each
docs/*.md it links (a command shown twice runs once, where it first appears).  ``train.py`` is the
zoo's MLP, ``SCRIPT_ARGS`` a two-step run, and ``[--plan plan.json]`` gives
both forms.  Each command runs in a scratch folder, in README order (later
commands read what earlier ones wrote), except those that take minutes; they
are parsed only, and tests/test_cost_cli.py runs them with small counts.
Commands that reach a Kubernetes API server (there is none here: an outer
boundary) must end with one line and exit status 2.
"""

import importlib
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO, ZOO

README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
TRAIN = os.path.join(ZOO, "mlp.py")
SUBSTITUTIONS = {"train.py": TRAIN, "SCRIPT_ARGS": "--steps 2", "/etc/autodist/plan.json": "plan.json",
                 "~/.cache/autodist/cost-model": "cost-model",
                 "all_reduce.txt": os.path.join(REPO, "tests", "data", "nccl_tests", "dgx_h100_all_reduce.txt")}
# Minutes each on this machine: parsed only (tests/test_cost_cli.py runs them with small counts).
PARSED_ONLY = {("costmodel", "eval"), ("profile", "transfers"), ("profile", "collectives"), ("profile", "remote-steps"),
               ("profile", "emulated-links"), ("costmodel", "install")}
# Minutes each too (every strategy trained): parsed only (tests/test_bench.py runs a small one).
PARSED_ONLY_COMMANDS = {"bench"}
# Profiling a model's step takes a minute or more: parsed only (tests/test_cost_cli.py profiles the zoo's mlp, and
# merges a new model's rows into earlier data as --add does).
PARSED_ONLY_OPTIONS = {"--model"}
KUBERNETES = ("--from-kubernetes", "--submit")


def documents():
    """The README, then the docs/*.md files it links, in the order it links them."""
    with open(README, encoding="utf-8") as fh:
        linked = re.findall(r"\]\((docs/[\w.-]+\.md)\)", fh.read())
    return [README, *(os.path.join(REPO, path) for path in dict.fromkeys(linked))]


def readme_commands():
    """(argv, redirect target or None) of every autodist/placement command in the shell blocks of documents()."""
    commands = []
    for path in documents():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for block in re.findall(r"^```\n(.*?)^```", text, re.S | re.M):
            for line in block.splitlines():
                line = line.split(" #")[0].strip()
                line = line.split("&& ")[-1]  # the set-up line ends with the command it runs
                if not line.startswith(("autodist ", "placement ")):
                    continue
                for form in _forms(line):
                    command, _, target = form.partition(" > ")
                    argv = [SUBSTITUTIONS.get(word, word) for word in shlex.split(command)]
                    entry = (_expand(argv), target.strip() or None)
                    if entry not in commands:
                        commands.append(entry)
    return commands


def test_the_readme_links_every_doc_and_stays_short():
    assert sorted(documents()[1:]) == sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS)
                                             if name.endswith(".md"))
    assert os.path.getsize(README) < 8 * 1024


def _forms(line):
    """``a [b] c`` -> ``a c`` and ``a b c``."""
    match = re.search(r"\[([^\]]+)\]", line)
    if not match:
        return [line]
    return [re.sub(r"\s+", " ", line[:match.start()] + line[match.end():]), line[:match.start()] + match.group(1)
            + line[match.end():]]


def _expand(argv):
    out = []
    for word in argv:
        out.extend(word.split() if word == SUBSTITUTIONS["SCRIPT_ARGS"] else [word])
    return [os.path.join(REPO, a) if a.startswith("benchmarks/") else a for a in out]


def _parse(argv):
    """Parse ``argv`` as the CLI does, without running it."""
    from autodist.cli import AUTODIST_COMMANDS, PLACEMENT_COMMANDS, _build_parser
    prog, rest = argv[0], argv[1:]
    parser = _build_parser(prog, AUTODIST_COMMANDS if prog == "autodist" else PLACEMENT_COMMANDS)
    args = parser.parse_args(rest)
    if args.command in ("run", "bench"):
        importlib.import_module(f"autodist.cli.{args.command}_cmd")._parse_rest(args)
    return args


def test_the_readme_shows_the_forms_this_issue_is_about():
    commands = [" ".join(argv) for argv, _ in readme_commands()]
    assert len(commands) >= 20
    assert any(c.startswith("autodist run") and "--preset cpu-local:2 --plan plan.json" in c for c in commands)
    assert any(c.startswith("placement report") and c.endswith("-- --batch-size 32") for c in commands)
    assert any(c.startswith("autodist plan") and c.endswith("-- --batch-size 32") for c in commands)


@pytest.mark.parametrize("argv", [argv for argv, _ in readme_commands()], ids=" ".join)
def test_every_readme_command_parses(argv):
    args = _parse(argv)
    if "--" in argv and argv[1] not in ("cluster", "emit", "inspect"):
        script_args = argv[argv.index("--") + 1:]
        given = getattr(args, "script_argv", None) or getattr(args, "script_args", None)
        assert list(given) == script_args


def _quick_search(argv):
    """A command that searches a plan, given a 1 s budget where the README leaves the default 10 s."""
    searches = argv[1] in ("plan", "run") or argv[:2] == ["placement", "report"]
    if not searches or {"--budget", "--moves", "--plan"} & set(argv):
        return argv
    end = argv.index("--") if "--" in argv else len(argv)
    return argv[:end] + ["--budget", "1"] + argv[end:]


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), KUBECONFIG=str(tmp_path / "no-kubeconfig"))
    env.pop("TF_CONFIG", None)
    (tmp_path / "cost-model").mkdir()
    # The report block reads plan.json before the plan block writes it: a quick plan stands in.
    subprocess.run([sys.executable, "-m", "autodist", "plan", TRAIN, "--preset", "dgx-h100:2", "--budget", "1"],
                   cwd=tmp_path, env=env, capture_output=True, check=True, timeout=300)
    ran = []
    for argv, target in readme_commands():
        key = tuple(argv[1:3])
        if key in PARSED_ONLY or argv[1] in PARSED_ONLY_COMMANDS or PARSED_ONLY_OPTIONS & set(argv):
            _parse(argv)
            continue
        if argv[:3] == ["placement", "report", "plan.json"]:
            (tmp_path / "other-plan.json").write_bytes((tmp_path / "plan.json").read_bytes())
        if argv[:3] == ["autodist", "profile", "ops"]:
            # seconds and one run, not the README's hour and three (test_cost_cli.py checks the median of runs)
            argv = argv + ["--time-limit", "2", "--runs", "1", "--out", "cost-model"]
        argv = _quick_search(argv)
        command = os.path.join(os.path.dirname(sys.executable), argv[0])  # the installed entry point
        done = subprocess.run([command, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        name = " ".join(argv)
        if any(flag in argv for flag in KUBERNETES) or argv[1] == "worker":
            # No API server and no TF_CONFIG here: one line naming what is missing.
            assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, (name, done.stderr[-2000:])
        else:
            assert done.returncode == 0, (name, done.stderr[-2000:])
        if target:
            (tmp_path / target).write_text(done.stdout)
        ran.append(name)
    assert any(name.startswith("autodist run") and "--plan plan.json" in name for name in ran)
