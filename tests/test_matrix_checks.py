"""Every matrix that reaches a ranking is checked where it enters (issue 76): scores, validation scores, banks and
embeddings from files, named in the error; ranks in the input's precision (float64 files are never cast to float32);
every command reads its settings with the sections checked; options that would be ignored together are refused."""

import json
import math

import numpy as np
import pytest
import torch
from test_evaluate import made  # noqa: F401  (the dataset.json fixture)

from fraglib.metrics import hubness


# ----------------------------------------------------------------------------- a dataset.json and score files
@pytest.fixture
def ds(made):  # noqa: F811  (the fixture imported above)
    """tests/test_evaluate.py's dataset.json (6 test images with 1-3 captions, 3 val, 4 train); plus clean score
    files S.npy (test), V.npy (val) and banks ok.npz, and a writer of banks with one array replaced."""
    from fraglib.run.evaluate import split_index

    tmp_path = made
    t, v = split_index(tmp_path, "test"), split_index(tmp_path, "val")
    rng = np.random.default_rng(0)
    nt, mt, nv, mv = len(t["imgid"]), len(t["sentid"]), len(v["imgid"]), len(v["sentid"])
    np.save(tmp_path / "S.npy", rng.normal(size=(nt, mt)).astype(np.float32))
    np.save(tmp_path / "V.npy", rng.normal(size=(nv, mv)).astype(np.float32))
    banks = {
        "val_annotation": rng.normal(size=(4, mv)),
        "val_search": rng.normal(size=(8, nv)),
        "test_annotation": rng.normal(size=(4, mt)),
        "test_search": rng.normal(size=(8, nt)),
    }

    def write_banks(name, **changed):
        np.savez(tmp_path / name, **{**banks, **changed})
        return tmp_path / name

    write_banks("ok.npz")
    return tmp_path, t, banks, write_banks


def _main(argv, d, capsys=None):
    """``fraglib.run.evaluate.main`` on the files of ``d`` (n_boot 50, hub_k 2, no params file); the JSON written, or
    (exit code, stderr) when it refuses."""
    from fraglib.run.evaluate import main

    out = d / "m.json"
    base = ["--set", "n_boot=50", "--set", "hub_k=2"] + ([] if "--params" in argv else ["--params", "none"])
    try:
        main([*argv, *base, "--out", str(out), "--overwrite"])
    except SystemExit as e:
        return e.code, capsys.readouterr().err if capsys else ""
    return json.loads(out.read_text())


def _with_banks(d, banks):
    return [
        "--scores",
        str(d / "S.npy"),
        "--val-scores",
        str(d / "V.npy"),
        "--banks",
        str(banks),
        "--dataset-dir",
        str(d),
    ]


# ----------------------------------------------------------------------------- banks, from files and in the API
@pytest.mark.parametrize(
    "change, says",
    [
        (lambda b: b.__setitem__((slice(None), 3), np.inf), r"test_annotation: 4 of 52 scores are NaN or \+inf"),
        (lambda b: b.__setitem__((0, 0), np.nan), r"test_annotation: 1 of 52 scores are NaN or \+inf"),
        ("empty", r"test_annotation: a non-empty 2-D matrix is needed, got shape \(0, 13\)"),
        ("wide", r"test_annotation: a \(4, 13\) matrix .* is needed, got \(4, 14\)"),
    ],
)
def test_a_damaged_bank_file_is_refused_naming_the_file_and_array(ds, capsys, change, says):
    """Once: +inf in a bank gave rc 0 and other ranks; NaN and empty banks were refused blaming the clean
    --scores; a bank of another width was named as --scores'. Now each names --banks, its file and the array."""
    import re

    d, t, banks, write_banks = ds
    if change == "empty":
        bad = np.zeros((0, len(t["sentid"])))
    elif change == "wide":
        bad = np.ones((4, len(t["sentid"]) + 1))
    else:
        bad = banks["test_annotation"].copy()
        change(bad)
    path = write_banks("bad.npz", test_annotation=bad)
    code, err = _main(_with_banks(d, path), d, capsys)
    assert code == 2 and f"--banks {path}: test_annotation" in err and re.search(says, err), err
    assert "--scores" not in err.split("error:")[1]
    assert isinstance(_main(_with_banks(d, d / "ok.npz"), d), dict)  # the clean banks are scored


