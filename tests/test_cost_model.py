"""Op-cost model: shipped default, op_costs on real graphs, regressor conventions, persistence."""

import dataclasses
import math
import os
import subprocess
import sys
import warnings

import jsonschema
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from autodist.errors import CostModelError
from autodist.graph.item import GraphItem
from autodist.resource_spec import load_cluster
from cost_models import CostModel, OpCost, UnknownOpTypeWarning
from cost_models.fitting.dataset import read_timings, write_timings
from cost_models.features import COPY_ON_READ, FEATURES, design_matrix, moved_bytes, op_raw_features
from cost_models.fitting.dataset import read_meta
from cost_models.model import MODEL_META, TIMINGS, TIMINGS_META, fit_cost_model, fit_executor_overhead
from cost_models.op_model import OpTimeRegressor, load_model, save_model
from cost_models.types import SOURCES


@pytest.fixture(scope="module")
def shipped():
    return read_timings(TIMINGS).timed()


@pytest.fixture(scope="module")
def cpu():
    return load_cluster(preset="cpu-local").devices("CPU")[0]


@pytest.fixture(scope="module")
def h100():
    return load_cluster(preset="dgx-h100").gpus()[0]


def _small_fit(timings, n=1500, **params):
    rows = timings.subset(np.arange(len(timings)) < n)
    X = design_matrix(rows.raw, rows.peak_flops, rows.memory_bandwidth)
    return OpTimeRegressor(max_iter=50, **params).fit(X, rows.seconds), X, rows


