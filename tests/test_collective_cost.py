"""The CPU collective calibration in the communication model and the simulator."""

import pytest

from autodist.resource_spec import load_cluster
from cost_models.calibration import TransferCalibration
from cost_models.collectives import ring_allreduce_seconds
from cost_models.comm import CommModel

# A 2-process allreduce curve in the calibration's format (seconds against bytes).
CURVE = TransferCalibration(overhead=4e-3, bandwidth=150e6,
                            measurements=[{"bytes": 4096, "seconds": 4.5e-3, "repeats": 5},
                                          {"bytes": 4 * 2**20, "seconds": 32e-3, "repeats": 5},
                                          {"bytes": 16 * 2**20, "seconds": 110e-3, "repeats": 5}])


def test_collective_allreduce_over_loopback_takes_the_calibrated_curve():
    spec = load_cluster(preset="cpu-local:2")
    devices = [d.name for d in spec.devices()]
    comm = CommModel(spec, collectives=CURVE)
    nbytes = 4 * 2**20
    phases = comm.allreduce_phases(nbytes, devices, "ring", collective_ops=True)
    assert len(phases) == 1 and phases[0].seconds == pytest.approx(float(CURVE.predict(nbytes)))
    assert phases[0].links  # it still occupies the loopback links, so it contends with other transfers
    # Transfers between the replicas' devices (a one-client plan) keep the link formula.
    assert comm.allreduce_time(nbytes, devices) < phases[0].seconds
    # n replicas: n - 1 steps of the 2-task curve at 2S/n bytes each.
    assert ring_allreduce_seconds(CURVE.predict, nbytes, 4) == pytest.approx(3 * float(CURVE.predict(nbytes / 2)))
    assert ring_allreduce_seconds(CURVE.predict, nbytes, 1) == 0.0


def test_collective_curve_applies_only_to_loopback_rings():
    spec = load_cluster(preset="dgx-h100:2")
    gpus = [d.name for d in spec.gpus()]
    with_curve = CommModel(spec, collectives=CURVE).allreduce_phases(2**26, gpus, "ring", collective_ops=True)
    without = CommModel(spec).allreduce_phases(2**26, gpus, "ring")
    assert [p.seconds for p in with_curve] == [p.seconds for p in without]


def test_simulator_prices_all_allreduce_plans_with_the_collective_curve(mlp_graph):
    from autodist.strategy import Strategy, VarSync
    from cost_models import CostModel
    from cost_models.model import CommRecords
    from placement import simulate

    spec = load_cluster(preset="cpu-local:2")
    base = CostModel.default()
    curve = CostModel(base.op_model, base.learned_devices, CommRecords(base.comm.transfers, CURVE))
    replicas = [[d.name] for d in spec.devices()]
    everything = Strategy(replicas=replicas, sync={v.name: VarSync("allreduce") for v in mlp_graph.trainable_variables()})
    assert everything.allreduces_everything()
    plain = simulate(mlp_graph, spec, everything, CostModel(base.op_model, base.learned_devices, CommRecords(base.comm.transfers)))
    priced = simulate(mlp_graph, spec, everything, curve)
    assert priced.step_time > plain.step_time  # the measured collectives are slower than transfers


@pytest.mark.slow
def test_profile_collectives_measures_real_allreduces_between_two_processes(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "collective_calibration.json"
    done = subprocess.run([sys.executable, "-m", "autodist", "profile", "collectives", "--repeats", "3", "--out",
                           str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    calibration = TransferCalibration.load(str(out))
    sizes = [m["bytes"] for m in calibration.measurements]
    assert sizes == sorted(sizes) and sizes[0] == 4096 and sizes[-1] == 64 * 2**20
    seconds = {m["bytes"]: m["seconds"] for m in calibration.measurements}
    assert seconds[64 * 2**20] > 4 * seconds[4 * 2**20] > 0  # bandwidth-bound at the large end
    assert calibration.command.startswith("autodist profile collectives")
