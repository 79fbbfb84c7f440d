"""Confirmation as data (fraglib_study/experiments/confirm.py): a claim's runs re-run end to end on a freshly drawn tiny synthetic
benchmark, and the claims table's column "confirmed on partition N"."""

import glob
import hashlib
import json
import re
import runpy
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from fraglib.core.config import ConfigError
from fraglib_study.audit import claims as C
from fraglib_study.experiments.confirm import (
    PARAMS_FREE,
    claim_runs,
    data_commands,
    data_stages,
    fraglib_modules,
    frozen_params,
    resolve,
)
from fraglib_study.report.tables import markdown

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
    from fraglib_study.experiments.confirm import main

    params = tiny_project(tmp_path)
    # the frozen file, not the project's params.yaml, is what every stage reads (issue #76: the features used 600)
    params["vision"] = {**TINY_VISION, "max_proposals": 20}
    (tmp_path / "frozen.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    main(["--partition", "5", "--dataset", "synthetic", "--runs", "full,devise", "--params", "frozen.yaml"])
    out = tmp_path / "runs" / "confirm" / "synthetic" / "p5"
    data = tmp_path / "data" / "confirm" / "synthetic" / "p5"
    assert yaml.safe_load((data / "params.yaml").read_text())["synthetic"] == {**TINY_SYNTHETIC, "seed": 5}
    record = json.loads((out / "confirm.json").read_text())
    assert record["runs"] == ["full", "devise"]
    assert record["params_sha256"] == hashlib.sha256((data / "params.yaml").read_bytes()).hexdigest()
    meta = json.loads(np.load(data / "features" / "rcnn.npz")["meta"].item())
    assert meta["settings"]["max_proposals"] == 20
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
        params, {"synthetic": [tmp_path / "runs" / "synthetic"]}, [claim], confirmed=C.confirmations(tmp_path)
    )
    assert [r.confirmed for r in rows if r.study == "synthetic"] == [
        {5: _expected(r.paper, out, r.task)} for r in rows if r.study == "synthetic"
    ]
    table = C.claims_table([r for r in rows if r.study == "synthetic"])
    assert table.header[-1] == "confirmed on partition 5" and table.rows[0][-1] in C.VERDICTS
    text = markdown(C.claim_blocks(tmp_path, params))
    assert "confirmed on partition 5" in text and "`python -m fraglib_study confirm --partition N`" in text
    # a finished confirmation is never replaced silently
    with pytest.raises(SystemExit):
        main(["--partition", "5", "--dataset", "synthetic", "--runs", "full", "--params", "frozen.yaml"])
    err = capsys.readouterr().err
    assert "full confirmed on partition 5 already" in err and "--overwrite" in err


def _expected(paper, folder, task):
    """The verdict on the partition's runs by the rule, written out: undecided without an A/A pair there."""
    try:
        return C.verdict(paper, *_ours(folder, task), comparable=False)
    except C.Undecided:
        return C.UNDECIDED


def _ours(folder, task):
    noise = C.study_noise({"runs": {"full": {}, "devise": {}}}, [folder], task, "rsum", {})[1]
    d = C.our_difference(folder / "full", folder / "devise", task, "rsum", train_var=noise)
    return d["diff"], (d["lo"], d["hi"])


def test_the_data_commands_are_the_pipelines_with_the_partition_and_its_folder(tmp_path):
    params = tiny_project(tmp_path)
    cmds = data_commands(
        tmp_path, "synthetic", frozen_params(params, "synthetic", 7), tmp_path / "d", tmp_path / "p.yaml"
    )
    assert cmds[0].endswith(f"--params {tmp_path}/p.yaml --out {tmp_path}/d")
    assert all("data/synthetic" not in c for c in cmds) and len(cmds) == 4
    # every stage reads the frozen file, none the project's params.yaml (issue #76)
    assert all(c.count("--params") == 1 and f"--params {tmp_path}/p.yaml" in c for c in cmds), cmds
    pascal = {**params, "pascal1k": {"root": "R", "folds": 10, "partition": 0}}
    (cmd,) = data_commands(tmp_path, "pascal1k", frozen_params(pascal, "pascal1k", 9), tmp_path / "f", tmp_path / "p")
    assert f"--out {tmp_path}/f --folds 10 --partition 9" in cmd
    # the folds' fragments read the frozen text settings; fraglib.data takes its settings on the command line
    converter, loop = cmd.split(" && ")
    assert "--params" not in converter and f"--params {tmp_path}/p || exit 1" in loop
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
    assert {"full", "devise", "stt", "stt_att", "kcca_linear"} <= set(found) and len(found) == len(set(found))
    assert "fr_lr01" not in found  # the fight's runs are no claim's
    assert set(claim_runs("synthetic")) == {
        r for c in C.read_claims() if "synthetic" in c["tested_on"] for r in c["runs"].values()
    }


