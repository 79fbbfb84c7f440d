"""The report layer without torch (issue #78): every module of the report layer imports, and a section of
docs/results.md builds from the committed results, in a Python where torch cannot be imported.

torch is blocked the way a machine without it behaves: an import finder that raises ModuleNotFoundError, not a
``sys.modules["torch"] = None`` entry (scipy's array-API helpers read ``sys.modules["torch"].Tensor`` whenever
the key exists, so that entry breaks scipy.stats where a missing torch does not).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_layers import modules

ROOT = Path(__file__).resolve().parents[1]

NO_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)

sys.meta_path.insert(0, NoTorch())
"""
# the report module that needs torch by its job: figure_data scores the checkpoints for a page's figure data (the
# pages read those data, never a checkpoint)
NEEDS_TORCH = {"fraglib_study.report.figure_data"}
# what a report must not load: torch, and the trainer, the evaluation and the systems that come with it
HEAVY = ("torch", "fraglib.run.train", "fraglib_study.experiments.study", "fraglib.run.evaluate", "fraglib.systems")


def report_modules() -> list[str]:
    """Every module of the study's report, audit and pages floors (tests/test_layers.py), but :data:`NEEDS_TORCH`."""
    floors = tuple(f"fraglib_study.{f}." for f in ("report", "audit", "pages"))
    return sorted(m for m in modules() if m.startswith(floors) and m not in NEEDS_TORCH)


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def loaded_heavy() -> str:
    """Code printing the :data:`HEAVY` modules the process has loaded."""
    return f"print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {HEAVY!r})))\n"


def test_the_block_stops_torch():
    out = run_without_torch("import torch\n")
    assert out.returncode != 0 and "blocked by the test" in out.stderr, out.stderr


def test_the_report_layer_imports_and_builds_a_table_without_torch():
    """Every report module imports, and the synthetic study's section of docs/results.md (retrieval, hubness,
    captions tables: :func:`fraglib_study.pages.summary.study_markdown`) builds from runs/synthetic, with torch blocked."""
    mods = report_modules()
    assert {
        "fraglib_study.report.tables",
        "fraglib_study.report.loading",
        "fraglib_study.report.uncertainty",
        "fraglib_study.audit.claims",
        "fraglib_study.pages.index",
        "fraglib_study.pages.summary",
    } <= set(mods)
    code = (
        f"import {', '.join(mods)}\n"
        "from pathlib import Path\n"
        "from fraglib_study.params import read_params\n"
        "from fraglib_study.report.loading import run_labels\n"
        "from fraglib_study.report.registry import studies\n"
        "from fraglib_study.pages.summary import study_markdown\n"
        "params = read_params('params.yaml')\n"
        "study = [s for s in studies(Path('.')) if s.name == 'synthetic'][0]\n"
        "text = study_markdown(Path('.'), study, params, run_labels(params))\n"
        "assert '| run | system |' in text and 'fr_best' in text, text[:2000]\n" + loaded_heavy()
    )
    out = run_without_torch(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.mark.parametrize("call", ["fraglib_study.pages.index.provenance()"])
def test_the_index_provenance_needs_no_torch(call):
    """It named the rendering machine's device through fraglib.core.device (torch); the page computes on none."""
    out = run_without_torch(f"import fraglib_study.params, fraglib_study.pages.index\n{call}\n" + loaded_heavy())
    assert out.returncode == 0, out.stderr[-3000:]


def test_the_whole_index_and_docs_results_build_without_torch(tmp_path):
    """What the index and summary stages run: docs/results.md's text and the whole entry page, torch blocked."""
    out = run_without_torch(
        "from fraglib_study.pages.index import build\n"
        "from fraglib_study.pages.summary import main\n"
        f"build({str(tmp_path / 'index.html')!r})\n"
        f"main(['--out', {str(tmp_path / 'results.md')!r}])\n" + loaded_heavy()
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
    assert "<h2>" in (tmp_path / "index.html").read_text() and "| run |" in (tmp_path / "results.md").read_text()


def notebook_import_lines(notebook: Path) -> str:
    """Every import statement of a notebook's code cells (those inside branches too), one per line."""
    import ast
    import json

    lines = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(ln for ln in "".join(cell["source"]).splitlines() if not ln.lstrip().startswith(("%", "!")))
        lines += [ast.unparse(n) for n in ast.walk(ast.parse(code)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("notebook", ["results_report", "training_report"])
def test_a_results_page_imports_no_torch(notebook):
    """Every import of the results and training notebooks runs with torch blocked and loads no trainer, evaluation
    or system: the pages draw each figure from their study's figure data (fraglib_study/report/figure_data.py), never
    from a checkpoint, so a clone renders it without torch (issue #78, item 3)."""
    code = notebook_import_lines(ROOT / "notebooks" / f"{notebook}.ipynb")
    assert "fraglib_study.report.notebook" in code  # the test reads the cells
    out = run_without_torch(code + loaded_heavy())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
