"""GPU pricing: kernels TensorFlow really runs, precision, liveness memory, gradient accumulation.

On real captured graphs (conftest's MLP, a Keras model under mixed_float16)
and on the shipped published-figure step tables; one hand-built toy graph
checks the liveness sweep against a peak computed by hand.
"""

import csv
import os
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

from autodist.api import with_job_options
from autodist.cli import placement_main
from autodist.errors import AutoDistError, CostModelError, InputError
from autodist.graph.item import GraphItem, JobInfo, OpInfo
from autodist.resource_spec import load_cluster
from autodist.resource_spec.presets import DEVICE_MODELS
from cost_models import CostModel, gradient_bytes
from cost_models.gpu import GpuKernelParams, GpuStep, architecture_of, runs_as
from cost_models.fitting.gpu_calibration import device_of
from cost_models.memory import live_peak
from cost_models.fitting.published import CALIBRATION_CSV, COLUMNS, published_step, read_calibration
from cost_models.step_table import step_table
from placement import Problem, Simulator, baselines

NO_KERNEL = ("Const", "Identity", "ReadVariableOp", "Reshape", "Shape", "NoOp", "Placeholder")


def _autodist(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autodist", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def _copy(item):
    return GraphItem.from_dict(item.to_dict())


def test_ops_that_launch_no_kernel_cost_nothing_on_a_gpu(mlp_graph):
    device = load_cluster(preset="dgx-h100").gpus()[0]
    costs = CostModel.default().op_costs(mlp_graph, device)
    no_kernel = [n for n, op in mlp_graph.ops.items() if op.type in NO_KERNEL]
    assert len(no_kernel) > 20
    assert all(costs[n].seconds == 0 and costs[n].step_seconds == 0 for n in no_kernel)
    matmuls = [n for n, op in mlp_graph.ops.items() if op.type == "MatMul"]
    assert matmuls and all(costs[n].seconds > 0 for n in matmuls)


def test_products_no_published_figure_of_the_architecture_runs_are_assumed(mlp_graph):
    """The fit records which kernel classes each architecture's figures exercise: Hopper's only run half-precision
    matrix products (BERT, G33/G34), so a tf32 job's MatMuls on an H100 are assumed, and said so in the report;
    on an A100 (TF32 BERT, G13-G17) they are calibrated."""
    from autodist.api import make_plan
    from autodist.report import build_report, render, schema

    params = GpuKernelParams.load()
    assert params.covers("hopper", "matmul_half") and not params.covers("hopper", "conv_half")
    assert params.covers("ampere", "matmul_tf32") and params.covers("volta", "conv_fp32")
    assert mlp_graph.job.precision == "tf32"
    matmuls = {n for n, op in mlp_graph.ops.items() if op.type == "MatMul" and op.flops}
    for preset, assumed in (("dgx-h100", matmuls), ("dgx-a100", set())):
        costs = CostModel.default().op_costs(mlp_graph, load_cluster(preset=preset).gpus()[0])
        assert {n for n, c in costs.items() if c.source == "assumed"} == assumed, preset
        assert {c.source for n, c in costs.items() if n not in assumed} == {"calibrated"}, preset
    plan = make_plan(mlp_graph, "dgx-h100:1", budget_s=0.2)
    doc = build_report(plan, mlp_graph)
    jsonschema.validate(doc, schema())
    (gpu,) = [d for d in doc["costs"]["devices"] if d["kind"] == "GPU"]
    assert gpu["basis"] == "partly-calibrated" and list(gpu["assumed_kernels"]) == ["matmul_tf32"]
    assert 0 < gpu["assumed_kernels"]["matmul_tf32"] < 1
    text = render(doc)
    assert "matmul_tf32" in text and "ASSUMED" in text


def test_a_p100_named_as_nvidia_smi_names_it_runs_fp32_on_cuda_cores_and_is_priced_as_assumed(tmp_path, cnn_graph):
    """Pascal has no tensor cores and no published figure of the calibration set: a TF32 job runs as fp32, its
    convolutions pay no NCHW transposes, and every kernel it launches is priced with the shared values, as assumed."""
    cluster = tmp_path / "p100.yaml"
    cluster.write_text("name: p100\nnodes:\n  - name: box\n    gpus: {model: Tesla-P100-SXM2-16GB, count: 2}\n")
    spec = load_cluster(str(cluster))
    gpu = spec.gpus()[0]
    assert gpu.model == "P100-SXM2" and architecture_of(gpu.model) == "pascal"
    assert not GpuKernelParams.load().calibrated("pascal")
    costs = CostModel.default().op_costs(cnn_graph, gpu)
    assert {c.source for c in costs.values() if c.seconds > 0} == {"assumed"}
    step = GpuStep(step_table(cnn_graph), gpu, cnn_graph.job.precision, xla=None)
    assert cnn_graph.job.precision == "tf32" and step.kinds["fp32"][step.conv].all() and step.conv.sum() == 2
    assert not any(moved.any() for moved in step.transposed_bytes.values())
    a100 = GpuStep(step_table(cnn_graph), device_of("A100-40GB"), cnn_graph.job.precision, xla=None)
    assert (a100.transposed_bytes[False][a100.conv] > 0).all()


def test_bias_and_activation_after_a_matmul_are_fused_away_under_xla_only(mlp_graph):
    """XLA runs them in the product's kernel; without XLA TensorFlow runs them apart (cuBLASLt is off)."""
    table = step_table(mlp_graph)
    fused = {t for t, f in zip(table["op_type"], table["fused"]) if f}
    assert fused == {"BiasAdd", "Relu"} and not table["remapped"].any()


def test_precision_moves_gpu_time_the_way_tensor_cores_do(mlp_graph):
    """TF32 and fp16 products run faster than FP32 on an A100; a GPU without TF32 (V100) prices tf32 as fp32."""
    model = CostModel.default()
    a100 = load_cluster(preset="p4d.24xlarge").gpus()[0]
    v100 = load_cluster(preset="p3.16xlarge").gpus()[0]
    step = {}
    for precision in ("fp32", "tf32", "fp16"):
        item = with_job_options(_copy(mlp_graph), precision=precision)
        for device in (a100, v100):
            costs = model.op_costs(item, device)
            step[precision, device.model] = sum(c.seconds for n, c in costs.items()
                                                if item.ops[n].type == "MatMul")
    assert step["tf32", "A100-40GB"] < step["fp32", "A100-40GB"]
    assert step["fp16", "A100-40GB"] < step["fp32", "A100-40GB"]
    assert step["tf32", "V100-16GB"] == step["fp32", "V100-16GB"]


def test_mixed_float16_capture_records_the_policy_and_halves_float16_gradients():
    import keras

    from autodist.graph.capture import capture_step
    from tests.conftest import _keras_step

    def capture(policy, hidden_dtype=None):
        keras.mixed_precision.set_global_policy(policy)
        try:
            model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, dtype=hidden_dtype, name="hidden"),
                                      keras.layers.Dense(1, dtype="float32", name="out")], name=f"mp_{policy}")
            opt = keras.optimizers.SGD(0.1)
            step = _keras_step(model, opt, keras.losses.MeanSquaredError())
            x, y = np.zeros((8, 32), np.float32), np.zeros((8, 1), np.float32)
            return capture_step(step, x, y)
        finally:
            keras.mixed_precision.set_global_policy("float32")

    full, mixed = capture("float32"), capture("mixed_float16", hidden_dtype="float16")
    assert (mixed.job.precision, mixed.job.dtype_policy) == ("fp16", "mixed_float16")
    assert full.job.precision in ("fp32", "tf32") and full.job.dtype_policy == "float32"
    full_kernel = next(v for v in full.trainable_variables() if v.name.endswith("hidden/kernel"))
    mixed_kernel = next(v for v in mixed.trainable_variables() if v.name.endswith("hidden/kernel"))
    assert mixed_kernel.dtype == "float16" and full_kernel.dtype == "float32"
    assert gradient_bytes(mixed_kernel) * 2 == gradient_bytes(full_kernel)


