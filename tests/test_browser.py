"""The pages in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright's Python package
(``executable_path``; Playwright's own browser download is never used). ``make test`` installs both where it can;
without them these tests skip, saying which is missing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from test_dvc_deps import ROOT

pytestmark = pytest.mark.slow

LINKS = """() => [...document.querySelectorAll('a[href], img[src], script[src], link[href], iframe[src]')]
    .map(e => e.href || e.src)"""


def chromium() -> str:
    """The Chromium executable (``FRAGLIB_CHROMIUM`` or ``chromium`` on the PATH), or skip with the reason."""
    path = os.environ.get("FRAGLIB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no Chromium found (apt-get install chromium; `make test` installs it as root)")
    return path


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--allow-file-access-from-files"])
        yield b
        b.close()


def open_page(browser, path: Path):
    """(page, failed file loads) of ``path`` opened by file:// URL, its scripts run, no JavaScript error."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, failed = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    assert not errors, f"{path}: JavaScript errors {errors}"
    return page, failed


def broken_links(page, failed: list[str]) -> list[str]:
    """The local links and sources of the page (after its scripts ran) that name no file, and failed loads."""
    bad = list(failed)
    for url in page.evaluate(LINKS):
        u = urlparse(url)
        if u.scheme == "file" and not Path(unquote(u.path)).exists():
            bad.append(url)
    return bad


def test_the_committed_pages_open_and_every_local_link_resolves(browser):
    """The index, one results page and the explorer (when its data are committed) as a clone holds them."""
    pages = [ROOT / "reports/index.html", ROOT / "reports/results_report.html"]
    pages += [p for p in (ROOT / "reports/explorer.html",) if p.exists()]
    for path in pages:
        page, failed = open_page(browser, path)
        assert page.title(), path
        assert not broken_links(page, failed), (path, broken_links(page, failed))
        page.close()


def test_the_explorer_lists_and_aligns_what_is_clicked(browser, explorer_data, tmp_path):
    """Pick an image: one column of k sentences per shown run, a correct one marked; click a pair: its fragments
    appear as boxes on the picture. Pick a sentence: k images per run. The map: one point per item."""
    from fraglib_study.pages.explorer_page import build

    out, runs = explorer_data
    html, _ = build(out, tmp_path / "reports" / "explorer.html")
    page, failed = open_page(browser, html)
    thumbs = page.locator("#grid img.thumb")
    assert thumbs.count() == 4
    thumbs.nth(0).click()
    columns = page.locator("#columns .column")
    assert columns.count() == len(runs)
    assert page.locator("#columns .column li").count() == 3 * len(runs)
    first = page.locator("#columns .column").nth(0).locator("li")
    first.nth(0).click()
    assert page.locator("#alignment .box").count() > 0
    assert page.locator("#alignment .box span").nth(0).inner_text().strip()
    page.click("#mode-sentences")
    page.locator("#sentlist div").nth(0).click()
    data = json.loads((out / "explorer.json").read_text())
    missed = sum(data["sentences"][0]["image"] not in r["sentence_top"][0] for r in data["runs"].values())
    assert page.locator("#columns .column .imgs img").count() == 3 * len(runs) + missed  # + the answer where missed
    page.click("#mode-map")
    assert page.locator("#maps rect").count() == 4 and page.locator("#maps circle").count() == 20
    first_category = sorted({im["category"] for im in data["images"]})[0]
    page.select_option("#category", first_category)
    assert page.locator("#maps rect").count() == sum(im["category"] == first_category for im in data["images"])
    assert not broken_links(page, failed)
    if os.environ.get("FRAGLIB_SCREENSHOTS"):  # where to save what the page looks like
        page.click("#mode-images")
        thumbs.nth(0).click()
        first.nth(0).click()
        page.screenshot(path=os.path.join(os.environ["FRAGLIB_SCREENSHOTS"], "explorer_tiny.png"), full_page=True)


RECTS = """sel => [...document.querySelectorAll(sel)].map(e => {
    const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"""


