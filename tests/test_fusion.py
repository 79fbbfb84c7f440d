"""Late fusion of two trained runs (fraglib_study.experiments.fusion): the weight is chosen on validation only, its ends
reproduce each run's own ranks, and bad arguments are refused by name."""

import numpy as np
import pytest
import torch

from fraglib.run.evaluate import EvalConfig
from fraglib_study.experiments import fusion
from fraglib_study.report.loading import load_run

EC = EvalConfig(n_boot=20, hubness=False)  # the fused test scored as a trained unit's (hubness: its own test)


def test_fuse_is_the_weighted_sum_of_standardised_scores():
    Sa = torch.tensor([[1.0, 3.0], [float("-inf"), 5.0]])
    Sb = torch.tensor([[2.0, 0.0], [4.0, 2.0]])
    za, zb = fusion.standardiser(Sa), fusion.standardiser(Sb)
    assert za == pytest.approx((3.0, 2.0)) and zb == pytest.approx((2.0, np.std([2, 0, 4, 2], ddof=1)))
    f = fusion.fuse(Sa, Sb, 0.25, za, zb)
    assert f[0, 1].item() == pytest.approx(0.25 * 0.0 + 0.75 * (0.0 - 2.0) / zb[1])
    assert f[1, 0].item() == float("-inf")  # a row-less item stays last
    assert torch.equal(fusion.fuse(Sa, Sb, 0.0, za, zb), (Sb - 2.0) / zb[1])  # no NaN from 0 x -inf


def test_fused_banks_keep_the_training_items_both_units_score():
    """A fragment run has no bank row for a training sentence without fragments, which a full-frame run scores: the
    banks fuse on the rows both have (Pascal1K: 3991 of 3998 training sentences), each row the fusion of its item's."""
    rng = torch.Generator().manual_seed(0)
    a = {"banks": {"val": {"search": torch.randn(3, 2, generator=rng)}}, "bank_rows": {"search": np.array([0, 1, 2])}}
    b = {"banks": {"val": {"search": torch.randn(2, 2, generator=rng)}}, "bank_rows": {"search": np.array([0, 2])}}
    za, zb = (0.5, 2.0), (-1.0, 3.0)
    out = fusion.fused_banks(a, b, 0.3, za, zb)["val"]["search"]
    want = fusion.fuse(a["banks"]["val"]["search"][[0, 2]], b["banks"]["val"]["search"], 0.3, za, zb)
    assert out.shape == (2, 2) and torch.equal(out, want)


def test_fused_run_chooses_its_weight_on_validation_and_its_ends_are_the_runs(tiny_study, tmp_path):
    out = fusion.fuse_runs(
        tiny_study / "full", tiny_study / "devise", tmp_path / "fused", weights=(0.0, 0.5, 1.0), ec=EC
    )
    a, b = (fusion.unit_scores(tiny_study / r / "seeds" / "seed0") for r in ("full", "devise"))
    za, zb = fusion.standardiser(a["val"][0]), fusion.standardiser(b["val"][0])
    by_w = {w: fusion.val_rsum(fusion.fuse(a["val"][0], b["val"][0], w, za, zb), a["val"][1]) for w in (0.0, 0.5, 1.0)}
    assert out["val_rsum_by_weight"] == {str(w): round(v, 2) for w, v in by_w.items()}
    assert by_w[out["weight"]] == max(by_w.values())
    fused = load_run(tmp_path / "fused")  # the layout of a trained run
    assert fused["ranks"]["search"].shape == load_run(tiny_study / "full")["ranks"]["search"].shape
    for w, run in ((1.0, "full"), (0.0, "devise")):  # each end is that run's own test ranks
        end = fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", tmp_path / f"w{w}", weights=(w,), ec=EC)
        own = load_run(tiny_study / run)
        for d in ("annotation", "search"):
            np.testing.assert_array_equal(load_run(tmp_path / f"w{w}")["ranks"][d], own["ranks"][d])
        assert end["search"]["r1"] == pytest.approx(own["search"]["r1"])


def test_fusion_refuses_bad_arguments(tiny_study, tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        fusion.main(["--runs", str(tiny_study / "full"), str(tmp_path / "nothing"), "--out", str(tmp_path / "o")])
    assert "nothing has no metrics.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fusion.main(
            [
                "--runs",
                str(tiny_study / "full"),
                str(tiny_study / "devise"),
                "--out",
                str(tmp_path / "o"),
                "--weights",
                "0.5,2",
            ]
        )
    assert "must lie in [0, 1]" in capsys.readouterr().err
    with monkeypatch.context() as m:
        _no_scoring(m)  # refused before any scoring
        for n in ("0", "-5"):
            (tmp_path / "p.yaml").write_text(f"evaluation: {{n_boot: {n}}}\n")
            with pytest.raises(SystemExit):
                fusion.main(
                    [
                        "--runs",
                        str(tiny_study / "full"),
                        str(tiny_study / "devise"),
                        "--out",
                        str(tmp_path / "o"),
                        "--params",
                        str(tmp_path / "p.yaml"),
                    ]
                )
            assert f"evaluation.n_boot={n}: out of range" in capsys.readouterr().err
    with pytest.raises(ValueError, match="two training runs per split"):  # one unit per split: no self-ensemble
        fusion.unit_pairs(tiny_study / "full", tiny_study / "full")


