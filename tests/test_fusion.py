"""Late fusion of two trained runs (fraglib.fusion): the weight is chosen on validation only, its ends
reproduce each run's own ranks, and bad arguments are refused by name."""

import numpy as np
import pytest
import torch

from fraglib import fusion
from fraglib.results import load_run


def test_fuse_is_the_weighted_sum_of_standardised_scores():
    Sa = torch.tensor([[1.0, 3.0], [float("-inf"), 5.0]])
    Sb = torch.tensor([[2.0, 0.0], [4.0, 2.0]])
    za, zb = fusion.standardiser(Sa), fusion.standardiser(Sb)
    assert za == pytest.approx((3.0, 2.0)) and zb == pytest.approx((2.0, np.std([2, 0, 4, 2], ddof=1)))
    f = fusion.fuse(Sa, Sb, 0.25, za, zb)
    assert f[0, 1].item() == pytest.approx(0.25 * 0.0 + 0.75 * (0.0 - 2.0) / zb[1])
    assert f[1, 0].item() == float("-inf")                       # a row-less item stays last
    assert torch.equal(fusion.fuse(Sa, Sb, 0.0, za, zb), (Sb - 2.0) / zb[1])   # no NaN from 0 x -inf


def test_fused_run_chooses_its_weight_on_validation_and_its_ends_are_the_runs(tiny_study, tmp_path):
    out = fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", tmp_path / "fused", weights=(0.0, 0.5, 1.0),
                           n_boot=20)
    a, b = (fusion.unit_scores(tiny_study / r / "seeds" / "seed0") for r in ("full", "devise"))
    za, zb = fusion.standardiser(a["val"][0]), fusion.standardiser(b["val"][0])
    by_w = {w: fusion.val_rsum(fusion.fuse(a["val"][0], b["val"][0], w, za, zb), a["val"][1]) for w in (0.0, 0.5, 1.0)}
    assert out["val_rsum_by_weight"] == {str(w): round(v, 2) for w, v in by_w.items()}
    assert by_w[out["weight"]] == max(by_w.values())
    fused = load_run(tmp_path / "fused")                         # the layout of a trained run
    assert fused["ranks"]["search"].shape == load_run(tiny_study / "full")["ranks"]["search"].shape
    for w, run in ((1.0, "full"), (0.0, "devise")):               # each end is that run's own test ranks
        end = fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", tmp_path / f"w{w}", weights=(w,), n_boot=20)
        own = load_run(tiny_study / run)
        for d in ("annotation", "search"):
            np.testing.assert_array_equal(load_run(tmp_path / f"w{w}")["ranks"][d], own["ranks"][d])
        assert end["search"]["r1"] == pytest.approx(own["search"]["r1"])


def test_fusion_refuses_bad_arguments(tiny_study, tmp_path, capsys):
    with pytest.raises(SystemExit):
        fusion.main(["--runs", str(tiny_study / "full"), str(tmp_path / "nothing"), "--out", str(tmp_path / "o")])
    assert "nothing has no metrics.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fusion.main(["--runs", str(tiny_study / "full"), str(tiny_study / "devise"), "--out", str(tmp_path / "o"),
                     "--weights", "0.5,2"])
    assert "must lie in [0, 1]" in capsys.readouterr().err
    with pytest.raises(ValueError, match="two training runs per split"):     # one unit per split: no self-ensemble
        fusion.unit_pairs(tiny_study / "full", tiny_study / "full")


def test_results_page_row_is_read_from_the_fused_metrics(tiny_study, tmp_path):
    from fraglib.summary import fusion_rows

    study = tmp_path / "runs" / "s"
    study.mkdir(parents=True)
    for r in ("full", "devise"):
        (study / r).symlink_to(tiny_study / r, target_is_directory=True)
    m = fusion.fuse_runs(study / "full", study / "devise", study / "fz", weights=(0.3,), n_boot=20)
    rows = fusion_rows(tmp_path, "s", {"fusion": {"fz": {"a": "full", "b": "devise"}, "absent": {"a": "x", "b": "y"}}})
    row = [r for r in rows if r.startswith("| `fz`")]
    assert len(row) == 1 and not any("absent" in r for r in rows)
    full = load_run(tiny_study / "full")
    cells = [c.strip() for c in row[0].split("|")[1:-1]]
    assert cells[2] == "0.3" and cells[4] == f"{m['annotation']['r1']:.1f}" and cells[5] == f"{m['search']['r1']:.1f}"
    assert cells[6].split(" / ")[0] == f"{m['annotation']['r1'] - full['annotation']['r1']:+.1f}, " \
                                       f"{m['search']['r1'] - full['search']['r1']:+.1f}"
