"""Every notebook executes top to bottom with tiny parameters (papermill, kernel `fraglib`)."""

import json
import re
from pathlib import Path

import pytest

from fraglib.run.inputs import DataPaths

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
REMOTE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)


def tiny_parameters(name: str, synth: Path, runs: Path) -> dict:
    """Parameters that make notebook ``name`` run in seconds. Every notebook must have an entry."""
    table = {
        "data_report": {"data_dir": str(synth), "n_show": 3, "sample_seed": 1},
        "text_report": {"dataset_dir": str(synth), "published_key": "pascal1k", "n_examples": 2},
        "vision_report": {
            "dataset_dir": str(synth),
            "features_dir": str(synth / "features"),
            "truth_file": str(synth / "ground_truth.json"),
            "n_show": 2,
        },
        "training_report": {
            "run_dir": str(runs / "full"),
            "figures_dir": str(runs / "figures"),  # tiny_figures
            "truth_file": str(synth / "ground_truth.json"),
            "search_table": str(runs / "search.csv"),
            "n_boot": 50,
        },
        "fight_report": {
            "runs_dir": str(runs),
            "folds_dir": str(runs),  # the tiny study stands in for the folds: the sections on the folds execute too
            "dataset_dir": str(synth),
            "params_file": str(runs / "params.yaml"),
            "n_boot": 50,
            "fight": {
                "ladder": ["random", "full"],
                "baselines": ["devise", "dtrnn", "not_run"],
                "searches": [str(runs / "search.csv"), "missing.csv"],
                "fusions": ["fz", "not_fused"],
                "attempts": [str(runs / "search.csv"), "missing.csv"],
                "after": ["random", "not_trained"],  # a run after the papers against the fight, and one never trained
            },
        },
        "text_only_report": {
            "runs": {"Tiny": str(runs / "text_only" / "a"), "Other": str(runs / "text_only" / "b")},
            "conversion_file": "",
            "n_examples": 2,
        },
        "results_report": {
            "runs_dir": str(runs),
            "dataset_dir": str(synth),
            "truth_file": str(synth / "ground_truth.json"),
            "params_file": str(runs / "params.yaml"),
            "breakdown_runs": ["devise"],
            "n_boot": 50,
            "n_examples": 1,
            "parse_file": str(synth / "parse.conllu"),
            "published_dataset": "pascal1k",
            "figures_dir": str(runs / "figures"),  # tiny_figures: the page draws every figure from it
        },
    }
    assert name in table, f"notebooks/{name}.ipynb has no tiny parameters in tests/test_notebooks.py"
    return table[name]


def text_only_runs(synth: Path, runs: Path) -> None:
    """``runs/text_only/a``: the text-only STT run on the tiny data, scored in domain and, re-encoded,
    as a transfer to "Other" (the same captions); ``b`` is not trained (its cells show as not scored)."""
    from fraglib_study.experiments.captions import java_missing, run_captions
    from fraglib_study.experiments.study import run_study
    from tests.conftest import tiny_params

    if java_missing():
        pytest.skip(java_missing())
    a = runs / "text_only" / "a"
    if (a / "transfer_other.json").exists():
        return
    run_study(
        DataPaths(synth),
        "stt_text",
        tiny_params(stt_text={"system": "stt", "images": "none", "lambda_ic": 0.0, "lambda_sim": 0.0}),
        a,
    )
    run_captions(a, n_boot=10)
    run_captions(
        a,
        n_boot=10,
        paths=DataPaths(synth),
        parse_file=str(synth / "parse.conllu"),
        images="none",
        name="transfer_other",
    )


FIGURE_PAGES = ("results_report", "training_report")  # drawn from a study's figure data (tiny_figures here)


