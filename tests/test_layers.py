"""The packages' layers are their folders: every module imports only its own folder or the folders below it,
with no circle — function-local imports included (a static scan of every import statement). The library
(``fraglib``) never imports the study (``fraglib_study``). docs/architecture.md draws the same floors."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

from test_dvc_deps import statements

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fraglib", "fraglib_study")  # the library first: the study sits on top of it
# each package's floors, bottom first: a module's floor is its folder (a module beside __init__.py: floor "")
FLOORS = {
    "fraglib": ("", "core", "metrics", "data", "text vision", "systems", "run"),
    "fraglib_study": ("", "reference", "experiments", "report", "audit", "pages", "bench"),
}
LAYERS = tuple((f"{pkg}/{floor}".rstrip("/"), floor) for pkg in PACKAGES for floor in FLOORS[pkg])


@functools.cache
def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of both packages (a package by its ``__init__``)."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def folder_of(name: str) -> tuple[str, str]:
    """(package, folder) of a dotted module name: the folder under the package it lives in ("" beside its
    ``__init__``)."""
    pkg, *rest = name.split(".")
    p = modules()[name]
    return pkg, (rest[0] if len(p.relative_to(ROOT / pkg).parts) > 1 else "")


def layer_of(name: str) -> int:
    """Index in :data:`LAYERS` of ``name``'s floor; KeyError for a module in a folder that is no floor."""
    pkg, folder = folder_of(name)
    for i, (where, floors) in enumerate(LAYERS):
        if where.split("/")[0] == pkg and folder in floors.split(" "):
            return i
    raise KeyError(name)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``path`` imports anywhere: ``from a import b`` is ``a.b`` when that is a module, else
    ``a``; relative imports resolved. A parent package that Python runs on the way is not counted: only what the
    statement names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for base, what in statements(ast.parse(path.read_text(encoding="utf-8")), package):
        out |= {f"{base}.{w}" if f"{base}.{w}" in known else base for w in what} if what else {base}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_every_module_has_a_layer():
    missing = [m for m in modules() if not _has_layer(m)]
    assert not missing, f"modules in a folder that is no floor (add it to FLOORS and docs/architecture.md): {missing}"


def _has_layer(m: str) -> bool:
    try:
        layer_of(m)
        return True
    except KeyError:
        return False


def test_imports_go_down_only():
    """No module imports a layer above its own (the layer test's output lists each offending arrow)."""
    up = [
        f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert not up, "imports that climb a layer:\n" + "\n".join(up)


def test_no_import_circle():
    """No circle anywhere, within a layer too (Tarjan's strongly connected components of the import graph)."""
    g = graph()
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_library_never_imports_the_study():
    up = [
        f"{m} -> {t}"
        for m, targets in graph().items()
        if m.startswith("fraglib.")
        for t in targets
        if t.startswith("fraglib_study")
    ]
    assert not up, up


def test_the_architecture_page_draws_these_floors():
    """docs/architecture.md's tree names every floor of this test, bottom first, one line per folder."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    drawn = re.findall(r"^\s*(?:\d+\s+)?(\w+)/\s", tree, re.M)
    expected = [pkg if not f else f for pkg in PACKAGES for fl in FLOORS[pkg] for f in (fl.split(" ") if fl else [""])]
    assert drawn == expected, drawn


def test_data_stages_start_without_the_training_stack():
    """Generating images, parsing text and extracting features import neither the systems nor the trainer."""
    code = (
        "import sys, fraglib.data.synthetic, fraglib.data.__main__, fraglib.text.build, fraglib.vision.features;"
        "print(sorted(m for m in sys.modules if m.startswith(('fraglib.systems', 'fraglib.run.train', 'fraglib_study.params',"
        " 'fraglib.run.evaluate', 'fraglib.run.inputs'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out


def test_the_report_layer_imports_no_trainer_and_no_system():
    """Reading committed results (tables, claims, facts, the index) loads neither the trainer nor a system: a change
    to a system's code does not touch what renders the pages (issue #78). torch: tests/test_light_reports.py."""
    import subprocess
    import sys

    code = (
        "import sys; import fraglib_study.params, fraglib_study.report.loading, fraglib_study.report.uncertainty, fraglib_study.report.tables, fraglib_study.audit.claims, "
        "fraglib_study.audit.facts, fraglib_study.pages.index, fraglib_study.pages.summary; "
        "print(sorted(m for m in sys.modules if m in ('fraglib.run.train', 'fraglib_study.experiments.study', 'fraglib.run.evaluate', "
        "'fraglib_study.schema', 'fraglib_study.experiments.captions') "
        "or m.startswith('fraglib.systems')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


ENTRY_POINTS = ("fraglib.data", "fraglib.text", "fraglib.vision", "fraglib.run", "fraglib_study")


def test_five_entry_points_and_every_command_uses_them():
    """Only the packages in :data:`ENTRY_POINTS` run under ``python -m`` (a ``__main__.py``; no module keeps an
    ``if __name__ == "__main__"`` of its own), and every command the stages, the Makefile, the notebooks and the docs
    give calls one of them; a ``fraglib_study`` command is one of its COMMANDS."""
    from fraglib_study.__main__ import COMMANDS

    runnable = {name.removesuffix(".__main__") for name, p in modules().items() if p.name == "__main__.py"}
    runnable |= {
        n for n, p in modules().items() if p.name != "__main__.py" and '__name__ == "__main__"' in p.read_text()
    }
    assert runnable == set(ENTRY_POINTS)
    texts = [*ROOT.glob("**/dvc.yaml"), ROOT / "Makefile", ROOT / "README.md", *ROOT.glob("docs/*.md")]
    texts += [
        *ROOT.glob("notebooks/*.ipynb"),
        *(ROOT / "fraglib").rglob("*.py"),
        *(ROOT / "fraglib_study").rglob("*.py"),
    ]
    bad = []
    for p in texts:
        if ".venv" in p.parts:
            continue
        for prog, rest in re.findall(r"python3? -m ((?:fraglib|fraglib_study)[\w.]*)(?:\s+([\w-]+))?", p.read_text()):
            if prog not in ENTRY_POINTS or (
                prog == "fraglib_study" and rest and not rest.isupper() and rest not in COMMANDS
            ):
                bad.append(f"{p.relative_to(ROOT)}: python -m {prog} {rest}")
    assert not bad, bad


def test_every_import_of_the_packages_names_what_is_there():
    """``from P import name`` (function-local ones included, in both packages and the notebooks) names a module of P or
    a name P defines: a move that left an import behind fails here, not when a rarely run branch reaches it."""
    import importlib
    import json

    sources = [(m, p.read_text(encoding="utf-8")) for m, p in modules().items()]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        sources.append((nb.name, "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!")))))
    known, missing = modules(), []
    for name, text in sources:
        package = name if known.get(name, Path()).name == "__init__.py" else name.rpartition(".")[0]
        for base, what in statements(ast.parse(text), package):
            if base.split(".")[0] not in PACKAGES:
                continue
            if base not in known:
                missing.append(f"{name}: no module {base}")
                continue
            for w in what:
                if f"{base}.{w}" not in known and not hasattr(importlib.import_module(base), w):
                    missing.append(f"{name}: from {base} import {w}")
    assert not missing, missing
