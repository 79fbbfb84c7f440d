"""DVC dependencies that cannot lie: every stage of every dvc.yaml depends on each fraglib file its command runs.

A stage's command runs ``python -m fraglib.<module>`` (a notebook through ``python -m fraglib_study notebook``, whose code
cells' imports count too). Its code is the transitive closure of the fraglib modules those import (a static scan
of every import statement, function-local ones included, relative ones resolved; a package's ``__init__.py``
runs on import, so the registry ``fraglib.systems`` pulls in every system), plus the package data files they
name (``published_results.yaml``, the HTML templates). A dep that is a folder covers every file under it.
"""

from __future__ import annotations

import ast
import json
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fraglib", "fraglib_study")
# the version string and an empty package file: they import nothing, every stage would list them
EXEMPT = {"fraglib/__init__.py", "fraglib_study/__init__.py"}


def module_file(name: str) -> Path | None:
    """The file that runs on ``import name`` (a package's ``__init__.py``), or None outside fraglib."""
    if name.split(".")[0] not in PACKAGES:
        return None
    p = ROOT.joinpath(*name.split("."))
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").exists() else None


def _dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def statements(tree: ast.AST, package: str = "") -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import statement of ``tree``, function-local ones included: ``import a.b``
    is ``("a.b", [])``, ``from a import b, c`` is ``("a", ["b", "c"])``; ``package`` resolves relative imports."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


def imported(tree: ast.AST, package: str = "") -> set[str]:
    """Every module ``tree`` imports anywhere (``from a import b`` yields ``a`` and ``a.b``); ``package``
    resolves relative imports."""
    names = {n for base, what in statements(tree, package) for n in [base] + [f"{base}.{w}" for w in what]}
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, len(n.split(".")) + 1)}  # parents run too


