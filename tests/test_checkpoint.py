"""Checkpoints: no code runs on load, a checkpoint is resumed only for the very inputs and settings
it was trained on, and a finished run never silently changes (issue "Reliability", items 1, 2, 6)."""

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fraglib.core.config import ConfigError
from fraglib.run import checkpoint
from fraglib.run.checkpoint import CheckpointError
from fraglib.run.inputs import DataPaths
from fraglib.run.train import check_usable, train

from conftest import tiny_eval, tiny_spec

CPU = torch.device("cpu")


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/fraglib_pwned",))


def test_a_crafted_checkpoint_runs_no_code(tmp_path):
    bad = tmp_path / "last.pt"
    with open(bad, "wb") as f:
        pickle.dump({"format": checkpoint.FORMAT, "x": _Boom()}, f)
    if os.path.exists("/tmp/fraglib_pwned"):
        os.remove("/tmp/fraglib_pwned")
    with pytest.raises(CheckpointError, match=f"{bad}: not a plain-tensor fraglib checkpoint") as e:
        checkpoint.load(bad)
    assert "weights_only" not in str(e.value)
    assert not os.path.exists("/tmp/fraglib_pwned")
    torch.save({"model": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a fraglib checkpoint"):
        checkpoint.load(tmp_path / "other.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "other.pt").read_bytes()[:50])
    with pytest.raises(CheckpointError, match="cut.pt: not a readable"):
        checkpoint.load(tmp_path / "cut.pt")


def test_changed_inputs_are_never_resumed(tiny_full, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_full, data)
    out = tmp_path / "run"
    spec = tiny_spec(epochs=2)
    train(DataPaths(data), out, spec, tiny_eval(), device=CPU, progress=False, stop_after=1)
    # the features change (as after `vision.k` 19 -> 3): the old model must not be resumed
    z = dict(np.load(data / "features" / "rcnn.npz"))
    z["features"] = z["features"] * 1.5
    np.savez(data / "features" / "rcnn.npz", **z)
    with pytest.raises(CheckpointError, match="other fingerprint"):
        train(DataPaths(data), out, spec, tiny_eval(), device=CPU, progress=False)
    fresh = train(DataPaths(data), tmp_path / "fresh", spec, tiny_eval(), device=CPU, progress=False)
    restarted = train(DataPaths(data), out, spec, tiny_eval(), device=CPU, progress=False, restart=True)
    assert restarted["test"] == fresh["test"]


def test_a_deleted_best_checkpoint_is_not_replaced_by_other_weights(tiny_full, tmp_path):
    spec = tiny_spec(epochs=2)
    done = train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False)
    (tmp_path / "best.pt").unlink()
    with pytest.raises(CheckpointError, match="best.pt: checkpoint not found"):
        train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False)
    again = train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False, restart=True)
    assert again["test"] == done["test"] and again["best_epoch"] == done["best_epoch"]
    assert json.loads((tmp_path / "metrics.json").read_text())["best_epoch"] is not None


def test_duplicate_seeds_are_refused():
    from fraglib_study.experiments.study import study_seeds

    with pytest.raises(ConfigError, match=r"study.seeds=\[0, 0\]: duplicate seeds"):
        study_seeds({"study": {"seeds": [0, 0]}})
    with pytest.raises(ConfigError, match="pascal1k.splits"):
        study_seeds({"pascal1k": {"splits": []}}, "pascal1k")


