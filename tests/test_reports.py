"""`make reports` (fraglib_study.pages.render): every page from what git holds, on a copy of the tracked files alone."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_every_notebook_stage_is_a_page_with_its_dvc_parameters():
    from fraglib_study.pages.render import report_pages

    pages = {p.html: p for p in report_pages(ROOT)}
    assert {
        "reports/results_report.html",
        "reports/pascal1k/fight_report.html",
        "reports/synthetic_extended/results_report.html",
        "reports/flickr8k/text_only_report.html",
    } <= set(pages)
    fight = pages["reports/pascal1k/fight_report.html"]
    assert fight.stage == "studies/pascal1k/dvc.yaml:fight_report"
    assert fight.parameters == {
        "runs_dir": "runs/pascal1k",
        "folds_dir": "runs/pascal1k_folds",
        "dataset_dir": "data/pascal1k/split{seed}",
    }  # lists: params.yaml
    assert fight.executed == "reports/pascal1k/executed/fight_report.ipynb"
    both = pages["reports/synthetic_extended/results_report.html"].parameters
    assert both["runs_dir"] == ["runs/synthetic", "runs/synthetic_extended"]  # a YAML list on the command line
    assert isinstance(pages["reports/results_report.html"].parameters["n_examples"], int)  # ${…}, resolved


def test_study_command_names_the_pipeline_of_a_path():
    from fraglib_study.report.registry import study_command

    assert study_command("data/pascal1k/split{seed}", ROOT) == "dvc repro studies/pascal1k/dvc.yaml"
    assert study_command("runs/synthetic_extended", ROOT) == "dvc repro studies/synthetic/dvc.yaml"
    assert study_command(ROOT / "runs" / "flickr8k" / "stt_text", ROOT) == "dvc repro studies/flickr8k/dvc.yaml"
    assert study_command("data/synthetic/features", ROOT) == "dvc repro"
    assert study_command("/elsewhere/runs", ROOT) == "dvc repro"


def _tracked_copy(dest: Path) -> Path:
    """The files git tracks, as they are in the working tree, copied to ``dest`` (a clone without DVC outputs)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)  # DVC wants a repository; provenance reads it
    return dest


