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
    from fraglib.explorer_page import build

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
    assert page.locator("#columns .column .imgs img").count() == 3 * len(runs)
    page.click("#mode-map")
    assert page.locator("#maps rect").count() == 4 and page.locator("#maps circle").count() == 20
    data = json.loads((out / "explorer.json").read_text())
    first_category = sorted({im["category"] for im in data["images"]})[0]
    page.select_option("#category", first_category)
    assert page.locator("#maps rect").count() == sum(im["category"] == first_category for im in data["images"])
    assert not broken_links(page, failed)
    if os.environ.get("FRAGLIB_SCREENSHOTS"):  # where to save what the page looks like
        page.click("#mode-images")
        thumbs.nth(0).click()
        first.nth(0).click()
        page.screenshot(path=os.path.join(os.environ["FRAGLIB_SCREENSHOTS"], "explorer_tiny.png"), full_page=True)
