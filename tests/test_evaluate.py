"""The one evaluation of a trained system (fraglib/run/evaluate.py): the study's own path re-scores a checkpoint to
the same numbers, its settings never retrain, and a checkpoint is scored only on the data it was trained on."""

import numpy as np
import pytest

from fraglib.run.inputs import DataPaths


@pytest.mark.parametrize("run", ["devise", "dtrnn"])
def test_rescoring_a_checkpoint_gives_the_study_metrics_sentence_similarity_included(tiny_study, run):
    """``fraglib.run.evaluate`` is the study's own test evaluation: re-scoring ``best.pt`` alone with the same
    EvalConfig gives the run's metrics.json and ranks.json exactly (DT-RNN: its sentence-similarity task too)."""
    import json

    from fraglib.run.evaluate import evaluate_run

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

    from fraglib.run.train import train

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

    from fraglib.run.evaluate import evaluate_run
    from fraglib.run.train import train

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

    from fraglib.run.train import train

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


# ----------------------------------------------------------------------------- scores from another tool
def _cli(argv, tmp_path, name="m.json"):
    import json

    from fraglib.run.evaluate import main

    main(
        [
            *argv,
            "--set",
            "n_boot=50",
            "--set",
            "hub_k=2",
            "--params",
            "none",
            "--out",
            str(tmp_path / name),
            "--overwrite",
        ]
    )
    return json.loads((tmp_path / name).read_text())


@pytest.mark.parametrize("run", ["devise", "full"])
def test_a_runs_own_scores_through_scores_give_the_runs_metrics(tiny_study, tmp_path, run):
    """The worked example of docs/evaluation.md: a run's matrices written by --save-scores, evaluated as another
    tool's files (--scores, --val-scores, --banks), give the run's metrics.json and ranks.json exactly: the
    hubness corrections (both protocols, parameters chosen on validation) included."""
    import json

    from fraglib.run.evaluate import main

    seed = tiny_study / run / "seeds" / "seed0"
    main([str(seed), "--save-scores", str(tmp_path), "--params", "none"])
    data = json.loads((seed / "metrics.json").read_text())["info"]["dataset_dir"]
    got = _cli(
        [
            "--scores",
            str(tmp_path / "test.npy"),
            "--val-scores",
            str(tmp_path / "val.npy"),
            "--banks",
            str(tmp_path / "banks.npz"),
            "--dataset-dir",
            data,
        ],
        tmp_path,
    )
    ranks = got.pop("ranks")
    assert got == json.loads((seed / "metrics.json").read_text())["test"]
    assert ranks == json.loads((seed / "ranks.json").read_text())
    assert set(got["hubness"]) >= {"inverted_softmax_inductive", "csls_transductive"}


@pytest.fixture
def made(tmp_path):
    """A dataset.json alone (all a score file needs): 6 test images with 1-3 captions (sentids out of image
    order), 3 val images, 4 train images."""
    import json

    images, sid = [], 100
    for n, (split, caps) in enumerate(
        [("test", c) for c in (2, 3, 1, 2, 3, 2)] + [("val", 2)] * 3 + [("train", 2)] * 4
    ):
        sents = [{"sentid": sid + 100 * k, "raw": f"caption {sid + 100 * k}"} for k in range(caps)]
        sid += 1
        images.append({"imgid": 50 + n, "filename": f"{n}.jpg", "split": split, "sentences": sents})
    (tmp_path / "dataset.json").write_text(json.dumps({"images": images}))
    return tmp_path


def _embeddings(dataset_dir, noise, seed=0):
    """Test-split embeddings: a random vector per image, each sentence its image's plus ``noise``."""
    import numpy as np

    from fraglib.run.evaluate import split_index

    idx = split_index(dataset_dir, "test")
    rng = np.random.default_rng(seed)
    img = rng.normal(size=(len(idx["imgid"]), 8))
    return idx, img, img[idx["sentence_image"]] + noise * rng.normal(size=(len(idx["sentid"]), 8))