def tiny_figures(synth: Path, runs: Path) -> None:
    """``runs/figures``: the tiny study's figure data, as ``python -m fraglib_study figures`` writes a study's (its
    runs' checkpoints under ``models/<run>/seed0``, k = 3 for the 4 test images; Figure 5's triplets and the
    alignment accuracy against the ground truth; no SDT-RNN, so no relation norms: that section says what it lacks)."""
    import yaml

    from fraglib_study.report.figure_data import main

    if (runs / "figures" / "explorer.json").exists():
        return
    models = runs / "models"
    for run in ("full", "devise", "random", "dtrnn"):
        (models / run).mkdir(parents=True, exist_ok=True)
        if not (models / run / "seed0").exists():
            (models / run / "seed0").symlink_to(runs / run / "seeds" / "seed0")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"]["k"] = 3
    (runs / "figures_params.yaml").write_text(yaml.safe_dump(params))
    main(["--dataset-dir", str(synth), "--parse", str(synth / "parse.conllu"), "--models-dir", str(models),
          "--runs", "full,devise,random,dtrnn", "--align-runs", "full", "--map-runs", "devise",
          "--truth", str(synth / "ground_truth.json"), "--triplet-run", str(models / "full" / "seed0"),
          "--triplets", "amod circle red", "--params", str(runs / "figures_params.yaml"),
          "--out", str(runs / "figures")])  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tiny_full, tiny_study, tmp_path, monkeypatch):
    from fraglib_study.report.notebook import run_notebook

    synth = tiny_full
    if name == "text_only_report":
        text_only_runs(synth, tiny_study)
    if name in FIGURE_PAGES:
        tiny_figures(synth, tiny_study)
    if name == "fight_report" and not (tiny_study / "fz" / "metrics.json").exists():
        from fraglib.run.evaluate import EvalConfig
        from fraglib_study.experiments.fusion import fuse_runs

        ec = EvalConfig(n_boot=20, hubness=False)  # the tiny study's 4 test images
        fuse_runs(tiny_study / "full", tiny_study / "devise", tiny_study / "fz", weights=(0.0, 0.5, 1.0), ec=ec)
    monkeypatch.chdir(ROOT)
    html = run_notebook(
        ROOT / "notebooks" / f"{name}.ipynb",
        tmp_path / f"{name}.html",
        tiny_parameters(name, synth, tiny_study),
        executed=tmp_path / f"{name}.ipynb",
    )
    nb = json.loads((tmp_path / f"{name}.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    if name not in FIGURE_PAGES:  # they compute on no device: their figures come from figure data, no torch loaded
        assert any("fraglib runs on" in "".join(o.get("text", "")) for o in outputs), "device line missing"
    page = html.read_text()
    assert "<details" in page and re.search(r"data:image/(png|jpeg);base64", page)  # code folded, figures embedded
    assert len(page.encode()) < 1 << 20, f"{name}: page of {len(page.encode()) >> 10} KB"
    assert not REMOTE.findall(page), "the page must open offline"
    if name == "results_report":  # Figures 4 and 5, the gallery's thumbnails and the alignment table, from figure data
        assert "needs" not in re.sub(r"<[^>]+>", "", page).split("Qualitative retrieval")[1].split("Triplet search")[0]
        assert "Fragment alignment against the ground truth" in page and "amod(circle, red)" in page
    if (
        name == "fight_report"
    ):  # a run after the papers read against the fight in its own words; the untrained one named
        assert "random ahead in" in page and "not_trained" in page


@pytest.mark.slow
def test_notebook_runs_from_the_notebooks_folder_with_root_relative_paths(tiny_full, tmp_path, monkeypatch):
    """JupyterLab starts a kernel in notebooks/: parameters written relative to the project root
    (as every default is) must still resolve (fraglib_study.report.notebook.at_project_root)."""
    import os

    from fraglib_study.report.notebook import project_root, run_notebook

    assert project_root(ROOT / "notebooks") == ROOT
    monkeypatch.chdir(ROOT / "notebooks")
    rel = os.path.relpath(tiny_full, ROOT)  # relative to the root, not to notebooks/
    run_notebook(
        ROOT / "notebooks" / "data_report.ipynb",
        tmp_path / "d.html",
        {"data_dir": rel, "n_show": 2},
        executed=tmp_path / "d.ipynb",
    )
    nb = json.loads((tmp_path / "d.ipynb").read_text())
    assert not [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"] if o["output_type"] == "error"]


@pytest.mark.slow
def test_the_fight_report_without_runs_names_the_command_that_builds_them(tiny_study, tmp_path, monkeypatch):
    import papermill as pm

    from fraglib_study.report.notebook import run_notebook

    monkeypatch.chdir(ROOT)
    (tmp_path / "runs").mkdir()
    with pytest.raises(
        pm.PapermillExecutionError,
        match=r"MissingResults.*no run of the ladder .* build them with "
        r"`dvc repro studies/pascal1k/dvc.yaml`",
    ):
        run_notebook(
            ROOT / "notebooks" / "fight_report.ipynb",
            tmp_path / "f.html",
            {"runs_dir": str(tmp_path / "runs"), "params_file": str(tiny_study / "params.yaml")},
            executed=tmp_path / "f.ipynb",
        )


@pytest.mark.slow
def test_a_failed_notebook_never_leaves_a_page_that_looks_current(tmp_path):
    """A failing run once left the previous HTML in place, looking valid."""
    import nbformat
    import papermill as pm

    from fraglib_study.report.notebook import run_notebook

    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("raise ValueError(f'no usable data, x={x}')"),
    ]
    nbformat.write(nb, tmp_path / "n.ipynb")
    html = tmp_path / "n.html"
    html.write_text("<p>yesterday's results</p>")
    with pytest.raises(pm.PapermillExecutionError, match="no usable data, x=7"):
        run_notebook(tmp_path / "n.ipynb", html, {"x": 7}, executed=tmp_path / "n.out.ipynb")
    page = html.read_text()
    assert "yesterday" not in page and "An Exception was encountered" in page and "no usable data, x=7" in page


def test_a_busy_machine_gives_a_finished_cell_time_for_its_last_output(tmp_path, monkeypatch):
    """papermill fails a cell whose last output comes over 4 s after it finished ("Timeout waiting for IOPub
    output"), as on a loaded machine: pages are rendered with a longer wait."""
    import papermill as pm

    from fraglib_study.report.notebook import run_notebook

    seen = {}

    def execute(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("not run")

    monkeypatch.setattr(pm, "execute_notebook", execute)
    with pytest.raises(RuntimeError, match="not run"):
        run_notebook(tmp_path / "n.ipynb", tmp_path / "n.html")
    assert seen["iopub_timeout"] >= 60


def test_report_template_loads_nothing_remote():
    """The HTML template is offline: the lab template's CDN scripts (require.js, MathJax, Mermaid)."""
    import nbformat

    from fraglib_study.report.notebook import render_html

    assert REMOTE.findall('<script src="https://cdnjs.cloudflare.com/x.js"></script>')  # the check can fail
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("1 + 1")]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        nbformat.write(nb, f"{d}/n.ipynb")
        page = render_html(f"{d}/n.ipynb", f"{d}/n.html").read_text()
    assert "<details" in page and not REMOTE.findall(page)


def test_a_page_renders_to_the_same_bytes_whatever_id_papermill_drew(tmp_path):
    """papermill gives its injected-parameters cell a random id; the page does not carry it, so re-running
    a report stage on the same results leaves the committed page unchanged."""
    import nbformat

    from fraglib_study.report.notebook import render_html

    pages = []
    for cid in ("2c972dc8", "2e6ef344"):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("x = 1", id=cid)
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells = [nbformat.v4.new_markdown_cell("# t", id="md"), cell]
        nbformat.write(nb, tmp_path / f"{cid}.ipynb")
        pages.append(render_html(tmp_path / f"{cid}.ipynb", tmp_path / f"{cid}.html").read_bytes())
    assert pages[0] == pages[1] and b"2c972dc8" not in pages[0]


def test_every_notebook_names_the_command_that_builds_its_inputs():
    """Opened in JupyterLab on a fresh clone, a notebook whose inputs are DVC outputs not built yet stops
    in its first code cell with the `dvc repro` (or make) command that builds them (fraglib_study.report.notebook.needs;
    executed for the fight report above)."""
    for name in NOTEBOOKS:
        cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
        code = [
            c for c in cells if c["cell_type"] == "code" and "parameters" not in c.get("metadata", {}).get("tags", [])
        ]
        first = "".join(code[0]["source"])
        assert re.search(r"needs\(|raise FileNotFoundError", first) and re.search(
            r"dvc repro|make \w+|study_command\(", first
        ), name


def _png(img) -> str:
    import base64
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _figures_notebook(n_photos: int):
    """A notebook with ``n_photos`` noise pictures (photograph-like) and one line plot, as PNG outputs."""
    import nbformat
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    photos = [Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)) for _ in range(n_photos)]
    plot = Image.new("RGBA", (600, 300), (255, 255, 255, 255))
    ImageDraw.Draw(plot).line([(0, 290), (300, 10), (599, 200)], fill=(31, 119, 180, 255), width=3)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# figures")] + [
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={"image/png": _png(img)})])
        for img in [*photos, plot]
    ]
    return nb