def test_bank_embeddings_and_embeddings_are_checked_naming_their_files(ds, capsys):
    """NaN, -inf or an empty embedding file is refused naming its flag and file; bank embeddings of another width
    than the split's name both files and both shapes."""
    d, t, _, _ = ds
    rng = np.random.default_rng(1)
    img, sent = rng.normal(size=(len(t["imgid"]), 8)), rng.normal(size=(len(t["sentid"]), 8))
    for name, x in (("i", img), ("t", sent), ("tw", rng.normal(size=(8, 5)))):
        np.save(d / f"{name}.npy", x)
    for bad, value in (("nan", np.nan), ("ninf", -np.inf)):
        x = sent.copy()
        x[2, 1] = value
        np.save(d / f"{bad}.npy", x)
        code, err = _main(
            ["--image-emb", str(d / "i.npy"), "--sentence-emb", str(d / f"{bad}.npy"), "--dataset-dir", str(d)],
            d,
            capsys,
        )
        assert code == 2 and f"--sentence-emb {d / bad}.npy" in err and "first at [2, 1]" in err, err
    np.save(d / "e.npy", np.zeros((0, 8)))
    code, err = _main(
        ["--image-emb", str(d / "e.npy"), "--sentence-emb", str(d / "t.npy"), "--dataset-dir", str(d)], d, capsys
    )
    assert code == 2 and f"--image-emb {d / 'e.npy'}: a non-empty 2-D matrix is needed" in err, err
    argv = [
        "--image-emb",
        str(d / "i.npy"),
        "--sentence-emb",
        str(d / "t.npy"),
        "--val-image-emb",
        str(d / "i.npy"),
        "--val-sentence-emb",
        str(d / "t.npy"),
        "--bank-image-emb",
        str(d / "i.npy"),
        "--bank-sentence-emb",
        str(d / "tw.npy"),
        "--dataset-dir",
        str(d),
    ]
    code, err = _main(argv, d, capsys)
    assert code == 2 and f"--val-image-emb {d / 'i.npy'} (6, 8) has 8 dims, --bank-sentence-emb " in err, err
    assert f"{d / 'tw.npy'} (8, 5) 5: their cosine cannot be taken" in err


def test_the_api_checks_banks_and_parameters():
    """``hubness.correct(S, "csls", nan)`` once said "cannot convert float NaN to integer"; DIS ignored a NaN bank; a
    bank of another width gave a bare torch size error. Each is now a ValueError naming the argument."""
    rng = np.random.default_rng(2)
    Q = torch.from_numpy(rng.normal(size=(5, 7)))
    B = torch.from_numpy(rng.normal(size=(4, 7)))
    nan_bank = B.clone()
    nan_bank[1, 2] = math.nan
    for bad in (math.nan, 2.5, True, "2", None):
        with pytest.raises(ValueError, match="csls K: a whole number is needed"):
            hubness.correct(Q, "csls", bad)
    with pytest.raises(ValueError, match="nnn: the parameter is a pair"):
        hubness.correct(Q, "nnn", 0.5)
    with pytest.raises(ValueError, match="nnn k: a whole number is needed, got nan"):
        hubness.correct(Q, "nnn", (0.5, math.nan))
    with pytest.raises(ValueError, match="dis β: a number is needed"):
        hubness.correct(Q, "dis", "1")
    with pytest.raises(ValueError, match="hubness k .*: a whole number is needed, got 1.5"):
        hubness.k_occurrence(Q, 1.5)
    for method, p in (("dis", 1.0), ("inverted_softmax", 1.0), ("csls", 2), ("nnn", (0.5, 2))):
        with pytest.raises(ValueError, match=r"bank: 1 of 28 scores are NaN or \+inf \(first at \[1, 2\]"):
            hubness.correct(Q, method, p, nan_bank)
        with pytest.raises(ValueError, match=r"got bank \(4, 6\) for scores \(5, 7\)"):
            hubness.correct(Q, method, p, B[:, :6])
        with pytest.raises(ValueError, match=r"got bank \(0, 7\) for scores \(5, 7\)"):
            hubness.correct(Q, method, p, B[:0])
        bad_q = Q.clone()
        bad_q[0, 0] = math.inf
        with pytest.raises(ValueError, match=r"1 of 35 scores are NaN or \+inf"):
            hubness.correct(bad_q, method, p, B)
    with pytest.raises(ValueError, match=r"DIS: bank: 1 of 28"):
        hubness.activated(Q, 1, nan_bank)