def _overlap(a, b) -> bool:
    """Two [left, top, right, bottom] rectangles share more than half a pixel each way."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def test_the_explorer_shows_where_the_answer_is(browser, explorer_data, tmp_path):
    """Both directions ranked: a sentence query's images carry their ranks 1..k, and where a run's list misses the
    answer its rank follows (the correct image after a gap, and a line); an image query's line says its best own
    sentence's rank. Data written before the ranks were recorded say the rank is not stored."""
    from fraglib_study.pages.explorer_page import build

    out, _ = explorer_data
    data = json.loads((out / "explorer.json").read_text())
    runs, k = list(data["runs"]), data["k"]
    owner = [s["image"] for s in data["sentences"]]
    old = tmp_path / "old"
    shutil.copytree(out, old)
    stripped = json.loads((old / "explorer.json").read_text())
    for r in stripped["runs"].values():
        del r["image_rank"], r["sentence_rank"]
    (old / "explorer.json").write_text(json.dumps(stripped))
    for folder, stored in ((out, True), (old, False)):
        html, _ = build(folder, tmp_path / folder.name / "explorer.html")
        page, failed = open_page(browser, html)
        assert [t.strip() for t in page.locator("#runs label").all_inner_texts()] == [
            data["runs"][r]["label"] for r in runs
        ]
        page.click("#mode-sentences")
        misses = 0
        for q in range(len(data["sentences"])):
            page.locator("#sentlist div").nth(q).click()
            for c, r in enumerate(runs):
                column = page.locator("#columns .column").nth(c)
                assert column.locator("h3").inner_text() == data["runs"][r]["label"]
                badges = column.locator(".rank").all_inner_texts()
                top = data["runs"][r]["sentence_top"][q]
                assert badges[:k] == [str(n) for n in range(1, k + 1)], (r, q, badges)
                note = column.locator(".answer").all_inner_texts()
                if owner[q] in top:
                    assert len(badges) == k and not note
                    continue
                misses += 1
                rank = data["runs"][r]["sentence_rank"][q]
                assert badges[k:] == [str(rank) if stored else f">{k}"], (r, q, badges)
                answer = page.locator("#query .own img").get_attribute("src")  # the query's own image
                assert column.locator(".imgs img").nth(k).get_attribute("src") == answer
                expect = f"rank {rank} of {len(data['images'])}" if stored else "its rank is not stored in these data"
                assert len(note) == 1 and expect in note[0], note
        assert misses, "no sentence query's list misses its image: the tiny runs no longer show the case"
        page.click("#mode-images")
        for i in range(len(data["images"])):
            page.locator("#grid img.thumb").nth(i).click()
            for c, r in enumerate(runs):
                column = page.locator("#columns .column").nth(c)
                assert column.locator("li").count() == k  # an <ol>: numbered 1..k
                note = column.locator(".answer").all_inner_texts()
                if any(owner[j] == i for j in data["runs"][r]["image_top"][i]):
                    assert not note
                elif stored:
                    assert note == [f"No correct sentence in the top {k}: the best-ranked of its own is at rank "
                                    f"{data['runs'][r]['image_rank'][i]} of {len(data['sentences'])}."]  # fmt: skip
                else:
                    assert len(note) == 1 and "its rank is not stored in these data" in note[0]
        assert not broken_links(page, failed)
        page.close()


def test_the_explorer_keeps_labels_and_points_apart(browser, explorer_data, tmp_path):
    """No two fragment labels on a picture overlap, whatever pair is clicked; on the map, every point is drawn
    after every larger one (no hub's square covers a small point); each category its own colour."""
    from fraglib_study.pages.explorer_page import build

    out, _ = explorer_data
    data = json.loads((out / "explorer.json").read_text())
    html, _ = build(out, tmp_path / "reports" / "explorer.html")
    page, _ = open_page(browser, html)
    pairs = 0
    for i in range(len(data["images"])):
        page.locator("#grid img.thumb").nth(i).click()
        items = page.locator("#columns .column").nth(0).locator("li")
        for n in range(items.count()):
            items.nth(n).click()
            labels = page.evaluate(RECTS, "#alignment .stage .box span")
            assert labels, (i, n)
            clash = [(a, b) for x, a in enumerate(labels) for b in labels[x + 1 :] if _overlap(a, b)]
            assert not clash, (i, n, clash)
            pairs += 1
    assert pairs == len(data["images"]) * data["k"]
    page.click("#mode-map")
    sizes = page.evaluate("""() => [...document.querySelectorAll('#maps svg')[0].children].map(e =>
        e.tagName === 'circle' ? Math.PI * e.r.baseVal.value ** 2 : e.width.baseVal.value * e.height.baseVal.value)""")
    assert len(sizes) == len(data["images"]) + len(data["sentences"])
    assert all(a >= b - 1e-6 for a, b in zip(sizes, sizes[1:])), sizes
    colours = page.evaluate("() => [...document.querySelectorAll('.legend i')].map(e => e.style.background)")
    assert len(colours) == len({im["category"] for im in data["images"]}) == len(set(colours))
    page.close()


def test_the_committed_pascal_explorer_colours_its_twenty_categories_apart(browser):
    """Pascal1K's 20 classes: 20 legend colours, none repeated, and each point the colour of its category."""
    path = ROOT / "reports/pascal1k/explorer.html"
    if not path.exists():
        pytest.skip("no Pascal1K explorer page committed")
    page, failed = open_page(browser, path)
    page.click("#mode-map")
    legend = page.evaluate("""() => [...document.querySelectorAll('.legend span')].map(e =>
        [e.textContent, e.querySelector('i').style.background])""")
    assert len(legend) == 20 and len({c for _, c in legend}) == 20, legend
    assert not broken_links(page, failed)
    page.close()