def test_import_and_default_model_load_without_tensorflow():
    code = (
        "import sys, autodist, cost_models\n"
        "cm = cost_models.CostModel.default()\n"
        "assert cm.op_model is not None and cm.comm.transfers is not None, cm\n"
        "assert 'tensorflow' not in sys.modules\n"
        "print(cm.id)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("costmodel-")


def test_op_costs_on_real_mlp_graph_cpu(mlp_graph, cpu):
    cm = CostModel.default()
    costs = cm.op_costs(mlp_graph, cpu)
    assert set(costs) == set(mlp_graph.ops)
    names, raw = op_raw_features(mlp_graph)
    unread = {n for n, flag in zip(names, raw["unread"]) if flag}
    for name, cost in costs.items():
        assert isinstance(cost, OpCost)
        assert math.isfinite(cost.seconds) and (cost.seconds == 0 if name in unread else cost.seconds > 0), name
        assert cost.source in SOURCES
    # cpu-local is the device the shipped data was measured on: the MatMuls are learned.
    matmuls = [n for n, op in mlp_graph.ops.items() if op.type == "MatMul"]
    assert matmuls and all(costs[n].source == "learned" for n in matmuls)


def test_op_costs_on_gpu_come_from_the_calibrated_kernel_model(mlp_graph, h100):
    model = CostModel.default()
    costs = model.op_costs(mlp_graph, h100)
    # No published Hopper figure runs TF32 products: those are assumed, the rest calibrated.
    assert {c.source for c in costs.values()} == {"calibrated", "assumed"}
    # A float32 MatMul of a tf32 job runs on TF32 tensor cores at the fitted efficiency of its size.
    assert mlp_graph.job.precision == "tf32"
    name, op = next((n, op) for n, op in mlp_graph.ops.items() if op.type == "MatMul" and op.flops)
    shared, arch = model.gpu.shared, model.gpu.architecture("hopper")
    expected = op.flops / (h100.peak_flops["tf32"] * shared["matmul_tf32"] * arch["compute"]) * (
        1 + shared["half_flops"] / op.flops)
    assert costs[name].seconds == pytest.approx(expected)


def test_the_prior_has_a_class_for_every_op_type_of_the_profiled_zoo():
    # GPU predictions of the zoo models never use the fallback: every op type
    # their real step graphs (and the micro-benchmarks) hold has a prior class.
    from cost_models.prior import known_op_type

    op_types = set(read_timings(TIMINGS).raw["op_type"])
    assert {"Erfc", "IsNan", "MatrixBandPart"} <= op_types
    assert sorted(t for t in op_types if not known_op_type(t)) == []


def test_bigger_matmul_costs_more_on_gpu(h100):
    from autodist.graph.item import OpInfo

    def mm(n):
        return OpInfo(f"mm{n}", "MatMul", [f"a{n}:0", f"a{n}:0"], [[n, n]], ["float32"], [4 * n * n], flops=2 * n**3)

    ops = [OpInfo(f"a{n}", "Placeholder", [], [[n, n]], ["float32"], [4 * n * n]) for n in (256, 8192)]
    reader = OpInfo("out", "IdentityN", ["mm256:0", "mm8192:0"], [[256, 256], [8192, 8192]], ["float32"] * 2, [0, 0])
    item = GraphItem(ops + [mm(256), mm(8192), reader], [])
    costs = CostModel.default().op_costs(item, h100)
    assert costs["mm8192"].seconds > 100 * costs["mm256"].seconds


def test_unknown_op_types_are_counted_in_one_warning(mlp_graph, cpu):
    data = mlp_graph.to_dict()
    renamed = 0
    for op in data["ops"]:
        if op["type"] in ("Relu", "Softmax", "Sqrt"):
            op["type"] = f"MadeUp{op['type']}"
            renamed += 1
    item = GraphItem.from_dict(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        costs = CostModel.default().op_costs(item, cpu)
    ours = [w for w in caught if issubclass(w.category, UnknownOpTypeWarning)]
    assert len(ours) == 1
    assert str(ours[0].message).startswith(f"{renamed} ops of ")
    fallback = [n for n, c in costs.items() if c.source == "fallback"]
    assert len(fallback) == renamed
    assert all(costs[n].seconds >= 10e-6 for n in fallback)


def test_device_without_figures_is_a_clear_error(mlp_graph, cpu):
    bare = dataclasses.replace(cpu, memory_bandwidth=0.0)
    with pytest.raises(CostModelError, match="memory_bandwidth"):
        CostModel.default().op_costs(mlp_graph, bare)


def test_regressor_follows_estimator_conventions(shipped):
    est = OpTimeRegressor(estimator="hist", max_iter=30)
    assert est.get_params()["max_iter"] == 30
    assert clone(est).get_params() == est.get_params()
    assert not hasattr(est, "estimator_")
    with pytest.raises(NotFittedError):
        est.predict(np.empty((1, len(FEATURES)), dtype=object))
    model, X, rows = _small_fit(shipped)
    assert model.n_features_in_ == len(FEATURES)
    assert set(model.op_types_) == set(rows.raw["op_type"])
    pred = model.predict(X)
    assert pred.shape == (len(rows),) and np.all(pred > 0)
    # Fitting is deterministic for a fixed random_state.
    again, _, _ = _small_fit(shipped)
    assert np.array_equal(again.predict(X), pred)
    # Unseen op types are predicted (as a missing category), not refused.
    X2 = X[:3].copy()
    X2[:, 0] = "NeverSeenOp"
    assert np.all(model.predict(X2) > 0)
    assert not model.knows(["NeverSeenOp"]).any()


def test_regressor_rejects_bad_input(shipped):
    _, X, rows = _small_fit(shipped, n=200)
    with pytest.raises(ValueError, match="estimator"):
        OpTimeRegressor(estimator="forest").fit(X, rows.seconds)
    with pytest.raises(ValueError, match="positive"):
        OpTimeRegressor().fit(X, -rows.seconds)
    with pytest.raises(ValueError, match="some timed"):
        OpTimeRegressor().fit(X, np.full(len(rows), np.nan))
    with pytest.raises(ValueError, match="target"):
        OpTimeRegressor(target="minutes").fit(X, rows.seconds)
    with pytest.raises(ValueError, match="shape"):
        OpTimeRegressor(max_iter=5).fit(X[:, :3], rows.seconds)


def test_gbr_estimator_fits_too(shipped):
    model, X, _ = _small_fit(shipped, n=300, estimator="gbr")
    assert np.all(model.predict(X) > 0)


def test_persistence_round_trip_checks_version_and_features(shipped, tmp_path):
    model, X, _ = _small_fit(shipped, n=400)
    pkl, meta = tmp_path / "m.pkl", tmp_path / "m.json"
    save_model(model, pkl, meta, {"rows": 400, "devices": ["cpu-local"]})
    loaded, info = load_model(pkl, meta)
    assert np.array_equal(loaded.predict(X), model.predict(X))
    assert info["features"] == list(FEATURES) and info["training_data"]["rows"] == 400
    import json

    data = json.loads(meta.read_text())
    data["sklearn_version"] = "0.0.1"
    meta.write_text(json.dumps(data))
    with pytest.raises(CostModelError, match="scikit-learn 0.0.1"):
        load_model(pkl, meta)
    data["features"] = ["op_type"]
    meta.write_text(json.dumps(data))
    with pytest.raises(CostModelError, match="features"):
        load_model(pkl, meta)


def test_shipped_model_metadata_describes_its_data():
    import json

    with open(MODEL_META) as fh:
        meta = json.load(fh)
    assert meta["features"] == list(FEATURES)
    assert meta["training_data"]["timed_rows"] > 1000
    assert "cpu-local" in meta["training_data"]["devices"]
    assert "micro" in meta["training_data"]["origins"]


def test_refit_from_data_learns_the_device_models(shipped):
    # What CostModel.default() does when the pickle does not match this scikit-learn.
    rows = shipped.subset(np.arange(len(shipped)) < 2000)
    fitted = fit_cost_model(rows)
    assert sorted(fitted.learned_devices) == ["cpu-local"]
    for model in (fitted.op_model, fitted.one_thread_model):
        assert model.n_features_in_ == len(FEATURES)
        assert set(model.op_types_) <= set(rows.raw["op_type"])
    assert set(fitted.op_model.op_types_) == set(rows.raw["op_type"])
    assert fitted.executor_overhead == 0.0 and fitted.executor is None  # no measured step to fit them on


def test_saving_data_without_one_thread_times_drops_an_older_one_thread_model(shipped, tmp_path):
    from cost_models.model import save_default

    rows = shipped.subset(np.arange(len(shipped)) < 2000)
    save_default(rows, {}, str(tmp_path))
    assert (tmp_path / "op_model_one_thread.pkl").exists()
    # GPU rows, say: no one-thread times, so no one-thread model may stay beside them.
    model = save_default(dataclasses.replace(rows, seconds_one_thread=np.full(len(rows), np.nan)), {}, str(tmp_path))
    assert model.one_thread_model is None
    assert not (tmp_path / "op_model_one_thread.pkl").exists() and not (tmp_path / "op_model_one_thread.json").exists()
    assert (tmp_path / "op_model.pkl").exists()


def test_ops_that_never_ran_a_kernel_cost_only_the_executor_overhead(mlp_graph, cpu):
    cm = CostModel.default()
    assert cm.op_model.kernel_rate_["Const"] == 0.0
    assert 0 < cm.executor_overhead < 100e-6
    costs = cm.op_costs(mlp_graph, cpu)
    names, raw = op_raw_features(mlp_graph)
    consts = [n for n, t, unread in zip(names, raw["op_type"], raw["unread"]) if t == "Const" and not unread]
    assert consts and all((costs[n].seconds, costs[n].source) == (cm.executor_overhead, "learned") for n in consts)


def test_ops_nothing_reads_are_pruned_and_cost_nothing(mlp_graph, cpu):
    names, raw = op_raw_features(mlp_graph)
    unread = [n for n, flag in zip(names, raw["unread"]) if flag]
    assert unread
    costs = CostModel.default().op_costs(mlp_graph, cpu)
    assert all(costs[n].seconds == 0.0 for n in unread)
    # What TensorFlow does: in the profiled zoo steps no unread op ran a kernel.
    rows = read_timings(TIMINGS)
    unread_rows = (rows.origin != "micro") & (rows.raw["unread"] > 0)
    assert unread_rows.sum() > 100 and np.isnan(rows.seconds[unread_rows]).all()


def test_dense_reads_of_a_sparsely_updated_variable_are_copies(embedding_graph, embedding_adam_graph, cpu):
    names, raw = op_raw_features(embedding_graph)
    types = dict(zip(names, raw["op_type"]))
    live = {n for n, flag in zip(names, raw["unread"]) if not flag}
    copies = [n for n in live if types[n] == COPY_ON_READ]
    plain = [n for n in live if types[n] == "ReadVariableOp"]
    assert copies and plain
    # Adam densifies the embedding's update: nothing touches it sparsely, so no read copies.
    assert COPY_ON_READ not in set(op_raw_features(embedding_adam_graph)[1]["op_type"])
    costs = CostModel.default().op_costs(embedding_graph, cpu)
    # A copy of the 10k x 16 table costs more than reading any dense variable.
    assert min(costs[n].seconds for n in copies) > 2 * max(costs[n].seconds for n in plain)


def test_expected_time_is_kernel_rate_times_kernel_time():
    rows = read_timings(TIMINGS)
    rows = rows.subset(rows.origin == "mlp")
    X = design_matrix(rows.raw, rows.peak_flops, rows.memory_bandwidth)
    model = OpTimeRegressor(max_iter=30).fit(X, rows.seconds)
    types = rows.raw["op_type"]
    for t in ("Const", "MatMul", "BiasAdd"):
        ran = np.isfinite(rows.seconds[types == t])
        assert model.kernel_rate_[t] == pytest.approx(ran.mean())
    rate = np.array([model.kernel_rate_[t] for t in types])
    assert np.allclose(model.predict(X), rate * model.predict(X, ran_kernel=True))


def test_roofline_ratio_target_scales_past_the_largest_measured_op(shipped):
    # Trees are flat outside their data: on log seconds a matmul four times
    # larger than any measured one costs no more; on the roofline ratio it does.
    matmuls = shipped.subset(shipped.raw["op_type"] == "MatMul")
    biggest = int(np.argmax(matmuls.raw["flops"]))
    row = {k: v[biggest:biggest + 1].copy() for k, v in matmuls.raw.items()}
    grown = {k: v.copy() for k, v in row.items()}
    for column in ("flops", "input_bytes", "output_bytes", "in0_elements", "in1_elements", "out0_elements"):
        grown[column] = grown[column] * 4
    X = design_matrix(matmuls.raw, matmuls.peak_flops, matmuls.memory_bandwidth)
    pair = np.concatenate([design_matrix(r, matmuls.peak_flops[0], matmuls.memory_bandwidth[0]) for r in (row, grown)])
    ratio = OpTimeRegressor(max_iter=50).fit(X, matmuls.seconds).predict(pair)
    seconds = OpTimeRegressor(max_iter=50, target="seconds").fit(X, matmuls.seconds).predict(pair)
    assert ratio[1] > 3 * ratio[0]
    assert seconds[1] == pytest.approx(seconds[0], rel=0.05)


def test_backward_matmuls_are_marked_transposed_and_cost_more_when_skinny(mlp_graph, shipped):
    names, raw = op_raw_features(mlp_graph)
    marks = {n: code for n, t, code in zip(names, raw["op_type"], raw["transposed_operands"]) if t == "MatMul"}
    # Each dense layer: its forward product reads nothing transposed, its weight
    # gradient reads the input transposed (1), its input gradient the weight (2);
    # the first layer's input (the data) gets no gradient.
    layers = sum(code == 0 for code in marks.values())
    assert layers >= 2 and sorted(set(marks.values())) == [0, 1, 2]
    assert sum(code == 1 for code in marks.values()) == layers
    assert sum(code == 2 for code in marks.values()) == layers - 1
    # Fitted on the measured matmuls, the regressor learns what was measured
    # (3x): a batch of 64 times a 4096x4096 weight read transposed (the input
    # gradient) is slower than the forward product of the same sizes.
    matmuls = shipped.subset(shipped.raw["op_type"] == "MatMul")
    row = {"op_type": np.array(["MatMul"], dtype=object), "dtype": np.array(["float32"], dtype=object),
           "flops": np.array([2.0 * 64 * 4096 * 4096]), "input_bytes": np.array([4.0 * (64 * 4096 + 4096 * 4096)]),
           "output_bytes": np.array([4.0 * 64 * 4096]), "in0_elements": np.array([64.0 * 4096]),
           "in1_elements": np.array([4096.0 * 4096]), "out0_elements": np.array([64.0 * 4096]),
           "out_rank": np.array([2.0]), "n_inputs": np.array([2.0]), "out_last_dim": np.array([4096.0]),
           "transposed_operands": np.array([0.0]), "unread": np.array([0.0])}
    transposed = dict(row, transposed_operands=np.array([2.0]))
    model = OpTimeRegressor().fit(design_matrix(matmuls.raw, matmuls.peak_flops, matmuls.memory_bandwidth),
                                  matmuls.seconds)
    plain_s, transposed_s = model.predict(np.concatenate(
        [design_matrix(r, matmuls.peak_flops[0], matmuls.memory_bandwidth[0]) for r in (row, transposed)]))
    assert transposed_s > 1.8 * plain_s


def test_executor_overhead_is_the_best_fit_of_kernels_to_measured_steps():
    rows = read_timings(TIMINGS)
    steps = read_meta(TIMINGS_META)["steps"]
    overhead = fit_executor_overhead(rows, steps)
    assert overhead > 0

    def relative_error(per_op):
        total = 0.0
        for name, record in steps.items():
            mine = rows.origin == name
            predicted = np.nansum(rows.seconds[mine]) + per_op * mine.sum()
            total += ((predicted - record["step_seconds"]) / record["step_seconds"]) ** 2
        return total

    best = relative_error(overhead)
    assert all(best <= relative_error(overhead * f) for f in (0.0, 0.5, 0.9, 1.1, 2.0))


def test_a_gather_moves_the_rows_it_gathers_not_its_whole_table(shipped):
    gathers = shipped.subset(shipped.raw["op_type"] == "GatherV2")
    assert {"wide_deep", "bert_base"} <= set(gathers.origin)
    moved = moved_bytes(gathers.raw)
    # Embedding tables of 4-128 MB; a step gathers a few hundred KB of rows from them.
    assert np.all(moved >= 2 * gathers.raw["output_bytes"])
    assert np.all(moved < gathers.raw["input_bytes"] / 5)
    others = shipped.subset(shipped.raw["op_type"] == "MatMul")
    assert np.array_equal(moved_bytes(others.raw), others.raw["input_bytes"] + others.raw["output_bytes"])


@pytest.fixture(scope="module")
def without_lm(shipped):
    """A model fitted on every row but the transformer LM's, and the LM's rows."""
    rest = shipped.subset(shipped.origin != "transformer_lm")
    model = OpTimeRegressor(max_iter=100).fit(design_matrix(rest.raw, rest.peak_flops, rest.memory_bandwidth),
                                              rest.seconds)
    return model, shipped.subset(shipped.origin == "transformer_lm")


def _predicted_over_measured(model, rows):
    return model.predict(design_matrix(rows.raw, rows.peak_flops, rows.memory_bandwidth), ran_kernel=True) / rows.seconds


def test_keras_attention_einsums_are_learned_from_micro_benchmarks(shipped, without_lm):
    # The micro-benchmarks time Keras MultiHeadAttention's einsums, forward and
    # gradient, so a model that never saw the transformer LM prices its Einsum
    # kernels (TensorFlow transposes around a batched matmul) from them.
    micro = shipped.subset((shipped.origin == "micro") & (shipped.raw["op_type"] == "Einsum"))
    assert any("gradient_tape" in n for n in micro.op_name) and any("gradient_tape" not in n for n in micro.op_name)
    model, lm = without_lm
    einsums = lm.subset(lm.raw["op_type"] == "Einsum")
    assert len(einsums) >= 8
    assert 0.67 < np.median(_predicted_over_measured(model, einsums)) < 1.5


def test_vocabulary_wide_matmuls_are_learned_from_micro_benchmarks(shipped, without_lm):
    # The LM's output layer (512 tokens x 256 by 256 x 8000) and its two
    # gradients are wider than any other matmul of the zoo; the micro-benchmarks'
    # vocabulary-wide products (forward and both gradients) reach that width, so
    # a model that never saw the LM interpolates their cost.
    model, lm = without_lm
    head = lm.subset((lm.raw["op_type"] == "MatMul") & (np.char.find(lm.op_name.astype(str), "lm_head") >= 0))
    assert len(head) == 3 and set(head.raw["transposed_operands"]) == {0, 1, 2}
    micro = shipped.subset((shipped.origin == "micro") & (shipped.raw["op_type"] == "MatMul"))
    for form in (0, 1, 2):  # forward, input gradient, weight gradient
        assert (micro.raw["out0_elements"][micro.raw["transposed_operands"] == form].max()
                >= head.raw["out0_elements"][head.raw["transposed_operands"] == form].max())
    ratio = _predicted_over_measured(model, head)
    assert np.all((ratio > 0.8) & (ratio < 1.3)), ratio


def test_micro_benchmark_ids_range_over_their_whole_table():
    # A model's sparse updates touch rows all over a 1M-row table; ids drawn
    # below 1000 would stay in cache and time the update several times faster.
    from cost_models.profiling.micro import INT_INPUT_MAX, micro_cases
    from cost_models.profiling.ops import _micro_args

    cases = micro_cases(np.random.default_rng(0))
    big = [c for c in cases if c.name.startswith("copyonread") and c.variables[0][0] >= 100_000][:2]
    big += [c for c in cases if c.name.startswith("biggather")][:1]
    assert len(big) == 3
    for case in big:
        rows = case.variables[0][0] if case.variables else case.inputs[0][0][0]
        ids = next(a for a in _micro_args(case) if a.dtype.is_integer).numpy()
        assert INT_INPUT_MAX < ids.max() < rows and ids.min() >= 0


def test_a_process_on_one_core_runs_the_step_at_one_thread_speed(mlp_graph, cpu):
    """Processes that share the measured machine's cores (emulated nodes pinned to one core) get fewer: the
    executor schedules the step on that many, so each op runs at its one-thread speed on one core."""
    model = CostModel.default()
    cores = model.executor.cores
    whole = model.op_costs(mlp_graph, cpu)
    assert model.op_costs(mlp_graph, cpu, cores=cores) == whole
    one = model.op_costs(mlp_graph, cpu, cores=1)
    assert {n: c.seconds for n, c in one.items()} == {n: c.seconds for n, c in whole.items()}  # standalone times
    step = sum(c.step_seconds for c in whole.values())
    step_one = sum(c.step_seconds for c in one.values())
    assert step < step_one < cores * step


def test_a_step_timed_whole_sets_the_step_time_of_graphs_of_its_structure(mlp_graph, embedding_graph, cpu):
    """Profiled steps timed whole (cost_models.measured_steps) price every graph of their structure: at a measured
    batch and core count the ops add up to the measured time, between them along the measured lines; the ops
    keep the model's proportions and say where their time came from; a graph of another structure is untouched."""
    from autodist.graph.rebatch import at_batch
    from cost_models.measured_steps import MeasuredStep

    model = CostModel.default()
    cores = int(model.executor.cores)
    batch = mlp_graph.job.batch_size
    timed = {1: {batch: 0.010, batch // 2: 0.006}, cores: {batch: 0.004, batch // 2: 0.003}}
    measured = copy_with_steps(model, [MeasuredStep("mlp", mlp_graph.structure_hash(), cpu.model, timed)])

    def step(graph, on):
        costs = measured.op_costs(graph, cpu, cores=on)
        return sum(c.step_seconds for c in costs.values()), costs

    assert step(mlp_graph, 1)[0] == pytest.approx(0.010)
    assert step(mlp_graph, None)[0] == pytest.approx(0.004)
    half = at_batch(mlp_graph, batch // 2)
    assert half.structure_hash() == mlp_graph.structure_hash()
    assert step(half, 1)[0] == pytest.approx(0.006)
    # A line through the measured batches: 0.002 s + 0.008 s per captured batch on one core.
    assert step(at_batch(mlp_graph, batch * 2), 1)[0] == pytest.approx(0.018)
    if cores > 1:
        assert step(mlp_graph, (1 + cores) / 2)[0] == pytest.approx(0.007)
    total, costs = step(mlp_graph, 1)
    plain = model.op_costs(mlp_graph, cpu, cores=1)
    ratio = total / sum(c.step_seconds for c in plain.values())
    assert all(c.step_seconds == pytest.approx(plain[n].step_seconds * ratio) for n, c in costs.items())
    assert {c.source for c in costs.values()} <= {"step-measured", "prior", "fallback"}
    assert any(c.source == "step-measured" for c in costs.values()) and "step-measured" in SOURCES
    assert measured.op_costs(embedding_graph, cpu) == model.op_costs(embedding_graph, cpu)
    assert measured.id != model.id
    # The report says which steps were timed whole.
    from autodist.api import make_plan
    from autodist.report import build_report, schema

    for graph, basis in ((mlp_graph, "step-measured"), (embedding_graph, "measured")):
        plan = make_plan(graph, "emu-1gbit:2", budget_s=0.2, cost_model=measured)
        doc = build_report(plan, graph, cost_model=measured)
        jsonschema.validate(doc, schema())
        assert [d["basis"] for d in doc["costs"]["devices"]] == [basis]


def test_a_measured_batch_keeps_its_measured_step_time_when_noise_makes_the_line_fall():
    """A tiny step timed at batch 16 a little slower than at 32 (timing noise) is priced at what was measured at
    each measured batch, and beyond them at the nearest one's time, not along a line that falls with the batch."""
    from cost_models.measured_steps import MeasuredStep

    step = MeasuredStep("mlp", "s", "cpu", {1: {32: 0.00359, 16: 0.00363}})
    assert step.seconds(1, 32) == 0.00359 and step.seconds(1, 16) == 0.00363
    assert step.seconds(1, 128) == 0.00359 and step.seconds(1, 8) == 0.00363
    rising = MeasuredStep("mlp", "s", "cpu", {1: {32: 0.004, 16: 0.003}})
    assert rising.seconds(1, 64) == pytest.approx(0.006) and rising.seconds(1, 8) == pytest.approx(0.0025)


def copy_with_steps(model, steps):
    """``model`` with ``steps`` (MeasuredStep list) as its steps timed whole."""
    import copy

    other = copy.copy(model)
    other.measured_steps, other._id = {(m.structure, m.device_model): m for m in steps}, None
    return other


def test_the_shipped_steps_timed_whole_are_found_for_the_zoo_s_captures(zoo_dir):
    """The shipped model's steps timed whole are keyed by their graph's structure: a change of capture that alters
    the zoo's graphs must re-key them (cost_models/data/op_timings.json and the op models' metadata), or they stop
    pricing the zoo without a word."""
    from autodist.graph.capture import capture_script

    model = CostModel.default()
    for name in ("mlp", "small_cnn"):
        item = capture_script(os.path.join(zoo_dir, f"{name}.py"), ["--batch-size", "16"])
        assert model.measured_step(item, "cpu-local") is not None, name
