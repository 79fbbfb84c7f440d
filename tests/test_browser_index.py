"""The committed index's first screen in a real browser (issue #79: "an index that answers on its first screen"):
opened at 1400 × 900 and scrolled to the top, it shows a link to every report page and explorer committed under
reports/ and the whole "Best per direction" table. Chromium and Playwright as in tests/test_browser.py (skips
without them)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from test_browser import browser, open_page  # noqa: F401  (the module-scoped Chromium fixture)

from test_dvc_deps import ROOT

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1400, 900

# each link's target and box, and the best table's box (left, top, right, bottom), in the viewport's coordinates
SHOWN = """() => {
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const table = document.querySelector('#best table');
    return {
        links: [...document.querySelectorAll('a[href]')].filter(a => a.getClientRects().length)
            .map(a => [a.href, box(a)]),
        best: table ? [box(table), table.rows.length, table.rows[0].innerText] : null,
        scroll: window.scrollY,
    };
}"""


def committed_pages() -> list[Path]:
    """Every page under reports/ but the index: the notebooks' pages and the explorers (not their figure folders)."""
    pages = [
        p for p in sorted((ROOT / "reports").rglob("*.html")) if "_files" not in str(p) and "executed" not in str(p)
    ]
    return [p for p in pages if p != ROOT / "reports" / "index.html"]


def on_screen(box: list[float]) -> bool:
    left, top, right, bottom = box
    return 0 <= left and right <= WIDTH and 0 <= top and bottom <= HEIGHT and right > left and bottom > top


def test_the_index_first_screen_links_every_page_and_shows_the_best_per_direction(browser):  # noqa: F811
    pages = committed_pages()
    assert len(pages) >= 10 and any(p.name == "explorer.html" for p in pages)
    page, failed = open_page(browser, ROOT / "reports" / "index.html")
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.evaluate("window.scrollTo(0, 0)")
    shown = page.evaluate(SHOWN)
    assert shown["scroll"] == 0
    linked = {
        Path(unquote(urlparse(href).path)).resolve()
        for href, box in shown["links"]
        if urlparse(href).scheme == "file" and on_screen(box)
    }
    missing = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked]
    assert not missing, f"pages with no link on the index's first screen ({WIDTH} × {HEIGHT}): {missing}"
    assert shown["best"], "no Best per direction table (#best table) on the index"
    box, rows, header = shown["best"]
    assert on_screen(box), f"the Best per direction table is not wholly on the first screen: its box {box}"
    assert rows >= 3 and "tied" in header and "CI" in header, (rows, header)
    assert not failed, failed
    page.close()
