"""One rule for outputs (fraglib.outputs): every command that writes refuses to replace or mix with files
already there unless --overwrite, before doing its work, and names them; with --overwrite a family is
replaced whole (no stale member survives beside new ones)."""
import json

import numpy as np
import pytest

from fraglib.outputs import claim


def test_claim_refuses_then_replaces_the_whole_family(tmp_path):
    fam = [tmp_path / f"{n}.npz" for n in ("rcnn", "groundtruth", "top36")]
    fam[0].write_text("old rcnn")
    fam[2].write_text("old top36")
    with pytest.raises(FileExistsError, match=r"refusing to replace 2 existing file\(s\): .*rcnn.npz, .*top36.npz"):
        claim(fam, fam[:1], False, "caches")
    assert fam[0].read_text() == "old rcnn"
    claim(fam, fam[:1], True, "caches")                  # this run writes rcnn only: top36 must not survive
    assert fam[0].exists() and not fam[2].exists()


def _precomp(root):
    root.mkdir()
    np.save(root / "train_ims.npy", np.ones((2, 3), np.float32))
    (root / "train_caps.txt").write_text("a dog\na cat\nthe dog\nthe cat\n")


# command -> (argv builder, the output file it must not touch); each builder gets (tmp_path, tiny_full)
COMMANDS = {
    "fraglib.data precomp": ("fraglib.data.__main__", lambda t, d: ["precomp", "--root", str(t / "p"), "--splits", "train", "--out", str(t / "o")],
                             "o/features/grid.npz"),
    "fraglib.data pascal1k": ("fraglib.data.__main__", lambda t, d: ["karpathy", "--json", str(d / "dataset.json"),
                                                                      "--images", str(d / "images"), "--out", str(t / "o")],
                              "o/dataset.json"),
    "fraglib.data.synthetic": ("fraglib.data.synthetic", lambda t, d: ["--out", str(t / "o")], "o/stats.json"),
    "fraglib.text parse": ("fraglib.text.build", lambda t, d: ["parse", "--dataset-dir", str(d), "--parse-file",
                                                               str(t / "o" / "parse.conllu")], "o/parse.conllu"),
    "fraglib.text fragments": ("fraglib.text.build", lambda t, d: ["fragments", "--dataset-dir", str(d), "--out-dir",
                                                                   str(t / "o")], "o/bow.npz"),
    "fraglib.vision.features": ("fraglib.vision.features", lambda t, d: ["--dataset-dir", str(d), "--out-dir", str(t / "o")],
                                "o/top36.npz"),
    "fraglib.vision.regions": ("fraglib.vision.regions", lambda t, d: ["--dataset-dir", str(d), "--out", str(t / "o" / "r.npz")],
                               "o/r.npz"),
    "fraglib.vision.objectness": ("fraglib.vision.objectness", lambda t, d: [
        "--dataset-dir", str(d), "--truth", str(d / "ground_truth.json"), "--out", str(t / "o" / "obj.npz")], "o/obj.npz"),
    "fraglib.search": ("fraglib.search", lambda t, d: ["--run", "full", "--dataset-dir", str(d), "--out", str(t / "o" / "s.csv")],
                       "o/s.csv"),
    "fraglib.captions": ("fraglib.captions", lambda t, d: ["--run-dir", str(t / "o")], "o/captions/seed0.json"),
    "fraglib.evaluate --out": ("fraglib.evaluate", lambda t, d: [str(t / "seed"), "--out", str(t / "o" / "m.json")], "o/m.json"),
    "fraglib.notebook (reports)": ("fraglib.notebook", lambda t, d: ["notebooks/data_report.ipynb", str(t / "o" / "d.html")],
                                   "o/executed/data_report.ipynb"),
    "fraglib.index": ("fraglib.index", lambda t, d: ["--out", str(t / "o" / "index.html")], "o/index.html"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_to_replace_existing_outputs(command, tiny_full, tmp_path, capsys, monkeypatch):
    import importlib

    from conftest import ROOT

    module, argv, existing = COMMANDS[command]
    monkeypatch.chdir(ROOT)
    _precomp(tmp_path / "p")
    if command == "fraglib.captions":                    # a finished generating run with one seed
        (tmp_path / "o").mkdir()
        (tmp_path / "o" / "metrics.json").write_text(json.dumps({"seeds": [0]}))
        from fraglib.captions import java_missing
        if java_missing():
            pytest.skip(java_missing())
    if command == "fraglib.evaluate --out":
        (tmp_path / "seed").mkdir()
    target = tmp_path / existing
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"yesterday's result")
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv(tmp_path, tiny_full))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "refusing to replace" in err and target.name in err and "--overwrite" in err, err
    assert target.read_bytes() == b"yesterday's result"


def test_precomp_with_overwrite_replaces_its_whole_family(tmp_path):
    from fraglib.data.__main__ import main

    _precomp(tmp_path / "p")
    out = tmp_path / "o"
    (out / "features").mkdir(parents=True)
    for stale in ("groundtruth.npz", "grid.npz", "top36.npz", "features_stats.json"):
        (out / "features" / stale).write_text("old")
    (out / "conversion.json").write_text("{}")
    main(["precomp", "--root", str(tmp_path / "p"), "--splits", "train", "--out", str(out), "--overwrite"])
    assert sorted(p.name for p in (out / "features").iterdir()) == ["rcnn.npz"]
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "features"]


def test_bench_never_replaces_another_machines_entries_silently(tmp_path):
    from fraglib.bench.common import merge

    path = tmp_path / "results.json"
    theirs = {"name": "epoch_full", "value": 1.0, "machine": "Intel Xeon; 16 cores; torch 2.11 (1 threads); Python 3.11"}
    keep = {"name": "other", "value": 3.0, "machine": theirs["machine"]}
    path.write_text(json.dumps([theirs, keep]))
    mine = {"name": "epoch_full", "value": 2.0, "machine": "AMD EPYC; 2 cores; torch 2.14 (1 threads); Python 3.11"}
    with pytest.raises(FileExistsError, match=r"1 entries to replace were measured on another machine \(epoch_full\)"):
        merge([mine], path)
    assert json.loads(path.read_text()) == [theirs, keep]
    assert json.loads(path.with_suffix(".pending.json").read_text()) == [mine]     # nothing measured is lost
    assert merge([mine], path, overwrite=True) == [mine, keep]
    again = dict(mine, value=2.5, machine=mine["machine"].replace("(1 threads)", "(2 threads)"))
    assert merge([again], path) == [again, keep]                                     # same machine: updated
