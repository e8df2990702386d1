"""Run public TensorFlow 2 / Keras scripts, unchanged, through every autodist stage.

Each script of the corpus (default ``../shared/realworld``, see its README)
goes through, each stage in a fresh process and a fresh working directory,
with a time limit per stage:

- ``capture``: ``autodist capture SCRIPT -o graph.json``; its variables and
  parameter count are compared with TensorFlow's own (a fit's
  ``model.trainable_variables``; for a custom loop the distinct trainable
  ``tf.Variable``s its traced step captures);
- ``plan``: ``autodist plan graph.json --preset cpu-local:2``;
- ``report``: ``placement report graph.json --preset cpu-local:2``;
- ``gpu_report``: ``placement report graph.json --preset p3.16xlarge:2 --references``: the
  user's path to a GPU target (two nodes of 8 V100 over 25 GbE), its line the
  plan's weak scaling where it has replicas to scale over, else its row, with
  the report's warnings (an op priced at the fallback);
- ``bench``: ``autodist bench SCRIPT --strategies ring --steps 10 --preset cpu-local:2``;
- ``run``: ``autodist run SCRIPT --preset cpu-local:2``.

A stage is ``ok`` (exit 0), ``refused`` (non-zero exit whose error is one
line, no traceback), or ``failed`` (a traceback, a time-out, several error
lines, or a capture whose counts differ from TensorFlow's), with the line
that says so.  Results go to ``benchmarks/results/realworld.{json,md}``.

The corpus' scripts also import pandas, matplotlib and pillow; put them on
``PYTHONPATH`` (e.g. ``pip install --target DIR pandas matplotlib pillow``),
as the corpus README says it was run; the path is recorded.

Usage::

    python benchmarks/realworld.py [--corpus DIR] [--only NAME ...] [--stages capture plan report gpu_report bench run]
                                   [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CORPUS = os.path.normpath(os.path.join(ROOT, "..", "shared", "realworld"))
RESULTS = os.path.join(HERE, "results")
STAGES = ("capture", "plan", "report", "gpu_report", "bench", "run")
PRESET = "cpu-local:2"
GPU_PRESET = "p3.16xlarge:2"
# Stages that need the captured graph.
NEEDS_GRAPH = ("plan", "report", "gpu_report")

# Run inside the capture stage's process: autodist capture, recording TensorFlow's own count of what the step
# trains: a fit's model.trainable_variables (Keras' list, after the trace has built a subclassed model), else the
# distinct trainable variables the traced step captures.
_CAPTURE_CHILD = r"""
import json, sys
import autodist.loops.fit as fit
import autodist.graph.trace as trace
from autodist.cli import main

counted = {}
original_item, original_fit = trace.item_from_graph, fit.step_item

def counting(concrete, variables, job, *args, **kwargs):
    if "variables" not in counted:
        seen = {id(v): v for v in variables if v.trainable}
        counted.update(variables=len(seen), parameters=int(sum(v.shape.num_elements() for v in seen.values())))
    return original_item(concrete, variables, job, *args, **kwargs)

def counting_fit(model, *args, **kwargs):
    item = original_fit(model, *args, **kwargs)  # traced: a subclassed model is built by now
    weights = model.trainable_variables
    counted.update(variables=len(weights), parameters=int(sum(w.numpy().size for w in weights)))
    return item

trace.item_from_graph, fit.step_item = counting, counting_fit
try:
    main(["capture", sys.argv[1], "-o", sys.argv[2]])
finally:
    with open(sys.argv[3], "w") as f:
        json.dump(counted, f)