def test_embeddings_and_reordered_files_give_hand_computed_ranks(made, tmp_path):
    """--image-emb/--sentence-emb score by cosine; sentences equal to their image's vector rank it first
    (R@1 100 both ways); the same files in another order with --image-ids/--sentence-ids give the same numbers,
    and the dot product of unit rows equals the cosine."""
    import numpy as np

    idx, img, sent = _embeddings(made, 0.0)
    np.save(tmp_path / "i.npy", img)
    np.save(tmp_path / "t.npy", sent)
    m = _cli(
        [
            "--image-emb",
            str(tmp_path / "i.npy"),
            "--sentence-emb",
            str(tmp_path / "t.npy"),
            "--dataset-dir",
            str(made),
            "--set",
            "hubness=false",
        ],
        tmp_path,
    )
    assert m["annotation"]["r1"] == m["search"]["r1"] == 100.0 and m["search"]["mean_rank"] == 1.0
    # a worse system: noisy sentences; then the same files shuffled, with their ids
    idx, img, sent = _embeddings(made, 2.0)
    np.save(tmp_path / "i.npy", img)
    np.save(tmp_path / "t.npy", sent)
    base = ["--dataset-dir", str(made), "--set", "hubness=false"]
    plain = _cli(["--image-emb", str(tmp_path / "i.npy"), "--sentence-emb", str(tmp_path / "t.npy"), *base], tmp_path)
    rng = np.random.default_rng(1)
    pi, ps = rng.permutation(len(img)), rng.permutation(len(sent))
    np.save(tmp_path / "ip.npy", img[pi])
    np.save(tmp_path / "tp.npy", sent[ps])
    (tmp_path / "test_img.txt").write_text("\n".join(str(x) for x in idx["imgid"][pi]))
    (tmp_path / "test_sent.txt").write_text("\n".join(str(x) for x in idx["sentid"][ps]))
    shuffled = _cli(
        [
            "--image-emb",
            str(tmp_path / "ip.npy"),
            "--sentence-emb",
            str(tmp_path / "tp.npy"),
            "--image-ids",
            str(tmp_path / "{split}_img.txt"),
            "--sentence-ids",
            str(tmp_path / "{split}_sent.txt"),
            *base,
        ],
        tmp_path,
    )
    assert shuffled == plain and plain["annotation"]["r1"] < 100.0
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    np.save(tmp_path / "s.npy", unit(img) @ unit(sent).T)
    assert _cli(["--scores", str(tmp_path / "s.npy"), *base], tmp_path) == plain


def test_against_gives_a_paired_difference_with_a_ci(made, tmp_path):
    """--against: the same matrix gives a zero difference with a zero-width CI; a perfect system against a noisy
    one gives the hand-computed R@1 difference, its CI around it."""
    import numpy as np

    from fraglib.run.evaluate import main

    idx, img, good = _embeddings(made, 0.0)
    _, _, bad = _embeddings(made, 3.0)
    for name, x in (("i", img), ("g", good), ("b", bad)):
        np.save(tmp_path / f"{name}.npy", x)
    base = ["--dataset-dir", str(made), "--set", "hubness=false", "--image-emb", str(tmp_path / "i.npy")]
    same = _cli(
        [
            *base,
            "--sentence-emb",
            str(tmp_path / "g.npy"),
            "--against-image-emb",
            str(tmp_path / "i.npy"),
            "--against-sentence-emb",
            str(tmp_path / "g.npy"),
        ],
        tmp_path,
    )
    assert all(
        v == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "excludes_zero": False}
        for d in same["paired"].values()
        for v in d.values()
    )
    out = _cli(
        [
            *base,
            "--sentence-emb",
            str(tmp_path / "g.npy"),
            "--against-image-emb",
            str(tmp_path / "i.npy"),
            "--against-sentence-emb",
            str(tmp_path / "b.npy"),
        ],
        tmp_path,
    )
    d = out["paired"]["search"]["r1"]
    assert d["diff"] == pytest.approx(100.0 - out["against"]["search"]["r1"]) and d["lo"] <= d["diff"] <= d["hi"]
    assert d["diff"] > 0
    main([*base, "--sentence-emb", str(tmp_path / "g.npy"), "--set", "n_boot=50", "--params", "none"])