def test_evaluate_matrix_checks_the_banks_against_the_scores():
    """The API (:func:`fraglib.run.evaluate.evaluate_matrix`) refuses a bank with +inf or of another width, naming it."""
    from fraglib.run.evaluate import EvalConfig, evaluate_matrix

    rng = np.random.default_rng(3)
    si, vi = np.arange(6).repeat(2), np.arange(4).repeat(2)
    S, V = rng.normal(size=(6, 12)), rng.normal(size=(4, 8))
    banks = {
        "val": {"annotation": torch.randn(5, 8), "search": torch.randn(5, 4)},
        "test": {"annotation": torch.randn(5, 12), "search": torch.randn(5, 6)},
    }
    ec = EvalConfig(n_boot=20, hub_k=2)
    assert "csls_inductive" in evaluate_matrix(S, si, ec, 0, val=(V, vi), banks=banks)["hubness"]
    banks["test"]["search"][0, 0] = math.inf
    with pytest.raises(ValueError, match=r"banks\['test'\]\['search'\]: bank: 1 of 30 scores are NaN or \+inf"):
        evaluate_matrix(S, si, ec, 0, val=(V, vi), banks=banks)
    banks["test"]["search"] = torch.randn(5, 7)
    with pytest.raises(ValueError, match=r"banks\['test'\]\['search'\]: .*got bank \(5, 7\) for scores \(12, 6\)"):
        evaluate_matrix(S, si, ec, 0, val=(V, vi), banks=banks)


# ----------------------------------------------------------------------------- precision
def test_float64_scores_are_ranked_in_float64(ds):
    """Another tool's float64 scores differing by 1e-12 stay distinct (R@1 100, once 0: cast to float32, all tied);
    finite scores up to 1e308 are ranked (once refused as "+inf … diverged model"), corrections included, with the
    ranks of the same matrix at scale 1 and β reported in the file's units."""
    d, t, _, _ = ds
    n, m = len(t["imgid"]), len(t["sentid"])
    S = np.full((n, m), 0.5)
    S[t["sentence_image"], np.arange(m)] += 1e-12
    np.save(d / "tie.npy", S)
    got = _main(["--scores", str(d / "tie.npy"), "--dataset-dir", str(d)], d)
    assert got["annotation"]["r1"] == got["search"]["r1"] == 100.0
    rng = np.random.default_rng(4)
    plain, val = rng.normal(size=(n, m)), np.load(d / "V.npy").astype(np.float64)
    np.save(d / "p.npy", plain)
    np.save(d / "v64.npy", val)
    np.save(d / "huge.npy", plain * 2.0**1000)  # up to ~1e301: a float64 holds it, its statistics overflow
    np.save(d / "vhuge.npy", val * 2.0**1000)
    base = ["--dataset-dir", str(d)]
    a = _main(["--scores", str(d / "p.npy"), "--val-scores", str(d / "v64.npy"), *base], d)
    b = _main(["--scores", str(d / "huge.npy"), "--val-scores", str(d / "vhuge.npy"), *base], d)
    assert b["ranks"] == a["ranks"] and b["annotation"] == a["annotation"]
    for key in ("inverted_softmax_transductive", "csls_transductive", "dis_transductive", "nnn_transductive"):
        for direction in ("annotation", "search"):
            x, y = a["hubness"][key][direction], b["hubness"][key][direction]
            assert x["r1"] == y["r1"] and x["val_rsum"] == y["val_rsum"]
            scale = 2.0**-1000 if key.split("_")[0] in ("inverted", "dis") else 1.0
            assert y["param"] == x["param"] * scale
    assert b["hubness"]["beta_unit"] == a["hubness"]["beta_unit"] * 2.0**1000


