"""Search throughput: moves per CPU second of the annealing alone, on a captured graph.

Runs ``placement.optimize`` with a fixed number of moves (seed 0, so every
run walks the same strategies) and times ``Annealer.run`` in CPU seconds,
which a shared machine's load disturbs far less than wall clock, and the
set-up before it (the problem, the baselines, the bound).  Compare
two commits by running it from each checkout (``PYTHONPATH=<checkout>``) in
one session; benchmarks/results/placement.md records such a comparison.

    python benchmarks/search_rate.py GRAPH_JSON PRESET MOVES [--batch N] [--tag NAME]
"""

import argparse
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("preset")
    parser.add_argument("moves", type=int)
    parser.add_argument("--batch", type=int, help="re-scale the captured step to this global batch")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)

    import placement.search as search
    from autodist.graph.item import GraphItem
    from autodist.graph.rebatch import at_batch
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import optimize

    item = GraphItem.load(args.graph)
    if args.batch and args.batch != item.job.batch_size:
        item = at_batch(item, args.batch)
    spent = []
    annealing = search.Annealer.run

    def timed(self, *a, **k):
        started = time.process_time()
        try:
            return annealing(self, *a, **k)
        finally:
            spent.append(time.process_time() - started)

    search.Annealer.run = timed
    spec, cost_model = load_cluster(preset=args.preset), CostModel.default()
    started = time.process_time()
    result = optimize(item, spec, cost_model, seed=0, moves=args.moves)
    whole = time.process_time() - started
    moves = result.stats["moves_tried"]
    print(f"{args.tag} batch {item.job.batch_size} {args.preset}: {moves} moves in {spent[0]:.2f} CPU s "
          f"({moves / spent[0]:.0f} moves per CPU s), set-up and final simulation {whole - spent[0]:.2f} CPU s; "
          f"step {result.simulation.step_time * 1e3:.4f} ms")


if __name__ == "__main__":
    main()