def _cells(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.slow
def test_make_reports_renders_every_page_from_the_committed_results(tmp_path):
    """No data, features or checkpoints: the results pages render, with the committed headline numbers; the
    data pages keep their committed version and name the command that builds their inputs."""
    copy = _tracked_copy(tmp_path / "clone")
    before = {p: p.read_bytes() for p in (copy / "reports").rglob("*.html")}
    out = subprocess.run(
        [sys.executable, "-m", "fraglib_study", "reports", "--no-index"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    status = {
        line.split()[1]: line.split()[0]
        for line in out.stdout.splitlines()
        if line.split() and line.split()[0] in ("rendered", "kept", "failed")
    }
    assert status["reports/results_report.html"] == "rendered"
    assert status["reports/training_report.html"] == "rendered"
    assert status["reports/flickr8k/text_only_report.html"] == "rendered"
    fight = yaml.safe_load((copy / "params.yaml").read_text())["results_report"]["fight"]
    summary_only = [
        r
        for r in fight["ladder"] + fight["baselines"]
        if (copy / "runs/pascal1k" / r / "metrics.json").exists()
        and not (copy / "runs/pascal1k" / r / "seeds").is_dir()
    ]
    if summary_only:  # the fight compares every run it names: never a page over a subset of them
        assert status["reports/pascal1k/fight_report.html"] == "kept"
        assert (copy / "reports/pascal1k/fight_report.html").read_bytes() == before[
            copy / "reports/pascal1k/fight_report.html"
        ]
    else:
        assert status["reports/pascal1k/fight_report.html"] == "rendered"
    for page in ("reports/data_report.html", "reports/vision_report.html"):  # about data a clone lacks
        assert status[page] == "kept" and (copy / page).read_bytes() == before[copy / page]
        assert "dvc repro" in out.stdout
    # headline numbers: every run's R@1 mean (± sd over several training runs) and its CI, both directions, as
    # metrics.json has them (fraglib_study.report.tables.retrieval)
    page = _cells((copy / "reports/results_report.html").read_text())
    runs = sorted((copy / "runs/synthetic").glob("*/metrics.json"))
    assert runs
    for m in runs:
        s = json.loads(m.read_text())
        if "images" in s.get("overrides", {}) and s["overrides"]["images"] == "none":
            continue
        several = len(s.get("per_seed") or s["seeds"]) > 1
        for d in ("annotation", "search"):
            sd = f" ± {s[d + '_sd']['r1']:.1f}" if several else ""
            assert f"{s[d]['r1']:.1f}{sd} [" in page, (m.parent.name, d)
    # every section drawn from committed files, the figures from the study's figure data: none lacks its inputs
    assert "builds them" not in page
    assert "Relation norms of the SDT-RNN" in page and "Gallery:" in page and "crops of at most 160 px" in page
    full = json.loads((copy / "runs/synthetic/full/metrics.json").read_text())
    training = _cells((copy / "reports/training_report.html").read_text())
    assert f"annotation: R@1 {full['annotation']['r1']:.1f} ± {full['annotation_sd']['r1']:.1f}" in training
    assert not (copy / "build" / "reports").exists() or not any((copy / "build" / "reports").rglob("*.html"))


def test_a_rendered_page_replaces_the_committed_one_whole(tmp_path, monkeypatch):
    """The staged page and notebook go into place atomically: on a full disk the committed page is left as it
    was (not a cut copy), and a page that fits replaces it whole with the staging copy gone."""
    import errno
    import pathlib

    import fraglib_study.report.notebook
    from fraglib_study.pages.render import render
    from fraglib_study.report.registry import Page

    def fake_run(notebook, html, parameters, executed, at=None):
        for p, text in ((html, "<html>new page</html>\n"), (executed, '{"cells": []}\n')):
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            Path(p).write_text(text)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fraglib_study.report.notebook, "run_notebook", fake_run)
    page = Page("dvc.yaml:x", "notebooks/x.ipynb", "reports/x.html", "reports/executed/x.ipynb", {})
    Path("reports").mkdir()
    Path("reports/x.html").write_text("<html>committed page</html>\n")
    write = pathlib.Path.write_bytes

    def full(self, data):
        write(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    with monkeypatch.context() as m:
        m.setattr(pathlib.Path, "write_bytes", full)
        with pytest.raises(OSError, match="No space left"):
            render(page, Path("build/reports"))
    assert Path("reports/x.html").read_text() == "<html>committed page</html>\n"
    assert render(page, Path("build/reports")).status == "rendered"
    assert Path("reports/x.html").read_text() == "<html>new page</html>\n"
    assert Path("reports/executed/x.ipynb").read_text() == '{"cells": []}\n'
    assert not any(p.is_file() for p in Path("build/reports").rglob("*"))


def test_a_rendered_page_brings_its_figures_and_drops_the_old_ones(tmp_path, monkeypatch):
    """The staged figures (``<page>_files/figNN``) go into place with the page; the earlier render's figures that
    the new page does not show are removed, the folder's other files kept, the staging folder left empty."""
    import fraglib_study.report.notebook
    from fraglib_study.pages.render import render
    from fraglib_study.report.registry import Page

    def fake_run(notebook, html, parameters, executed, at=None):
        Path(executed).parent.mkdir(parents=True, exist_ok=True)
        Path(executed).write_text('{"cells": []}\n')
        fraglib_study.report.notebook.write_figures(html, {"fig01.jpg": b"new picture"})
        Path(html).write_text('<img src="x_files/fig01.jpg">\n')

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fraglib_study.report.notebook, "run_notebook", fake_run)
    page = Page("dvc.yaml:x", "notebooks/x.ipynb", "reports/x.html", "reports/executed/x.ipynb", {})
    old = Path("reports/x_files")
    old.mkdir(parents=True)
    for name in ("fig01.jpg", "fig02.png", "data.js"):
        (old / name).write_text("old")
    assert render(page, Path("build/reports")).status == "rendered"
    assert sorted(p.name for p in old.iterdir()) == ["data.js", "fig01.jpg"]
    assert (old / "fig01.jpg").read_bytes() == b"new picture" and (old / "data.js").read_text() == "old"
    assert not any(p.is_file() for p in Path("build/reports").rglob("*"))


def test_every_committed_page_is_under_1_mb_with_its_figures_under_3_mb():
    """The limits a page keeps (its figures are files beside it: fraglib_study.report.notebook.figures_of): the HTML under
    1 MB, the figures it shows together under 3 MB, each figure it names present and none left over."""
    from fraglib_study.report.notebook import figure_files, figures_folder

    pages = sorted((ROOT / "reports").rglob("*.html"))
    assert pages
    for html in pages:
        text = html.read_text(encoding="utf-8")
        assert html.stat().st_size < 1_000_000, html
        named = set(re.findall(rf'src="{re.escape(figures_folder(html).name)}/(fig\d+\.(?:png|jpg))"', text))
        files = figure_files(html)
        assert named == {p.name for p in files}, html
        assert sum(p.stat().st_size for p in files) < 3_000_000, html


def test_every_committed_notebook_page_has_the_common_header():
    """Each committed report page rendered from a notebook opens with the project's header: its contents box and a
    link back to the index (a page from an old render, without them, fails here; the index and the explorers are
    built otherwise)."""
    pages = [
        p for p in sorted((ROOT / "reports").rglob("*.html")) if "_files" not in str(p) and "executed" not in str(p)
    ]
    pages = [p for p in pages if p.name not in ("index.html", "explorer.html")]
    assert len(pages) >= 10
    bare = [
        str(p.relative_to(ROOT)) for p in pages if "fraglib-toc" not in (t := p.read_text()) or "index.html" not in t
    ]
    assert not bare, f"pages without the common header (re-render them: make reports, or their DVC stage): {bare}"


def test_the_extended_page_repeats_no_picture_of_the_default_page():
    """Images in git cost every clone: the extended synthetic page names the default page for the pictures drawn
    from the same figure data (its `figures_page`: Figures 4-5, the gallery) instead of repeating them."""
    from fraglib_study.pages.render import report_pages
    from fraglib_study.report.notebook import figure_files

    page = ROOT / "reports" / "synthetic_extended" / "results_report.html"
    pages = {p.html: p for p in report_pages(ROOT)}
    assert pages["reports/synthetic_extended/results_report.html"].parameters["figures_page"] == (
        "reports/results_report.html"
    )
    default = {p.read_bytes() for p in figure_files(ROOT / "reports" / "results_report.html")}
    extended = figure_files(page)
    repeated = [p.name for p in extended if p.read_bytes() in default]
    # the one picture both pages draw alike: the breakdown of the same three runs (base, breakdown_runs)
    assert extended and len(repeated) <= 1, repeated
    assert page.read_text().count("not repeated here") == 3
