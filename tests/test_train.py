"""Training end to end on the tiny benchmark: determinism, kill-and-resume, variants, batching."""
import json

import numpy as np
import pytest
import torch

from conftest import TINY_TRAIN
from fraglib.config import ConfigError
from fraglib.train import TrainConfig, load_data, make_batches, train


def _test_metrics(out):
    return json.loads((out / "metrics.json").read_text())["test"]


def test_same_seed_same_metrics_and_resume_equals_uninterrupted(tiny_full, tmp_path):
    cfg = TrainConfig(**TINY_TRAIN)
    a = train(tiny_full, tmp_path / "a", cfg, device=torch.device("cpu"), progress=False)
    train(tiny_full, tmp_path / "b", cfg, device=torch.device("cpu"), progress=False)
    assert _test_metrics(tmp_path / "a") == _test_metrics(tmp_path / "b")
    assert (tmp_path / "a" / "ranks.json").read_text() == (tmp_path / "b" / "ranks.json").read_text()
    # killed after 2 epochs (the process ends), then started again: resumes from last.pt
    r = train(tiny_full, tmp_path / "c", cfg, device=torch.device("cpu"), progress=False, stop_after=2)
    assert r == {"stopped_at_epoch": 2}
    assert torch.load(tmp_path / "c" / "last.pt", weights_only=False)["epoch"] == 2
    train(tiny_full, tmp_path / "c", cfg, device=torch.device("cpu"), progress=False)
    assert _test_metrics(tmp_path / "c") == _test_metrics(tmp_path / "a")
    assert (tmp_path / "c" / "history.csv").read_text() == (tmp_path / "a" / "history.csv").read_text()
    hist = (tmp_path / "a" / "history.csv").read_text().splitlines()
    assert len(hist) == 1 + cfg.epochs and "train_C_0" in hist[0] and "train_C_F" in hist[0]
    assert a["config"]["seed"] == 0 and a["best_epoch"] in range(1, cfg.epochs + 1)


def test_resume_refuses_another_configuration(tiny_full, tmp_path):
    cfg = TrainConfig(**TINY_TRAIN)
    train(tiny_full, tmp_path, cfg, device=torch.device("cpu"), progress=False, stop_after=1)
    with pytest.raises(ValueError, match="another configuration"):
        train(tiny_full, tmp_path, TrainConfig(**{**TINY_TRAIN, "lr": 0.5}), device=torch.device("cpu"), progress=False)


@pytest.mark.parametrize("override", [
    {"devise": True, "fragment_weight": 0.0},
    {"devise": True, "fragment_weight": 0.0, "similarity": "cosine", "optimizer": "adam", "lr": 1e-3},
    {"random": True},
    {"detector": "fullframe"},
    {"detector": "groundtruth", "fragment_mode": "bow", "accumulate": "max"},
    {"fragment_mode": "bigram", "beta": 0.0},
])
def test_variants_run(tiny_full, tmp_path, override):
    m = train(tiny_full, tmp_path, TrainConfig(**{**TINY_TRAIN, "epochs": 2, **override}), device=torch.device("cpu"),
              progress=False)
    t = m["test"]
    assert 0 <= t["annotation"]["r1"] <= 100 and t["search"]["mean_rank"] >= 1
    assert t["annotation_ci"]["r1"][0] <= t["annotation"]["r1"] <= t["annotation_ci"]["r1"][1]


def test_batches_never_repeat_an_image(tiny_full):
    splits, _, _, _ = load_data(tiny_full, TrainConfig(), torch.device("cpu"))
    tr = splits["train"]
    batches = make_batches(tr, 7, seed=0, epoch=3)
    for b in batches:
        assert len(set(tr.sentence_image[b].tolist())) == len(b) <= 7
    seen = np.concatenate(batches)
    assert len(seen) == len(set(seen.tolist()))
    assert len(seen) >= tr.n_sentences - 1  # every sentence with fragments, but a lone last one
    assert [b.tolist() for b in batches] == [b.tolist() for b in make_batches(tr, 7, seed=0, epoch=3)]


def test_bad_train_parameters():
    with pytest.raises(ConfigError, match=r"train\.detector='yolo'"):
        TrainConfig(detector="yolo").validate()
    with pytest.raises(ConfigError, match="both 0"):
        TrainConfig(fragment_weight=0.0, beta=0.0).validate()


def test_search_over_splits_with_fixed_keys(tiny_full, tmp_path):
    """The validation-only search averages its criterion over splits and keeps --set keys fixed."""
    import yaml

    from fraglib import search

    for s in (0, 1):
        (tmp_path / f"split{s}").symlink_to(tiny_full, target_is_directory=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": dict(TINY_TRAIN)}))
    out = tmp_path / "table.csv"
    search.main(["--dataset-dir", str(tmp_path / "split{seed}"), "--splits", "0", "1", "--params", str(params),
                 "--set", "devise=true", "--set", "fragment_weight=0", "--trials", "2", "--epochs", "1",
                 "--jobs", "1", "--out", str(out)])
    lines = out.read_text().splitlines()
    assert lines[0].split(",")[:5] == list(search.SPACE) and len(lines) == 3
    crit = [float(line.split(",")[5]) for line in lines[1:]]
    assert crit == sorted(crit, reverse=True) and all(c > 0 for c in crit)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["splits"] == [0, 1] and meta["base"]["devise"] is True


def test_variant_config_layers_dataset_overrides():
    """train <- dataset 'all' <- variant <- dataset '<variant>'; unknown names are refused."""
    from fraglib.study import variant_config

    params = {"train": {"lr": 0.01, "margin": 1.0, "embed_dim": 64},
              "variants": {"full": {}, "devise": {"devise": True, "fragment_weight": 0.0, "margin": 0.5}}}
    extra = {"all": {"lr": 0.1, "margin": 0.2}, "devise": {"lr": 0.3}}
    full = variant_config(params, "full", 3, extra)
    assert (full.lr, full.margin, full.embed_dim, full.seed) == (0.1, 0.2, 64, 3)
    dev = variant_config(params, "devise", 0, extra)
    assert (dev.lr, dev.margin, dev.devise) == (0.3, 0.5, True)       # the variant's own margin wins over 'all'
    assert variant_config(params, "full", 0).lr == 0.01
    with pytest.raises(ConfigError, match="neither 'all' nor a variant"):
        variant_config(params, "full", 0, {"fulll": {"lr": 1.0}})


def test_devise_scores_cosine_by_hand():
    from fraglib.train import devise_scores

    V = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    S = torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    assert torch.allclose(devise_scores(V, S), torch.tensor([[8.0, 7.0], [0.0, 1.0]]))
    r = 2 ** -0.5
    assert torch.allclose(devise_scores(V, S, "cosine"), torch.tensor([[0.8, 7 / 5 * r], [0.0, r]]))


def test_cosine_is_refused_for_the_fragment_model():
    with pytest.raises(ConfigError, match="DeViSE baseline only"):
        TrainConfig(similarity="cosine").validate()
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig(optimizer="rmsprop").validate()


def test_seed_threads_give_idle_cores_to_the_last_round():
    from fraglib.study import seed_threads

    assert seed_threads(5, 2, 2) == [1, 1, 1, 1, 2]
    assert seed_threads(3, 2, 8) == [4, 4, 8]
    assert seed_threads(4, 2, 2) == [1, 1, 1, 1]
    assert seed_threads(1, 2, 2) == [2]
    assert seed_threads(2, 1, 3) == [3, 3]