def test_cosine_of_huge_embeddings_is_not_all_ties_and_float32_is_unchanged(ds, tmp_path):
    """Embeddings scaled by 1e200 once gave all-tied cosines (their norms overflowed): rows are normalised first,
    exactly; the cosine of float32 embeddings is bit for bit the former formula, in float32."""
    from fraglib.run.evaluate import embedding_scores

    d, t, _, _ = ds
    rng = np.random.default_rng(5)
    img = rng.normal(size=(len(t["imgid"]), 8))
    np.save(d / "i.npy", img * 1e200)
    np.save(d / "t.npy", img[t["sentence_image"]] * 1e200)
    got = _main(["--image-emb", str(d / "i.npy"), "--sentence-emb", str(d / "t.npy"), "--dataset-dir", str(d)], d)
    assert got["annotation"]["r1"] == got["search"]["r1"] == 100.0
    with pytest.raises(ValueError, match="overflow float64"):
        embedding_scores(img * 1e200, img * 1e200, "dot", "x")
    for scale in (1.0, 1e-20, 1e30):
        a, b = (
            (rng.normal(size=(20, 16)) * scale).astype(np.float32),
            (rng.normal(size=(30, 16)) * scale).astype(np.float32),
        )
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        old = (
            (a64 / np.linalg.norm(a64, axis=1, keepdims=True)) @ (b64 / np.linalg.norm(b64, axis=1, keepdims=True)).T
        ).astype(np.float32)
        new = embedding_scores(a, b)
        assert new.dtype == np.float32 and new.tobytes() == old.tobytes()
        assert embedding_scores(a64, b64).dtype == np.float64


def test_float32_score_files_are_ranked_in_float32_as_before(ds):
    """A float32 file enters as float32 (the study's committed metrics do not move); a float64 one as float64."""
    from fraglib.run.evaluate import checked_matrix

    x = np.ones((2, 3), np.float32)
    assert checked_matrix(x, "x").dtype == np.float32 and checked_matrix(x.astype(np.float16), "x").dtype == np.float16
    assert checked_matrix(x.astype(np.float64), "x").dtype == np.float64
    assert checked_matrix(x.astype(np.int64), "x").dtype == np.float64
    with pytest.raises(ValueError, match="a 2-D array of real numbers is needed"):
        checked_matrix(x.astype(np.complex64), "x")
    if np.finfo(np.longdouble).max > np.finfo(np.float64).max:
        big = np.full((2, 2), np.longdouble(10) ** 400)
        with pytest.raises(ValueError, match="beyond float64's range"):
            checked_matrix(big, "x")


def test_precomp_refuses_float64_features_beyond_float32_naming_the_file(tmp_path):
    """float64 features near 1e300 once became inf in rcnn.npz with rc 0: refused, naming the file and the range;
    float32 regions near float32's largest value get a finite mean row."""
    from fraglib.data.precomp import read_precomp, write_cache

    root = tmp_path / "p"
    root.mkdir()
    ims = np.ones((2, 3))
    ims[1, 2] = 1e300
    np.save(root / "train_ims.npy", ims)
    (root / "train_caps.txt").write_text("a\nb\n")
    with pytest.raises(
        ValueError,
        match=r"train_ims.npy: 1 image row\(s\) hold float64 values beyond float32's "
        r"range \(±3\.403e\+38; first: row 1\)",
    ):
        read_precomp(root, ["train"])
    np.save(root / "train_ims.npy", np.full((2, 3, 4), 3e38, np.float32))
    ds, feats, counts = read_precomp(root, ["train"])
    write_cache(ds, feats, counts, tmp_path / "out")
    with np.load(tmp_path / "out" / "features" / "rcnn.npz") as z:
        assert np.isfinite(z["features"]).all()


