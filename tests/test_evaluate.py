"""The one evaluation of a trained system (fraglib/evaluate.py): the study's own path re-scores a checkpoint to
the same numbers, its settings never retrain, and a checkpoint is scored only on the data it was trained on."""

import pytest

from fraglib.inputs import DataPaths


@pytest.mark.parametrize("run", ["devise", "dtrnn"])
def test_rescoring_a_checkpoint_gives_the_study_metrics_sentence_similarity_included(tiny_study, run):
    """``fraglib.evaluate`` is the study's own test evaluation: re-scoring ``best.pt`` alone with the same
    EvalConfig gives the run's metrics.json and ranks.json exactly (DT-RNN: its sentence-similarity task too)."""
    import json

    from fraglib.evaluate import evaluate_run

    from conftest import tiny_eval

    seed = tiny_study / run / "seeds" / "seed0"
    again = evaluate_run(seed, tiny_eval())
    ranks = again.pop("ranks")
    assert json.loads(json.dumps(again)) == json.loads((seed / "metrics.json").read_text())["test"]
    assert ranks == json.loads((seed / "ranks.json").read_text())
    assert ("similarity" in again) == (run == "dtrnn")


def test_changing_the_evaluation_rescores_and_never_retrains(tiny_full, tmp_path):
    """The evaluation settings are not part of a checkpoint's identity: a finished run trained again with other
    n_boot / hubness settings resumes at its last epoch (no training step) and only its CIs and hubness change."""
    import json

    import torch

    from fraglib.train import train

    from conftest import tiny_eval, tiny_spec

    cpu = torch.device("cpu")
    a = train(DataPaths(tiny_full), tmp_path, tiny_spec("devise", epochs=2), tiny_eval(), device=cpu, progress=False)
    before = (tmp_path / "last.pt").read_bytes()
    b = train(
        DataPaths(tiny_full),
        tmp_path,
        tiny_spec("devise", epochs=2),
        tiny_eval(n_boot=20, hubness=False),
        device=cpu,
        progress=False,
    )
    assert (tmp_path / "last.pt").read_bytes() == before  # not retrained, not even re-saved
    assert a["test"]["annotation"] == b["test"]["annotation"] and "hubness" not in b["test"]
    assert json.loads((tmp_path / "metrics.json").read_text())["eval_config"]["n_boot"] == 20


def test_a_checkpoint_is_not_scored_on_other_data_at_its_recorded_path(tiny_full, tmp_path):
    """The checkpoint records its inputs' SHA-256: when the data at the path it was trained from changed, the
    default re-scoring refuses (naming the file) instead of scoring whatever lies there now."""
    import shutil

    import torch

    from fraglib.evaluate import evaluate_run
    from fraglib.train import train

    from conftest import tiny_eval, tiny_spec

    data = tmp_path / "data"
    shutil.copytree(tiny_full, data)
    train(
        DataPaths(data),
        tmp_path / "run",
        tiny_spec("devise", epochs=1),
        tiny_eval(),
        device=torch.device("cpu"),
        progress=False,
    )
    assert evaluate_run(tmp_path / "run", tiny_eval())["annotation"]["r1"] >= 0
    (data / "dataset.json").write_text((data / "dataset.json").read_text() + " ")
    with pytest.raises(ValueError, match=r"other data than dataset \(.*dataset.json\)"):
        evaluate_run(tmp_path / "run", tiny_eval())


def test_settings_the_test_split_cannot_take_are_refused_before_training(tiny_full, tmp_path):
    """hub_k at or above the test split's size, or folds that do not divide its images: refused before any
    epoch, naming the setting (nothing is written)."""
    import torch

    from fraglib.train import train

    from conftest import tiny_eval, tiny_spec

    for ec, message in ((tiny_eval(hub_k=1000), r"evaluation\.hub_k=1000"), (tiny_eval(test_folds=3), r"test_folds=3")):
        with pytest.raises(ValueError, match=message):
            train(
                DataPaths(tiny_full),
                tmp_path / "r",
                tiny_spec("devise"),
                ec,
                device=torch.device("cpu"),
                progress=False,
            )
        assert not (tmp_path / "r" / "last.pt").exists()