def test_a_run_may_take_a_subset_of_the_seeds():
    from fraglib_study.experiments.study import study_seeds

    p = {
        "study": {"seeds": [0, 1, 2]},
        "pascal1k": {"splits": [4, 3, 2, 1, 0]},
        "runs": {
            "big": {"system": "vse", "seeds": [1, 0]},
            "bad": {"system": "vse", "seeds": [7]},
            "twice": {"system": "vse", "seeds": [1, 1]},
        },
    }
    assert study_seeds(p, None, "big") == [0, 1] and study_seeds(p, "pascal1k", "big") == [1, 0]  # the study's order
    assert study_seeds(p, None, "other") == [0, 1, 2]
    one = {**p, "study": {"seeds": [0]}}
    assert study_seeds(one, None, "big") == [0]  # seed 1 is not in a one-seed study: skipped
    with pytest.raises(
        ConfigError,
        match=r"runs.bad.seeds=\[7\]: expected a list without duplicates sharing a seed "
        r"with study.seeds",
    ):
        study_seeds(p, None, "bad")
    with pytest.raises(ConfigError, match=r"runs.twice.seeds=\[1, 1\]"):
        study_seeds(p, None, "twice")


def test_replicates_train_each_seed_again_with_its_own_training_seed(tiny_full, tmp_path):
    """runs.<run>.replicates: seed 0 trains twice (training seeds 0 and 1000) on the same data; the
    summary lists both units in one group (one test set) and their mean."""
    from fraglib_study.experiments.study import run_study, study_replicates
    from fraglib_study.report.loading import load_run

    from conftest import tiny_params

    params = tiny_params(r={"system": "devise", "replicates": 2, "epochs": 1})
    s = run_study(DataPaths(tiny_full), "r", params, tmp_path)
    assert s["units"] == ["0", "0r1"] and s["groups"] == [0, 0] and s["replicates"] == 2
    ms = [json.loads((tmp_path / "seeds" / f"seed{u}" / "metrics.json").read_text()) for u in s["units"]]
    assert [m["train_config"]["seed"] for m in ms] == [0, 1000]
    assert s["annotation"]["r5"] == pytest.approx(
        (ms[0]["test"]["annotation"]["r5"] + ms[1]["test"]["annotation"]["r5"]) / 2
    )
    costs = [(tmp_path / "seeds" / f"seed{u}" / "history.csv").read_text() for u in s["units"]]
    assert costs[0] != costs[1]  # another initialisation and batch order
    assert load_run(tmp_path)["ranks"]["search"].shape[0] == 2
    with pytest.raises(ConfigError, match=r"runs.r.replicates=0: expected an integer"):
        study_replicates({"runs": {"r": {"replicates": 0}}}, "r")
    assert study_replicates({"study": {"replicates": 3}}, "r") == 3


def test_unusable_data_stops_before_training(tiny_full):
    from fraglib.core.batches import Views
    from fraglib.run.inputs import DataPaths, load_splits

    splits, _, _ = load_splits(DataPaths(tiny_full), Views("rcnn", "dependency"), CPU)
    te = splits["test"]
    te.images.off = np.zeros_like(te.images.off)  # every test image without features
    with pytest.raises(ValueError, match=r"only 0 of \d+ test sentences are usable \(0 of \d+ images have features"):
        check_usable(splits, "somewhere")


def test_captions_without_a_known_word_stop_systems_that_read_word_vectors(tiny_full):
    from fraglib.core.batches import Views
    from fraglib.run.inputs import load_splits

    for view in ("dependency", "tree_basic"):
        splits, _, _ = load_splits(DataPaths(tiny_full), Views("fullframe", view), CPU)
        check_usable(splits, "somewhere", Views("fullframe", view))  # English captions: fine
        assert splits["train"].known_word_sentences().all()
        splits["train"].words.zero_()  # every word out of the dictionary
        with pytest.raises(ValueError, match=r"only 0 of \d+ train sentences have a word with a GloVe vector"):
            check_usable(splits, "somewhere", Views("fullframe", view))


