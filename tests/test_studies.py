"""The one registry of studies (fraglib_study.report.registry): what the dvc.yaml files hold, nothing typed but titles."""

import re
import shutil
from pathlib import Path

from fraglib_study.report.registry import studies

ROOT = Path(__file__).resolve().parents[1]
TOOLS = "stages:\n  page:\n    cmd: python -m fraglib_study notebook notebooks/x.ipynb reports/x.html\n"
STUDY = """stages:
  train:
    foreach: ${runs}
    do:
      wdir: ../..
      cmd: python -m fraglib_study study --run ${key} --dataset coco --dataset-dir data/coco/split{seed} --out runs/coco/${key}
  text:
    wdir: ../..
    cmd: python -m fraglib.text fragments --dataset-dir data/coco
  page:
    wdir: ../..
    cmd: python -m fraglib_study notebook notebooks/results_report.ipynb reports/coco/results.html -p runs_dir runs/coco
"""


def _project(dest: Path) -> Path:
    """The committed dvc.yaml files and Makefile in ``dest``."""
    for f in [ROOT / "dvc.yaml", ROOT / "Makefile", *ROOT.glob("studies/*/dvc.yaml")]:
        (dest / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest / f.relative_to(ROOT))
    return dest


def test_the_committed_studies_and_what_they_are_derived_from():
    found = {s.name: s for s in studies(ROOT)}
    assert list(found) == ["synthetic", "synthetic_extended", "pascal1k", "flickr8k"]
    default, pascal = found["synthetic"], found["pascal1k"]
    assert (default.pipeline, default.runs, default.data, default.unit, default.repro, default.make) == (
        "dvc.yaml",
        "runs/synthetic",
        "data/synthetic",
        "seeds",
        "dvc repro",
        None,
    )
    assert (pascal.pipeline, pascal.runs, pascal.dataset, pascal.unit, pascal.repro, pascal.make) == (
        "studies/pascal1k/dvc.yaml",
        "runs/pascal1k",
        "pascal1k",
        "splits",
        "dvc repro studies/pascal1k/dvc.yaml",
        "make pascal1k",
    )
    assert pascal.heading == "Pascal1K, five stratified splits (`make pascal1k`)"
    assert [p.kind for p in pascal.pages] == [
        "text_report",
        "vision_report",
        "results_report",
        "fight_report",
        "explorer",
    ]
    assert found["synthetic_extended"].data is None and found["flickr8k"].dataset == "flickr8k"


def test_the_registry_has_the_pages_dvc_runs():
    """Its pages are the report stages DVC resolves (fraglib_study.pages.render), each in exactly one study."""
    from fraglib_study.pages.render import report_pages

    ours = [(p.stage, p.html, p.notebook) for s in studies(ROOT) for p in s.pages]
    assert sorted(ours) == sorted((p.stage, p.html, p.notebook) for p in report_pages(ROOT))
    assert len({html for _, html, _ in ours}) == len(ours)


def test_the_registry_finds_exactly_the_studies_whose_dvc_yaml_exists(tmp_path):
    root = _project(tmp_path)
    (root / "studies" / "flickr8k" / "dvc.yaml").unlink()
    (root / "studies" / "coco").mkdir()
    (root / "studies" / "coco" / "dvc.yaml").write_text(STUDY)
    (root / "studies" / "tools").mkdir()  # a pipeline that trains no run is no study
    (root / "studies" / "tools" / "dvc.yaml").write_text(TOOLS)
    found = {s.name: s for s in studies(root)}
    assert list(found) == ["synthetic", "synthetic_extended", "pascal1k", "coco"]  # a new one: after the titled
    coco = found["coco"]
    assert (coco.pipeline, coco.dataset, coco.unit, coco.data, coco.make) == (
        "studies/coco/dvc.yaml",
        "coco",
        "splits",
        "data/coco",
        None,
    )
    assert coco.heading == "coco (`dvc repro studies/coco/dvc.yaml`)"
    (page,) = coco.pages
    assert (page.stage, page.html, page.parameters, page.title) == (
        "studies/coco/dvc.yaml:page",
        "reports/coco/results.html",
        {"runs_dir": "runs/coco"},
        ("results", ""),
    )
    (root / "dvc.yaml").unlink()
    assert [s.name for s in studies(root)] == ["synthetic_extended", "pascal1k", "coco"]


def test_summary_csv_has_one_row_per_committed_run_with_its_numbers():
    """``python -m fraglib_study summary --csv``: one row per run of every study, the means and sds of its
    metrics.json, and the commit that last wrote it."""
    import csv
    import io
    import json

    from fraglib_study.pages.summary import runs_csv, runs_rows
    from fraglib_study.report.registry import studies

    rows = runs_rows(ROOT)
    expected = {(s.name, p.parent.name) for s in studies(ROOT) for p in (ROOT / s.runs).glob("*/metrics.json")}
    assert {(r["study"], r["run"]) for r in rows} == expected and len(rows) == len(expected)
    r = next(r for r in rows if r["study"] == "synthetic" and r["run"] == "full")
    m = json.loads((ROOT / "runs" / "synthetic" / "full" / "metrics.json").read_text())
    assert r["annotation_r1"] == m["annotation"]["r1"] and r["search_mean_rank_sd"] == m["search_sd"]["mean_rank"]
    assert len(r["commit"]) >= 7
    back = list(csv.DictReader(io.StringIO(runs_csv(rows))))
    assert len(back) == len(rows) and float(back[0]["annotation_r1"]) == rows[0]["annotation_r1"]


def test_every_page_has_its_own_title_and_a_header_that_places_it():
    """Each page's title (its <title> and H1) is its own; its header names its study, the commit it is rendered
    from and links back to the index (fraglib_study.report.registry.page_header)."""
    from fraglib_study.report.registry import page_header

    pages = [p for s in studies(ROOT) for p in s.pages]
    titles = [p.title[0] for p in pages]
    assert len(set(titles)) == len(titles), titles
    head = page_header("reports/pascal1k/results_report.html", "fallback", ROOT)
    assert head.startswith("# Pascal1K: ") and "Pascal1K, five stratified splits" in head
    assert re.search(r"Rendered from commit `[0-9a-f]{7,}` \(\d{4}-\d\d-\d\d\)", head)
    assert "[← all reports](../index.html)" in head and "(../../docs/README.md)" in head
    assert page_header("", "Fallback title", ROOT).startswith("# Fallback title\n")
    hostile = page_header("", "<script>alert(1)</script> [x](javascript:alert(2))", ROOT)
    assert "<script>" not in hostile and "](javascript" not in hostile  # a caller's title is text, not Markdown


def test_a_study_heading_states_its_data_from_params(tmp_path):
    """The synthetic study's heading is filled from params.yaml's synthetic section (sizes never typed twice); a
    section that leaves a size to its default gives a heading without sizes, never a wrong one."""
    root = _project(tmp_path)
    (root / "params.yaml").write_text("synthetic: {n_train: 8, n_val: 2, n_test: 6, gallery: 3}\n")
    assert studies(root)[0].heading == "Synthetic benchmark (8 / 2 / 6 images, test galleries of 3, `dvc repro`)"
    (root / "params.yaml").write_text("synthetic: {n_train: 8}\n")
    assert studies(root)[0].heading == "Synthetic benchmark (`dvc repro`)"
