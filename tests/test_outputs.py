"""One rule for outputs (fraglib.core.outputs): every command that writes refuses to replace or mix with files
already there unless --overwrite, before doing its work, and names them; with --overwrite a family is
replaced whole (no stale member survives beside new ones)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fraglib.core.outputs import claim


def test_claim_refuses_then_replaces_the_whole_family(tmp_path):
    fam = [tmp_path / f"{n}.npz" for n in ("rcnn", "groundtruth", "top36")]
    fam[0].write_text("old rcnn")
    fam[2].write_text("old top36")
    with pytest.raises(FileExistsError, match=r"refusing to replace 2 existing file\(s\): .*rcnn.npz, .*top36.npz"):
        claim(fam, fam[:1], False, "caches")
    assert fam[0].read_text() == "old rcnn"
    claim(fam, fam[:1], True, "caches")  # this run writes rcnn only: top36 must not survive
    assert fam[0].exists() and not fam[2].exists()


def _precomp(root):
    root.mkdir()
    np.save(root / "train_ims.npy", np.ones((2, 3), np.float32))
    (root / "train_caps.txt").write_text("a dog\na cat\nthe dog\nthe cat\n")


# command -> (argv builder, the output file it must not touch); each builder gets (tmp_path, tiny_full)
COMMANDS = {
    "fraglib.data precomp": (
        "fraglib.data.readers.precomp",
        lambda t, d: ["--root", str(t / "p"), "--splits", "train", "--out", str(t / "o")],
        "o/features/grid.npz",
    ),
    "fraglib.data karpathy": (
        "fraglib.data.readers.karpathy",
        lambda t, d: [
            "--json",
            str(d / "dataset.json"),
            "--images",
            str(d / "images"),
            "--out",
            str(t / "o"),
        ],
        "o/dataset.json",
    ),
    # the k-fold partition of Pascal1K (a two-category sentences.json written into t/src by the test)
    "fraglib.data pascal1k --folds": (
        "fraglib.data.readers.pascal1k",
        lambda t, d: ["--root", str(t / "src"), "--out", str(t / "o"), "--folds", "10"],
        "o/fold3/dataset.json",
    ),
    "fraglib_study.report.figure_data": (
        "fraglib_study.report.figure_data",
        lambda t, d: ["--dataset-dir", str(d), "--dataset", "synthetic", "--out", str(t / "o")],
        "o/queries.json",
    ),
    "fraglib.data.synthetic": ("fraglib.data.synthetic", lambda t, d: ["--out", str(t / "o")], "o/stats.json"),
    "fraglib.text parse": (
        "fraglib.text.build",
        lambda t, d: ["parse", "--dataset-dir", str(d), "--parse-file", str(t / "o" / "parse.conllu")],
        "o/parse.conllu",
    ),
    "fraglib.text fragments": (
        "fraglib.text.build",
        lambda t, d: ["fragments", "--dataset-dir", str(d), "--out-dir", str(t / "o")],
        "o/bow.npz",
    ),
    "fraglib.vision.features": (
        "fraglib.vision.features",
        lambda t, d: ["--dataset-dir", str(d), "--out-dir", str(t / "o")],
        "o/top36.npz",
    ),
    "fraglib.vision.regions": (
        "fraglib.vision.regions",
        lambda t, d: ["--dataset-dir", str(d), "--out", str(t / "o" / "r.npz")],
        "o/r.npz",
    ),
    "fraglib.vision.objectness": (
        "fraglib.vision.objectness",
        lambda t, d: [
            "--dataset-dir",
            str(d),
            "--truth",
            str(d / "ground_truth.json"),
            "--out",
            str(t / "o" / "obj.npz"),
        ],
        "o/obj.npz",
    ),
    "fraglib_study.experiments.search": (
        "fraglib_study.experiments.search",
        lambda t, d: ["--run", "full", "--dataset-dir", str(d), "--out", str(t / "o" / "s.csv")],
        "o/s.csv",
    ),
    "fraglib_study.experiments.captions": (
        "fraglib_study.experiments.captions",
        lambda t, d: ["--run-dir", str(t / "o")],
        "o/captions/seed0.json",
    ),
    "fraglib.run.evaluate --out": (
        "fraglib.run.evaluate",
        lambda t, d: [str(t / "seed"), "--out", str(t / "o" / "m.json")],
        "o/m.json",
    ),
    "fraglib_study.report.notebook (reports)": (
        "fraglib_study.report.notebook",
        lambda t, d: ["notebooks/data_report.ipynb", str(t / "o" / "d.html")],
        "o/executed/data_report.ipynb",
    ),
    "fraglib_study.pages.index": (
        "fraglib_study.pages.index",
        lambda t, d: ["--out", str(t / "o" / "index.html")],
        "o/index.html",
    ),
    "fraglib_study.pages.summary": (
        "fraglib_study.pages.summary",
        lambda t, d: ["--out", str(t / "o" / "README.md")],
        "o/README.md",
    ),
    # a timeline's figure, refused before the record is read (record's --out: tests/test_timeline.py)
    "fraglib_study.bench timeline draw": (
        "fraglib_study.bench.timeline",
        lambda t, d: ["draw", str(t / "timeline.json"), "--out", str(t / "o" / "timeline.svg")],
        "o/timeline.svg",
    ),
    "fraglib_study.pages.summary --csv": (
        "fraglib_study.pages.summary",
        lambda t, d: ["--csv", str(t / "o" / "README.md")],
        "o/README.md",
    ),
    # refused before it reads either folder
    "fraglib_study.audit.rerun --json": (
        "fraglib_study.audit.rerun",
        lambda t, d: [str(t / "new"), "--reference-dir", str(t / "ref"), "--json", str(t / "o" / "cmp.json")],
        "o/cmp.json",
    ),
    # a study's figure data with the explorer record of one run of tiny_study (its seed folder linked into t/m)
    "fraglib_study.report.figure_data --runs": (
        "fraglib_study.report.figure_data",
        lambda t, d: ["--dataset-dir", str(d), "--models-dir", str(t / "m"), "--out", str(t / "o"), "--runs", "full"],
        "o/explorer.json",
    ),
    # the fold explorer's data (fold 0 of one run: the same linked seed folder), refused before any checkpoint is read
    "fraglib_study.experiments.explore --folds": (
        "fraglib_study.experiments.explore",
        lambda t, d: [
            "--folds",
            "--dataset",
            "pascal1k",
            "--models-dir",
            str(t / "m"),
            "--out",
            str(t / "o"),
            "--runs",
            "full",
        ],  # fmt: skip
        "o/explorer.json",
    ),
    # the fused run's folder (two trained runs of tiny_study, copied into t by the test)
    "fraglib_study.experiments.fusion": (
        "fraglib_study.experiments.fusion",
        lambda t, d: ["--runs", str(t / "full"), str(t / "devise"), "--out", str(t / "o")],
        "o/metrics.json",
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_to_replace_existing_outputs(command, tiny_full, tmp_path, capsys, monkeypatch, request):
    import importlib
    import shutil

    from conftest import ROOT

    module, argv, existing = COMMANDS[command]
    monkeypatch.chdir(ROOT)
    _precomp(tmp_path / "p")
    if command == "fraglib_study.experiments.captions":  # a finished generating run with one seed
        (tmp_path / "o").mkdir()
        (tmp_path / "o" / "metrics.json").write_text(json.dumps({"seeds": [0]}))
        from fraglib_study.experiments.captions import java_missing

        if java_missing():
            pytest.skip(java_missing())
    if command == "fraglib.run.evaluate --out":
        (tmp_path / "seed").mkdir()
    if command == "fraglib.data pascal1k --folds":
        from test_folds import pascal_fixture

        pascal_fixture(tmp_path / "src")
    if command in ("fraglib_study.report.figure_data --runs", "fraglib_study.experiments.explore --folds"):
        (tmp_path / "m" / "full").mkdir(parents=True)
        (tmp_path / "m" / "full" / "seed0").symlink_to(
            request.getfixturevalue("tiny_study") / "full" / "seeds" / "seed0"
        )
    if command == "fraglib_study.experiments.fusion":
        runs = request.getfixturevalue("tiny_study")
        for r in ("full", "devise"):
            shutil.copytree(runs / r, tmp_path / r)
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
    from fraglib_study.bench.common import merge

    path = tmp_path / "results.json"
    theirs = {
        "name": "epoch_full",
        "value": 1.0,
        "machine": "Intel Xeon; 16 cores; torch 2.11 (1 threads); Python 3.11",
    }
    keep = {"name": "other", "value": 3.0, "machine": theirs["machine"]}
    path.write_text(json.dumps([theirs, keep]))
    mine = {"name": "epoch_full", "value": 2.0, "machine": "AMD EPYC; 2 cores; torch 2.14 (1 threads); Python 3.11"}
    with pytest.raises(FileExistsError, match=r"1 entries to replace were measured on another machine \(epoch_full\)"):
        merge([mine], path)
    assert json.loads(path.read_text()) == [theirs, keep]
    assert json.loads(path.with_suffix(".pending.json").read_text()) == [mine]  # nothing measured is lost
    assert merge([mine], path, overwrite=True) == [mine, keep]
    again = dict(mine, value=2.5, machine=mine["machine"].replace("(1 threads)", "(2 threads)"))
    assert merge([again], path) == [again, keep]  # same machine: updated


# ----------------------------------------------------------------------------- the rule, by construction
# Commands that write with --out-like flags but keep what exists on purpose (the module docstring of
# fraglib/core/outputs.py says why), each with the test that covers its own rule.
KEEPS_ON_PURPOSE = {
    "fraglib.run.train": "resumes a run from its checkpoint (tests/test_train.py, resume tests)",
    "fraglib_study.experiments.study": "resumes every seed of a run (tests/test_train.py, study resume tests)",
    "fraglib_study.bench": "a register: updates this machine's entries (test_bench_never_replaces_another_machines_entries_silently)",
    "fraglib_study.audit.costs": "a register: a make target's next successful run replaces its record (tests/test_costs.py)",
    "fraglib.data.readers.pascal1k": "resumes a download: keeps the images whose checksums verify (tests/test_download.py)",
}
OUT_FLAGS = ("--out", "--out-dir", "--parse-file", "--csv", "--json", "--cv-out", "--executed", "--save-scores")


def _package_files():
    from conftest import ROOT

    return sorted(p for p in [*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")])


def _module_name(path):
    from conftest import ROOT

    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] in ("__init__", "__main__") else parts)


def test_every_command_that_writes_is_covered_by_the_output_test():
    """The command list is derived from the code: every module whose argument parser takes an output flag is
    tried by test_every_command_refuses_to_replace_existing_outputs, or keeps its outputs on purpose."""
    import ast

    writers = set()
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value in OUT_FLAGS for a in node.args)
            ):
                writers.add(_module_name(path))
    covered = {m.removesuffix(".__main__") for m, _, _ in COMMANDS.values()}
    covered.add("fraglib.data.convert")  # the readers' shared --out: tried through each reader case above
    missing = writers - covered - set(KEEPS_ON_PURPOSE)
    assert not missing, f"commands with an output flag that no case of COMMANDS tries: {sorted(missing)}"
    assert len(writers) >= 15, sorted(writers)  # the scan itself still finds the commands


# X.method(...) that writes a file whatever X is; module.function(...) that writes one for these modules
METHODS = {"write_text", "write_bytes", "savefig", "to_csv", "to_json", "to_parquet", "imwrite"}
FUNCTIONS = {
    ("np", "save"),
    ("np", "savez"),
    ("np", "savez_compressed"),
    ("torch", "save"),
    ("json", "dump"),
    ("pickle", "dump"),
    ("yaml", "dump"),
    ("yaml", "safe_dump"),
    ("shutil", "copy"),
    ("shutil", "copy2"),
    ("shutil", "copyfile"),
    ("shutil", "copytree"),
    ("shutil", "move"),
    ("cv2", "imwrite"),
}
# writes that go elsewhere than a file of the user's: an in-memory buffer, the temporary file of a helper
NOT_FILES = {"buf", "buffer", "io", "out_buf"}


# the argument naming the written file: the second for these (obj first), the first for the other functions
TARGET_SECOND = {"torch", "json", "pickle", "yaml", "shutil"}
TARGET_KEYWORDS = {"f", "fp", "stream", "dst", "file", "path_or_buf", "fname"}


def _write_target(node):
    """The expression naming the file a write call writes: ``X`` of ``X.write_text(...)``, the path argument of
    ``np.save`` / ``open`` / ``fig.savefig`` / ``df.to_csv`` (first) or ``torch.save`` / ``json.dump`` / ``shutil.copy`` (second); None when absent.
    Only that expression can make a write safe (``p.write_bytes(buf.getvalue())`` writes ``p``, not ``buf``)."""
    import ast

    f = node.func
    method = isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FUNCTIONS)
    if method and f.attr in ("write_text", "write_bytes"):
        return f.value
    at = 1 if not method and isinstance(f, ast.Attribute) and f.value.id in TARGET_SECOND else 0
    if len(node.args) > at:
        return node.args[at]
    return next((k.value for k in node.keywords if k.arg in TARGET_KEYWORDS), None)


def _direct_writes(tree):
    """(line, call) of every file write in ``tree`` that does not go through fraglib.core.outputs: a writer call
    (``X.write_text``, ``np.savez``, ``torch.save``, ``savefig``, ``json.dump``, ``open(.., "w")``, ...)
    none of whose names is bound by ``with atomic(...) as name`` / ``with appending(...) as name`` (or by
    ``with open(name, ...) as fh`` of such a name)."""
    import ast

    safe = set(NOT_FILES)
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if not (isinstance(call, ast.Call) and isinstance(item.optional_vars, ast.Name)):
                    continue
                fn = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                names = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
                if fn in ("atomic", "appending") or (fn == "open" and names & safe):
                    safe.add(item.optional_vars.id)
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = (
                node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            if not (isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax")):
                continue
        elif isinstance(f, ast.Attribute) and f.attr in METHODS:
            if (
                f.attr in ("to_csv", "to_json")
                and not node.args
                and not any(k.arg == "path_or_buf" for k in node.keywords)
            ):
                continue  # df.to_csv(index=False) returns text
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FUNCTIONS:
            if "dump" in f.attr and not node.args[1:] and not any(k.arg in ("fp", "stream") for k in node.keywords):
                continue  # yaml.dump(obj) returns text
        else:
            continue
        target = _write_target(node)
        names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else set()
        if not names & safe:
            bad.append((node.lineno, ast.unparse(node)[:90]))
    return bad


def test_every_file_write_in_the_package_goes_through_the_atomic_helpers():
    """One write rule by construction: a write that bypasses fraglib.core.outputs (a cut file after a kill or a
    full disk) fails this test, naming the file and line."""
    import ast

    found = {
        f"{p.name}:{line}: {code}"
        for p in _package_files()
        if p.name != "outputs.py"
        for line, code in _direct_writes(ast.parse(p.read_text()))
    }
    assert not found, "\n".join(sorted(found))


def test_the_write_scan_finds_a_direct_write_and_accepts_the_helpers():
    import ast

    bad = ast.parse(
        "def f(p, S):\n    p.write_text('x')\n    np.savez(p, S=S)\n    torch.save(S, p)\n"
        "    with open(p, 'w') as fh:\n        json.dump(S, fh)\n    df.to_csv(p)\n    df.to_json(path_or_buf=p)\n"
        "    (out / name).write_bytes(buf.getvalue())\n    torch.save(buf, p)\n"
    )
    assert sorted(line for line, _ in _direct_writes(bad)) == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    good = ast.parse(
        "def f(p, S):\n    with atomic(p) as tmp:\n        np.savez(tmp, S=S)\n"
        "    with atomic(p) as t2, open(t2, 'w') as fh:\n        json.dump(S, fh)\n"
        "    with appending(p) as j:\n        j.write('x')\n    open(p).read()\n    yaml.dump(S)\n"
        "    text = df.to_csv(index=False)\n"
    )
    assert _direct_writes(good) == []


def test_atomic_leaves_the_old_file_whole_when_the_writer_fails(tmp_path):
    from fraglib.core.outputs import atomic, write_text

    target = tmp_path / "sub" / "metrics.json"
    write_text(target, "complete\n")
    with pytest.raises(OSError, match="No space left"):
        with atomic(target) as tmp:
            tmp.write_text("half of the ne")
            raise OSError(28, "No space left on device")
    assert target.read_text() == "complete\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["metrics.json"]  # no temporary left behind


# ----------------------------------------------------------------------------- the contract inside a command
def test_every_main_of_the_package_runs_under_the_output_contract():
    """Found from the code: every module-level ``main`` is wrapped in fraglib.core.outputs.command, so a writer added
    to any command without a claim is refused at run time instead of replacing a user's file (an entry point's
    ``main`` writes nothing: it picks the command whose ``main`` runs, wrapped)."""
    import ast

    from test_layers import ENTRY_POINTS

    bare = []
    for path in _package_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                names = {getattr(d, "id", getattr(d, "attr", None)) for d in node.decorator_list}
                if "command" not in names and _module_name(path) not in ENTRY_POINTS:
                    bare.append(_module_name(path))
    assert not bare, f"main without @fraglib.core.outputs.command: {bare}"


def _command(body):
    from fraglib.core.outputs import command

    @command
    def main(argv=None):
        body()

    return main


def test_a_command_replaces_only_what_it_claimed_or_wrote(tmp_path, capsys):
    from fraglib.core.outputs import claim, updates, write_text

    mine, theirs, register = tmp_path / "mine.json", tmp_path / "notes.txt", tmp_path / "reg.json"
    for p in (mine, theirs, register):
        p.write_text("before")

    def body():
        claim([mine], [mine], True, "test")
        write_text(mine, "1")
        write_text(mine, "2")  # its own file again
        updates(register)
        write_text(register, "updated")
        write_text(theirs, "clobbered")

    with pytest.raises(SystemExit) as exc:
        _command(body)()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{theirs}: refusing to replace a file this command did not write or claim" in err, err
    assert (mine.read_text(), register.read_text(), theirs.read_text()) == ("2", "updated", "before")
    write_text(theirs, "library call")  # outside a command the helpers only write atomically
    assert theirs.read_text() == "library call"


def test_a_failed_write_names_the_file_keeps_the_old_one_and_leaves_no_partial_set(tmp_path, capsys):
    from fraglib.core.outputs import atomic, claim, write_text

    family = [tmp_path / "test.npy", tmp_path / "val.npy", tmp_path / "banks.npz"]
    family[2].write_text("yesterday")

    def body():
        claim(family, family, True, "test")
        write_text(family[0], "new test")
        with atomic(family[2]) as tmp:  # the disk fills while the second file is written
            tmp.write_text("half")
            raise OSError(28, "No space left on device")

    with pytest.raises(SystemExit) as exc:
        _command(body)()
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert f"{family[2]}: could not write it (No space left on device)" in err and "removed the 1 file" in err, err
    assert not family[0].exists(), "the partial set must not block the next run"
    assert family[2].read_text() == "yesterday"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["banks.npz"]  # no temporary file left either


def test_a_family_never_reaches_through_a_symlink_out_of_its_folder(tmp_path):
    from fraglib.core.outputs import Refused, claim

    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "holiday.jpg").write_text("a user's picture")
    out = tmp_path / "explorer"
    out.mkdir()
    (out / "thumbs").symlink_to(photos)
    (out / "explorer.json").write_text("{}")
    family = [out / "explorer.json", out / "thumbs" / "holiday.jpg"]
    with pytest.raises(Refused, match=r"thumbs/holiday.jpg lies through a symlink outside .*explorer"):
        claim(family, [], True, "fraglib_study.experiments.explore")
    assert (photos / "holiday.jpg").read_text() == "a user's picture" and (out / "explorer.json").exists()


def test_a_command_never_writes_through_a_symlinked_folder_below_its_claim(tmp_path, capsys):
    from fraglib.core.outputs import claim, write_bytes

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "o"
    out.mkdir()
    (out / "thumbs").symlink_to(elsewhere)

    def body():
        claim([out / "explorer.json"], [], True, "test", root=out)
        write_bytes(out / "thumbs" / "1.jpg", b"jpeg")

    with pytest.raises(SystemExit):
        _command(body)()
    assert "lies through a symlink outside" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_explore_overwrite_deletes_only_the_thumbnails_its_explorer_json_lists(tmp_path):
    from fraglib_study.experiments.explore import written_thumbnails

    out = tmp_path / "x"
    (out / "thumbs").mkdir(parents=True)
    for n in ("3.jpg", "holiday.jpg"):
        (out / "thumbs" / n).write_bytes(b"jpeg")
    (out / "explorer.json").write_text(json.dumps({"images": [{"thumb": "thumbs/3.jpg"}, {"thumb": "../escape.jpg"}]}))
    assert written_thumbnails(out) == [out / "thumbs" / "3.jpg"]
    (out / "explorer.json").write_text("{cut")
    assert written_thumbnails(out) == []  # a damaged explorer.json vouches for no picture


def test_figures_overwrite_keeps_a_users_pictures(tiny_study, tiny_full, tmp_path, monkeypatch):
    """figures --overwrite replaces the thumbnails it wrote, never a user's picture beside them (in its --thumbs
    folder, a page's folder shared with nothing else it writes)."""
    import yaml

    from fraglib_study.report.figure_data import main

    from conftest import ROOT

    monkeypatch.chdir(ROOT)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"] = {**params["explorer"], "k": 3, "align_runs": ["full"], "map_runs": []}  # 4 test images
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "m" / "full").mkdir(parents=True)
    (tmp_path / "m" / "full" / "seed0").symlink_to(tiny_study / "full" / "seeds" / "seed0")
    out = tmp_path / "o"
    thumbs = tmp_path / "reports" / "thumbs"
    argv = ["--dataset-dir", str(tiny_full), "--models-dir", str(tmp_path / "m"), "--out", str(out), "--runs", "full",
            "--params", str(tmp_path / "params.yaml"), "--thumbs", str(thumbs)]  # fmt: skip
    main(argv)
    ours = sorted(p.name for p in thumbs.iterdir())
    (thumbs / "holiday.jpg").write_bytes(b"a user's picture")
    main([*argv, "--overwrite"])
    assert (thumbs / "holiday.jpg").read_bytes() == b"a user's picture"
    assert sorted(p.name for p in thumbs.iterdir()) == sorted([*ours, "holiday.jpg"])


