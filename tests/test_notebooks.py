"""Every notebook executes top to bottom with tiny parameters (papermill, kernel `fraglib`)."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def tiny_parameters(name: str, synth: Path) -> dict:
    """Parameters that make notebook ``name`` run in seconds. Every notebook must have an entry."""
    table = {
        "data_report": {"data_dir": str(synth), "n_show": 3, "sample_seed": 1},
        "text_report": {"dataset_dir": str(synth), "published_key": "pascal1k", "n_examples": 2},
    }
    assert name in table, f"notebooks/{name}.ipynb has no tiny parameters in tests/test_notebooks.py"
    return table[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tiny_text, tmp_path, monkeypatch):
    from fraglib.notebook import run_notebook

    synth, _ = tiny_text
    monkeypatch.chdir(ROOT)
    html = run_notebook(ROOT / "notebooks" / f"{name}.ipynb", tmp_path / f"{name}.html",
                        tiny_parameters(name, synth), executed=tmp_path / f"{name}.ipynb")
    nb = json.loads((tmp_path / f"{name}.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("fraglib runs on" in "".join(o.get("text", "")) for o in outputs), "device line missing"
    page = html.read_text()
    assert "<details" in page and "data:image/png;base64" in page  # code folded, figures embedded
