"""Hostile arguments to three writers never cost a user's files (fraglib.core.outputs): a caption ``--name`` that is
a path, a user's picture beside the synthetic benchmark's images, and a fusion ``--out`` that is a trained run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fraglib_study.experiments import fusion


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- fraglib_study.experiments.captions --name
def _caption_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Two run folders side by side: ``stt`` (captioned once) and ``devise``; no checkpoints."""
    runs = tmp_path / "runs"
    stt, devise = runs / "stt", runs / "devise"
    for r in (stt, devise):
        (r / "seeds" / "seed0").mkdir(parents=True)
        (r / "metrics.json").write_text(json.dumps({"run": r.name, "seeds": [0], "system": r.name}))
        (r / "seeds" / "seed0" / "metrics.json").write_text('{"test": {}}')
        (r / "history.csv").write_text("seed,epoch\n")
    (stt / "captions.json").write_text('{"old": true}')
    (stt / "captions").mkdir()
    (stt / "captions" / "seed0.json").write_text('{"old": true}')
    return stt, devise


@pytest.mark.parametrize(
    "name",
    [".", "..", "../devise", "sub/captions", "..\\devise", ".hidden", "", "metrics", "seeds", "History", "timing"],
)
def test_a_caption_name_that_is_a_path_or_a_run_file_is_refused_before_anything_is_touched(name, tmp_path, capsys):
    from fraglib_study.experiments.captions import main

    stt, devise = _caption_runs(tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["--run-dir", str(stt), "--name", name, "--overwrite"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--name {name!r}" in err and ("plain file name" in err or "run folder's own files" in err), err
    assert _snapshot(tmp_path) == before  # the run's metrics.json and the other run's are whole


def test_a_plain_caption_name_is_accepted():
    from fraglib_study.experiments.captions import check_name

    for name in ("captions", "transfer_flickr8k", "beam-5", "captions.v2"):
        assert check_name(name) == name


def test_a_missing_checkpoint_stops_captions_before_any_file_is_deleted(tmp_path, capsys):
    from fraglib.run.checkpoint import CheckpointError
    from fraglib_study.experiments.captions import java_missing, main, run_captions

    stt, _ = _caption_runs(tmp_path)
    stale = stt / "captions" / "seed7.json"  # a seed the next run does not write: --overwrite would remove it
    stale.write_text('{"old": true}')
    before = _snapshot(tmp_path)
    with pytest.raises(CheckpointError, match=r"seeds/seed0/best\.pt: checkpoint not found"):
        run_captions(stt, overwrite=True)
    assert _snapshot(tmp_path) == before
    if java_missing():
        pytest.skip(java_missing())
    with pytest.raises(SystemExit) as exc:
        main(["--run-dir", str(stt), "--overwrite"])
    assert "seeds/seed0/best.pt: checkpoint not found" in str(exc.value.code)
    assert "nothing was written or deleted" in str(exc.value.code)
    assert _snapshot(tmp_path) == before
    with pytest.raises(SystemExit) as exc:  # without --overwrite: the refusal comes first, as always
        main(["--run-dir", str(stt)])
    assert exc.value.code == 2 and "refusing to replace" in capsys.readouterr().err


# ----------------------------------------------------------------------------- fraglib.data.synthetic
def _params(tmp_path: Path, n_train: int) -> Path:
    p = tmp_path / f"params{n_train}.yaml"
    p.write_text(f"synthetic:\n  n_train: {n_train}\n  n_val: 1\n  n_test: 1\n")
    return p


def test_the_synthetic_benchmark_never_lists_or_deletes_a_users_picture(tmp_path, capsys):
    from fraglib.data.synthetic import main

    out = tmp_path / "d"
    (out / "images").mkdir(parents=True)
    holiday = out / "images" / "holiday.png"
    holiday.write_bytes(b"a user's picture")
    main(["--params", str(_params(tmp_path, 5)), "--out", str(out)])  # a foreign file alone is no benchmark
    assert holiday.read_bytes() == b"a user's picture"
    assert len(list((out / "images").glob("0*.png"))) == 7
    with pytest.raises(SystemExit) as exc:
        main(["--params", str(_params(tmp_path, 3)), "--out", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "refusing to replace" in err and "holiday.png" not in err, err
    main(["--params", str(_params(tmp_path, 3)), "--out", str(out), "--overwrite"])
    assert holiday.read_bytes() == b"a user's picture"  # kept
    assert sorted(p.name for p in (out / "images").iterdir()) == [f"{i:06d}.png" for i in range(5)] + [
        "holiday.png"
    ]  # the earlier run's 000005.png and 000006.png are gone with the rest of its benchmark


# ----------------------------------------------------------------------------- fraglib_study.experiments.fusion --out
@pytest.mark.parametrize("strip", ["", "checkpoints", "training files", "all but a unit"])
def test_fusion_never_writes_into_a_trained_runs_folder(strip, tiny_study, tmp_path, capsys):
    victim = tmp_path / "random"
    shutil.copytree(tiny_study / "random", victim)
    if strip:  # as a clone holds it: checkpoints in models/, or fewer of the training files
        gone = {"checkpoints": ("*.pt",), "training files": ("*.pt", "history.csv", "timing.json")}.get(
            strip, ("*.pt", "history.csv", "timing.json", "ranks.json")
        )
        for pattern in gone:
            for p in victim.rglob(pattern):
                p.unlink()
        if strip == "all but a unit":
            (victim / "metrics.json").unlink()
    before = _snapshot(victim)
    argv = ["--runs", str(tiny_study / "full"), str(tiny_study / "devise"), "--out", str(victim), "--overwrite"]
    with pytest.raises(SystemExit) as exc:
        fusion.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"--out {victim} is a trained run's folder" in err, err
    with pytest.raises(ValueError, match="is a trained run's folder"):
        fusion.fuse_runs(tiny_study / "full", tiny_study / "devise", victim, overwrite=True)
    assert _snapshot(victim) == before


def test_fusion_overwrite_replaces_only_its_own_files(tiny_study, tmp_path):
    out = tmp_path / "fz"
    (tmp_path / "p.yaml").write_text("evaluation: {n_boot: 20, hubness: false}\n")  # 4 test images: no hubness
    argv = ["--runs", str(tiny_study / "full"), str(tiny_study / "devise"), "--weights", "0.5"]
    argv += ["--params", str(tmp_path / "p.yaml")]
    fusion.main(argv + ["--out", str(out)])
    assert json.loads((out / "metrics.json").read_text())["system"] == "fusion"
    mine = {out / "notes.txt": b"my notes", out / "seeds" / "seed0" / "plot.png": b"my plot"}
    for p, b in mine.items():
        p.write_bytes(b)
    stale = out / "seeds" / "seed9" / "ranks.json"  # fusion's own file of a unit no longer fused
    stale.parent.mkdir()
    stale.write_text("[]")
    assert out / "seeds" / "seed0" / "plot.png" not in fusion.fused_files(out)
    fusion.main(argv + ["--out", str(out), "--overwrite"])
    assert all(p.read_bytes() == b for p, b in mine.items()) and not stale.exists()