def test_without_java_a_generating_run_is_confirmed_without_captions(tmp_path, monkeypatch, capsys):
    import fraglib_study.experiments.captions
    from fraglib_study.experiments.confirm import captions

    monkeypatch.setattr(
        fraglib_study.experiments.captions, "java_missing", lambda: "no Java runtime (java not on PATH)"
    )
    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", lambda *a: pytest.fail("ran a command"))
    captions(tmp_path, tmp_path / "runs" / "stt", {})
    assert "no captions of" in capsys.readouterr().out


def test_every_module_of_the_data_stages_is_given_the_frozen_file_if_it_reads_one(capsys):
    """:data:`fraglib_study.experiments.confirm.PARAMS_FREE` against the modules' own parsers: a module that reads a parameter file
    is given the frozen one, and every module takes --overwrite (a resumed stage replaces its partial files)."""
    params = frozen_params(
        {**yaml.safe_load((ROOT / "params.yaml").read_text()), "pascal1k": {"root": "R", "folds": 3}}, "pascal1k", 0
    )
    modules = {
        m
        for d in ("synthetic", "pascal1k")
        for _, cmd in data_stages(ROOT, d, params, Path("out"), Path("p.yaml"))
        for m in fraglib_modules(cmd)
    }
    assert {
        "fraglib.data synthetic",
        "fraglib.text parse",
        "fraglib.vision features",
        "fraglib.data pascal1k",
    } <= modules
    for m in sorted(modules):
        entry, command = m.split(" ")
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")  # runpy: the module is imported already
            mp.setattr(sys, "argv", [entry, command, "--help"])
            with pytest.raises(SystemExit):
                runpy.run_module(entry, run_name="__main__", alter_sys=False)
        usage = capsys.readouterr().out
        assert ("--params" in usage) == (m not in PARAMS_FREE), m
        assert "--overwrite" in usage, m


class Stages:
    """Stand-in for the data stages' shell commands (``fraglib_study.experiments.confirm.run_commands``): records each command,
    leaves a file in the data folder as a stage would, and fails (a kill) at stage ``fail``."""

    def __init__(self, fail=None):
        self.cmds, self.fail = [], fail

    def __call__(self, cmds, root):
        for cmd in cmds:
            self.cmds.append(cmd)
            folder = Path(root) / re.search(r"data/confirm/\S+/p\d+", cmd).group(0)
            (folder / f"out{len(self.cmds)}").write_text("partial")
            if self.fail and self.fail in cmd:
                raise KeyboardInterrupt


def stub_training(monkeypatch):
    """Training stubbed out: the runs trained, each with the SHA-256 of the parameters it was given."""
    trained = []

    def run_study(paths, run, params, out, *a):
        trained.append((run, frozen_sha(params)))
        Path(out).mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr("fraglib_study.experiments.confirm.run_study", run_study)
    return trained


def frozen_sha(params):
    return hashlib.sha256(yaml.safe_dump(params, sort_keys=False).encode()).hexdigest()


def test_a_confirmation_killed_in_its_data_stages_resumes_where_it_stopped(tmp_path, monkeypatch):
    from fraglib_study.experiments.confirm import main, run_commands

    tiny_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    trained = stub_training(monkeypatch)
    data = Path("data/confirm/synthetic/p2")
    argv = ["--partition", "2", "--dataset", "synthetic", "--runs", "full"]

    def generated_then_killed(cmds, root):  # the real generation, killed before its completion is recorded
        run_commands(cmds, root)
        raise KeyboardInterrupt

    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", generated_then_killed)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    assert (data / "dataset.json").exists() and not trained
    # the generation again, over its own files (--overwrite, else it refuses them); killed in the features stage
    stages = Stages(fail="fraglib.vision features")

    generated = []

    def generation_for_real(cmds, root):
        generated.extend(c for c in cmds if "fraglib.data synthetic" in c)
        (run_commands if "fraglib.data synthetic" in cmds[0] else stages)(cmds, root)

    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", generation_for_real)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    assert [c.split()[3] for c in stages.cmds] == ["parse", "fragments", "features"] and not trained
    assert generated[0].endswith("--overwrite")  # its own partial files, replaced
    # resumed: the three finished stages kept, the features run again over their partial files
    stages = Stages()
    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", stages)
    main(argv)
    (cmd,) = stages.cmds
    assert "fraglib.vision features" in cmd and cmd.endswith(f"--params {data}/params.yaml --overwrite")
    assert trained == [("full", frozen_sha(yaml.safe_load((data / "params.yaml").read_text())))]
    state = json.loads((data / "stages.json").read_text())["stages"]
    assert all(s["done"] for s in state.values()) and len(state) == 4


