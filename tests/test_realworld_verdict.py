"""benchmarks/realworld.py judges a stage by the line that carries its figures, not by its exit status alone."""

import importlib.util
import os

from tests.conftest import REPO

SPEC = importlib.util.spec_from_file_location("realworld_bench", os.path.join(REPO, "benchmarks", "realworld.py"))
realworld = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(realworld)

ROW = "ring                   7.47       7.06-7.94         7.26   1.03             1              1"


def test_bench_is_judged_by_its_ring_row_not_by_a_script_line_holding_ring():
    """tf_docs_keras_text_classification prints random words before bench's table (one held "ring")."""
    stdout = "Review tf.Tensor(b'wbftcgvc rgk aprojij bring jxt')\n" + ROW + "\n"
    assert realworld.verdict("bench", 0, stdout, stdout, False) == ("ok", ROW)


def test_a_stage_that_exits_0_without_its_figures_failed():
    outcome, line = realworld.verdict("bench", 0, "Review tf.Tensor(b'bring')\n", "", False)
    assert outcome == "failed" and "without a line" in line
