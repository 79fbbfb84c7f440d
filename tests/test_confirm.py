"""Confirmation as data (fraglib/confirm.py): a claim's runs re-run end to end on a freshly drawn tiny synthetic
benchmark, and the claims table's column "confirmed on partition N"."""

import glob
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from fraglib import claims as C
from fraglib.config import ConfigError
from fraglib.confirm import claim_runs, data_commands, frozen_params, resolve
from fraglib.tables import markdown

from conftest import ROOT, tiny_params

TINY_SYNTHETIC = dict(n_train=16, n_val=4, n_test=4, seed=3, twin_fraction=0.5)
TINY_VISION = dict(max_proposals=30, num_workers=0, image_size=128, proposal_size=64)  # the features stage dominates


def tiny_project(root):
    """A project root holding the committed pipelines and a params.yaml of the tiny benchmark with runs full and
    devise (the sides of Karpathy et al.'s Table 1 claim against DeViSE)."""
    for f in [ROOT / "dvc.yaml", *ROOT.glob("studies/*/dvc.yaml")]:
        (root / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, root / f.relative_to(ROOT))
    params = tiny_params(full={"system": "fragment"}, devise={"system": "devise"})
    params.update(synthetic=dict(TINY_SYNTHETIC), text={}, vision=TINY_VISION)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return params


def test_a_confirmation_rebuilds_the_benchmark_from_the_new_seed_and_retrains_the_runs(tmp_path, monkeypatch, capsys):
    from fraglib.confirm import main

    params = tiny_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    main(["--partition", "5", "--dataset", "synthetic", "--runs", "full,devise"])
    out = tmp_path / "runs" / "confirm" / "synthetic" / "p5"
    data = tmp_path / "data" / "confirm" / "synthetic" / "p5"
    assert yaml.safe_load((data / "params.yaml").read_text())["synthetic"] == {**TINY_SYNTHETIC, "seed": 5}
    assert json.loads((out / "confirm.json").read_text())["runs"] == ["full", "devise"]
    for run in ("full", "devise"):
        m = json.loads((out / run / "metrics.json").read_text())
        assert m["seeds"] == [0] and (out / run / "seeds" / "seed0" / "ranks.json").exists()
        assert not list((out / run).rglob("*.pt"))  # checkpoints under models/confirm/, out of git
    assert list((tmp_path / "models" / "confirm" / "synthetic" / "p5" / "full").rglob("*.pt"))
    images = [im["filename"] for im in json.loads((data / "dataset.json").read_text())["images"]]
    assert len(images) == 24
    # the claims table: its verdict on partition 5 by the same rule, beside the study's ("—": not trained here)
    claim = next(c for c in C.read_claims() if c["runs"] == {"a": "full", "b": "devise"})
    rows = C.claim_rows(
        params, {"synthetic": [tmp_path / "runs" / "synthetic"]}, [claim], 100, confirmed=C.confirmations(tmp_path)
    )
    assert [r.confirmed for r in rows if r.study == "synthetic"] == [
        {5: C.verdict(r.paper, *_ours(out, r.task), comparable=False)} for r in rows if r.study == "synthetic"
    ]
    table = C.claims_table([r for r in rows if r.study == "synthetic"])
    assert table.header[-1] == "confirmed on partition 5" and table.rows[0][-1] in C.VERDICTS
    text = markdown(C.claim_blocks(tmp_path, params, n_boot=50))
    assert "confirmed on partition 5" in text and "`python -m fraglib.confirm --partition N`" in text
    # a finished confirmation is never replaced silently
    with pytest.raises(SystemExit):
        main(["--partition", "5", "--dataset", "synthetic", "--runs", "full"])
    assert "--overwrite" in capsys.readouterr().err


def _ours(folder, task):
    d = C.our_difference(folder / "full", folder / "devise", task, "rsum", 100)
    return d["diff"], (d["lo"], d["hi"])


def test_the_data_commands_are_the_pipelines_with_the_partition_and_its_folder(tmp_path):
    params = tiny_project(tmp_path)
    cmds = data_commands(
        tmp_path, "synthetic", frozen_params(params, "synthetic", 7), tmp_path / "d", tmp_path / "p.yaml"
    )
    assert cmds[0].endswith(f"--params {tmp_path}/p.yaml --out {tmp_path}/d")
    assert all("data/synthetic" not in c for c in cmds) and len(cmds) == 4
    pascal = {**params, "pascal1k": {"root": "R", "folds": 10, "partition": 0}}
    (cmd,) = data_commands(tmp_path, "pascal1k", frozen_params(pascal, "pascal1k", 9), tmp_path / "f", tmp_path / "p")
    assert f"--out {tmp_path}/f --folds 10 --partition 9" in cmd
    # the loop over the folds visits the fold folders, not folds.json beside them (it names the partition)
    for f in ("fold0", "fold1"):
        (tmp_path / "f" / f).mkdir(parents=True)
    (tmp_path / "f" / "folds.json").write_text("{}")
    (pattern,) = re.findall(r"for d in (\S+); do", cmd)
    assert sorted(Path(p).name for p in glob.glob(pattern)) == ["fold0", "fold1"]
    with pytest.raises(KeyError, match=r"\$\{pascal1k.nope\}"):
        resolve("x ${pascal1k.nope}", pascal)
    with pytest.raises(ConfigError, match="pascal1k.partition=-1"):
        frozen_params(pascal, "pascal1k", -1)


def test_the_claims_runs_are_both_sides_of_every_claim_tested_there():
    found = claim_runs("pascal1k")
    assert {"full", "devise", "stt", "stt_att", "kcca"} <= set(found) and len(found) == len(set(found))
    assert "fr_lr01" not in found  # the fight's runs are no claim's
    assert set(claim_runs("synthetic")) == {
        r for c in C.read_claims() if "synthetic" in c["tested_on"] for r in c["runs"].values()
    }


def test_without_java_a_generating_run_is_confirmed_without_captions(tmp_path, monkeypatch, capsys):
    import fraglib.captions
    from fraglib.confirm import captions

    monkeypatch.setattr(fraglib.captions, "java_missing", lambda: "no Java runtime (java not on PATH)")
    monkeypatch.setattr("fraglib.confirm.run_commands", lambda *a: pytest.fail("ran a command"))
    captions(tmp_path, tmp_path / "runs" / "stt", {})
    assert "no captions of" in capsys.readouterr().out
