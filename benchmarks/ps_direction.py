"""Parameter servers against ring allreduce, in the directions the published figures go.

Published: AutoDist measured partitioned PS at 1.5x ring allreduce for
BERT-large on 8 g4dn.12xlarge, an allreduce that densifies sparse gradients
(IndexedSlices) as Horovod's ``sparse_as_dense`` does; ring beats PS for
dense CNNs on NVLink + InfiniBand (BytePS, Horovod).  Every strategy is
simulated; P is the cluster's nodes (one PS task each), n its GPUs:

- the zoo's transformer LM with its vocabulary scaled to 200,000 (two
  205 MB tables: the token embedding, sparse, and the dense LM head) on
  p3.16xlarge:8 (8 nodes of 8 V100, 25 GbE), the zoo's 8 sequences on each
  of its 64 GPUs (``--global-batch 512``).  Partitioned PS against ring
  with the embedding densified (``ring-sparse-as-dense``: the published
  comparison), and against ring with its rows all-gathered (as TensorFlow
  2.21's MultiWorkerMirroredStrategy and autodist's runtime sync it; no
  published figure), where PS can win by the LM head's bytes only: a node's
  NIC carries 2(P-1)/P of it each way under PS, 2(n-1)/n under the flat ring.
- the zoo's wide-and-deep recommender on the same cluster, each of its 64
  replicas at the zoo's batch of 256: nearly all its gradient is embedding
  rows, which the flat ring all-gathers through every NIC ((n-1) replicas'
  rows each way) while a node's NIC carries 2(P-1)/P of its own replicas'
  rows each way under PS: 14 replicas' rows against 63.
- VGG-16 on dgx-a100:8 (NVLink + 8x 200 Gb/s InfiniBand a node), 16 images
  on each of its 64 GPUs: ring beats partitioned-ps.
- VGG-16 on p3.16xlarge:2 (16 V100, 25 GbE TCP), 64 images a GPU, without XLA,
  as Horovod's README measured it (16 Pascal GPUs on 25 Gb/s: "Distributed
  TensorFlow" 74.7 img/s, Horovod with NCCL 1,308.7 over TCP and 1,787.4 over
  RDMA, 0.04-0.06 of it): TensorFlow 1's parameter servers as tf_cnn_benchmarks
  ran them (``tensorflow-ps``: every GPU pushes and pulls its own copy,
  placement.baselines.tensorflow_ps_step) against Horovod's step
  (``horovod``, placement.baselines.horovod_step).
- the zoo's BERT-large on g4dn.12xlarge:8 (32 T4, 50 GbE TCP), 8 sequences of
  128 a GPU (AutoDist's examples/benchmark/bert.py), without XLA (TensorFlow
  2.0.1 graph mode, on both sides): AutoDist's PartitionedPS, whose local
  proxies pull each shard as soon as it is updated (``autodist-ps``,
  placement.baselines.autodist_ps_step), against Horovod with sparse
  gradients densified (``horovod-sparse-as-dense``), AutoDist's published
  1.5x (petuum.github.io/autodist, "Performance Analysis"); autodist's own
  runtime's ``partitioned-ps`` reads every shard at the next step's start.

Every job goes through what ``placement report`` does to it (``--xla``,
``--global-batch``: with_job_options, planned_batch), then the baselines the
report lists and the two references the published figures were measured on.
Each comparison prints whether it goes as published (or as the issue
expects, or as the bytes predict), with the reason it should; the results
also hold every strategy's busiest NIC seconds.  Simulated only: the LM's
custom training loop runs under allreduce plans alone (the runtime runs PS
plans for ``model.fit`` scripts, such as the recommender).

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
from zoo import BATCH_SIZES, MODELS_DIR, REPO, captured, machine

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARED = ("greedy-ps", "partitioned-ps", "ring", "hierarchical", "parallax")
DENSIFIED = "ring-sparse-as-dense"
HOROVOD, HOROVOD_DENSE, TF_PS, AUTODIST_PS = "horovod", "horovod-sparse-as-dense", "tensorflow-ps", "autodist-ps"
ETHERNET, NVLINK_IB, T4_NODES = "p3.16xlarge:8", "dgx-a100:8", "g4dn.12xlarge:8"
# A wrapper that runs the zoo LM with a larger vocabulary (the script reads VOCAB when it builds).
_BIG_VOCAB_LM = """
import sys
sys.path.insert(0, {models!r})
import transformer_lm
transformer_lm.VOCAB = {vocab}
transformer_lm.main()
"""
_PUBLISHED_PS = ("AutoDist's 1.5x: its allreduce densified sparse gradients, so the whole embedding went through "
                 "the ring where PS moves its touched rows")
_GATHERED = ("no published figure: the ring all-gathers the embedding's touched rows, so only the LM head's bytes "
             "differ much, 2(P-1)/P = 1.75 of it per NIC each way under PS and 2(n-1)/n = 1.97 under the flat "
             "ring: PS can be at most 1.13x faster, less its client's dispatch; hierarchical, on collective ops, runs the same ring)")
_ROWS = ("the flat ring all-gathers 63 replicas' rows through every NIC each way, partitioned PS about 14, "
         "less its client's dispatch")
_RING_WINS = "BytePS and Horovod: NCCL's ring over InfiniBand with RDMA against PS over gRPC/TCP, for a dense CNN"
_HOROVOD_README = ("Horovod's README (2017), 16 Pascal GPUs on 25 Gb/s, VGG-16 at 64 a GPU: Distributed TensorFlow "
                   "74.7 img/s, Horovod (NCCL) 1,308.7 over TCP and 1,787.4 over RDMA: TensorFlow's PS at 0.04-0.06 "
                   "of Horovod, every GPU pushing its own gradient of the 528 MiB model through its node's NIC")
_AUTODIST_BERT = ("AutoDist's performance analysis (TensorFlow 2.0.1, 8 g4dn.12xlarge): PartitionedPS about 1.5x "
                  "Horovod for BERT-large; its PS sums a node's GPUs before one push (2(P-1)/P = 1.75 of the gradient "
                  "through each NIC, Horovod's ring 2(n-1)/n = 1.94 of it, the embedding densified) and its proxies "
                  "pull each shard back as soon as it is updated, beside the pushes still going")


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


def compare(graph_item, preset, xla=None, global_batch=None):
    """Per strategy: ``(step seconds, busiest NIC's busy seconds)``.

    The job as ``placement report --preset PRESET [--xla X] [--global-batch N]``
    plans it (with_job_options, planned_batch); the compared baselines, ring
    with sparse gradients densified where the model has any, and the
    references the published figures were measured on: Horovod's step
    (``horovod``; ``horovod-sparse-as-dense`` where the model has sparse
    gradients), TensorFlow 1's parameter servers (``tensorflow-ps``) and
    AutoDist's PartitionedPS (``autodist-ps``).
    """
    from autodist.api import with_job_options
    from autodist.graph.semantics import planned_batch
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import Problem, Simulator, baselines

    spec = load_cluster(preset=preset)
    item = planned_batch(with_job_options(graph_item, xla=xla), len(spec.compute_devices()), global_batch)
    problem = Problem(item, spec, CostModel.default())
    sim = Simulator(problem)
    strategies = {name: baselines.named(name).build(problem) for name in COMPARED}
    if problem.sparse_gradients:
        strategies[DENSIFIED] = baselines.sparse_as_dense(strategies["ring"], problem.sparse_gradients)
    results = {name: sim.simulate(strategy) for name, strategy in strategies.items()}
    results[HOROVOD] = baselines.horovod_step(problem)
    if problem.sparse_gradients:
        results[HOROVOD_DENSE] = baselines.horovod_step(problem, dense=True)
    results[TF_PS] = baselines.tensorflow_ps_step(problem)
    results[AUTODIST_PS] = baselines.autodist_ps_step(problem)
    return {name: (result.step_time, max((t for link, t in result.link_busy.items() if "/nic" in link), default=0.0))
            for name, result in results.items()}


def replicas(preset):
    from autodist.resource_spec import load_cluster

    return len(load_cluster(preset=preset).compute_devices())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "ps_direction.json"))
    args = parser.parse_args(argv)
    if args.vocab < 1:
        parser.exit(2, f"ps_direction: error: --vocab must be at least 1, got {args.vocab}\n")
    # Every GPU of the cluster a replica, each at the zoo's batch (a global batch of fewer samples than GPUs leaves
    # the rest without a replica: placement.problem.Problem.max_replicas).
    recommender_batch = replicas(ETHERNET) * BATCH_SIZES["wide_deep"]
    lm_batch, cnn_batch = replicas(ETHERNET) * 8, replicas(NVLINK_IB) * 16
    # (model, cluster, graph, [(expected faster, than, what the expectation rests on, why)][, report options])
    cases = [
        (f"transformer_lm, vocabulary {args.vocab}, 8 a GPU, global batch {lm_batch}", ETHERNET,
         big_vocab_lm(args.vocab),
         [("partitioned-ps", DENSIFIED, "published", _PUBLISHED_PS),
          ("partitioned-ps", "ring", "the issue expects", _GATHERED)], {"global_batch": lm_batch}),
        (f"wide_deep, batch {recommender_batch}", ETHERNET, captured("wide_deep", recommender_batch),
         [("partitioned-ps", "ring", "the bytes predict", _ROWS)]),
        (f"vgg16, 16 a GPU, global batch {cnn_batch}", NVLINK_IB, captured("vgg16", 16),
         [("ring", "partitioned-ps", "published", _RING_WINS)], {"global_batch": cnn_batch}),
        ("vgg16, 64 a GPU, global batch 1024, --xla off", "p3.16xlarge:2", captured("vgg16", 64),
         [(HOROVOD, TF_PS, "published", _HOROVOD_README)], {"xla": "off", "global_batch": 1024}),
        ("bert_large, 8 a GPU, global batch 256, --xla off", T4_NODES, captured("bert_large", 8),
         [(AUTODIST_PS, HOROVOD_DENSE, "published", _AUTODIST_BERT)], {"xla": "off", "global_batch": 256}),
    ]
    rows = []
    for model, preset, graph_item, checks, *options in cases:
        options = options[0] if options else {}
        found = compare(graph_item, preset, **options)
        steps = {name: step for name, (step, _) in found.items()}
        print(f"{model} on {preset}: " + "  ".join(f"{name} {t * 1e3:.1f} ms" for name, t in steps.items()))
        verdicts = []
        for winner, loser, basis, why in checks:
            held = steps[winner] < steps[loser]
            verdicts.append({"expected_faster": winner, "than": loser, "ratio": steps[loser] / steps[winner],
                             "holds": held, "as": basis, "why": why})
            print(f"  {winner} {steps[loser] / steps[winner]:.2f}x faster than {loser} "
                  f"({'as' if held else 'NOT as'} {basis}: {why})")
        rows.append({"model": model, "cluster": preset, "report_options": options, "step_time": steps,
                     "busiest_nic_seconds": {name: nic for name, (_, nic) in found.items()}, "checks": verdicts})
    write_json_atomic(args.out, {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]),
        "machine": machine(),
        "cases": rows,
    })


if __name__ == "__main__":
    main()
