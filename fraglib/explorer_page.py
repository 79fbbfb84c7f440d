"""The explorer page: pick a test image or sentence and see what every run retrieves, and where the fragment run
aligns each fragment; built from the committed ``runs/<study>/explorer/`` (:mod:`fraglib.explore`), no checkpoint.

    python -m fraglib.explorer_page runs/synthetic/explorer reports/explorer.html [--overwrite]

Writes the page (``templates/explorer.html.j2``: HTML and its JavaScript, no server, opens from ``file://``) and
its scripts in ``<page stem>_files/`` beside it: ``data.js`` sets ``window.EXPLORER``, the explorer's JSON with
thumbnail paths relative to the page (the thumbnails stay where the data stage wrote them), and ``align_<run>.js``
per aligned run sets ``window.EXPLORER_ALIGN[run]`` (each file under 1 MB, as every committed file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from fraglib.notebook import TEMPLATES
from fraglib.outputs import OVERWRITE_HELP, claim_cli, command, remove, write_text

TEMPLATE = "explorer.html.j2"  # in fraglib/templates


def parser() -> argparse.ArgumentParser:
    """The command line; DATA and HTML come first (``fraglib.studies`` reads them there in dvc.yaml's stages)."""
    ap = argparse.ArgumentParser(prog="python -m fraglib.explorer_page", description=__doc__.split("\n")[0])
    ap.add_argument("data", help="a folder written by python -m fraglib.explore (explorer.json, thumbs/)")
    ap.add_argument("html", help="the page to write; its scripts go beside it in <stem>_files/")
    ap.add_argument("--title", default="", help="the page's title (default: from the data set's name)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    return ap


def data_file(html: str | Path) -> Path:
    """The data script of a page: ``reports/explorer.html`` -> ``reports/explorer_files/data.js``."""
    html = Path(html)
    return html.with_name(f"{html.stem}_files") / "data.js"


# explorer.json's fields (fraglib.explore writes them) and their types; each image and sentence record's too
FIELDS = {"dataset": str, "seed": int, "k": int, "runs": dict, "aligned": list, "images": list, "sentences": list}
IMAGE_FIELDS = {"id": int, "thumb": str}
SENTENCE_FIELDS = {"id": int, "image": int, "text": str}
RUN_FIELDS = {"label": str, "image_top": list, "sentence_top": list}


def check_explorer(src: Path) -> dict[str, Any]:
    """The explorer data of ``src`` (an ``explorer.json``), its fields checked; ValueError naming the file and
    the field when it is cut or damaged (the page would otherwise break in the reader's browser)."""

    def need(record: Any, fields: dict[str, type], where: str) -> None:
        if not isinstance(record, dict):
            raise ValueError(f"{src}: {where}: expected an object, got {type(record).__name__}")
        for key, kind in fields.items():
            v = record.get(key)
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise ValueError(f"{src}: {where}.{key}={v!r}: expected a{'n' * (kind is int)} {kind.__name__}")

    try:
        data = json.loads(src.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{src}: not valid JSON ({exc}): the file is cut or damaged; rebuild it") from None
    need(data, FIELDS, "explorer")
    for i, im in enumerate(data["images"]):
        need(im, IMAGE_FIELDS, f"images[{i}]")
        if not re.fullmatch(r"thumbs/[^/\\]+\.jpg", im["thumb"]):
            raise ValueError(f"{src}: images[{i}].thumb={im['thumb']!r}: not a thumbs/<id>.jpg of its own")
    n = len(data["images"])
    for i, s in enumerate(data["sentences"]):
        need(s, SENTENCE_FIELDS, f"sentences[{i}]")
        if not 0 <= s["image"] < n:
            raise ValueError(f"{src}: sentences[{i}].image={s['image']}: no such image (the data holds {n})")
    for run, r in data["runs"].items():
        need(r, RUN_FIELDS, f"runs.{run}")
    bad = [r for r in data["aligned"] if r not in data["runs"]]
    if bad:
        raise ValueError(f"{src}: aligned names {bad[0]!r}, which is not among its runs")
    return data


def page_data(data_dir: str | Path, html: str | Path) -> dict[str, Any]:
    """The explorer JSON of ``data_dir`` for a page at ``html``: thumbnails as paths from the page's folder.
    Raises FileNotFoundError naming a missing ``explorer.json`` or thumbnail and the command that builds it, and
    ValueError naming a damaged one's field (:func:`check_explorer`)."""
    data_dir = Path(data_dir)
    src = data_dir / "explorer.json"
    how = "python -m fraglib.explore (the explorer stage of the study's dvc.yaml) writes it"
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no explorer data; {how}")
    data = check_explorer(src)
    folder = Path(html).resolve().parent
    for im in data["images"]:
        thumb = data_dir / im["thumb"]
        if not thumb.is_file():
            raise FileNotFoundError(f"{thumb}: thumbnail of image {im['id']} missing; {how}")
        im["thumb"] = Path(os.path.relpath(thumb.resolve(), folder)).as_posix()
    return data


def build(data_dir: str | Path, html: str | Path, title: str = "") -> tuple[Path, Path]:
    """Write the page ``html``, its data script (:func:`data_file`) and one alignment script per aligned run;
    returns (page, data script). Raises FileNotFoundError as :func:`page_data`."""
    import jinja2

    html = Path(html)
    data = page_data(data_dir, html)
    aligns = {}
    for run in data["aligned"]:
        src = Path(data_dir) / f"alignments_{run}.json"
        if not src.is_file():
            raise FileNotFoundError(f"{src}: alignments of run {run} missing; python -m fraglib.explore writes them")
        aligns[data_file(html).with_name(f"align_{run}.js")] = (run, src.read_text(encoding="utf-8"))
    title = title or f"Explorer: {data['dataset']} test split (seed {data['seed']})"
    js = data_file(html)
    write_text(js, f"window.EXPLORER = {_script_json(json.dumps(data, separators=(',', ':')))};\n")
    for old in set(js.parent.glob("align_*.js")) - set(aligns):  # a run no longer aligned
        remove(old)
    for path, (run, text) in aligns.items():
        head = f"(window.EXPLORER_ALIGN = window.EXPLORER_ALIGN || {{}})[{json.dumps(run)}] = "
        write_text(path, f"{head}{_script_json(text)};\n")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, keep_trailing_newline=True)
    index = Path(os.path.relpath(Path("reports/index.html").resolve(), html.resolve().parent)).as_posix()
    scripts = [p.relative_to(html.parent).as_posix() for p in (js, *aligns)]
    write_text(html, env.get_template(TEMPLATE).render(title=title, scripts=scripts, index=index))
    return html, js


def _script_json(text: str) -> str:
    """JSON text safe inside a script (no ``</``)."""
    return text.replace("</", "<\\/")


@command
def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    html = Path(args.html)
    family = [html, data_file(html), *data_file(html).parent.glob("align_*.js")]
    claim_cli(ap, family, family, args.overwrite, "fraglib.explorer_page")
    try:
        page, js = build(args.data, html, args.title)
    except (FileNotFoundError, ValueError) as exc:
        ap.error(str(exc))
    print(f"wrote {page} ({page.stat().st_size / 1e3:.0f} kB) and {js} ({js.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
