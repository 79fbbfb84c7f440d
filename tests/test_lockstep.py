"""The DVC locks in step with the code a clone holds (fraglib_study/audit/lockstep.py; issue #78, item 4)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fraglib_study.audit.lockstep import md5_of, out_of_step, record, unrecorded

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp: Path) -> Path:
    """A two-stage project: ``make`` reads src/a.py and src/lib/ and writes out/x; ``use`` reads out/x and src/b.py."""
    (tmp / "src" / "lib").mkdir(parents=True)
    (tmp / "src" / "a.py").write_text("a = 1\n")
    (tmp / "src" / "b.py").write_text("b = 2\n")
    (tmp / "src" / "lib" / "c.py").write_text("c = 3\n")
    (tmp / "src" / "lib" / "d.py").write_text("d = 4\n")
    (tmp / "params.yaml").write_text("train: {epochs: 5, lr: 0.1}\nother: 1\n")

    def dep(p: str) -> dict:
        md5, size, n = md5_of(tmp / p)
        return {"path": p, "hash": "md5", "md5": md5, "size": size, **({"nfiles": n} if n is not None else {})}

    stages = {
        "make": {
            "cmd": "python src/a.py",
            "deps": [dep("src/a.py"), dep("src/lib")],
            "params": {"params.yaml": {"train.epochs": 5, "train.lr": 0.1}},
            "outs": [{"path": "out/x", "hash": "md5", "md5": "0" * 32, "size": 1}],
        },
        "use": {"cmd": "python src/b.py", "deps": [{"path": "out/x", "md5": "1" * 32}, dep("src/b.py")]},
    }
    (tmp / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
    return tmp


def _pipeline(root: Path, make: str, params: str) -> Path:
    """``root`` (:func:`_project`) as a DVC project whose dvc.yaml declares ``make`` (command ``make``, settings
    ``params``, one more source than its lock records), ``use``, and ``new``, a stage never run."""
    import sys

    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(
        "stages:\n"
        f"  make:\n    cmd: {make}\n    deps: [src/a.py, src/lib, src/b.py]\n"
        f"    params: [{params}]\n    outs: [out/x]\n"
        "  use:\n    cmd: python src/b.py\n    deps: [out/x, src/b.py]\n"
        "  new:\n    cmd: python src/b.py\n    deps: [src/b.py]\n"
    )
    return root


def test_md5_of_a_file_and_a_folder_by_hand(tmp_path):
    """A file: md5 of its bytes; a folder: md5 of the JSON list of its files' md5 and paths, sorted, + ".dir"."""
    (tmp_path / "f").write_bytes(b"abc")
    assert md5_of(tmp_path / "f") == ("900150983cd24fb0d6963f7d28e17f72", 3, None)
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "z").write_bytes(b"abc")
    (tmp_path / "d" / "sub" / "y").write_bytes(b"")
    listing = [
        {"md5": "d41d8cd98f00b204e9800998ecf8427e", "relpath": "sub/y"},
        {"md5": "900150983cd24fb0d6963f7d28e17f72", "relpath": "z"},
    ]
    want = hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir"
    assert md5_of(tmp_path / "d") == (want, 3, 2)


def test_out_of_step_names_changed_sources_and_settings_but_not_written_inputs(tmp_path):
    root = _project(tmp_path)
    assert out_of_step("dvc.lock", root) == []  # out/x is written by a stage: not a source, never hashed here
    (root / "src" / "lib" / "c.py").write_text("c = 30\n")
    (root / "src" / "b.py").unlink()
    (root / "params.yaml").write_text("train: {epochs: 6}\nother: 2\n")  # `other` is no stage's setting
    rows = {(r["stage"], r["what"], r["path"], r["why"]) for r in out_of_step("dvc.lock", root)}
    assert rows == {
        ("make", "source", "src/lib", "changed since recorded"),
        ("make", "setting", "params.yaml:train.epochs", "changed since recorded"),
        ("make", "setting", "params.yaml:train.lr", "missing"),
        ("use", "source", "src/b.py", "missing"),
    }