# ----------------------------------------------------------------------------- settings and options
@pytest.mark.parametrize(
    "extra, says",
    [
        ("evaluaton:\n  n_boot: 7\n", "unknown section 'evaluaton' (did you mean 'evaluation'?)"),
        ("evaluation: 5\n", "evaluation: expected a mapping, got 5"),
    ],
)
def test_evaluate_and_train_read_their_settings_checked(tmp_path, capsys, extra, says):
    """A misspelt `evaluaton:` was ignored by fraglib.run.evaluate and fraglib.run.train (study and explore refuse it);
    `evaluation: 5` gave "TypeError: 'int' object is not a mapping". Both are refused naming the section."""
    import yaml

    from fraglib.run.evaluate import eval_config
    from fraglib.run.train import main as train_main

    from conftest import tiny_params

    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({k: v for k, v in tiny_params().items() if k != "evaluation"}) + extra)
    code, err = _main(
        ["--scores", str(tmp_path / "none.npy"), "--dataset-dir", str(tmp_path), "--params", str(p)], tmp_path, capsys
    )
    assert code == 2 and says in err, err
    with pytest.raises(SystemExit) as e:
        train_main(
            [
                "--run",
                "devise",
                "--dataset-dir",
                str(tmp_path / "none"),
                "--out",
                str(tmp_path / "r"),
                "--params",
                str(p),
            ]
        )
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="evaluation: expected a mapping of evaluation settings, got 5"):
        eval_config({"evaluation": 5})


@pytest.mark.parametrize(
    "argv, says",
    [
        (["SEED", "--save-scores", "OUT", "--scores", "S"], "--scores: options for another tool's scores"),
        (["--save-scores", "OUT", "--scores", "S"], "--save-scores writes a trained run's matrices: it needs SEED_DIR"),
        (["SEED", "--save-scores", "OUT", "--out", "m.json"], "--save-scores writes the matrices only, no metrics"),
        (["SEED", "--save-scores", "OUT", "--split", "val"], "drop --split val"),
        (["SEED", "--against", "S", "--seed", "3"], "--against-scores, --seed: options for another tool's"),
        (["--scores", "S", "--features-dir", "F"], "--features-dir: the features a trained run"),
        (["--scores", "S", "--metric", "dot"], "--metric: the score of embeddings"),
    ],
)
def test_options_that_would_be_ignored_together_are_refused(tmp_path, capsys, argv, says):
    from fraglib.run.evaluate import main

    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / a) if a in ("SEED", "OUT", "S", "F") else a for a in argv])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "OUT").exists()


def test_save_scores_of_a_nan_checkpoint_is_refused_naming_it(tiny_full, tmp_path, capsys):
    """A checkpoint with NaN weights once exported all-NaN matrices with rc 0 through --save-scores."""
    from fraglib.run import checkpoint
    from fraglib.run.evaluate import main
    from fraglib.run.inputs import DataPaths
    from fraglib.run.train import train

    from conftest import tiny_eval, tiny_spec

    run = tmp_path / "run"
    train(
        DataPaths(tiny_full),
        run,
        tiny_spec("devise", epochs=1),
        tiny_eval(),
        device=torch.device("cpu"),
        progress=False,
    )
    best = checkpoint.best_of(run)
    ck = checkpoint.load(best)
    ck["model"] = {k: torch.full_like(v, math.nan) if v.is_floating_point() else v for k, v in ck["model"].items()}
    checkpoint.save(best, ck)
    with pytest.raises(SystemExit) as e:
        main([str(run), "--save-scores", str(tmp_path / "out"), "--params", "none"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{best}: its test scores (--save-scores writes nothing)" in err, err
    assert "NaN or +inf" in err and not (tmp_path / "out").exists()


def test_a_params_file_named_but_missing_is_refused(ds, capsys):
    """--params naming no file was read as "the defaults" without a word; it is refused, naming it."""
    from fraglib.run.evaluate import main

    d = ds[0]
    with pytest.raises(SystemExit):
        main(["--scores", str(d / "S.npy"), "--dataset-dir", str(d), "--params", str(d / "no_such.yaml")])
    assert "--params" in capsys.readouterr().err