@pytest.mark.parametrize(
    "make, flags, says",
    [
        (lambda n, m: np.zeros((n + 1, m)), [], "is needed, got"),
        (lambda n, m: np.zeros((m, m)), [], "one row per caption"),
        (lambda n, m: np.where(np.eye(n, m) > 0, np.nan, 0.0), [], "NaN or +inf"),
        (lambda n, m: np.zeros((n, m)), ["--sentence-ids", "{tmp}/ids.txt"], "ids are missing"),
        (lambda n, m: np.zeros((n, m)), ["--banks", "{tmp}/s.npy"], "banks"),
        (lambda n, m: np.zeros((n, m), object), [], "NumPy"),
    ],
)
def test_bad_score_files_are_refused_naming_the_cause(made, tmp_path, capsys, make, flags, says):
    from fraglib.run.evaluate import main, split_index

    idx = split_index(made, "test")
    n, m = len(idx["imgid"]), len(idx["sentid"])
    S = make(n, m)
    if S.dtype == object:
        np.save(tmp_path / "s.npy", S, allow_pickle=True)
    else:
        np.save(tmp_path / "s.npy", S)
    (tmp_path / "ids.txt").write_text("\n".join(str(x + 10_000) for x in idx["sentid"]))
    flags = [f.format(tmp=tmp_path) for f in flags]
    with pytest.raises(SystemExit) as e:
        main(["--scores", str(tmp_path / "s.npy"), "--dataset-dir", str(made), "--params", "none", *flags])
    assert e.value.code == 2 and says in capsys.readouterr().err


@pytest.fixture(scope="module")
def galleried(tiny_full, tmp_path_factory):
    """A copy of the tiny benchmark whose 4 test images form two galleries of 2."""
    import json
    import shutil

    out = tmp_path_factory.mktemp("galleries") / "synth"
    shutil.copytree(tiny_full, out)
    ds = json.loads((out / "dataset.json").read_text())
    tests = [im for im in ds["images"] if im["split"] == "test"]
    for n, im in enumerate(tests):
        im["gallery"] = n // 2
    (out / "dataset.json").write_text(json.dumps(ds))
    return out


@pytest.mark.parametrize("run", ["full", "dtrnn"])
def test_a_galleried_test_split_is_scored_and_ranked_gallery_by_gallery(tiny_study, galleried, run):
    """Test images with galleries: each gallery's block of the score matrix is the whole split's (to float
    rounding: other tiles), pairs across
    galleries score -inf, so every query's rank is the rank within its own gallery (by hand, per gallery);
    sentence similarity (DT-RNN) likewise stays inside the gallery."""
    import dataclasses

    import torch

    from fraglib.metrics.retrieval import annotation_ranks, search_ranks
    from fraglib.run.checkpoint import best_of, load_system
    from fraglib.run.evaluate import score_matrix, similarity_matrix
    from fraglib.run.inputs import load_splits

    system, _ = load_system(best_of(tiny_study / run / "seeds" / "seed0"))
    views = system.views(system.cfg)
    split = load_splits(DataPaths(galleried), views, torch.device("cpu"), names=("test",))[0]["test"]
    assert split.galleries.tolist() == [0, 0, 1, 1]
    S = score_matrix(system, split)
    plain = score_matrix(system, dataclasses.replace(split, galleries=None))
    g, si = split.galleries, split.sentence_image
    same = g[:, None] == g[si][None, :]
    # other tiles, other float order (DT-RNN composes its trees level by level over the tile: ~1e-4 relative)
    torch.testing.assert_close(S[torch.from_numpy(same)], plain[torch.from_numpy(same)], rtol=1e-3, atol=1e-3)
    assert torch.isneginf(S[torch.from_numpy(~same)]).all()
    for b in (0, 1):
        rows, cols = np.flatnonzero(g == b), np.flatnonzero(g[si] == b)
        block = S[np.ix_(rows, cols)]
        local = si[cols] - rows[0]
        assert np.array_equal(annotation_ranks(S, si)[rows], annotation_ranks(block, local))
        assert np.array_equal(search_ranks(S, si)[cols], search_ranks(block, local))
    sim = similarity_matrix(system, split)
    if run == "dtrnn":
        across = torch.from_numpy(g[si][:, None] != g[si][None, :])
        assert torch.isneginf(sim[across]).all() and torch.isfinite(sim[~across]).any()
    else:
        assert sim is None


def test_a_split_half_in_galleries_is_refused_naming_an_image(galleried, tmp_path):
    import json
    import shutil

    import torch

    from fraglib.core.batches import Views
    from fraglib.run.inputs import load_splits

    out = tmp_path / "synth"
    shutil.copytree(galleried, out)
    ds = json.loads((out / "dataset.json").read_text())
    first = next(im for im in ds["images"] if im["split"] == "test")
    del first["gallery"]
    (out / "dataset.json").write_text(json.dumps(ds))
    with pytest.raises(ValueError, match=rf"1 of the 4 images of split 'test' \(e\.g\. {first['filename']}\)"):
        load_splits(DataPaths(out), Views("rcnn", "dependency"), torch.device("cpu"), names=("test",))