def test_results_page_row_is_read_from_the_fused_metrics(tiny_study, tmp_path):
    from fraglib_study.pages.summary import fusion_rows

    study = tmp_path / "runs" / "s"
    study.mkdir(parents=True)
    for r in ("full", "devise"):
        (study / r).symlink_to(tiny_study / r, target_is_directory=True)
    m = fusion.fuse_runs(study / "full", study / "devise", study / "fz", weights=(0.3,), ec=EC)
    rows = fusion_rows(tmp_path, "s", {"fusion": {"fz": {"a": "full", "b": "devise"}, "absent": {"a": "x", "b": "y"}}})
    row = [r for r in rows if r.startswith("| `fz`")]
    assert len(row) == 1 and not any("absent" in r for r in rows)
    full = load_run(tiny_study / "full")
    cells = [c.strip() for c in row[0].split("|")[1:-1]]
    assert cells[2] == "0.3" and cells[4] == f"{m['annotation']['r1']:.1f}" and cells[5] == f"{m['search']['r1']:.1f}"
    assert (
        cells[6].split(" / ")[0] == f"{m['annotation']['r1'] - full['annotation']['r1']:+.1f}, "
        f"{m['search']['r1'] - full['search']['r1']:+.1f}"
    )


def _copy_runs(tiny_study, tmp_path, *names):
    """Copies of trained runs (results and best.pt) under tmp_path: tests that write or alter never touch the
    session's runs."""
    import shutil

    for r in names:
        shutil.copytree(tiny_study / r, tmp_path / r)
    return [tmp_path / r for r in names]


def _no_scoring(monkeypatch):
    """Make any scoring fail: a refusal must come before it."""

    def score(seed_dir, ec=None):
        raise AssertionError(f"scored {seed_dir} before refusing")

    monkeypatch.setattr(fusion, "unit_scores", score)


def test_fusion_never_writes_into_an_input_run_and_replaces_a_fused_run_only_with_overwrite(
    tiny_study, tmp_path, capsys, monkeypatch
):
    a, b = _copy_runs(tiny_study, tmp_path, "full", "devise")
    files = lambda: {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}  # noqa: E731
    before = files()
    (tmp_path / "p.yaml").write_text("evaluation: {n_boot: 20, hubness: false}\n")  # 4 test images: no hubness
    argv = ["--runs", str(a), str(b), "--weights", "0.5", "--params", str(tmp_path / "p.yaml")]
    with monkeypatch.context() as m:
        _no_scoring(m)
        for out in (a, tmp_path / "x" / ".." / "full"):  # even spelled otherwise, even with --overwrite
            with pytest.raises(SystemExit):
                fusion.main(argv + ["--out", str(out), "--overwrite"])
            assert f"is the input run {a}" in capsys.readouterr().err
        with pytest.raises(ValueError, match="is the input run"):
            fusion.fuse_runs(a, b, b, overwrite=True)
    assert files() == before
    out = tmp_path / "fz"
    fusion.main(argv + ["--out", str(out)])
    first = (out / "metrics.json").read_bytes()
    stale = out / "seeds" / "seed9" / "ranks.json"  # a unit the next fusion does not write
    stale.parent.mkdir()
    stale.write_text("[]")
    with monkeypatch.context() as m:
        _no_scoring(m)
        with pytest.raises(SystemExit):
            fusion.main(argv + ["--out", str(out)])
        assert f"refusing to replace 4 existing file(s): {out / 'metrics.json'}" in capsys.readouterr().err
        with pytest.raises(FileExistsError, match="Pass --overwrite"):
            fusion.fuse_runs(a, b, out, weights=(0.5,), ec=EC)
    assert (out / "metrics.json").read_bytes() == first and stale.exists()
    fusion.main(argv + ["--out", str(out), "--overwrite"])
    assert (out / "metrics.json").read_bytes() == first and not stale.exists()  # replaced whole, same result


def _dataset_fingerprint(run, sha):
    """Rewrite the dataset fingerprint of ``run``'s checkpoint, as if it had been trained on other data."""
    from fraglib.run import checkpoint

    path = run / "seeds" / "seed0" / "best.pt"
    ck = checkpoint.load(path)
    ck["fingerprint"]["dataset"] = sha
    checkpoint.save(path, ck)


