"""The step as it runs on the target: Keras' jit_compile='auto' resolved per device, XLA's fusion priced, the
runtime compiling replicas as priced (issue 42)."""

import copy
import re

import pytest

from autodist.graph.item import JobInfo
from autodist.graph.xla import resolve_xla
from autodist.resource_spec.presets import DEVICE_MODELS
from cost_models.gpu import GpuStep
from cost_models.step_table import step_table

# A default Keras 3 compile (jit_compile="auto", or what argv[1] says) of a small CNN with a BatchNormalization.
SCRIPT = """
import sys
import keras
import numpy as np

asked = {"auto": "auto", "on": True, "off": False}[sys.argv[1] if len(sys.argv) > 1 else "auto"]
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                          keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
options = {} if asked == "auto" else {"jit_compile": asked}
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", **options)
model.fit(np.zeros((16, 8, 8, 3), "float32"), np.zeros(16, "int32"), batch_size=8)
"""


@pytest.fixture(scope="module")
def bn_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("xla") / "bn_cnn.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.fixture(scope="module")
def captured(bn_script):
    """The script captured (on this CPU-only host) with jit_compile auto, on and off."""
    from autodist.graph.capture import capture_script

    return {asked: capture_script(bn_script, [asked]) for asked in ("auto", "on", "off")}


def test_a_default_keras_compile_is_recorded_as_auto_and_runs_xla_on_a_gpu_not_on_a_cpu(captured):
    job = captured["auto"].job
    assert (job.jit_compile, job.jit_supported, job.distribute_strategy) == ("auto", True, "")
    assert job.xla is False  # what Keras resolved on this CPU-only host
    assert resolve_xla(job, "GPU").on is True
    assert resolve_xla(job, "CPU").on is False
    assert "auto" in resolve_xla(job, "GPU").reason


def test_an_explicit_jit_compile_holds_on_every_device(captured):
    for asked, on in (("on", True), ("off", False)):
        job = captured[asked].job
        assert job.jit_compile == asked
        assert {resolve_xla(job, kind).on for kind in ("GPU", "CPU")} == {on}


@pytest.mark.parametrize("fields, on", [
    ({"jit_compile": "auto"}, True),
    ({"jit_compile": "auto", "distribute_strategy": "OneDeviceStrategy"}, False),
    ({"jit_compile": "auto", "jit_supported": False}, False),
    ({"xla": True}, True),  # a graph saved before jit_compile was recorded
    ({"xla": False}, False),
])
def test_keras_rule_for_auto_on_a_gpu(fields, on):
    assert resolve_xla(JobInfo(**fields), "GPU").on is on


# The recurrent layers of keras.io's bidirectional LSTM example (corpus: keras_io_bidirectional_lstm_imdb), a GRU,
# and an LSTM whose ReLU keeps it off cuDNN.
RNN_SCRIPT = """
import keras
import numpy as np

inputs = keras.Input((None,), dtype="int32")
x = keras.layers.Embedding(50, 8)(inputs)
x = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(x)
x = keras.layers.GRU(8, return_sequences=True, name="gru")(x)
x = keras.layers.LSTM(8, activation="relu", name="relu_lstm")(x)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(np.zeros((16, 12), "int32"), np.zeros(16, "float32"), batch_size=8)
"""