"""


def _autodist(*args):
    return [sys.executable, "-m", "autodist", *args]


def _placement(*args):
    return [sys.executable, "-c", "import sys; from autodist.cli import placement_main; "
            "sys.exit(placement_main(sys.argv[1:]))", *args]


def _commands(script, folder):
    graph = os.path.join(folder, "graph.json")
    return {
        "capture": [sys.executable, "-c", _CAPTURE_CHILD, script, graph, os.path.join(folder, "tf_count.json")],
        "plan": _autodist("plan", graph, "--preset", PRESET, "-o", os.path.join(folder, "plan.json")),
        "report": _placement("report", graph, "--preset", PRESET),
        "gpu_report": _placement("report", graph, "--preset", GPU_PRESET, "--references"),
        "bench": _autodist("bench", script, "--strategies", "ring", "--steps", "10", "--preset", PRESET,
                           "-o", os.path.join(folder, "bench-plans")),
        "run": _autodist("run", script, "--preset", PRESET, "-o", os.path.join(folder, "run-plan.json")),
    }


def _error_lines(text):
    """The lines of ``text`` where autodist says it stops (``autodist: error: ...``, ``placement: error: ...``)."""
    return [line for line in text.splitlines() if line.startswith(("autodist: error:", "placement: error:"))]


# The line of a passing stage's standard output shown for it: the first this pattern finds (a stage that exits 0
# without one failed: its figures are missing).  Bench's is its table's ring row: a script's own output can hold
# "ring" (tf_docs_keras_text_classification prints random words).
OK_LINES = {"capture": "captured ", "plan": "predicted step", "report": "predicted", "gpu_report": r"^autodist\s+\d",
            "bench": r"^\s*ring\s+\d", "run": "measured step time"}


def verdict(stage, returncode, stdout, output, timed_out):
    """``(outcome, line)`` of one stage from its exit status, its standard output and all its output."""
    lines = [line for line in output.splitlines() if line.strip()]
    if timed_out:
        return "failed", "timed out"
    if "Traceback (most recent call last)" in output:
        return "failed", (lines[-1] if lines else "traceback")
    if returncode == 0:
        shown = [line for line in stdout.splitlines() if line.strip()]
        wanted = [line for line in shown if re.search(OK_LINES[stage], line)]
        if not wanted:
            return "failed", f"exit 0 without a line holding {OK_LINES[stage]!r}: {(shown or [''])[-1].strip()}"
        return "ok", wanted[0].strip()
    errors = _error_lines(output)
    if len(errors) == 1:
        return "refused", errors[0].strip()
    return "failed", (errors[0] if errors else (lines[-1] if lines else f"exit {returncode}")).strip()


def run_stage(stage, command, folder, timeout):
    """One stage's record: outcome, line, exit status, seconds; the stage runs in ``folder/stage``."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=os.path.join(folder, stage), env=env, capture_output=True, text=True, timeout=timeout)
        stdout, output, code, timed_out = done.stdout, done.stdout + done.stderr, done.returncode, False
    except subprocess.TimeoutExpired:
        stdout, output, code, timed_out = "", "", None, True
    outcome, line = verdict(stage, code, stdout, output, timed_out)
    if stage == "gpu_report" and outcome == "ok":
        line = _gpu_report_line(stdout, output, line)
    record = {"stage": stage, "outcome": outcome, "line": line[:400], "exit": code,
              "seconds": round(time.perf_counter() - start, 1)}
    if stage == "capture" and outcome == "ok":
        record.update(_capture_counts(folder))
        if record.get("variables") != record.get("tf_variables") or record.get("parameters") != record.get(
                "tf_parameters"):
            record["outcome"] = "failed"
            record["line"] = (f"captured {record.get('variables')} trainable variables / {record.get('parameters')} "
                              f"parameters, TensorFlow counts {record.get('tf_variables')} / "
                              f"{record.get('tf_parameters')}")
    return record


def _gpu_report_line(stdout, output, plan_row):
    """A GPU report's line: its weak-scaling sentence (one line of it), else the plan's row, then its warnings."""
    text = " ".join(stdout.split())
    found = re.search(r"Weak scaling: .*?efficiency of [\d.]+%\.", text)
    warnings = [line.strip() for line in output.splitlines() if line.startswith("placement: warning:")]
    return "; ".join([found.group(0) if found else " ".join(plan_row.split())] + warnings)