def test_fusion_refuses_runs_trained_on_other_data(tiny_study, tmp_path, capsys, monkeypatch):
    a, b = tiny_study / "full", _copy_runs(tiny_study, tmp_path, "devise")[0]
    _dataset_fingerprint(b, "f" * 64)
    _no_scoring(monkeypatch)
    msg = (
        rf"unit 0: {a} \(seed0, trained on .*\) and {b} \(seed0, trained on .*\) were trained on different "
        r"datasets \(dataset.json sha256 [0-9a-f]{12} vs ffffffffffff\)"
    )
    with pytest.raises(ValueError, match=msg):
        fusion.fuse_runs(a, b, tmp_path / "fz")
    with pytest.raises(SystemExit):
        fusion.main(["--runs", str(a), str(b), "--out", str(tmp_path / "fz")])
    assert "were trained on different datasets" in capsys.readouterr().err and not (tmp_path / "fz").exists()


@pytest.mark.parametrize(
    "split, change, what",
    [
        ("test", lambda S, si: (S[:, :-1], si[:-1]), r"\(4, \d+\) vs \(4, \d+\) images x sentences"),  # other sizes
        ("val", lambda S, si: (S, si[::-1].copy()), "the same shape, other sentence-image pairs"),
    ],
)  # other data
def test_fusion_refuses_scores_of_other_splits(tiny_study, tmp_path, monkeypatch, split, change, what):
    score = fusion.unit_scores

    def other(seed_dir, ec):
        s = score(seed_dir, ec)
        if "devise" in str(seed_dir):
            s[split] = change(*s[split])
        return s

    monkeypatch.setattr(fusion, "unit_scores", other)
    with pytest.raises(
        ValueError,
        match=rf"unit 0: {tiny_study / 'full'} and {tiny_study / 'devise'} were scored "
        rf"on different {split} splits \({what}\)",
    ):
        fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", tmp_path / "fz", weights=(0.5,), ec=EC)


def test_fused_files_are_written_through_fraglib_outputs(tiny_study, tmp_path, monkeypatch):
    import json

    written = {}
    write = fusion.write_text

    def record(path, text):
        written[path] = text
        write(path, text)

    monkeypatch.setattr(fusion, "write_text", record)
    out = tmp_path / "fz"
    s = fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", out, weights=(0.5,), ec=EC)
    assert set(written) == {
        out / "metrics.json",
        out / "seeds" / "seed0" / "metrics.json",
        out / "seeds" / "seed0" / "ranks.json",
    }
    assert (out / "metrics.json").read_text() == json.dumps(s, indent=1, sort_keys=True) + "\n"
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["metrics.json", "metrics.json", "ranks.json"]


def test_a_fused_run_is_scored_by_the_one_evaluation_with_hubness_and_folds(tiny_study, tmp_path):
    """The fused test matrix goes through fraglib.run.evaluate.evaluate_matrix with the evaluation section: at
    w = 1 the fused scores are run A's standardised (an increasing affine map), so its k-occurrence statistics,
    its corrected ranks under every correction and its fold metrics are run A's own, recomputed here."""
    import json

    from fraglib.run.evaluate import evaluate_matrix

    ec = EvalConfig(n_boot=20, hubness=True, test_folds=2, hub_k=2)  # 4 test images, 2 folds of 2
    fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", tmp_path / "w1", weights=(1.0,), ec=ec)
    got = json.loads((tmp_path / "w1" / "seeds" / "seed0" / "metrics.json").read_text())["test"]
    ranks = json.loads((tmp_path / "w1" / "seeds" / "seed0" / "ranks.json").read_text())
    a = fusion.unit_scores(tiny_study / "full" / "seeds" / "seed0", ec)
    own = evaluate_matrix(a["test"][0], a["test"][1], ec, 0, "run A", a["val"], a["banks"])
    assert set(got["hubness"]) == set(own["hubness"]) and "csls_inductive" in got["hubness"]
    for d in ("annotation", "search"):
        assert got["hubness"][d] == pytest.approx(own["hubness"][d])  # k-occurrence: plain rankings only
        assert ranks[d] == own["ranks"][d]
    assert ranks["hubness"]["corrected"].keys() == own["ranks"]["hubness"]["corrected"].keys()
    for key, by_dir in own["ranks"]["hubness"]["corrected"].items():
        for d in ("annotation", "search"):
            np.testing.assert_array_equal(ranks["hubness"]["corrected"][key][d], by_dir[d], err_msg=key)
    assert got["folds"] == json.loads(json.dumps(own["folds"]))  # the same ranks: the same fold metrics
    fused = load_run(tmp_path / "w1")  # read back as a trained run, its corrections included
    assert set(fused["corrected"]) == set(own["ranks"]["hubness"]["corrected"])
