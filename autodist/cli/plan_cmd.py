"""``autodist plan SOURCE --cluster FILE | --preset NAME[:N]``: search and write a plan."""

from __future__ import annotations

import shlex
import sys

from autodist.errors import InputError


class ProgressBar:
    """A bar on a stream, drawn as ``placement.optimize`` reports progress.

    On a terminal one line is redrawn at every percent; elsewhere (a log
    file, a pipe) a new line is written every quarter.
    """

    def __init__(self, stream=None, width=30):
        self.stream = stream or sys.stderr
        self.width = width
        self.step = 1 if self.stream.isatty() else 25
        self._shown = -1

    def __call__(self, fraction, best_step_time):
        percent = int(round(100 * max(0.0, min(1.0, fraction))))
        if percent // self.step == self._shown // self.step and self._shown >= 0:
            return
        self._shown = percent
        filled = self.width * percent // 100
        bar = "#" * filled + "." * (self.width - filled)
        start, end = ("\r", "") if self.step == 1 else ("", "\n")
        self.stream.write(f"{start}searching [{bar}] {percent:3d}%  best {best_step_time * 1e3:.3f} ms/step{end}")
        self.stream.flush()

    def close(self):
        if self._shown >= 0 and self.step == 1:
            self.stream.write("\n")
            self.stream.flush()


def register(subparsers):
    from autodist.cli.emit_cmd import add_manifest_arguments
    from autodist.resource_spec import add_cluster_arguments

    p = subparsers.add_parser("plan", help="search the best placement and write plan.json")
    p.add_argument("source", help="training script (.py), graph.json, GraphDef (.pb/.pbtxt) or SavedModel directory")
    p.add_argument("--script-args", default="", metavar="ARGS", help="arguments of a training script, one string")
    add_cluster_arguments(p)
    p.add_argument("-o", "--output", default="plan.json", metavar="FILE", help="where to write the plan (default plan.json)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--budget", type=float, default=10.0, metavar="SECONDS", help="search budget (default 10)")
    p.add_argument("--emit-k8s", metavar="DIR", help="also write Kubernetes manifests for the plan here")
    add_manifest_arguments(p)
    p.set_defaults(func=run)


def summary(plan):
    pred = plan.prediction
    jobs = ", ".join(f"{len(plan.tasks_of(j))} {j}" for j in ("chief", "worker", "ps") if plan.tasks_of(j))
    return (
        f"predicted step {pred['step_time'] * 1e3:.3f} ms (compute {pred['compute_time'] * 1e3:.3f} ms, "
        f"exposed communication {pred['exposed_comm_time'] * 1e3:.3f} ms); tasks: {jobs}"
    )


def run(args):
    from autodist.api import graph_of
    from autodist.api import plan as make_plan
    from autodist.cli.emit_cmd import manifests_for, options_from_args
    from autodist.resource_spec import cluster_from_args

    if args.budget <= 0:
        raise InputError(f"must be positive, got {args.budget}", field="--budget")
    if args.emit_k8s:
        options_from_args(args)  # bad manifest options fail before the search
    resource_spec = cluster_from_args(args)
    graph_item = graph_of(args.source, shlex.split(args.script_args))
    bar = ProgressBar()
    try:
        plan = make_plan(graph_item, resource_spec, seed=args.seed, budget_s=args.budget, progress=bar)
    finally:
        bar.close()
    objects = manifests_for(plan, args) if args.emit_k8s else []
    plan.save(args.output)
    print(f"{args.output}: {summary(plan)}")
    if objects:
        from launcher.manifests import write_manifests

        for path in write_manifests(objects, args.emit_k8s):
            print(path)
    return 0