def test_the_explorer_draws_a_map_for_each_ticked_run(browser, explorer_data, tmp_path):
    """Map mode: one map per ticked run with a joint space, in run order, each run's label over it; ticking and
    unticking adds and removes maps; a ticked run without one is named with why; on every map each point is drawn
    after every larger one (a hub's square never covers a small point); one legend for all maps."""
    from fraglib_study.pages.explorer_page import build

    out, _ = explorer_data
    data_dir = tmp_path / "data"
    shutil.copytree(out, data_dir)
    data = json.loads((data_dir / "explorer.json").read_text())
    data["maps"]["random"] = json.loads(json.dumps(data["maps"]["devise"]))  # a second joint space, for the test
    data["maps"]["random"]["images"] = [[1 - x, y] for x, y in data["maps"]["random"]["images"]]
    data["runs"]["full"]["joint_space"] = False
    (data_dir / "explorer.json").write_text(json.dumps(data))
    html, _ = build(data_dir, tmp_path / "reports" / "explorer.html")
    page, failed = open_page(browser, html)
    page.click("#mode-map")
    labels = {r: data["runs"][r]["label"] for r in data["runs"]}

    def maps():
        return [h.split(" \u2014 ")[0] for h in page.locator("#maps .map h3").all_inner_texts()]

    def tick(run, on):
        box = page.locator(f"#runs input[value='{run}']")
        if box.is_checked() != on:
            box.click()

    assert maps() == [labels["devise"], labels["random"]]  # every run ticked at first (one per system)
    notes = " ".join(page.locator("#maps .unmapped").all_inner_texts())
    assert labels["full"] in notes and "no joint space" in notes
    assert page.locator("#maps .legend").count() == 1
    for svg in range(page.locator("#maps svg").count()):
        sizes = page.evaluate("""n => [...document.querySelectorAll('#maps svg')[n].children].map(e =>
            e.tagName === 'circle' ? Math.PI * e.r.baseVal.value ** 2 : e.width.baseVal.value * e.height.baseVal.value)""",
            svg)  # fmt: skip
        assert len(sizes) == len(data["images"]) + len(data["sentences"])
        assert all(a >= b - 1e-6 for a, b in zip(sizes, sizes[1:])), (svg, sizes)
    tick("devise", False)
    assert maps() == [labels["random"]] and "tick it above" in page.locator("#maps").inner_text()
    tick("random", False)
    tick("full", False)
    assert maps() == [] and "Tick a run above" in page.locator("#maps").inner_text()
    tick("random", True)
    tick("devise", True)
    assert maps() == [labels["devise"], labels["random"]]  # run order, not ticking order
    page.select_option("#category", sorted({im["category"] for im in data["images"]})[0])
    assert page.locator("#maps svg").count() == 2
    assert not broken_links(page, failed)
    page.close()


def test_the_committed_explorers_travel_with_reports_and_show_human_labels(browser, tmp_path):
    """reports/ copied alone: each committed explorer opens, every thumbnail loads from the copy (they live under
    reports/), the title and the run labels hold no config key; the Pascal1K explorer lists the fold runs it does not
    show, each with why and, where training makes it, the command; its map mode draws one map per ticked run with a
    joint space."""
    import re

    src = [ROOT / p for p in ("reports/explorer.html", "reports/pascal1k/explorer.html") if (ROOT / p).exists()]
    if not src:
        pytest.skip("no explorer page committed")
    copy = tmp_path / "copy" / "reports"
    shutil.copytree(ROOT / "reports", copy, ignore=shutil.ignore_patterns("executed"))
    for path in src:
        page, failed = open_page(browser, copy / path.relative_to(ROOT / "reports"))
        title = page.locator("h1").inner_text()
        assert title.startswith("Explorer: ") and not re.search(r"\(\w+\.\w+\)|shown\.|splits? \d", title), title
        for label in page.locator("#runs label").all_inner_texts():
            assert not re.search(r"\w+\.\w+_\w+|: splits? \d", label), label
        loaded = page.evaluate(
            """() => [...document.querySelectorAll('#grid img')].map(i => [i.src, i.naturalWidth])"""
        )
        assert loaded and all(w > 0 and "/copy/reports/" in u for u, w in loaded), loaded[:3]
        assert not broken_links(page, failed), (path, broken_links(page, failed))
        page.click("#mode-map")
        ticked = page.evaluate(
            "() => [...document.querySelectorAll('#runs input')].filter(b => b.checked).map(b => b.value)"
        )
        data = page.evaluate("() => window.EXPLORER")
        assert page.locator("#maps svg").count() == sum(r in data["maps"] for r in ticked) >= 1
        if data.get("protocol") == "folds":
            page.locator("#missing summary").click()  # folded: the names in its summary, the rest one click away
            items = page.locator("#missing li")
            assert items.count() == len(data["missing"]) + bool(data.get("rebuild")) > 0
            for n, m in enumerate(data["missing"]):
                text = items.nth(n).inner_text()
                assert m["run"] in text and m["reason"] in text
                if m["command"]:
                    assert items.nth(n).locator("code").inner_text() == m["command"]
            page.click("#mode-images")
            page.locator("#grid img.thumb").nth(0).click()
            units = page.locator("#columns .column .unit").all_inner_texts()
            assert len(units) == len(ticked) and all(re.fullmatch(r"fold 0: its \w+ training( \(replicate \d+\))?", u)
                                                     for u in units), units  # fmt: skip
        page.close()