def _capture_counts(folder):
    from autodist.graph.item import GraphItem

    item = GraphItem.load(os.path.join(folder, "graph.json"))
    with open(os.path.join(folder, "tf_count.json")) as f:
        counted = json.load(f)
    return {"variables": len(item.trainable_variables()), "parameters": item.parameter_count(),
            "tf_variables": counted.get("variables"), "tf_parameters": counted.get("parameters")}


def run_script(name, corpus, stages, timeout, folder, earlier=()):
    """Every asked stage of one script in ``folder`` (kept between invocations), after ``earlier`` records of
    it; a stage that needs a graph is skipped without a passing capture."""
    script = os.path.join(corpus, name)
    by_stage = {r["stage"]: r for r in earlier}
    commands = _commands(script, folder)
    for stage in stages:
        captured = by_stage.get("capture", {}).get("outcome") == "ok"
        if stage in NEEDS_GRAPH and not captured:
            by_stage[stage] = {"stage": stage, "outcome": "skipped", "line": "no graph (capture did not pass)"}
            continue
        # A stage runs in an empty folder: scripts write files there (os.mkdir of a checkpoint folder fails on
        # the one an earlier invocation left).
        shutil.rmtree(os.path.join(folder, stage), ignore_errors=True)
        os.makedirs(os.path.join(folder, stage))
        record = run_stage(stage, commands[stage], folder, timeout)
        print(f"{name} {stage}: {record['outcome']} ({record['seconds']} s) {record['line']}", flush=True)
        by_stage[stage] = record
    return {"script": name, "stages": [by_stage[s] for s in STAGES if s in by_stage]}


def _provenance(invocations, results):
    """How the results were made: the command, or (merged from several) the invocations' commands; and the scripts
    whose records come from earlier runs that recorded no invocation."""
    commands = sorted({" ".join(i["argv"]) for i in invocations})
    scripts = sorted({s for i in invocations for s in i["scripts"]})
    older = [r["script"] for r in results if r["script"] not in scripts]
    text = f"Command: `{commands[0]}`\n\n" if len(invocations) == 1 else ""
    if len(invocations) > 1:
        text = (f"Merged from {len(invocations)} invocations ({len(scripts)} scripts; each stage's latest record "
                "kept, every record in `realworld.json` with its seconds), with these commands:\n\n"
                + "".join(f"- `{c}`\n" for c in commands) + "\n")
    if older:
        text += (f"Kept from earlier runs that recorded no command ({len(older)} scripts, not run again): "
                 + ", ".join(older) + ".\n\n")
    return text


def _markdown(results, stages, invocations=()):
    head = "| script | " + " | ".join(stages) + " |\n|---|" + "---|" * len(stages) + "\n"
    rows = []
    for r in results:
        by_stage = {s["stage"]: s for s in r["stages"]}
        cells = []
        for stage in stages:
            s = by_stage.get(stage)
            cells.append("" if s is None else f"{s['outcome']}: {s['line']}".replace("|", "\\|")[:160])
        rows.append(f"| {r['script']} | " + " | ".join(cells) + " |")
    counts = _totals(results, stages)
    total = "\n".join(f"- {stage}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts[stage].items()))
                      for stage in stages)
    title = f"# Real-world scripts through autodist ({PRESET}; gpu_report: {GPU_PRESET})"
    return f"{title}\n\n{_provenance(invocations, results)}{total}\n\n{head}" + "\n".join(rows) + "\n"


def _totals(results, stages):
    counts = {stage: {} for stage in stages}
    for r in results:
        for s in r["stages"]:
            counts[s["stage"]][s["outcome"]] = counts[s["stage"]].get(s["outcome"], 0) + 1
    return counts


# The options whose folders are this machine's own: the corpus reads relative to the repository, the scratch
# folders (what --work and an --out outside the repository name) as these names.
PATH_OPTIONS = {"--corpus": None, "--work": "$WORK", "--out": "$OUT"}