def test_runs_are_added_to_a_partition_one_claim_at_a_time_on_the_same_frozen_parameters(tmp_path, monkeypatch, capsys):
    from fraglib_study.experiments.confirm import main

    params = tiny_project(tmp_path)
    params["runs"].update(fr_lr01={"system": "fragment"}, devise_d2048={"system": "devise"})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    trained = stub_training(monkeypatch)
    stages = Stages()
    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", stages)
    argv = ["--partition", "4", "--dataset", "synthetic", "--runs"]
    record = tmp_path / "runs" / "confirm" / "synthetic" / "p4" / "confirm.json"
    frozen = Path("data/confirm/synthetic/p4/params.yaml")
    main([*argv, "fr_lr01,devise_d2048"])
    assert len(stages.cmds) == 4
    main([*argv, "devise,full"])  # the second claim's runs: the data kept, the first runs not forgotten
    assert len(stages.cmds) == 4 and [r for r, _ in trained] == ["fr_lr01", "devise_d2048", "devise", "full"]
    sha = hashlib.sha256(frozen.read_bytes()).hexdigest()
    got = json.loads(record.read_text())
    assert got["runs"] == ["fr_lr01", "devise_d2048", "devise", "full"] and got["params_sha256"] == sha
    # the stages read from dvc.yaml: the one that reads synthetic.seed, then the data stages after it
    assert list(got["stages"]) == ["synthetic", "parse_synthetic", "fragments_synthetic", "features_synthetic"]
    assert all(s["params_sha256"] == sha and f"--params {frozen}" in s["cmd"] for s in got["stages"].values())
    # other parameters on this partition: refused, naming both hashes, nothing run or written
    changed = {**params, "train": {**params["train"], "epochs": params["train"]["epochs"] + 1}}
    Path("other.yaml").write_text(yaml.safe_dump(changed))
    with pytest.raises(SystemExit):
        main([*argv, "full", "--params", "other.yaml"])
    err = capsys.readouterr().err
    assert f"SHA-256 {sha}" in err and "other.yaml frozen for it gives SHA-256" in err and "--overwrite" in err
    assert len(stages.cmds) == 4 and len(trained) == 4 and json.loads(record.read_text()) == got
    assert hashlib.sha256(frozen.read_bytes()).hexdigest() == sha
    # with --overwrite: the partition rebuilt on them (its own files replaced) and every run of it retrained
    main([*argv, "full", "--params", "other.yaml", "--overwrite"])
    new = hashlib.sha256(frozen.read_bytes()).hexdigest()
    assert new != sha and f"SHA-256 {new}" in err  # the hash the refusal named
    assert len(stages.cmds) == 8 and all(c.endswith("--overwrite") for c in stages.cmds[4:])
    assert trained[4:] == [(r, new) for r in ["fr_lr01", "devise_d2048", "devise", "full"]]
    got = json.loads(record.read_text())
    assert got["params_sha256"] == new and got["runs"] == ["fr_lr01", "devise_d2048", "devise", "full"]
    assert got["params"] == "other.yaml"


def test_data_built_by_the_older_confirmation_is_not_trusted(tmp_path, monkeypatch, capsys):
    from fraglib_study.experiments.confirm import main

    tiny_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    stub_training(monkeypatch)
    monkeypatch.setattr("fraglib_study.experiments.confirm.run_commands", stages := Stages())
    data = Path("data/confirm/synthetic/p1")
    data.mkdir(parents=True)
    (data / "done").write_text("")  # its parse, fragments and features read params.yaml, not the frozen file
    with pytest.raises(SystemExit):
        main(["--partition", "1", "--dataset", "synthetic", "--runs", "full"])
    assert "older fraglib_study.experiments.confirm" in capsys.readouterr().err and not stages.cmds
    main(["--partition", "1", "--dataset", "synthetic", "--runs", "full", "--overwrite"])
    assert len(stages.cmds) == 4 and all(c.endswith("--overwrite") for c in stages.cmds)
    assert not (data / "done").exists()