def test_record_refuses_a_changed_setting_and_an_empty_evidence(tmp_path, monkeypatch):
    """A changed setting is re-run, not re-recorded: record stops before DVC is called; so does a target that
    names no stage."""
    root = _pipeline(_project(tmp_path), "python src/a.py", "train.epochs, train.lr")
    monkeypatch.chdir(root)
    with pytest.raises(ValueError, match="--evidence"):
        record(["dvc.yaml:make"], "  ")
    (root / "params.yaml").write_text("train: {epochs: 6, lr: 0.1}\n")
    with pytest.raises(ValueError, match=r"dvc.yaml:make params.yaml:train.epochs \(changed since recorded\)"):
        record(["dvc.yaml"], "re-ran nothing")
    with pytest.raises(ValueError, match=r"dvc.yaml:make params.yaml:train.epochs"):
        record(["dvc.yaml:make"], "re-ran nothing")  # a stage by its address
    with pytest.raises(ValueError, match="dvc.yaml:mak index: names no stage"):
        record(["dvc.yaml:mak", "index"], "re-ran nothing")
    with pytest.raises(subprocess.CalledProcessError):  # `use` reads no setting: not refused; DVC lacks out/x
        record(["dvc.yaml:use"], "re-ran nothing")
    with pytest.raises(subprocess.CalledProcessError):  # --rerun: the stage's command just ran; DVC is asked
        record(["dvc.yaml:make"], "rendered by make reports", rerun=True)  # DVC lacks out/x
    assert not (root / "docs").exists()  # nothing recorded


def test_the_default_pipelines_lock_is_in_step_with_the_code():
    """dvc.lock (the README's first command) records the sources and settings a clone holds: after an edit that
    moves no number, `python -m fraglib_study lockstep record` with the evidence; after one that does, `dvc repro`."""
    rows = out_of_step("dvc.lock", ROOT) + unrecorded("dvc.yaml", ROOT)
    assert not rows, "\n".join(f"{r['stage']}: {r['path']} ({r['why']})" for r in rows[:20])


STUDY_LOCKS = ["studies/synthetic/dvc.lock", "studies/pascal1k/dvc.lock", "studies/flickr8k/dvc.lock"]


@pytest.mark.parametrize("lock", STUDY_LOCKS)
def test_the_studies_locks_are_in_step_with_the_code(lock):
    """Every stage of every study is in step: its data re-made by this code, its pages rendered by it, its trainings
    and fusions re-run or re-recorded on a byte-compared sample (docs/lock_records.json, docs/runs.md "The lock")."""
    rows = out_of_step(lock, ROOT)
    assert not rows, "\n".join(f"{r['stage']}: {r['path']} ({r['why']})" for r in rows[:20])


def test_unrecorded_names_a_stage_never_run_and_an_input_added_after_its_run(tmp_path):
    """dvc.yaml declares, the lock records: a stage or an input only in dvc.yaml is out of step too."""
    root = _pipeline(_project(tmp_path), "python src/a.py", "train.epochs, train.lr, other")
    rows = {(r["stage"], r["what"], r["path"], r["why"]) for r in unrecorded("dvc.yaml", root)}
    assert rows == {
        ("make", "source", "src/b.py", "declared, not recorded"),
        ("make", "setting", "params.yaml:other", "declared, not recorded"),
        ("new", "stage", "dvc.yaml", "not in the lock"),
    }


def test_an_out_of_step_stage_names_the_code_its_results_were_made_by(tmp_path):
    """`lockstep check` says which commits made a stage's committed results (its units' timing.json), so a reader
    sees how old the results of a stage out of step are; nothing where the outputs record none."""
    import json

    from fraglib_study.audit.lockstep import made_by

    root = _project(tmp_path)
    for unit, commit, date, machine in (("seed0", "abc1234", "2026-11-27T10:00:00Z", "M1"),
                                        ("seed1", "def5678-dirty", "2026-11-29T09:00:00Z", "M2"),
                                        ("seed0r1", "abc1234", "2026-11-27T11:00:00Z", "M1")):  # fmt: skip
        (root / "out" / "x" / unit).mkdir(parents=True)
        (root / "out" / "x" / unit / "timing.json").write_text(
            json.dumps({"commit": commit, "date": date, "machine": machine})
        )
    assert made_by(["out/x"], root) == "abc1234 (2026-11-27), def5678-dirty (2026-11-29) on M1 / M2"
    assert made_by([], root) == "" and made_by(["src"], root) == ""  # no outputs; outputs without timing


