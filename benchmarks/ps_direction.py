"""Parameter servers against ring allreduce, in the direction the published figures go.

AutoDist (partitioned PS beats ring for models whose gradients are dominated
by a large embedding, on Ethernet) and BytePS/Horovod (ring wins for dense
CNNs on NVLink + InfiniBand).  Two checks, every baseline simulated:

- the zoo's transformer LM with its vocabulary scaled to 200,000 (two
  205 MB tables: the token embedding, sparse, and the dense LM head) on
  p3.16xlarge:8 (8 nodes of 8 V100, 25 GbE): partitioned-ps beats ring;
- VGG-16 on dgx-a100:8 (NVLink + 8x 200 Gb/s InfiniBand a node): ring beats
  partitioned-ps.

Writes benchmarks/results/ps_direction.json.

    python benchmarks/ps_direction.py [--vocab 200000] [--out PATH]
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

from autodist.io import write_json_atomic
from zoo import MODELS_DIR, REPO, captured, machine

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARED = ("greedy-ps", "partitioned-ps", "ring", "hierarchical", "parallax")
# A wrapper that runs the zoo LM with a larger vocabulary (the script reads VOCAB when it builds).
_BIG_VOCAB_LM = """
import sys
sys.path.insert(0, {models!r})
import transformer_lm
transformer_lm.VOCAB = {vocab}
transformer_lm.main()
"""


def big_vocab_lm(vocab, batch_size=8):
    """The zoo transformer LM with ``vocab`` tokens, captured in a fresh process."""
    from autodist.graph.item import GraphItem

    with tempfile.TemporaryDirectory(prefix="autodist-lm-") as folder:
        script, graph = os.path.join(folder, "lm_big.py"), os.path.join(folder, "graph.json")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(_BIG_VOCAB_LM.format(models=MODELS_DIR, vocab=vocab))
        code = ("import sys; from autodist.graph.capture import capture_script; "
                "capture_script(sys.argv[1], sys.argv[3:]).save(sys.argv[2])")
        subprocess.run([sys.executable, "-c", code, script, graph, "--steps", "1", "--batch-size", str(batch_size)],
                       check=True, cwd=REPO)
        return GraphItem.load(graph)


def compare(graph_item, preset):
    """Step time (s) of every compared baseline of ``graph_item`` on ``preset``."""
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import Problem, Simulator, baselines

    sim = Simulator(Problem(graph_item, load_cluster(preset=preset), CostModel.default()))
    return {name: sim.simulate(baselines.BASELINES[name](sim.problem)).step_time for name in COMPARED}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "ps_direction.json"))
    args = parser.parse_args(argv)
    cases = [
        (f"transformer_lm, vocabulary {args.vocab}", "p3.16xlarge:8", big_vocab_lm(args.vocab), "partitioned-ps",
         "ring"),
        ("vgg16", "dgx-a100:8", captured("vgg16", 16), "ring", "partitioned-ps"),
    ]
    rows = []
    for model, preset, graph_item, winner, loser in cases:
        steps = compare(graph_item, preset)
        held = steps[winner] < steps[loser]
        rows.append({"model": model, "cluster": preset, "step_time": steps, "expected_faster": winner,
                     "than": loser, "ratio": steps[loser] / steps[winner], "holds": held})
        shown = "  ".join(f"{name} {t * 1e3:.1f} ms" for name, t in steps.items())
        print(f"{model} on {preset}: {shown}; {winner} {steps[loser] / steps[winner]:.2f}x faster than {loser}"
              f" ({'as published' if held else 'NOT as published'})")
    write_json_atomic(args.out, {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]),
        "machine": machine(),
        "cases": rows,
    })


if __name__ == "__main__":
    main()
