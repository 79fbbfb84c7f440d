"""The explorer page: pick a test image or sentence and see what every run retrieves, and where the fragment run
aligns each fragment; built from the committed ``runs/<study>/explorer/`` (:mod:`fraglib.explore`), no checkpoint.

    python -m fraglib.explorer_page runs/synthetic/explorer reports/explorer.html [--overwrite]

Writes the page (``templates/explorer.html.j2``: HTML and its JavaScript, no server, opens from ``file://``) and
``<page stem>_data.js`` beside it, which sets ``window.EXPLORER``: the explorer's JSON with thumbnail paths relative
to the page (the thumbnails stay where the data stage wrote them).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from fraglib.notebook import TEMPLATES
from fraglib.outputs import OVERWRITE_HELP, claim_cli, write_text

TEMPLATE = "explorer.html.j2"  # in fraglib/templates


def parser() -> argparse.ArgumentParser:
    """The command line; DATA and HTML come first (``fraglib.studies`` reads them there in dvc.yaml's stages)."""
    ap = argparse.ArgumentParser(prog="python -m fraglib.explorer_page", description=__doc__.split("\n")[0])
    ap.add_argument("data", help="a folder written by python -m fraglib.explore (explorer.json, thumbs/)")
    ap.add_argument("html", help="the page to write; its data go beside it in <stem>_data.js")
    ap.add_argument("--title", default="", help="the page's title (default: from the data set's name)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    return ap


def data_file(html: str | Path) -> Path:
    """The data script beside a page: ``reports/explorer.html`` -> ``reports/explorer_data.js``."""
    html = Path(html)
    return html.with_name(f"{html.stem}_data.js")


def page_data(data_dir: str | Path, html: str | Path) -> dict[str, Any]:
    """The explorer JSON of ``data_dir`` for a page at ``html``: thumbnails as paths from the page's folder.
    Raises FileNotFoundError naming a missing ``explorer.json`` or thumbnail and the command that builds it."""
    data_dir = Path(data_dir)
    src = data_dir / "explorer.json"
    how = "python -m fraglib.explore (the explorer stage of the study's dvc.yaml) writes it"
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no explorer data; {how}")
    data = json.loads(src.read_text(encoding="utf-8"))
    folder = Path(html).resolve().parent
    for im in data["images"]:
        thumb = data_dir / im["thumb"]
        if not thumb.is_file():
            raise FileNotFoundError(f"{thumb}: thumbnail of image {im['id']} missing; {how}")
        im["thumb"] = Path(os.path.relpath(thumb.resolve(), folder)).as_posix()
    return data


def build(data_dir: str | Path, html: str | Path, title: str = "") -> tuple[Path, Path]:
    """Write the page ``html`` and its data script (:func:`data_file`); returns both paths."""
    import jinja2

    html = Path(html)
    data = page_data(data_dir, html)
    title = title or f"Explorer: {data['dataset']} test split (seed {data['seed']})"
    js = data_file(html)
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    write_text(js, f"window.EXPLORER = {payload};\n")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, keep_trailing_newline=True)
    index = Path(os.path.relpath(Path("reports/index.html").resolve(), html.resolve().parent)).as_posix()
    write_text(html, env.get_template(TEMPLATE).render(title=title, data_js=js.name, index=index))
    return html, js


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    html = Path(args.html)
    claim_cli(ap, [html, data_file(html)], [html, data_file(html)], args.overwrite, "fraglib.explorer_page")
    try:
        page, js = build(args.data, html, args.title)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    print(f"wrote {page} ({page.stat().st_size / 1e3:.0f} kB) and {js} ({js.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