def test_summary_csv_refuses_to_replace_a_file(tmp_path, monkeypatch, capsys):
    from fraglib_study.pages.summary import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("# my project")
    with pytest.raises(SystemExit) as exc:
        main(["--csv", "README.md"])
    assert exc.value.code == 2 and "refusing to replace" in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == "# my project"
    with pytest.raises(SystemExit):
        main(["--csv", "runs.csv", "--out", "x.md"])  # --out has no meaning with --csv: refused, not ignored
    assert "takes no --out" in capsys.readouterr().err


def test_summary_csv_says_which_run_folders_it_leaves_out(tmp_path, monkeypatch, capsys):
    from fraglib_study.pages.summary import main

    from conftest import ROOT

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("fraglib_study.pages.summary.unsummarised", lambda root: [Path("runs/synthetic/killed")])
    main(["--csv", str(tmp_path / "runs.csv")])
    assert "1 run folder(s) without metrics.json left out: runs/synthetic/killed" in capsys.readouterr().err
    assert (tmp_path / "runs.csv").read_text().startswith("study,run,")


def test_figures_deletes_only_the_crops_its_triplets_json_lists(tmp_path):
    from fraglib_study.report.figure_data import written_crops

    (tmp_path / "crops").mkdir()
    (tmp_path / "triplets.json").write_text(
        json.dumps(
            {"queries": [{"hits": [{"crop": "crops/on_dog_sofa_1.jpg"}, {"crop": "/etc/passwd"}]}, {"reason": "x"}]}
        )
    )
    assert written_crops(tmp_path) == [tmp_path / "crops" / "on_dog_sofa_1.jpg"]
    (tmp_path / "triplets.json").write_text("[cut")
    assert written_crops(tmp_path) == []


