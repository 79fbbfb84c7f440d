"""Datasets from data (issue #78, item 6): readers registered by name, dataset sections found by their root, and no
dataset's name typed in package code outside its reader."""

from __future__ import annotations

import ast
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fraglib.core.config import ConfigError, dataset_sections
from fraglib.data import readers
from fraglib.data.__main__ import main as data_main

from conftest import ROOT

# where a reader's name may stand as a string in package code besides its own module (fraglib/data/readers/<name>.py)
# and the module that implements it (fraglib/data/<name>.py), each with why
NOT_A_DATASET = {
    "fraglib/core/config.py": "the synthetic generator's own params.yaml section (SynthConfig), not a dataset's",
    "fraglib_study/schema.py": "the same section checked against SynthConfig's fields",
    "fraglib_study/audit/claims.py": "the papers' table vocabulary (published_results.yaml keys, mscoco included)",
}
BENCH = "fraglib_study/bench/"  # benchmarks measure named data by design: their JSON entries name it


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, kinds)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }


def test_no_dataset_name_is_typed_outside_its_reader():
    names = set(readers.names())
    assert {"pascal1k", "flickr8k", "synthetic", "karpathy"} <= names
    hits = []
    for path in sorted([*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_A_DATASET or rel.startswith(BENCH):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docs:
                own = rel in (f"fraglib/data/readers/{node.value}.py", f"fraglib/data/{node.value}.py")
                if not own and not (rel == "fraglib/data/precomp.py" and node.value == "precomp"):
                    hits.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not hits, "dataset names typed outside their readers: " + ", ".join(hits)


def test_every_reader_has_its_command_title_and_credit_and_an_unknown_one_is_named():
    for name in readers.names():
        module = readers.reader(name)
        assert callable(module.main) and isinstance(module.TITLE, str) and module.TITLE
        assert isinstance(module.CREDIT, str)
    assert readers.title("pascal1k") == "Pascal1K" and readers.title("mydata") == "mydata"
    assert readers.credit("mydata") == "" and "Pascal" in readers.credit("pascal1k")
    with pytest.raises(ConfigError, match=r"unknown dataset reader 'pascl1k' \(did you mean 'pascal1k'\?\)"):
        readers.reader("pascl1k")
    with pytest.raises(ConfigError, match="no module 'nosuch'"):
        readers.reader("nosuch.reader")


def test_the_command_lists_the_readers_and_refuses_a_download_a_reader_lacks(capsys):
    data_main([])
    listing = capsys.readouterr().out
    assert all(f"  {n} " in listing for n in readers.names())
    with pytest.raises(SystemExit, match="reader 'karpathy' has no download"):
        data_main(["download", "karpathy", "--out", "x"])
    with pytest.raises(SystemExit, match="unknown dataset reader 'karpaty'"):
        data_main(["karpaty", "--out", "x"])


READER = '''
"""A reader kept outside fraglib: every line of a text file is an image's one caption."""
from pathlib import Path

from fraglib.core.outputs import command
from fraglib.data import convert
from fraglib.data.dataset import Dataset

TITLE = "Lines"
CREDIT = "made up for a test"


@command
def main(argv=None):
    ap = convert.parser("lines", __doc__)
    ap.add_argument("--root", required=True)
    args = ap.parse_args(argv)
    lines = Path(args.root, "captions.txt").read_text().splitlines()
    images = [{"imgid": i, "filename": f"{i}.png", "split": "train"} for i in range(len(lines))]
    sentences = [{"sentid": i, "imgid": i, "raw": t, "tokens": t.split()} for i, t in enumerate(lines)]
    convert.write(ap, args, Dataset("lines", Path(args.root), images, sentences))
'''


def test_a_reader_outside_fraglib_converts_and_its_section_is_a_dataset(tmp_path, monkeypatch):
    """A new dataset needs no edit of fraglib: a module of one's own is a reader by its dotted name, and a params.yaml
    section holding a root (and naming that reader) is a dataset the schema checks like Pascal1K's."""
    from fraglib_study.schema import read_checked

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "lines.py").write_text(textwrap.dedent(READER))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "captions.txt").write_text("a red circle\na blue square\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data_main(["mine.lines", "--root", str(tmp_path / "src"), "--out", str(tmp_path / "data")])
    got = json.loads((tmp_path / "data" / "dataset.json").read_text())
    assert got["dataset"] == "lines" and [im["sentences"][0]["raw"] for im in got["images"]] == [
        "a red circle",
        "a blue square",
    ]
    assert readers.title("mine.lines") == "Lines"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["lines"] = {"root": str(tmp_path / "src"), "reader": "mine.lines", "runs": ["full"], "splits": [0]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert "lines" in dataset_sections(read_checked(tmp_path / "params.yaml"))
    params["lines"]["reader"] = "mine.nosuch"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"lines\.reader: dataset reader 'mine.nosuch': no module"):
        read_checked(tmp_path / "params.yaml")
    sys.modules.pop("mine.lines", None)


def test_confirm_reads_a_new_datasets_protocol_from_its_pipeline(tmp_path):
    """The data stages of a dataset to confirm on: the data stage reading its partition key, then those after it."""
    from fraglib_study.experiments.confirm import partition_key, protocol

    (tmp_path / "studies" / "lines").mkdir(parents=True)
    stages = {
        "prepare": {
            "cmd": "python -m fraglib.data mine.lines --root ${lines.root} --seed ${lines.seed} --out data/lines",
            "params": ["lines.root", "lines.seed"],
            "outs": ["data/lines/dataset.json"],
        },
        "report": {"cmd": "python -m fraglib_study notebook n.ipynb r.html", "deps": ["data/lines/dataset.json"]},
        "parse": {
            "cmd": "python -m fraglib.text parse --dataset-dir data/lines",
            "deps": ["data/lines/dataset.json"],
            "outs": [{"data/lines/parse.conllu": {"cache": True}}],
        },
        "fragments": {"cmd": "python -m fraglib.text fragments --dataset-dir data/lines", "deps": ["data/lines"]},
        "train": {"cmd": "python -m fraglib_study study --run full", "deps": ["data/lines"], "params": ["lines.seed"]},
    }
    (tmp_path / "studies" / "lines" / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    params = {"lines": {"root": "r", "seed": 0}}
    assert partition_key(params, "lines") == "lines.seed"
    assert partition_key({"lines": {"root": "r", "folds": 5}}, "lines") == "lines.partition"
    pipeline, _, names = protocol(tmp_path, "lines", params)
    assert pipeline == "studies/lines/dvc.yaml" and names == ["prepare", "parse", "fragments"]
    with pytest.raises(ConfigError, match="no pipeline .* reading other.seed"):
        protocol(tmp_path, "other", {"other": {"root": "r"}})


def test_the_studies_titles_come_from_their_pipelines():
    """Every study and page of this project has a title in its stage's meta (none falls back to a folder name)."""
    from fraglib_study.report.registry import studies

    found = studies(ROOT)
    assert [s.name for s in found] == ["synthetic", "synthetic_extended", "pascal1k", "flickr8k"]
    for s in found:
        assert s.title != s.name and s.order < float("inf"), s.name
        for p in s.pages:
            assert p.title[0] != Path(p.html).stem and p.title[1], p.html


def test_a_runs_folder_names_its_data_through_its_study(tmp_path, capsys, monkeypatch):
    """``python -m fraglib_study rerun RUNS_DIR`` compares the claims on RUNS_DIR's study's data (it assumed synthetic);
    a folder no study names needs ``--dataset``."""
    from fraglib_study.audit.rerun import main, study_dataset

    assert study_dataset("runs/synthetic", ROOT) == "synthetic"
    assert study_dataset("runs/pascal1k_folds", ROOT) == "pascal1k" and study_dataset(tmp_path, ROOT) is None
    shutil.copytree(ROOT / "runs" / "synthetic" / "devise", tmp_path / "runs" / "devise")
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as out:
        main([str(tmp_path / "runs"), "--reference-dir", str(tmp_path / "runs"), "--params", str(ROOT / "params.yaml")])
    assert out.value.code == 2 and "no study of this project has it as its runs folder: name --dataset" in (
        capsys.readouterr().err
    )