def _portable_name(option, path):
    """How ``path``, given to ``option``, reads in the results: relative to the repository where it is the corpus
    or lies inside it, else the option's placeholder."""
    inside = os.path.commonpath([ROOT, os.path.abspath(path)]) == ROOT
    if PATH_OPTIONS[option] is None or inside:
        return os.path.relpath(path, ROOT)
    return PATH_OPTIONS[option]


def _machine_folders(invocations, work):
    """Absolute folder -> the name it reads as, for the default corpus, ``work`` and every folder the
    ``invocations`` name (those recorded already portable are skipped)."""
    folders = {DEFAULT_CORPUS: _portable_name("--corpus", DEFAULT_CORPUS),
               os.path.abspath(work): _portable_name("--work", work)}
    for invocation in invocations:
        argv = invocation["argv"]
        for option, value in zip(argv, argv[1:]):
            if option in PATH_OPTIONS and os.path.isabs(value):
                folders[value.rstrip(os.sep)] = _portable_name(option, value)
    return folders


def _portable(text, folders):
    """``text`` with every folder of ``folders`` written as the name it reads as (longest folders first)."""
    for folder in sorted(folders, key=len, reverse=True):
        text = re.sub(re.escape(folder) + r"(?![\w.-])", lambda _: folders[folder], text)
    return text


def portable_records(results, invocations, work):
    """The results' lines and the invocations' commands with this machine's folders written as any machine reads
    them (:func:`_portable_name`), so that the committed files do not name the folders of whoever ran them."""
    folders = _machine_folders(invocations, work)
    for result in results:
        for record in result["stages"]:
            record["line"] = _portable(record["line"], folders)
    for invocation in invocations:
        invocation["argv"] = [_portable(arg, folders) for arg in invocation["argv"]]
    return results, invocations


def _write(args, results, seconds, invocations):
    """Write the results so far (every script's latest record of each stage) to ``args.out`` .json and .md, with
    the invocations that made them (``invocations``: earlier ones, then this one's)."""
    results, invocations = portable_records(results, invocations, args.work)
    stages = [s for s in STAGES if any(r["stage"] == s for res in results for r in res["stages"])]
    record = {"preset": PRESET, "gpu_preset": GPU_PRESET, "stages": stages,
              "pythonpath": os.environ.get("PYTHONPATH", ""),
              "timeout_s": args.timeout, "machine": platform.processor() or platform.machine(),
              "seconds_this_invocation": round(seconds, 1), "invocations": invocations,
              "totals": _totals(results, stages), "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(record, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(_markdown(results, stages, invocations))
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="folder of scripts (default ../shared/realworld)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these scripts (file names, .py optional)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per stage (default 300)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "realworld"),
                        help="results path without suffix; stages recorded there before and not run again are kept")
    parser.add_argument("--work", help="folder for each script's graph and plans, kept so that a later invocation "
                                       "can plan what an earlier one captured (default: a new temporary folder)")
    args = parser.parse_args(argv)
    names = sorted(f for f in os.listdir(args.corpus) if f.endswith(".py"))
    if args.only:
        wanted = {n if n.endswith(".py") else f"{n}.py" for n in args.only}
        names = [n for n in names if n in wanted]
    earlier, invocations = {}, []
    if os.path.exists(args.out + ".json"):  # stages run before: kept unless run again
        with open(args.out + ".json") as f:
            before = json.load(f)
        earlier, invocations = {r["script"]: r for r in before["results"]}, before.get("invocations", [])
    this = {"argv": ["python", "benchmarks/realworld.py", *(argv if argv is not None else sys.argv[1:])],
            "scripts": names, "stages": args.stages}
    invocations = invocations + [this]
    args.work = args.work or tempfile.mkdtemp(prefix="realworld-")
    started = time.perf_counter()
    for name in names:
        folder = os.path.join(args.work, name[:-3])
        os.makedirs(folder, exist_ok=True)
        earlier[name] = run_script(name, os.path.abspath(args.corpus), args.stages, args.timeout, folder,
                                   earlier.get(name, {}).get("stages", ()))
        record = _write(args, [earlier[n] for n in sorted(earlier)], time.perf_counter() - started, invocations)
    print(json.dumps(record["totals"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
