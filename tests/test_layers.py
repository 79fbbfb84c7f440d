"""The package's layers: every module imports only its own layer or those below, with no circle — function-local
imports included (a static scan of every import statement). The table is docs/architecture.md's."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from test_dvc_deps import statements

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "fraglib"

# bottom first; a module belongs to the last layer whose prefix names it (its own name or a package above it)
LAYERS = (
    (
        "core",
        (
            "fraglib",
            "fraglib.config",
            "fraglib.outputs",
            "fraglib.device",
            "fraglib.reference",
            "fraglib.batches",
            "fraglib.notebook",
            "fraglib.pagetext",
            "fraglib.progress",
        ),
    ),
    ("metrics", ("fraglib.metrics", "fraglib.hubness", "fraglib.distributed")),
    ("data", ("fraglib.data",)),
    ("text, vision", ("fraglib.text", "fraglib.vision")),
    ("systems", ("fraglib.systems",)),
    ("inputs", ("fraglib.inputs", "fraglib.checkpoint")),
    ("evaluate", ("fraglib.evaluate",)),
    ("train", ("fraglib.train",)),
    (
        "experiment",
        (
            "fraglib.params",
            "fraglib.study",
            "fraglib.search",
            "fraglib.fusion",
            "fraglib.captions",
            "fraglib.alignment",
            "fraglib.explore",
            "fraglib.confirm",
        ),
    ),
    (
        "report",
        (
            "fraglib.results",
            "fraglib.studies",
            "fraglib.tables",
            "fraglib.plots",
            "fraglib.summary",
            "fraglib.index",
            "fraglib.reports",
            "fraglib.claims",
            "fraglib.costs",
            "fraglib.facts",
            "fraglib.explorer_page",
            "fraglib.rerun",
            "fraglib.lockstep",
            "fraglib.figures",
        ),
    ),
    ("bench", ("fraglib.bench",)),
)


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package by its ``__init__``)."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def layer_of(name: str) -> int:
    """Index in :data:`LAYERS` of the most specific prefix naming ``name``; KeyError for a module in no layer."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".")) and (best is None or len(pre) > best[1]):
                best = (i, len(pre))
    if best is None:
        raise KeyError(name)
    return best[0]


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
    assert not missing, f"modules in no layer of LAYERS (add them to docs/architecture.md and here): {missing}"


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


def test_the_architecture_page_lists_the_layers_of_this_test():
    """docs/architecture.md's layer table names the same modules, layer by layer, bottom first."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|", text, re.M)
    got = [(name.strip(), tuple(sorted(re.findall(r"`([\w.]+)`", mods)))) for _, name, mods in rows]
    assert got == [(name, tuple(sorted(p))) for name, p in LAYERS]


def test_data_stages_start_without_the_training_stack():
    """Generating images, parsing text and extracting features import neither the systems nor the trainer."""
    code = (
        "import sys, fraglib.data.synthetic, fraglib.data.__main__, fraglib.text.build, fraglib.vision.features;"
        "print(sorted(m for m in sys.modules if m.startswith(('fraglib.systems', 'fraglib.train', 'fraglib.params',"
        " 'fraglib.evaluate', 'fraglib.inputs'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out


def test_the_report_layer_imports_no_trainer_and_no_system():
    """Reading committed results (tables, claims, facts, the index) loads neither the trainer nor a system: a change
    to a system's code does not touch what renders the pages (issue #78). torch: tests/test_light_reports.py."""
    import subprocess
    import sys

    code = (
        "import sys; import fraglib.tables, fraglib.claims, fraglib.facts, fraglib.index; "
        "print(sorted(m for m in sys.modules if m in ('fraglib.train', 'fraglib.study', 'fraglib.evaluate') "
        "or m.startswith('fraglib.systems')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out