@lru_cache(maxsize=None)
def _scan(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(modules imported, string constants) of one fraglib file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return frozenset(imported(tree, package)), frozenset(consts)


def _data_files() -> dict[str, Path]:
    """Package data by name: every non-Python file or non-package folder under fraglib/."""
    return {
        p.name: p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*")
        if "__pycache__" not in p.parts and p.suffix not in (".py", ".pyc") and not (p / "__init__.py").exists()
    }


def study_commands() -> dict[str, tuple[str, str]]:
    """``python -m fraglib_study``'s commands (fraglib_study/__main__.py: it imports a command's module by name, so
    the scan reads the table rather than the imports)."""
    from fraglib_study.__main__ import COMMANDS

    return COMMANDS


def notebook_imports(notebook: Path) -> set[str]:
    """The modules a notebook's code cells import (IPython magics and shell lines left out)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    src = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return imported(ast.parse("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))))


def stage_code(cmd: str, wdir: Path = ROOT) -> set[str]:
    """Project-relative paths of the code and package data ``cmd`` runs: its fraglib modules, their import
    closure, the files they name, and the notebooks it executes. Raises ValueError for a python command
    that is not ``python -m fraglib.…`` (this test could not see its code)."""
    words = shlex.split(cmd)
    todo: set[str] = set()
    needed: set[Path] = set()
    for i, w in enumerate(words):
        if w in ("python", "python3") or w.endswith("/python"):
            if words[i + 1 : i + 2] != ["-m"] or words[i + 2].split(".")[0] not in PACKAGES:
                raise ValueError(f"{cmd!r}: a python command this test cannot follow (not python -m fraglib.…)")
            mod, rest = words[i + 2], i + 3
            todo |= imported(ast.parse(f"import {mod}")) | {f"{mod}.__main__"}
            if mod == "fraglib_study":  # the study's one command line: COMMAND names the module whose main runs
                mod, rest = study_commands()[words[i + 3]][0], i + 4
                todo |= imported(ast.parse(f"import {mod}"))
            if mod == "fraglib_study.report.notebook":
                nb = (wdir / words[rest]).resolve()
                needed.add(nb)
                todo |= notebook_imports(nb)
    data, seen = _data_files(), set()
    while todo:
        name = todo.pop()
        f = module_file(name)
        if f is None or f in seen:
            continue
        seen.add(f)
        mods, consts = _scan(f)
        todo |= mods
        needed |= {data[c] for c in consts if c in data}
    return {p.relative_to(ROOT).as_posix() for p in needed | seen} - EXEMPT


def uncovered(cmd: str, deps: list[str], wdir: Path = ROOT) -> list[str]:
    """The files of :func:`stage_code` that none of ``deps`` (paths relative to ``wdir``) is or holds."""
    have = [(wdir / d).resolve().relative_to(ROOT).as_posix() for d in deps]
    return sorted(f for f in stage_code(cmd, wdir) if not any(f == d or f.startswith(d + "/") for d in have))


def test_every_stage_depends_on_all_the_code_it_runs():
    """Every stage of every dvc.yaml (foreach expanded by DVC), checked against its command's code."""
    from dvc.repo import Repo

    problems = []
    with Repo(str(ROOT)) as repo:
        stages = list(repo.index.stages)
        assert len(stages) > 30, "the stages of every dvc.yaml"
        for stage in stages:
            cmd = stage.cmd if isinstance(stage.cmd, str) else " && ".join(stage.cmd)
            missing = uncovered(cmd, [d.fs_path for d in stage.deps], Path(stage.wdir))  # absolute dep paths
            if missing:
                problems.append(f"{stage.addressing}: {', '.join(missing)}")
    assert not problems, "stages whose deps miss code they run:\n" + "\n".join(problems)


def test_no_stage_lists_code_it_does_not_run():
    """A package folder or module in a stage's deps that its command's code never imports is idle: it marks the
    stage stale for edits that cannot change its outputs (and the lock asks to re-record it for nothing). Every
    stage of every dvc.yaml, one template per foreach."""
    import yaml

    idle = []
    for f in [ROOT / "dvc.yaml", *sorted(ROOT.glob("studies/*/dvc.yaml"))]:
        for name, stage in yaml.safe_load(f.read_text())["stages"].items():
            s = stage.get("do", stage)
            code = [d for d in s.get("deps") or [] if d.split("/")[0] in PACKAGES]
            for d in code:
                if not uncovered(s["cmd"], [x for x in s["deps"] if x != d]):
                    idle.append(f"{f.relative_to(ROOT)}:{name}: {d}")
    assert not idle, "deps no code of the stage imports:\n" + "\n".join(idle)


def _copied_stages() -> dict[str, dict]:
    """Some stages of dvc.yaml as written (``${…}`` left in place: the code deps name no variable)."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return {
        n: stages[n].get("do", stages[n]) for n in ("train_synthetic", "captions_synthetic", "results_report", "index")
    }


CASES = [(n, d) for n, s in _copied_stages().items() for d in s["deps"] if d.split("/")[0] in PACKAGES]


def test_the_scan_follows_registry_local_and_relative_imports():
    code = stage_code("python -m fraglib_study captions --run-dir runs/synthetic/stt")
    assert {
        "fraglib_study/experiments/captions.py",
        "fraglib/systems/__init__.py",
        "fraglib/systems/gru.py",
        "fraglib/systems/cnn.py",
    } <= code
    report = stage_code("python -m fraglib_study notebook notebooks/results_report.ipynb reports/r.html -p a b")
    assert {
        "notebooks/results_report.ipynb",
        "fraglib_study/reference/published_results.yaml",
        "fraglib_study/templates",
    } <= report
    tree = ast.parse("def f():\n    from .gru import Gru\n    import fraglib.cnn as c\n")
    assert {"fraglib.systems.gru", "fraglib.cnn", "fraglib"} <= imported(tree, "fraglib.systems")


@pytest.mark.parametrize("stage,drop", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_a_stage_missing_one_dep_is_caught(stage, drop):
    """A copied stage definition passes whole; without any one of its code deps the check names what that
    dep held (so no listed code dep is idle either)."""
    s = _copied_stages()[stage]
    assert uncovered(s["cmd"], s["deps"]) == []
    missing = uncovered(s["cmd"], [d for d in s["deps"] if d != drop])
    assert missing and all(m == drop or m.startswith(drop + "/") for m in missing)


def test_a_python_command_the_scan_cannot_follow_is_refused():
    with pytest.raises(ValueError, match="cannot follow"):
        stage_code("python scripts/train.py --run full")


@pytest.mark.parametrize(
    "dvc_file, stage",
    [
        ("dvc.yaml", "index"),
        ("dvc.yaml", "results_report"),
        ("studies/synthetic/dvc.yaml", "results_report_extended"),
        ("studies/pascal1k/dvc.yaml", "results_report"),
        ("studies/pascal1k/dvc.yaml", "fight_report"),
        ("studies/flickr8k/dvc.yaml", "report"),
    ],
)
def test_a_systems_edit_leaves_the_index_and_the_pages_up_to_date(dvc_file, stage):
    """`dvc status` marks a stage changed only when one of its deps changed: docs/results.md with the index, the
    results pages (their figures drawn from figure data, not checkpoints), the fight page and Flickr8K's page run no
    system and no trainer, and no dep of theirs holds one (issue #78), so an edit to ``fraglib/systems/vse.py`` or
    ``fraglib/run/train.py`` leaves them up to date."""
    import yaml

    s = yaml.safe_load((ROOT / dvc_file).read_text())["stages"][stage]
    code = stage_code(s["cmd"], (ROOT / dvc_file).parent / s.get("wdir", "."))
    for edited in (
        "fraglib/systems/vse.py",
        "fraglib/systems/scan.py",
        "fraglib/run/train.py",
        "fraglib/run/evaluate.py",
    ):
        assert edited not in code, f"{stage} runs {edited}"
        assert not [d for d in s["deps"] if edited == d or edited.startswith(d.rstrip("/") + "/")], (stage, edited)