def test_unsummarised_finds_a_run_killed_before_its_summary(tmp_path):
    import shutil

    from fraglib_study.pages.summary import unsummarised
    from fraglib_study.report.registry import studies

    from conftest import ROOT

    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    runs = tmp_path / studies(tmp_path)[0].runs
    (runs / "killed" / "seeds" / "seed0").mkdir(parents=True)
    (runs / "done" / "seeds" / "seed0").mkdir(parents=True)
    (runs / "done" / "metrics.json").write_text("{}")
    assert unsummarised(tmp_path) == [runs / "killed"]


# deletions outside fraglib.core.outputs.remove (which a command checks against its claims), each with why it is safe
OWN_DELETIONS = {
    "checkpoint.py": "a training run's own best.pt / last.pt / lock, in the run folder it resumes",
    "features.py": "rmdir of the empty output folder this run made, after a failure",
    "notebook.py": "rmdir of a page's figures folder once empty",
    "render.py": "its own staging copies under build/reports, moved into place",
    "rehearsal.py": "the benchmark's temporary inputs it made",
    "scale.py": "the benchmark's temporary folders it made",
}


def test_every_deletion_in_the_package_goes_through_the_output_contract():
    """A file is deleted through fraglib.core.outputs.remove (refused inside a command unless claimed or written by it),
    or in a module of OWN_DELETIONS, which deletes only what it made itself."""
    import ast

    found = []
    for p in _package_files():
        if p.name == "outputs.py" or p.name in OWN_DELETIONS:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("unlink", "rmdir", "rmtree") or (
                    node.func.attr == "remove" and getattr(node.func.value, "id", "") == "os"
                ):
                    found.append(f"{p.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


def test_remove_inside_a_command_deletes_only_what_it_claimed(tmp_path, capsys):
    from fraglib.core.outputs import claim, remove

    mine, theirs = tmp_path / "align_full.js", tmp_path / "align_mine.js"
    for p in (mine, theirs):
        p.write_text("x")

    def body():
        claim([mine], [mine], True, "test")
        remove(mine)
        remove(theirs)

    with pytest.raises(SystemExit):
        _command(body)()
    assert "refusing to delete a file this command did not write or claim" in capsys.readouterr().err
    assert not mine.exists() and theirs.exists()


def test_remove_tree_inside_a_command_deletes_only_a_claimed_output(tmp_path, capsys):
    """What the pool clears before a stage's command (as dvc repro does): a claimed folder goes whole, a file too; an
    unclaimed folder is refused and stays."""
    from fraglib.core.outputs import remove_tree, updates

    mine, theirs, page = tmp_path / "captions", tmp_path / "explorer", tmp_path / "page.html"
    for d in (mine, theirs):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "a.json").write_text("x")
    page.write_text("x")

    def body():
        updates(mine, page)
        remove_tree(mine)
        remove_tree(page)
        remove_tree(tmp_path / "absent")
        remove_tree(theirs)

    with pytest.raises(SystemExit):
        _command(body)()
    assert "refusing to delete a folder this command did not claim" in capsys.readouterr().err
    assert not mine.exists() and not page.exists() and (theirs / "sub" / "a.json").exists()


