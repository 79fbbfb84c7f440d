"""The fight report and the Pascal1K results page as a reader opens them (headless Chromium, the fixtures of
tests/test_browser.py): every CI figure of the fight names each baseline under it, and every heading says which
test sets (ten folds, five splits) it reads and how often each run trained."""

from __future__ import annotations

import pytest
from test_browser import browser, open_page  # noqa: F401  (the module-scoped Chromium fixture)

from fraglib_study.params import read_params
from fraglib_study.report.loading import run_labels, run_names

from test_dvc_deps import ROOT

pytestmark = pytest.mark.slow

FIGHT = ROOT / "reports/pascal1k/fight_report.html"
RESULTS = ROOT / "reports/pascal1k/results_report.html"
SYNTHETIC = ROOT / "reports/results_report.html"

CAPTIONS = """() => [...document.querySelectorAll('p')].filter(p => p.innerText.startsWith('The figure above')).map(p => {
    const cell = p.closest('.jp-Cell');
    const head = document.evaluate('preceding::h2[1]', p, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null);
    const img = [...cell.querySelectorAll('img')].filter(i =>
        i.compareDocumentPosition(p) & Node.DOCUMENT_POSITION_FOLLOWING);
    return {text: p.innerText, section: head.singleNodeValue ? head.singleNodeValue.innerText : '',
            drawn: img.length > 0 && img.every(i => i.complete && i.naturalWidth > 0)};
})"""
HEADINGS = """() => [...document.querySelectorAll('h2, h3')].map(h => h.innerText.replace('¶', '').trim())"""


def _fight():
    params = read_params(ROOT / "params.yaml")
    fight = params["results_report"]["fight"]
    return params, fight["ladder"][-1], fight["baselines"], run_labels(params)


def test_the_fights_ci_figures_name_each_baseline(browser):  # noqa: F811
    """The verdict on ten folds and the fight on five splits: under each CI figure (drawn), its rows in words, the
    best recipe and every baseline of that protocol by its label."""
    params, best, baselines, labels = _fight()
    page, _ = open_page(browser, FIGHT)
    found = {c["section"]: c for c in page.evaluate(CAPTIONS)}
    page.close()
    expected = {
        "The verdict on ten folds": run_names(params, ROOT / "runs/pascal1k_folds"),
        "The fight on five splits": run_names(params, ROOT / "runs/pascal1k"),
    }
    for start, present in expected.items():
        caption = [c for s, c in found.items() if s.startswith(start)]
        assert len(caption) == 1, (start, list(found))
        assert caption[0]["drawn"], f"{start}: no figure drawn above its caption"
        text = caption[0]["text"]
        assert labels[best] in text
        bases = [b for b in baselines if b in present]
        assert bases, start
        assert [b for b in bases if labels[b] not in text] == [], f"{start}: {text}"
        assert text.index(labels[best]) < min(text.index(labels[b]) for b in bases)  # run − base, in that order


def test_every_heading_of_the_fight_says_its_protocol_and_trainings(browser):  # noqa: F811
    page, _ = open_page(browser, FIGHT)
    heads = page.evaluate(HEADINGS)
    page.close()
    results = [h for h in heads if not h.startswith("The search budgets")]  # the search tables: validation only
    assert len(results) >= 10
    assert [h for h in results if not ("ten folds" in h or "five splits" in h) or "training" not in h] == []
    assert heads[0].startswith("The verdict on ten folds, two trainings per fold")


def test_the_pascal1k_results_page_says_its_protocol_and_has_no_synthetic_section(browser):  # noqa: F811
    """Every heading over results names the five splits and the trainings; the synthetic benchmark's alignment
    section is left out on real data (the synthetic page keeps it)."""
    page, _ = open_page(browser, RESULTS)
    heads = page.evaluate(HEADINGS)
    page.close()
    assert not [h for h in heads if "Fragment alignment" in h]
    over_runs = [h for h in heads if not h.startswith(("Qualitative retrieval", "Triplet search"))]
    assert len(over_runs) >= 8
    assert [h for h in over_runs if "five splits" not in h or "training" not in h] == []
    assert [h for h in heads if h not in over_runs and "one training run on one split" not in h] == []
    page, _ = open_page(browser, SYNTHETIC)
    heads = page.evaluate(HEADINGS)
    page.close()
    assert [h for h in heads if h.startswith("Fragment alignment against the ground truth (synthetic benchmark)")]