def test_an_lstm_or_gru_on_cudnn_turns_keras_auto_off_on_a_gpu_and_says_how_it_is_priced(tmp_path, capsys):
    """On a GPU Keras runs an LSTM or GRU whose settings allow it on cuDNN and then compiles nothing with XLA
    (keras/src/layers/rnn/lstm.py); capture, on a host without a GPU, sees the loop and a model XLA could compile.
    The job names the layers; the step is priced without XLA on a GPU, and the report says that the layers are
    priced as cuDNN runs them (tests/test_cudnn_rnn.py)."""
    from autodist.cli import placement_main
    from autodist.graph.capture import capture_script

    script = tmp_path / "rnn.py"
    script.write_text(RNN_SCRIPT)
    item = capture_script(str(script))
    job = item.job
    assert (job.jit_compile, job.jit_supported) == ("auto", True)  # as Keras resolved it on this CPU-only host
    # (Keras suffixes a layer's name where this test process built one of that name before)
    assert sorted(re.sub(r"(_\d+)+$", "", name) for name in job.cudnn_rnns) == ["backward_lstm", "forward_lstm", "gru"]
    choice = resolve_xla(job, "GPU")
    assert choice.on is False and "forward_lstm" in choice.reason and "cuDNN" in choice.reason
    assert resolve_xla(job, "CPU").on is False
    graph = tmp_path / "rnn.json"
    item.save(graph)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        placement_main(["report", str(graph), "--preset", "p3.16xlarge:1", "--budget", "0.3"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    xla_row = " ".join(out.split("\nXLA")[1].split("\ncosts on")[0].split())
    assert xla_row.startswith("off") and "cuDNN" in xla_row
    assert "priced as cuDNN's kernels" in xla_row


def _asking(item, choice):
    """A copy of ``item`` whose job asks for XLA ``choice`` (as ``--xla`` does)."""
    from autodist.api import with_job_options

    return with_job_options(copy.deepcopy(item), xla=choice)


ONE_V100 = ("name: one-v100\nnodes:\n  - name: gpu\n    count: 1\n    cpus: {model: xeon-e5-2686v4-2s}\n"
            "    gpus: {model: V100-16GB, count: 1}\n")


def _bn_forward_kernels(item, xla):
    """Names of the BatchNormalization's forward ops that launch a kernel of their own on a V100."""
    device = DEVICE_MODELS["V100-16GB"].device("V100-16GB", "n", 0)
    table = step_table(item)
    step = GpuStep(table, device, "fp32", xla)
    launching = step._launching(xla)
    return [(name, table["op_type"][i]) for i, name in enumerate(item.ops)
            if "batch_normalization" in name and table["phase"][i] == "forward" and launching[i]]


def test_keras_batch_norm_runs_fused_under_xla(captured):
    """Keras 3 computes batch norm from primitive ops: without XLA each launches a kernel; under XLA the
    normalisation is one fused elementwise chain inside its consumer's kernel, and only the two moment
    reductions (the variance reads the mean, so XLA cannot fuse them into one) launch."""
    item = captured["auto"]
    unfused = _bn_forward_kernels(item, False)
    fused = _bn_forward_kernels(item, True)
    assert len(unfused) >= 8
    assert sorted(t for _, t in fused) == ["Mean", "Mean"]


def test_the_plan_and_the_runtime_compile_the_step_as_priced(captured, tmp_path):
    from autodist.api import make_plan
    from launcher.runtime.layout import RunLayout

    cluster = tmp_path / "one-v100.yaml"
    cluster.write_text(ONE_V100)
    for choice, on in (("auto", True), ("off", False), ("on", True)):
        plan = make_plan(_asking(captured["auto"], choice), str(cluster), moves=1)
        assert plan.graph["xla"] is on, choice
        assert RunLayout.from_plan(plan).jit_compile("GPU") is on  # what a replica on a GPU builds its step with
    cpu_plan = make_plan(_asking(captured["auto"], "auto"), "cpu-local:1", moves=1)
    assert cpu_plan.graph["xla"] is False


def test_xla_prices_a_gpu_step_faster_and_in_less_memory(captured, tmp_path):
    """The same ResNet-like step priced on one V100 under --xla on and off: fused chains move fewer bytes."""
    from autodist.api import make_plan

    cluster = tmp_path / "one-v100.yaml"
    cluster.write_text(ONE_V100)
    predicted = {}
    for choice in ("on", "off"):
        plan = make_plan(_asking(captured["auto"], choice), str(cluster), moves=1)
        gpu = [d for d in plan.prediction["memory"] if "GPU" in d]
        predicted[choice] = (plan.prediction["step_time"], plan.prediction["memory"][gpu[0]])
    assert predicted["on"][0] < predicted["off"][0]
    assert predicted["on"][1] < predicted["off"][1]


def test_run_refuses_an_xla_setting_the_plan_was_not_priced_with(captured, bn_script, tmp_path):
    """Replicas compile the step as the plan priced it: another --xla is one line, exit 2, nothing run, saying
    why the plan was priced so."""
    import subprocess
    import sys

    from autodist.api import make_plan

    plan_path = tmp_path / "plan.json"
    make_plan(_asking(captured["auto"], "off"), "cpu-local:1", moves=1).save(str(plan_path))
    out = subprocess.run([sys.executable, "-m", "autodist", "run", "--plan", str(plan_path), "--xla", "on",
                          bn_script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "--xla" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "the job asks for no XLA" in out.stderr


TWO_V100 = ONE_V100.replace("one-v100", "two-v100").replace("count: 1}", "count: 2}")


def test_a_plan_one_client_drives_is_priced_and_reported_without_xla(captured, tmp_path):
    """PS and hybrid plans run as the single client's one uncompiled tf.function (launcher.runtime.trainer): a job
    that asks for XLA is priced there as the same job without it, and the plan says so; the plan on collective ops
    (each replica's own step, compiled as priced) keeps XLA."""
    from autodist.api import cluster_of, make_plan
    from cost_models import CostModel
    from placement import Problem, Simulator
    from autodist.plan import Plan
    from autodist.strategy import VarSync
    from placement.baselines import named

    spec = cluster_of(str(_write(tmp_path, "two-v100.yaml", TWO_V100)))
    problems = {choice: Problem(_asking(captured["auto"], choice), spec, CostModel.default()) for choice in ("on", "off")}
    ps = {c: Simulator(p).simulate(named("greedy-ps").build(p)) for c, p in problems.items()}
    assert ps["on"].compute_time == ps["off"].compute_time and ps["on"].memory == ps["off"].memory
    ring = {c: Simulator(p).simulate(named("ring").build(p)) for c, p in problems.items()}
    assert ring["on"].compute_time < ring["off"].compute_time
    # A plan with a PS variable: the plan records the step as it runs.
    problem = problems["on"]
    strategy = named("ring").build(problem)
    first = next(iter(strategy.sync))
    strategy.sync[first] = VarSync("ps", ps_tasks=(0,))
    strategy.ps_devices = list(problem.ps_candidates[:1])
    plan = Plan.from_strategy(problem.graph_item, spec, strategy, Simulator(problem).simulate(strategy), "m", 0)
    assert plan.graph["xla"] is False and "one client" in plan.graph["xla_reason"]
    assert make_plan(_asking(captured["auto"], "on"), spec, moves=1, allreduce_only=True).graph["xla"] is True


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _priced_plan(item, spec, replicas):
    """The plan of ``item`` with every variable allreduced by ring over ``replicas`` (lists of device names),
    priced by the simulator, and the Problem share its step was priced on."""
    from autodist.plan import Plan
    from autodist.strategy import Strategy, VarSync
    from cost_models import CostModel
    from placement import Problem, Simulator

    sync = {v.name: VarSync("allreduce", algorithm="ring", bucket=0) for v in item.trainable_variables()}
    strategy = Strategy(replicas=replicas, sync=sync, ps_devices=[])
    problem = Problem(item, spec, CostModel.default())
    simulation = Simulator(problem).simulate(strategy)
    share = problem.at_replicas(len(replicas), problem.micro_batches_of(strategy))
    return Plan.from_strategy(item, spec, strategy, simulation, "m", 0), share, simulation


def test_a_jit_compiled_step_on_two_cpu_replicas_is_priced_and_reported_without_xla(captured):
    """A Keras model compiled with jit_compile=True on cpu-local:2: its two replicas sum gradients with collectives
    XLA does not compile on CPUs, so the runtime runs their step uncompiled; the plan prices it so (memory as the
    uncompiled job's) and the report says why.  On one replica the step runs, and is priced, compiled."""
    from autodist.api import cluster_of
    from autodist.report import build_report, render

    spec = cluster_of("cpu-local:2")
    two = [["local-0/CPU:0"], ["local-1/CPU:0"]]
    plan, share, simulation = _priced_plan(captured["on"], spec, two)
    assert plan.graph["xla"] is False and "2 CPU replicas" in plan.graph["xla_reason"]
    assert share.xla is False
    assert simulation.memory == _priced_plan(captured["off"], spec, two)[2].memory
    text = render(build_report(plan, captured["on"]), "text")
    (row,) = [line for line in text.splitlines() if line.lstrip().startswith("XLA")]
    assert "off" in row and "2 CPU replicas" in row
    one, share, _ = _priced_plan(captured["on"], spec, [["local-0/CPU:0"]])
    assert one.graph["xla"] is True and share.xla is True
    assert "XLA" in one.graph["xla_reason"] and "on" in render(build_report(one, captured["on"]), "text")


def test_the_runtime_compiles_every_replica_as_the_plan_priced_it(captured, tmp_path):
    """For every job setting (jit_compile auto, on, off), device kind and replica count: the jit_compile a replica
    builds its step with (launcher.runtime.layout.RunLayout.jit_compile) is the XLA the plan and the simulator's
    Problem priced the step with."""
    from autodist.api import cluster_of
    from launcher.runtime.layout import RunLayout

    clusters = {"CPU": cluster_of("cpu-local:2"), "GPU": cluster_of(str(_write(tmp_path, "two.yaml", TWO_V100)))}
    replica_sets = {"CPU": [[["local-0/CPU:0"]], [["local-0/CPU:0"], ["local-1/CPU:0"]]],
                    "GPU": [[["gpu-0/GPU:0"]], [["gpu-0/GPU:0"], ["gpu-0/GPU:1"]]]}
    seen = set()
    for asked, item in captured.items():
        for kind, spec in clusters.items():
            for replicas in replica_sets[kind]:
                plan, share, _ = _priced_plan(item, spec, replicas)
                runs = RunLayout.from_plan(plan).jit_compile(kind)
                assert runs is plan.graph["xla"] is share.xla, (asked, kind, len(replicas))
                seen.add((asked, kind, len(replicas), runs))
    assert ("on", "CPU", 1, True) in seen and ("on", "CPU", 2, False) in seen and ("on", "GPU", 2, True) in seen