AMP_REWRITE_SCRIPT = """
import keras
import numpy as np
import tensorflow as tf

tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
inputs = keras.Input((32,))
h = keras.layers.Dense(64, activation=lambda v: keras.activations.gelu(v, approximate=True), name="ff")(inputs)
h = keras.layers.LayerNormalization(name="norm")(keras.layers.Dense(64, name="proj")(h))
model = keras.Model(inputs, keras.layers.Dense(1, name="out")(h))
model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.MeanSquaredError())
model.fit(np.zeros((32, 32), np.float32), np.zeros((32, 1), np.float32), batch_size=8, epochs=1)
"""


def test_the_amp_graph_rewrite_is_captured_as_tensorflow_rewrites_the_step_for_a_gpu(tmp_path, capsys):
    """TensorFlow's own auto_mixed_precision pass runs on the captured step: products in float16, the tanh
    GELU (its Pow is on TensorFlow's deny list) and the layer norm's statistics in float32, Casts between; a GPU
    where TensorFlow skips the pass is refused in one line."""
    import tensorflow as tf

    from autodist.graph.capture import capture_script

    script = tmp_path / "amp.py"
    script.write_text(AMP_REWRITE_SCRIPT)
    try:
        item = capture_script(str(script))
    finally:
        tf.config.optimizer.set_experimental_options({"auto_mixed_precision": False})
    assert (item.job.amp_rewrite, item.job.precision, item.job.dtype_policy) == (True, "fp16", "float32")
    dtypes = {}
    for op in item.ops.values():
        dtypes.setdefault(op.type, set()).add(op.output_dtypes[0] if op.output_dtypes else "")
    assert dtypes["MatMul"] == {"float16"}
    assert dtypes["Pow"] == {"float32"} and dtypes["Mean"] == {"float32"}
    assert {"float16", "float32"} <= dtypes["Cast"]
    assert any(name.endswith("-AutoMixedPrecision") for name in item.ops)
    assert all(v.dtype == "float32" for v in item.trainable_variables())
    step = GpuStep(step_table(item), device_of("V100-16GB"), item.job.precision)
    assert set(step.kernel_classes()[step.compute]) == {"matmul_half"}

    # TensorFlow skips the pass below compute capability 7.0: on a P100 the step would run float32, unrewritten.
    graph = tmp_path / "amp.json"
    item.save(graph)
    cluster = tmp_path / "p100.yaml"
    cluster.write_text("name: p100\nnodes:\n  - name: box\n    gpus: {model: P100-SXM2, count: 1}\n")
    capsys.readouterr()  # what capture printed
    with pytest.raises(SystemExit) as exit_info:
        placement_main(["report", str(graph), "--cluster", str(cluster)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "job.amp_rewrite" in err and "P100-SXM2" in err and "auto_mixed_precision" in err


def test_half_precisions_without_tensor_cores_run_on_cuda_cores(cnn_graph):
    """float16 on a P100 and bfloat16 on a V100 run on CUDA cores at the float32 peak and efficiency (TensorFlow
    computes float16 products in float32 there), and their convolutions pay no NCHW transposes; on an A100 both run on
    tensor cores."""
    table = step_table(cnn_graph)
    for model, precision, on_tensor_cores in (("P100-SXM2", "fp16", False), ("V100-16GB", "bf16", False),
                                              ("V100-16GB", "fp16", True), ("A100-40GB", "bf16", True)):
        device = device_of(model)
        step = GpuStep(table, device, precision, framework="pytorch", layout="nchw")
        kind = "half" if on_tensor_cores else "fp32"
        assert step.kinds[kind][step.compute].all(), (model, precision)
        half = {"fp16": "float16", "bf16": "bfloat16"}[precision]
        assert (step.peak[step.compute] == device.peak_flops[half if on_tensor_cores else "float32"]).all()
        assert runs_as(precision, device) == (precision if on_tensor_cores else "fp32")
        assert step.transposed_bytes[False][step.conv].all() == on_tensor_cores, (model, precision)


def test_liveness_peak_of_a_toy_graph_equals_the_hand_computed_peak():
    """x(100) -> a(200) -> b(300) -> c(50); a is read again by d(10) after c; r aliases b."""
    def op(name, inputs, nbytes, op_type="Relu"):
        return OpInfo(name, op_type, inputs, [[nbytes // 4]], ["float32"], [nbytes], phase="forward")

    ops = [op("x", [], 100, "Placeholder"), op("a", ["x:0"], 200), op("b", ["a:0"], 300),
           op("r", ["b:0"], 300, "Reshape"), op("c", ["r:0"], 50), op("d", ["a:0", "c:0"], 10),
           op("out", ["d:0"], 0, "NoOp")]
    item = GraphItem(ops, [], JobInfo(model_name="toy", batch_size=1))
    # After c runs: a (200, read by d), b (300, read through its alias r by c) and c (50) are live: 550.
    # The placeholder and the reshape allocate nothing; b is freed after c, then d adds 10 to a and c: 260.
    assert live_peak(step_table(item)) == 550


def test_a_multi_output_ops_outputs_die_apart():
    """bn = FusedBatchNormV3(x) -> y(400), stats(4); r = Relu(y)(400); g = Sum(r)(8); h(g)(500);
    grad(stats, h)(4).

    y is read only by r: it dies there, while the statistics live until the gradient.  The peak is while r runs
    (bn's 404 and r's 400: 804); held whole until the gradient, y would make it 404 + 8 + 500 = 912 at h.
    """
    def op(name, inputs, sizes, op_type):
        return OpInfo(name, op_type, inputs, [[b // 4] for b in sizes], ["float32"] * len(sizes), sizes,
                      phase="forward")

    ops = [op("x", [], [400], "Placeholder"), op("bn", ["x:0"], [400, 4], "FusedBatchNormV3"),
           op("r", ["bn:0"], [400], "Relu"), op("g", ["r:0"], [8], "Sum"), op("h", ["g:0"], [500], "Tile"),
           op("grad", ["bn:1", "h:0"], [4], "Mul"), op("out", ["grad:0"], [0], "NoOp")]
    table = step_table(GraphItem(ops, [], JobInfo(model_name="toy", batch_size=1)))
    assert (table["early_bytes"][1], table["early_use"][1]) == (400, 2)
    assert live_peak(table) == 804


def test_fused_kernels_store_only_what_a_non_elementwise_op_reads():
    """x(100) -> a=MatMul(200) -> b=Mul(300) -> c=Tanh(50) -> d=MatMul(10) -> e=Mul(b, d)(20) -> out.

    Unfused, b lives from its kernel to e: the peak is a and b, 500.  Fused,
    b is read only by elementwise ops (c, e), so the chain's kernel never
    writes it: the peak is a alone, 200 (then c and d, 60; then d and e, 30).
    """
    def op(name, inputs, nbytes, op_type):
        return OpInfo(name, op_type, inputs, [[nbytes // 4]], ["float32"], [nbytes], phase="forward")

    ops = [op("x", [], 100, "Placeholder"), op("a", ["x:0"], 200, "MatMul"), op("b", ["a:0"], 300, "Mul"),
           op("c", ["b:0"], 50, "Tanh"), op("d", ["c:0"], 10, "MatMul"), op("e", ["b:0", "d:0"], 20, "Mul"),
           op("out", ["e:0"], 0, "NoOp")]
    table = step_table(GraphItem(ops, [], JobInfo(model_name="toy", batch_size=1)))
    assert live_peak(table) == 500
    assert live_peak(table, fused_kernels=True) == 200


def test_half_precision_halves_only_a_float32_graphs_bytes():
    """An fp16 override halves a float32 graph's forward and backward bytes; a mixed graph's float32 ops stay."""
    full, _ = published_step(next(r for r in read_calibration() if r.config == "resnet50-fp32"))
    mixed, _ = published_step(next(r for r in read_calibration() if r.config == "resnet50-mp"))
    device = load_cluster(preset="dgx-a100").gpus()[0]
    for table, halved in ((full, True), (mixed, False)):
        as_fp32, as_fp16 = GpuStep(table, device, "fp32"), GpuStep(table, device, "fp16")
        float32 = (table["dtype"] == "float32") & (table["phase"] != "update") & (as_fp32.bytes > 0)
        assert float32.sum() > 100
        expected = as_fp32.bytes[float32] / 2 if halved else as_fp32.bytes[float32]
        assert np.array_equal(as_fp16.bytes[float32], expected)


def test_gradient_accumulation_splits_the_global_batch_and_syncs_once(mlp_graph):
    # As the runtime runs it: m micro-batches of 1/m of each replica's rows, one synchronisation.
    spec = load_cluster(preset="cpu-2s-25g:2")
    model = CostModel.default()

    def run(micro_batches, overlap=False):
        item = with_job_options(_copy(mlp_graph), micro_batches=micro_batches)
        sim = Simulator(Problem(item, spec, model))
        result = sim.simulate(baselines.data_parallel(sim.problem), overlap=overlap)
        return result, sim.problem.at_replicas(result.replicas).graph_item.job.batch_size

    (one, one_batch), (four, four_batch) = run(1), run(4)
    assert one.replicas == 2 and (one_batch, four_batch) == (8, 2)  # 16 samples over 2 replicas, then 4 parts
    assert four.step_time - four.compute_time == pytest.approx(one.step_time - one.compute_time)
    assert one.step_time > one.compute_time
    # Four runs of a quarter of the slice: the same work, plus each run's fixed costs.
    assert one.compute_time < four.compute_time < 4 * one.compute_time
    # With overlap, gradients become ready only during the last micro-batch: less of the sync is hidden.
    assert run(4, True)[0].step_time - four.compute_time >= run(1, True)[0].step_time - one.compute_time - 1e-12


def test_accumulation_keeps_a_gradient_buffer(mlp_graph):
    spec = load_cluster(preset="dgx-h100")
    model = CostModel.default()
    sim_one = Simulator(Problem(mlp_graph, spec, model))
    sim_four = Simulator(Problem(with_job_options(_copy(mlp_graph), micro_batches=4), spec, model))
    strategy = baselines.data_parallel(sim_one.problem)
    device = strategy.replicas[0][0]
    extra = sim_four.memory(strategy)[device] - sim_one.memory(strategy)[device]
    assert extra == mlp_graph.parameter_bytes()


def test_published_configurations_fit_and_resnet50_fp32_at_256_does_not():
    runs = [r for r in read_calibration() if r.evaluated]
    from cost_models.fitting.gpu_calibration import _must_not_fit, _published_peak

    for run in runs:
        table, scalars = published_step(run)
        assert _published_peak(table, scalars, run) <= device_of(run.device).memory_bytes, run.id
    check = _must_not_fit(runs)
    assert check["device"] == "V100-16GB" and check["batch"] == 256 and not check["fits"]


def _published(run_id):
    run = next(r for r in read_calibration() if r.id == run_id)
    table, _ = published_step(run)
    return run, table, device_of(run.device)


def test_fused_chains_cost_nothing_and_their_fuser_scales_the_kernels_left():
    """A TensorFlow step without XLA runs the ops its graph holds (TF1's ResNet-50 its FusedBatchNormV3 kernels,
    BERT its layer norm and GELU as separate ops); XLA fuses the elementwise chains (xla_memory on the kernels
    left), and so do a PyTorch run's hand-fused kernels (fused_pytorch)."""
    params = GpuKernelParams.load()
    for run_id in ("G4/amp", "G20/amp"):
        run, table, device = _published(run_id)
        without_xla = GpuStep(table, device, run.precision, False)
        tensorflow = without_xla.kernel_seconds(params)
        for xla, framework, fuser in ((False, "", None), (True, "", "xla_memory"), (False, "pytorch", "fused_pytorch")):
            step = GpuStep(table, device, run.precision, xla, framework=framework)
            seconds = step.kernel_seconds(params)
            # Inside a chain, or inside another op's kernel: nothing to pay.
            inside = step.folded[xla] | (step.chained if fuser else False)
            assert step.chained.any() and not seconds[step.memory & inside].any(), (run_id, xla)
            left = step.memory & ~inside & ~without_xla.folded[False]
            ratio = seconds[left] / tensorflow[left]
            expected = params.shared[fuser] if fuser else 1.0
            assert ratio == pytest.approx(np.full(ratio.shape, expected)), (run_id, xla)


def test_g20_without_xla_is_predicted_much_slower_than_with_it():
    """The published BERT-base AMP runs differ 2.3x by XLA alone (G20); the model must not flatten that: it keeps at
    least three quarters of the published ratio."""
    from cost_models.fitting.gpu_calibration import prepared, throughput

    steps = {run.id: (run, step) for run, step in prepared(read_calibration()) if run.row == "G20"}
    params = GpuKernelParams.load()
    with_xla, without = (throughput(steps[i][1], steps[i][0], params) for i in ("G20/amp-xla", "G20/amp"))
    published = steps["G20/amp-xla"][0].throughput / steps["G20/amp"][0].throughput
    assert with_xla / without > 0.75 * published


def test_a_tf_run_of_unstated_xla_is_priced_at_the_geometric_mean_and_pytorch_without_xla():
    params = GpuKernelParams.load()
    run, table, device = _published("G8/amp")
    assert run.xla is None and run.framework == "tf1"
    seconds = {x: GpuStep(table, device, run.precision, x, run.micro_batches).step_seconds(params)
               for x in (None, False, True)}
    assert seconds[True] < seconds[None] < seconds[False]
    assert seconds[None] == pytest.approx(np.sqrt(seconds[True] * seconds[False]))
    run, table, device = _published("G34/a100")
    unstated, without = (GpuStep(table, device, run.precision, x, framework="pytorch").step_seconds(params)
                         for x in (None, False))
    assert unstated == without


def test_nchw_half_precision_convolutions_pay_a_transpose_of_everything_they_move():
    """Lambda's PyTorch ResNet-50 kept NCHW tensors (G30): cuDNN transposes each operand and result of a
    tensor-core convolution in and out of NHWC, a read and a write of every byte the convolution moves; float32
    convolutions run NCHW natively, and nothing else changes."""
    params = GpuKernelParams.load()
    for run_id, transposed in (("G30/amp", True), ("G30/fp32", False)):
        run, table, device = _published(run_id)
        assert run.layout == "nchw"
        nhwc, nchw = (GpuStep(table, device, run.precision, None, framework="pytorch", layout=layout)
                      for layout in ("nhwc", "nchw"))
        extra = nchw.kernel_seconds(params) - nhwc.kernel_seconds(params)
        arch = params.architecture(nchw.architecture)
        expected = np.where(nchw.conv & transposed, 2 * nchw.bytes, 0.0) / (
            nchw.memory_bandwidth * params.shared["memory"] * arch["memory"])
        assert nchw.conv.sum() > 150 and extra == pytest.approx(expected, rel=1e-9, abs=1e-15), run_id
    with pytest.raises(CostModelError, match="layout"):
        GpuStep(table, device, run.precision, layout="nwhc")


def _conv_step(groups):
    """A captured Keras step around one 3x3 Conv2D of 128 channels in ``groups`` groups (after a dense layer, so
    that its input gradient runs too)."""
    import keras
    import tensorflow as tf

    from autodist.graph.capture import capture_step

    model = keras.Sequential([keras.Input((28, 28, 128)), keras.layers.Dense(128),
                              keras.layers.Conv2D(128, 3, padding="same", groups=groups, use_bias=False),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return capture_step(step, np.zeros((32, 28, 28, 128), np.float32), np.zeros((32, 1), np.float32))


def test_a_grouped_convolution_is_priced_as_the_grouped_kernel_it_runs():
    """Keras compiles a grouped Conv2D with XLA inside its own function; the capture inlines it, so its forward and
    both gradients are priced on their own FLOPs (the dense convolution's over the groups) and bytes (the same
    activations): each costs more than a quarter of the dense one and less than it, never below its streaming."""
    a100 = load_cluster(preset="p4d.24xlarge").gpus()[0]
    params = GpuKernelParams.load()
    convs, costs = {}, {}
    for groups in (1, 4):
        item = with_job_options(_conv_step(groups), precision="tf32")
        assert not any(op.type.endswith("PartitionedCall") for op in item.ops.values())
        convs[groups] = {op.type: name for name, op in item.ops.items() if op.type.startswith("Conv2D")}
        assert set(convs[groups]) == {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
        costs[groups] = CostModel.default().op_costs(item, a100)
        table = step_table(item)
        step = GpuStep(table, a100, "tf32")
        arch = params.architecture(step.architecture)
        streaming = step.bytes / (step.memory_bandwidth * params.shared["memory"] * arch["memory"])
        names = list(item.ops)
        for name in convs[groups].values():
            assert costs[groups][name].seconds >= streaming[names.index(name)] > 0
        if groups == 1:
            dense = item
            continue
        for op_type, name in convs[groups].items():
            dense_name = convs[1][op_type]
            assert item.ops[name].flops * groups == dense.ops[dense_name].flops, op_type
            assert costs[1][dense_name].seconds / groups < costs[groups][name].seconds < costs[1][dense_name].seconds


def test_products_are_never_faster_than_their_bytes_stream():
    params = GpuKernelParams.load()
    run, table, device = _published("G34/h100")
    step = GpuStep(table, device, run.precision, False)
    arch = params.architecture(step.architecture)
    streaming = step.bytes / (step.memory_bandwidth * params.shared["memory"] * arch["memory"])
    kernel = step.kernel_seconds(params)
    assert np.all(kernel[step.compute] >= streaming[step.compute])
    assert np.any(kernel[step.compute] == streaming[step.compute])  # BERT's attention products are memory-bound


def test_calibration_file_matches_the_reference_rows():
    """Every figure in the shipped calibration file is in its row of the published-figures reference."""
    reference = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference",
                             "published-training-figures.md")
    if not os.path.exists(reference):
        pytest.skip("../shared/reference is not beside this checkout")
    lines = {line.split("|")[1].strip(): line for line in open(reference) if line.startswith("| G")}
    for run in read_calibration():
        text = f"{run.throughput:g}"
        assert text in lines[run.row].replace(",", ""), run.id


def test_architecture_of_device_models():
    """A field of each GPU device model, found by name or alias; a name the catalogue lacks is not guessed."""
    assert [architecture_of(m) for m in ("V100-16GB", "A100-80GB", "H100-SXM", "T4", "NVIDIA-H100-80GB-HBM3")] == [
        "volta", "ampere", "hopper", "turing", "hopper"]
    assert architecture_of("H800-SXM") == architecture_of("Mystery-9") == architecture_of("xeon-8480c-2s") == ""
    assert all(m.architecture for m in DEVICE_MODELS.values() if m.kind == "GPU")


def test_a_device_without_the_precision_the_job_needs_is_refused(mlp_graph):
    device = load_cluster(preset="dgx-h100").gpus()[0]
    device.peak_flops = {"float32": device.peak_flops["float32"]}
    with pytest.raises(CostModelError, match="float16"):
        GpuStep(step_table(mlp_graph), device, "fp16")


def test_bad_precision_and_calibration_input_give_one_line(tmp_path, mlp_graph):
    mlp_graph.save(tmp_path / "g.json")
    out = _autodist("plan", str(tmp_path / "g.json"), "--preset", "dgx-h100", "--precision", "fp8",
                    "-o", str(tmp_path / "p.json"))
    assert out.returncode == 2 and "--precision" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()

    cluster = tmp_path / "fp32-only.yaml"
    cluster.write_text("name: fp32-only\nnodes:\n  - name: box\n    gpus:\n      model: MyAccel\n      count: 1\n"
                       "      peak_flops: {float32: 67}\n      memory: 80 GB\n      memory_bandwidth: 3.35 TB/s\n"
                       "    fabric: {kind: pcie, generation: 4}\n")
    out = _autodist("plan", str(tmp_path / "g.json"), "--cluster", str(cluster), "--precision", "fp16",
                    "-o", str(tmp_path / "p.json"))
    assert out.returncode == 2, out.stderr
    assert "float16" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()

    with open(CALIBRATION_CSV) as f:
        rows = list(csv.DictReader(f))
    broken = tmp_path / "calibration.csv"
    with open(broken, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[c for c in COLUMNS if c != "throughput"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    out = _autodist("costmodel", "fit-gpu", "--calibration", str(broken), "-o", str(tmp_path / "m.json"))
    assert out.returncode == 2 and "throughput" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()

    # NCHW is PyTorch's: TensorFlow's layout optimizer hands cuDNN NHWC tensors.
    with open(broken, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(dict(row, layout="nchw") if row["row"] == "G4" else row for row in rows)
    out = _autodist("costmodel", "fit-gpu", "--calibration", str(broken), "-o", str(tmp_path / "m.json"))
    assert out.returncode == 2 and "layout" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()


def test_fitted_parameters_round_trip_and_refuse_missing_fields():
    params = GpuKernelParams.load()
    assert GpuKernelParams.from_dict(params.to_dict()).to_dict() == params.to_dict()
    assert params.fitted_on and all(f.startswith("G") for f in params.fitted_on)
    broken = params.to_dict()
    del broken["shared"]["launch"]
    with pytest.raises(AutoDistError, match="launch"):
        GpuKernelParams.from_dict(broken)


@pytest.mark.parametrize("options", [{"micro_batches": 0}, {"micro_batches": True}, {"precision": "fp8"}])
def test_job_options_refuse_what_no_job_can_be(options):
    with pytest.raises(InputError):
        with_job_options(GraphItem([], []), **options)


def test_keras_argmax_bit_ops_are_priced_as_the_kernels_they_are_not_at_the_fallback():
    """Keras 3's argmax (in its accuracy metrics) tells -0.0 from 0.0 by the sign bit: a Bitcast to int32, which
    shares its input's buffer, and a BitwiseAnd, an elementwise kernel. Neither is an unknown op type any more, on a
    GPU or on a CPU."""
    import warnings

    import keras
    import tensorflow as tf

    from autodist.graph.capture import capture_step
    from cost_models import UnknownOpTypeWarning

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])

    def step(x):
        return tf.reduce_sum(tf.cast(keras.ops.argmax(model(x), axis=-1), tf.float32))

    item = capture_step(step, np.zeros((512, 8), np.float32))  # int32 results over 1024 elements: a GPU kernel
    types = {op.type: name for name, op in item.ops.items()}
    assert {"Bitcast", "BitwiseAnd"} <= set(types)
    for device in (load_cluster(preset="dgx-a100").gpus()[0], load_cluster(preset="cpu-local").compute_devices()[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownOpTypeWarning)
            costs = CostModel.default().op_costs(item, device)
        assert costs[types["BitwiseAnd"]].source != "fallback"
        if device.kind == "GPU":
            assert costs[types["Bitcast"]].seconds == 0 and costs[types["BitwiseAnd"]].seconds > 0


def test_3d_pooling_is_priced_as_the_memory_kernel_it_is_not_at_the_fallback():
    """keras-io's 3D_image_classification pools its Conv3D volumes (MaxPool3D, and MaxPool3DGrad in the backward
    pass): both got the fallback cost, with a warning, on a CPU; they stream their volumes as the 2-D pools do."""
    import warnings

    import keras
    import tensorflow as tf

    from autodist.graph.capture import capture_step
    from cost_models import UnknownOpTypeWarning

    model = keras.Sequential([keras.Input((8, 8, 8, 1)), keras.layers.Conv3D(4, 3), keras.layers.MaxPool3D(2),
                              keras.layers.AveragePooling3D(1), keras.layers.GlobalAveragePooling3D(),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    item = capture_step(step, np.zeros((2, 8, 8, 8, 1), np.float32))
    pools = {name: op.type for name, op in item.ops.items() if "Pool3D" in op.type}
    assert {"MaxPool3D", "MaxPool3DGrad", "AvgPool3D", "AvgPool3DGrad"} <= set(pools.values())
    for device in (load_cluster(preset="dgx-a100").gpus()[0], load_cluster(preset="cpu-local").compute_devices()[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownOpTypeWarning)
            costs = CostModel.default().op_costs(item, device)
        assert all(costs[name].source != "fallback" and costs[name].seconds > 0 for name in pools)


def test_resampling_diagonals_and_top_k_are_priced_as_memory_kernels_not_at_the_fallback():
    """keras-io's ViT (a Resizing layer, a top-5 accuracy metric, the identity matrix its patch extraction builds
    with ``eye``) and tf docs' simple_audio
    (Resizing) got the fallback cost, with a warning, on every GPU: bilinear and nearest resampling and their
    gradients, ``tf.linalg.diag`` and ``in_top_k`` stream their tensors as the other data-movement kernels do."""
    import warnings

    import keras
    import tensorflow as tf

    from autodist.graph.capture import capture_step
    from cost_models import UnknownOpTypeWarning

    convs = [keras.layers.Conv2D(3, 3, padding="same") for _ in range(3)]
    optimizer = keras.optimizers.SGD(0.1)

    def model(x):
        x = convs[0](keras.layers.Resizing(8, 8)(x))  # the gradients flow back through the resamplings after it
        x = convs[1](tf.image.resize(x, (12, 12), method="bilinear"))
        return tf.reduce_mean(convs[2](tf.image.resize(x, (16, 16), method="nearest")), axis=(1, 2))

    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = tf.reduce_mean(tf.linalg.diag(logits)) + keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True)[0]
        weights = [w for conv in convs for w in conv.trainable_variables]
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
        return loss, tf.reduce_mean(tf.cast(tf.math.in_top_k(y, logits, 2), tf.float32))

    model(np.zeros((2, 6, 6, 2), np.float32))  # build the layers outside the traced step

    item = capture_step(step, np.zeros((2, 6, 6, 2), np.float32), np.zeros((2,), np.int32))
    wanted = {"ResizeBilinear", "ResizeBilinearGrad", "ResizeNearestNeighbor", "ResizeNearestNeighborGrad",
              "MatrixDiagV3", "InTopKV2"}
    ops = {name: op.type for name, op in item.ops.items() if op.type in wanted}
    assert set(ops.values()) == wanted
    for device in (load_cluster(preset="dgx-a100").gpus()[0], load_cluster(preset="cpu-local").compute_devices()[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownOpTypeWarning)
            costs = CostModel.default().op_costs(item, device)
        assert all(costs[name].source != "fallback" and costs[name].seconds > 0 for name in ops)