def test_a_failed_overwrite_leaves_the_earlier_set_whole(tiny_study, tiny_full, tmp_path, monkeypatch):
    """figures --overwrite whose work fails (a damaged checkpoint) deletes nothing: the earlier explorer data and
    thumbnails stay as they were (claimed with writes=family, pruned only after a complete new set)."""
    import yaml

    from fraglib_study.report.figure_data import main

    from conftest import ROOT

    monkeypatch.chdir(ROOT)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"] = {**params["explorer"], "k": 3, "align_runs": ["full"], "map_runs": []}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "m" / "full").mkdir(parents=True)
    (tmp_path / "m" / "full" / "seed0").symlink_to(tiny_study / "full" / "seeds" / "seed0")
    out = tmp_path / "o"
    argv = [
        "--dataset-dir",
        str(tiny_full),
        "--out",
        str(out),
        "--runs",
        "full",
        "--params",
        str(tmp_path / "params.yaml"),
    ]
    main(["--models-dir", str(tmp_path / "m"), *argv])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / "broken" / "full" / "seed0").mkdir(parents=True)
    (tmp_path / "broken" / "full" / "seed0" / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(Exception):
        main(["--models-dir", str(tmp_path / "broken"), *argv, "--overwrite"])
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_prune_removes_only_what_this_run_did_not_write(tmp_path):
    from fraglib.core.outputs import claim, prune, write_text

    family = [tmp_path / f"{n}.json" for n in ("a", "b", "c")]
    for p in family:
        p.write_text("old")

    def body():
        claim(family, family, True, "test")  # nothing deleted before the work
        assert all(p.exists() for p in family)
        write_text(family[0], "new")
        assert prune(family) == family[1:]

    _command(body)()
    assert [p.exists() for p in family] == [True, False, False] and family[0].read_text() == "new"


def test_a_claim_never_replaces_a_folder_or_a_device(tmp_path):
    from fraglib.core.outputs import Refused, claim, write_text

    (tmp_path / "out.json").mkdir()
    with pytest.raises(Refused, match=r"out.json is a folder: refusing to replace it, with or without --overwrite"):
        claim([tmp_path / "out.json"], [tmp_path / "out.json"], True, "test")
    with pytest.raises(Refused, match=r"is not a regular file"):
        claim([Path("/dev/null")], [Path("/dev/null")], True, "test")
    with pytest.raises(Refused, match=r"out.json: is a folder, not a file"):
        write_text(tmp_path / "out.json", "x")


def test_a_long_legal_name_is_writable_and_a_blocked_folder_names_the_file(tmp_path):
    from fraglib.core.outputs import WriteFailed, write_text

    long = tmp_path / ("y" * 250 + ".json")  # the file system allows 255 bytes: the temporary name must fit too
    write_text(long, "{}")
    assert long.read_text() == "{}"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(WriteFailed, match=r"afile/out.json: could not write it"):
        write_text(tmp_path / "afile" / "out.json", "x")


def test_summary_replaces_only_its_own_page_without_overwrite(tmp_path, monkeypatch, capsys):
    """A file that quotes the generated-by line somewhere (a user's notes) is not the tool's page."""
    from fraglib_study.pages.summary import GENERATED, main, written_here

    notes = tmp_path / "notes.md"
    notes.write_text(f"# My notes\n\nThe page says:\n{GENERATED}\n")
    assert not written_here(notes)
    page = tmp_path / "page.md"
    page.write_text(f"# Results\n\n{GENERATED}\n\nold\n")
    assert written_here(page)
    with pytest.raises(SystemExit):
        main(["--out", str(notes)])
    assert "refusing to replace a file fraglib_study.pages.summary did not write" in capsys.readouterr().err
    assert notes.read_text().startswith("# My notes")


@pytest.mark.parametrize("value", [340.0, -1.0, float("nan"), float("inf")])
def test_a_run_summary_with_impossible_figures_is_named(tmp_path, value):
    """summary, --csv, the claims and the pages read run summaries through read_summary: R@K beyond [0, 100], a
    rank below 1 or a non-finite figure is an error naming the file and the field, not a row on a page."""
    from fraglib_study.report.loading import read_summary

    m = {"system": "x", "seeds": [0], "annotation": {"r1": 10.0, "r5": 20.0, "r10": 30.0, "mean_rank": 4.0},
         "search": {"r1": 10.0, "r5": 20.0, "r10": 30.0, "mean_rank": 4.0}}  # fmt: skip
    key = "mean_rank" if value < 0 else "r1"
    m["annotation"][key] = value
    f = tmp_path / "metrics.json"
    f.write_text(json.dumps(m).replace("NaN", "NaN"))
    with pytest.raises(ValueError, match=rf"metrics.json: annotation.{key}=.* is impossible"):
        read_summary(f)


def test_rerun_refuses_a_unit_no_run_has_and_a_meaningless_z(tmp_path, capsys):
    from fraglib_study.audit.rerun import main, one_unit

    run = tmp_path / "runs" / "full"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"seeds": [0], "units": ["0", "0r1"]}))
    with pytest.raises(ValueError, match=r"training run 'nosuch': no run of .* has it \(they have 0, 0r1\)"):
        one_unit(tmp_path / "runs", "nosuch", tmp_path / "cut")
    for z in ("-1", "nan", "0"):
        with pytest.raises(SystemExit):
            main([str(tmp_path / "runs"), "--z-max", z, "--no-claims"])
        assert "--z-max" in capsys.readouterr().err