def test_record_keep_outs_writes_the_entries_from_dvc_yaml_and_keeps_the_outputs(tmp_path, monkeypatch, capsys):
    """--keep-outs: for stages whose outputs no machine holds whole, the entry is written from the declaration
    (sources hashed here, settings read here, an input another stage writes as recorded), its outputs kept; a
    changed setting of a stage that does not train is refused, a stage never run too."""
    root = _pipeline(_project(tmp_path), "python src/a.py --v 2", "train.epochs, train.lr")
    monkeypatch.chdir(root)
    (root / "src" / "lib" / "c.py").write_text("c = 30\n")  # a source edited, a source added to `make`
    record(["dvc.yaml"], "re-ran make and use elsewhere: byte-identical", keep_outs=True)  # `new`: never run, skipped
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"make", "use"} and "never run, nothing to re-record: dvc.yaml:new" in capsys.readouterr().err
    assert out_of_step("dvc.lock", root) == [] and not [r for r in unrecorded("dvc.yaml", root) if r["stage"] != "new"]
    assert lock["make"]["cmd"] == "python src/a.py --v 2" and [d["path"] for d in lock["make"]["deps"]] == [
        "src/a.py",
        "src/b.py",
        "src/lib",
    ]
    assert lock["make"]["outs"] == [{"path": "out/x", "hash": "md5", "md5": "0" * 32, "size": 1}]  # kept
    assert lock["use"]["deps"][0] == {"path": "out/x", "md5": "1" * 32}  # as recorded, not hashed here
    log = json.loads((root / "docs" / "lock_records.json").read_text())
    assert [e["targets"] for e in log] == [["dvc.yaml"]]
    (root / "params.yaml").write_text("train: {epochs: 6, lr: 0.1}\n")
    with pytest.raises(ValueError, match=r"dvc.yaml:make params.yaml:train.epochs \(changed since recorded\)"):
        record(["dvc.yaml:make"], "re-ran nothing", keep_outs=True)  # `python src/a.py` is no study: re-run it
    with pytest.raises(ValueError, match="new was never run"):
        record(["dvc.yaml:new"], "re-ran nothing", keep_outs=True)
    assert len(json.loads((root / "docs" / "lock_records.json").read_text())) == 1


def test_settled_reads_whether_changed_settings_reach_a_committed_run(tmp_path):
    """A training stage whose settings section changed is re-recorded only when its committed units record the
    settings today's params resolve to, and are the units it plans: another run's entry may change, its own not."""
    import copy
    import shutil

    from fraglib_study.experiments.study import settled
    from fraglib_study.schema import read_checked

    params = read_checked(ROOT / "params.yaml")
    shutil.copytree(ROOT / "runs" / "synthetic" / "full", tmp_path / "full")
    argv = ["--run", "full", "--dataset-dir", "data/synthetic", "--out", str(tmp_path / "full")]
    assert settled(argv, params) == []  # the committed default study (docs/lock_records.json)
    other = copy.deepcopy(params)
    other["runs"]["random"]["label"] = "renamed"
    assert settled(argv, other) == []
    mine = copy.deepcopy(params)
    mine["systems"]["fragment"]["margin"] = 2.5
    units = sorted(p.name for p in (tmp_path / "full" / "seeds").iterdir())
    assert settled(argv, mine) == [f"{tmp_path / 'full'}/seeds/{u}: system_config differs" for u in units]
    shutil.rmtree(tmp_path / "full" / "seeds" / units[-1])
    why = settled(argv, params)
    assert why[0] == f"{tmp_path / 'full'}: unit {units[-1]} planned, not committed" and len(why) == 1
    (tmp_path / "full" / "metrics.json").unlink()  # units trained, never summarised
    assert settled(argv, params)[-1] == f"{tmp_path / 'full'}/metrics.json: no summary of the units"


def test_settled_reads_a_k_fold_run_and_names_the_settings_it_reads(tmp_path):
    """A k-fold run: its folds are its units, its summary records folds and partition; study.jobs (threads, hence
    arithmetic) is no setting settled reads, so lockstep refuses to re-record a stage for it."""
    import copy
    import shutil

    from fraglib_study.experiments.study import settled, settles
    from fraglib_study.schema import read_checked

    params = read_checked(ROOT / "params.yaml")
    shutil.copytree(ROOT / "runs" / "pascal1k_folds" / "devise", tmp_path / "devise")
    argv = ["--run", "devise", "--dataset", "pascal1k", "--folds", "--dataset-dir", "data/pascal1k/folds/fold{seed}"]
    argv += ["--out", str(tmp_path / "devise")]
    assert settled(argv, params) == []
    fewer = copy.deepcopy(params)
    fewer["pascal1k"]["folds"] = 5
    why = settled(argv, fewer)
    assert f"{tmp_path / 'devise'}: unit seed9r1 committed, not planned" in why
    assert f"{tmp_path / 'devise'}/metrics.json: folds 10, now 5" in why
    assert [
        k for k in ("train", "systems.socher", "runs.stt", "pascal1k.fold_replicates", "study.jobs") if settles(k)
    ] == [
        "train",
        "systems.socher",
        "runs.stt",
        "pascal1k.fold_replicates",
    ]
