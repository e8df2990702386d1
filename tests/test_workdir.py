"""Each replica writes in a working folder of its own (autodist.workdir), as each worker of a cluster on its own
disk: the corpus' tf_docs_keras_save_and_load (``os.mkdir``), tf_docs_distribute_keras (an HDF5 checkpoint) and
tf_docs_structured_data_preprocessing_layers (a ``.keras`` saved and loaded back) stopped both replicas when they
ran in one folder ("FileExistsError", "Unable to synchronously create file", "Bad CRC-32")."""

import os
import subprocess
import sys

import numpy as np

from autodist.workdir import own_folder
from tests.plan_runs import captured, ring_plan

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "saves_in_its_folder.py")


def test_an_own_folder_links_every_entry_and_keeps_what_is_written_its_own(tmp_path):
    user = tmp_path / "user"
    (user / "images").mkdir(parents=True)
    (user / "data.csv").write_text("1,2\n")
    (user / ".hidden").write_text("x")
    folder = own_folder(str(tmp_path), "replica-1", str(user))
    assert sorted(os.listdir(folder)) == [".hidden", "data.csv", "images"]
    assert open(os.path.join(folder, "data.csv")).read() == "1,2\n"
    os.mkdir(os.path.join(folder, "saved"))
    assert not (user / "saved").exists()


def test_an_own_folder_never_links_the_folder_that_holds_it(tmp_path):
    (tmp_path / "input.txt").write_text("x")
    (tmp_path / "runs").mkdir()
    folder = own_folder(str(tmp_path / "runs"), "replica-1", str(tmp_path))
    assert os.listdir(folder) == ["input.txt"]


def test_two_replicas_save_and_load_in_their_folders_and_the_chief_in_the_users(tmp_path):
    np.save(tmp_path / "data.npy", np.random.default_rng(3).random((64, 7)).astype(np.float32))
    plan = ring_plan(captured(SCRIPT, tmp_path), tmp_path / "plan.json")
    before = set(os.listdir(tmp_path))
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "saved and loaded back" in done.stdout
    assert set(os.listdir(tmp_path)) - before == {"cp.weights.h5", "saved"}
    assert os.listdir(tmp_path / "saved") == ["model.keras"]


def test_a_second_replica_keeps_a_callback_that_writes_in_its_own_folder_only(tmp_path, monkeypatch):
    import keras

    from launcher.runtime.loops.fit import writes_in_own_folder

    (tmp_path / "user" / "logs").mkdir(parents=True)
    monkeypatch.chdir(own_folder(str(tmp_path), "replica-1", str(tmp_path / "user")))
    assert writes_in_own_folder(keras.callbacks.ModelCheckpoint("training_1/cp.weights.h5"))
    assert writes_in_own_folder(keras.callbacks.EarlyStopping())
    assert not writes_in_own_folder(keras.callbacks.ModelCheckpoint(str(tmp_path.parent / "cp.weights.h5")))
    assert not writes_in_own_folder(keras.callbacks.CSVLogger("logs/log.csv"))


SAVES_BEFORE_ITS_STEP = """
import numpy as np
import keras

data = np.load("data.npy")
model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(1)])
model.save_weights("initial.weights.h5")
model.load_weights("initial.weights.h5")
model.compile(optimizer="sgd", loss="mse")
model.fit(data, data[:, :1], batch_size=16, epochs=1, verbose=0)
"""


def test_capture_leaves_nothing_the_script_writes_before_its_step(tmp_path, monkeypatch):
    """keras-io's mixup saves its initial weights before fit and both replicas save them again: capture (which
    ``autodist run`` and ``bench`` do first) left the file in the run's folder, every replica's folder linked it,
    and the replicas wrote one HDF5 file through the links ("Unable to synchronously create file")."""
    from autodist.graph.capture import capture_script

    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text(SAVES_BEFORE_ITS_STEP)
    np.save(tmp_path / "job" / "data.npy", np.zeros((32, 7), np.float32))
    monkeypatch.chdir(tmp_path / "job")
    item = capture_script("train.py")
    assert item.job.batch_size == 16 and item.job.model_name == "train"
    assert sorted(os.listdir(".")) == ["data.npy", "train.py"]