def test_figures_go_beside_the_page_as_files_the_same_bytes_each_time(tmp_path):
    """No figure is embedded: photographs become JPEG, line art stays PNG, in ``<page>_files/figNN``; rendering
    again gives the same page and files, and a re-render with fewer figures removes the ones it no longer shows."""
    import nbformat
    from PIL import Image

    from fraglib_study.report.notebook import figure_files, figures_folder, render_html

    nbformat.write(_figures_notebook(2), tmp_path / "n.ipynb")
    html = tmp_path / "out" / "n.html"
    page = render_html(tmp_path / "n.ipynb", html).read_text()
    folder = figures_folder(html)
    assert folder == tmp_path / "out" / "n_files"
    assert page.count("<img") == 3 and 'src="data:image' not in page
    assert [p.name for p in figure_files(html)] == ["fig01.jpg", "fig02.jpg", "fig03.png"]
    for p in figure_files(html):
        assert f'src="n_files/{p.name}"' in page
    assert Image.open(folder / "fig01.jpg").format == "JPEG" and Image.open(folder / "fig03.png").size == (600, 300)
    first = {p.name: p.read_bytes() for p in figure_files(html)}
    (folder / "data.js").write_text("kept")  # not a figure (the explorer's scripts live in such a folder)
    assert render_html(tmp_path / "n.ipynb", html).read_text() == page
    assert {p.name: p.read_bytes() for p in figure_files(html)} == first
    nbformat.write(_figures_notebook(0), tmp_path / "n.ipynb")
    page = render_html(tmp_path / "n.ipynb", html).read_text()
    assert [p.name for p in figure_files(html)] == ["fig01.png"] and 'src="n_files/fig01.png"' in page
    assert (folder / "data.js").read_text() == "kept"