def test_a_dataset_without_a_val_split_stops_before_the_first_epoch(tiny_full, tmp_path):
    """No val (or no test) split once crashed only after every epoch had been trained."""
    data = tmp_path / "data"
    shutil.copytree(tiny_full, data, ignore=shutil.ignore_patterns("images"))
    d = json.loads((data / "dataset.json").read_text())
    for im in d["images"]:
        im["split"] = "train" if im["split"] == "val" else im["split"]
    (data / "dataset.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="the val split has 0 images and 0 sentences"):
        train(DataPaths(data), tmp_path / "run", tiny_spec(epochs=2), tiny_eval(), device=CPU, progress=False)
    assert not list((tmp_path / "run").rglob("*.pt"))  # stopped before any training


def test_results_in_one_folder_checkpoints_in_another(tiny_full, tmp_path, monkeypatch):
    """A study keeps its small results in git (runs/) and its checkpoints in DVC (models/): the results
    folder holds no checkpoint, names where they are, and everything that loads one finds it there."""
    from fraglib.run.checkpoint import CheckpointError, best_of
    from fraglib.run.evaluate import evaluate_run
    from fraglib_study.experiments.study import run_study

    from conftest import tiny_params

    monkeypatch.chdir(tmp_path)  # the names are relative, as in the pipeline
    run_study(DataPaths(tiny_full), "devise", tiny_params(), "runs/devise", models_dir="models/devise")
    seed = tmp_path / "runs" / "devise" / "seeds" / "seed0"
    assert sorted(p.name for p in seed.iterdir()) == ["history.csv", "metrics.json", "ranks.json", "timing.json"]
    assert sorted(p.name for p in (tmp_path / "models" / "devise" / "seed0").iterdir()) == [
        "best.pt",
        "last.pt",
        "timing.json",
    ]
    assert json.loads((seed / "metrics.json").read_text())["checkpoint_dir"] == "models/devise/seed0"
    assert best_of(seed) == Path("models/devise/seed0/best.pt")
    again = evaluate_run(seed, tiny_eval())
    assert again["ranks"] == json.loads((seed / "ranks.json").read_text())
    shutil.rmtree(tmp_path / "models")
    with pytest.raises(CheckpointError, match=r"models/devise/seed0/best.pt: checkpoint not found; .*dvc pull"):
        best_of(seed)


class _Plain:
    """A harmless custom class: still not allowed in a checkpoint."""


def test_a_checkpoint_holding_other_objects_is_refused_without_advice_to_run_its_code(tmp_path):
    """torch's error advises loading with weights_only=False (which runs the file's code): the message
    says what the file is and that it is not loaded, and never repeats that advice."""
    path = tmp_path / "last.pt"
    torch.save({"format": checkpoint.FORMAT, "model": {}, "extra": _Plain()}, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    msg = str(e.value)
    assert msg.startswith(
        f"{path}: not a plain-tensor fraglib checkpoint (it holds objects other than tensors and "
        "plain containers: Unsupported global: GLOBAL "
    )
    assert "_Plain); it is not loaded, since loading it could run code" in msg
    assert "weights_only" not in msg and "safe_globals" not in msg and "trust" not in msg


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4416 vs 4352"),
        OSError(28, "No space left on device"),
    ],
)
def test_a_full_disk_names_the_checkpoint_and_keeps_the_previous_one(tmp_path, monkeypatch, failure):
    path = tmp_path / "last.pt"
    checkpoint.save(path, {"epoch": 1})
    real_save = torch.save

    def disk_fills(obj, f, *a, **k):  # half the file reaches the disk, then the write fails
        real_save(obj, f, *a, **k)
        Path(f).write_bytes(Path(f).read_bytes()[:40])
        raise failure

    monkeypatch.setattr(torch, "save", disk_fills)
    with pytest.raises(OSError) as e:
        checkpoint.save(path, {"epoch": 2})
    assert str(e.value) == (
        f"{path}: writing the checkpoint failed, is the disk full? ({str(failure).splitlines()[0]}). "
        "The previous last.pt, if any, is intact: free some space and run the same command again "
        "to resume from it"
    )
    monkeypatch.undo()
    assert checkpoint.load(path)["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file left
