"""benchmarks/realworld.py records its commands and lines as any machine reads them: the corpus relative to the
repository, the scratch folders (--work, an --out outside the repository) by name; before, the committed results
named the folders of the machine that ran them (``--corpus /work/wt/shared/realworld``, ``/tmp/h47/work/...``)."""

import importlib.util
import os

from tests.conftest import REPO
SPEC = importlib.util.spec_from_file_location("realworld_bench", os.path.join(REPO, "benchmarks", "realworld.py"))
realworld = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(realworld)


def test_commands_and_lines_name_no_folder_of_this_machine():
    corpus = realworld.DEFAULT_CORPUS
    invocations = [{"argv": ["python", "benchmarks/realworld.py", "--corpus", corpus, "--out", "/tmp/x/results/rw",
                             "--work", "/tmp/x/work", "--only", "a"]},
                   {"argv": ["python", "benchmarks/realworld.py", "--only", "b", "--out",
                             os.path.join(REPO, "benchmarks", "results", "realworld")]}]
    results = [{"script": "a.py", "stages": [
        {"stage": "capture", "line": f"captured a: the step at {corpus}/a.py:12"},
        {"stage": "plan", "line": "/tmp/x/work/a/plan.json: predicted step 1 ms; /tmp/x/workspace stays"},
        {"stage": "run", "line": "plan /tmp/realworld-abc/b/run-plan.json"}]}]
    results, invocations = realworld.portable_records(results, invocations, "/tmp/realworld-abc")
    assert [r["line"] for r in results[0]["stages"]] == [
        "captured a: the step at ../shared/realworld/a.py:12",
        "$WORK/a/plan.json: predicted step 1 ms; /tmp/x/workspace stays",
        "plan $WORK/b/run-plan.json"]
    assert invocations[0]["argv"][2:] == ["--corpus", "../shared/realworld", "--out", "$OUT", "--work", "$WORK",
                                          "--only", "a"]
    assert invocations[1]["argv"][-1] == os.path.join("benchmarks", "results", "realworld")
    assert realworld.portable_records(results, invocations, "/tmp/realworld-abc") == (results, invocations)