def test_a_page_image_is_jpeg_only_when_that_is_much_smaller():
    import base64
    import io

    import numpy as np
    from PIL import Image

    from fraglib_study.report.notebook import page_image

    assert page_image(b"\xff\xd8 any jpeg", "jpeg") == ("jpg", b"\xff\xd8 any jpeg")  # kept as it is
    flat = base64.b64decode(_png(Image.new("RGB", (500, 200), (240, 240, 240))))
    ext, data = page_image(flat, "png")
    assert ext == "png" and len(data) <= len(flat)
    noise = base64.b64decode(_png(Image.fromarray(np.random.default_rng(1).integers(0, 255, (200, 300, 3), np.uint8))))
    ext, data = page_image(noise, "png", quality=80)
    assert ext == "jpg" and 2 * len(data) <= len(noise) and Image.open(io.BytesIO(data)).size == (300, 200)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=150)  # a plot: antialiased lines and text, thousands of colours
    for k in range(6):
        ax.plot(np.sin(np.linspace(0, 6, 200) + k), label=f"run {k}")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    plot = buf.getvalue()
    full = io.BytesIO()
    Image.open(io.BytesIO(plot)).save(full, format="PNG", optimize=True)
    ext, data = page_image(plot, "png")
    shown = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), float)
    drawn = Image.open(io.BytesIO(plot)).convert("RGBA")
    white = Image.new("RGB", drawn.size, "white")
    white.paste(drawn, mask=drawn.getchannel("A"))
    assert ext == "png" and len(data) < len(full.getvalue()) / 1.5  # in 256 colours
    assert np.abs(shown - np.asarray(white, float)).mean() <= 1.0  # and it looks the same


def test_a_page_without_figures_leaves_no_folder(tmp_path):
    from fraglib_study.report.notebook import figures_folder, write_figures

    html = tmp_path / "p.html"
    write_figures(html, {"fig01.png": b"x"})
    assert (figures_folder(html) / "fig01.png").read_bytes() == b"x"
    write_figures(html, {})
    assert not figures_folder(html).exists()


def test_the_renderer_skips_only_the_iri_grammars_and_still_validates():
    """fraglib_study.report.notebook.skip_iri_grammars: nbformat still imports jsonschema and rejects an invalid notebook,
    and rfc3987_syntax's grammars are not built (a fresh process: the suite's own may have imported them)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fraglib_study.report.notebook import skip_iri_grammars\n"
        "skip_iri_grammars()\n"
        "import nbformat\n"
        "nb = nbformat.v4.new_notebook()\n"
        "nbformat.validate(nb)\n"
        "nb.cells = [{'cell_type': 'code', 'source': 'x'}]\n"
        "try:\n"
        "    nbformat.validate(nb)\n"
        "    raise SystemExit('an invalid notebook passed validation')\n"
        "except nbformat.ValidationError:\n"
        "    pass\n"
        "assert 'jsonschema' in sys.modules and sys.modules.get('rfc3987_syntax') is None\n"
        "assert 'lark' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.slow
def test_the_page_and_executed_notebook_are_written_atomically(tmp_path, monkeypatch):
    """Papermill saves the notebook as it runs: it now does so in a scratch folder, and the page and the
    executed notebook each appear whole (fraglib.core.outputs), the notebook still naming its own path."""
    import os

    import nbformat

    from fraglib_study.report.notebook import run_notebook

    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(x * 2)"),
    ]
    nbformat.write(nb, tmp_path / "n.ipynb")
    renamed = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(os.path.relpath(b, tmp_path)), real(a, b)))
    executed = tmp_path / "out" / "executed" / "n.ipynb"
    run_notebook(tmp_path / "n.ipynb", tmp_path / "out" / "n.html", {"x": 21})
    assert renamed == ["out/executed/n.ipynb", "out/n.html"]
    done = json.loads(executed.read_text())
    assert done["metadata"]["papermill"]["output_path"] == str(executed)
    assert done["cells"][-1]["outputs"][0]["text"] == ["42\n"]
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["executed", "n.html", "n.ipynb"]


def test_a_page_knows_where_it_is(tmp_path):
    """The export lays every page out the same way (fraglib_study.report.notebook.lay_out, contents): the header a notebook
    displays goes to the top and gives the <title>, the sections get a linked table of contents, `docs/…` mentions
    become links relative to the page, and stderr (warnings naming build paths) stays in the executed notebook."""
    import nbformat

    from fraglib_study.report.notebook import HEADER, project_root, render_html

    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("start_page(page)", id="c")
    code.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="/build/fraglib/plots.py:102: UserWarning: x\n"),
        nbformat.v4.new_output(
            "display_data", data={"text/markdown": "# Pascal1K: a page\n\nthe header"}, metadata={HEADER: True}
        ),
    ]
    nb.cells = [
        nbformat.v4.new_markdown_cell("See docs/evaluation.md and `docs/runs.md`.", id="m"),
        code,
        nbformat.v4.new_markdown_cell("## First part\n\ntext", id="a"),
        nbformat.v4.new_markdown_cell("## Second part", id="b"),
    ]
    nbformat.write(nb, tmp_path / "n.ipynb")
    at = project_root() / "reports" / "pascal1k" / "x.html"  # where the page will live; written elsewhere
    page = render_html(tmp_path / "n.ipynb", tmp_path / "n.html", at).read_text()
    assert "<title>Pascal1K: a page</title>" in page
    toc = page.index('<nav class="fraglib-toc">')
    assert page.index("the header") < toc < page.index("See <a href")  # the header, the contents, then the first cell
    assert '<a href="#First-part">First part</a>' in page and '<a href="#Second-part">Second part</a>' in page
    assert '<a href="../../docs/evaluation.md">docs/evaluation.md</a>' in page and "<code>docs/runs.md</code>" in page
    assert "UserWarning" not in page and "plots.py" not in page


def test_note_shows_a_remark_as_markdown_not_raw_text():
    from unittest.mock import patch

    from fraglib_study.report.notebook import note

    with patch("IPython.display.display") as shown:
        note("no run of", "a, b", "<run>")
    (md,), _ = shown.call_args
    assert md.data == "*no run of a, b &lt;run&gt;*"


def test_a_misspelt_or_broken_parameter_is_refused_before_the_page(tmp_path, capsys):
    """papermill only warns on an unknown parameter and renders the defaults: the command refuses it, naming the
    notebook's parameters; a VALUE that is not YAML, or a missing notebook, is a one-line error too."""
    from fraglib_study.report.notebook import main

    for argv, says in (
        (["notebooks/data_report.ipynb", str(tmp_path / "d.html"), "-p", "dat_dir", "x"], "has no parameter dat_dir"),
        (["notebooks/data_report.ipynb", str(tmp_path / "d.html"), "-p", "n_show", "["], "not valid YAML"),
        (["notebooks/no_such.ipynb", str(tmp_path / "d.html")], "no such notebook"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "d.html").exists()


def test_every_stage_passes_only_parameters_its_notebook_has():
    from fraglib_study.pages.render import report_pages
    from fraglib_study.report.notebook import notebook_parameters

    bad = [
        (p.stage, sorted(set(p.parameters) - set(notebook_parameters(p.notebook))))
        for p in report_pages()
        if p.kind != "explorer" and set(p.parameters) - set(notebook_parameters(p.notebook))
    ]
    assert not bad
