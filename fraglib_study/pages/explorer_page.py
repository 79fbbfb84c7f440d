"""The explorer page: pick a test image or sentence and see what every run retrieves, and where the fragment run
aligns each fragment; built from a study's committed explorer data, no checkpoint: ``runs/synthetic/figures/`` (the
synthetic study's figure data, :mod:`fraglib_study.report.figure_data`) or ``runs/pascal1k_folds/explorer/`` (the fold
explorer, :mod:`fraglib_study.experiments.explore`).

    python -m fraglib_study explorer-page runs/synthetic/figures reports/explorer.html [--title T] [--overwrite]

Writes the page (``templates/explorer.html.j2``: HTML and its JavaScript, no server, opens from ``file://``) and
its scripts in ``<page stem>_files/`` beside it: ``data.js`` sets ``window.EXPLORER``, the explorer's JSON with
thumbnail paths relative to the page, and ``align_<run>.js`` per aligned run sets ``window.EXPLORER_ALIGN[run]``
(each file under 1 MB, as every committed file). The thumbnails stay where the data stage wrote them (one copy in
git): the stage that writes the data puts them under ``reports/`` (``--thumbs`` of ``figures`` or ``explore``), so the page
and its pictures travel together; the page refuses data whose thumbnail is missing. Labels: each run's
``params.yaml`` label without notes on another protocol's splits (:func:`shown_label`); the title names the data
set and the protocol (:func:`page_title`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from fraglib.core.outputs import OVERWRITE_HELP, Refused, claim_cli, command, remove, write_text
from fraglib.data import readers
from fraglib_study.report.notebook import TEMPLATES

TEMPLATE = "explorer.html.j2"  # in fraglib_study/templates


def parser() -> argparse.ArgumentParser:
    """The command line; DATA and HTML come first (``fraglib_study.report.registry`` reads them there in dvc.yaml's stages)."""
    ap = argparse.ArgumentParser(prog="python -m fraglib_study explorer-page", description=__doc__.split("\n")[0])
    ap.add_argument("data", help="a folder written by python -m fraglib_study explore (explorer.json, thumbs/)")
    ap.add_argument("html", help="the page to write; its scripts go beside it in <stem>_files/")
    ap.add_argument("--title", default="", help="the page's title (default: from the data set's name)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    return ap


def data_file(html: str | Path) -> Path:
    """The data script of a page: ``reports/explorer.html`` -> ``reports/explorer_files/data.js``."""
    html = Path(html)
    return html.with_name(f"{html.stem}_files") / "data.js"


WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
# a label's note on the splits a study trained the run on ("(Pascal1K: splits 0-1)", "(…; Pascal1K, Flickr8K:
# splits 0-1)"): true of another page's protocol, not of the items an explorer shows
_SPLIT_NOTE = r"[A-Z][A-Za-z0-9]*(?:, [A-Z][A-Za-z0-9]*)*: splits? [0-9][^;()]*"


def shown_label(label: str) -> str:
    """A run's label as the explorer shows it: its ``params.yaml`` label without notes on the splits a study
    trained it on (``"Peri: STT-ATT (…, + decoder; Pascal1K: splits 0-1)"`` -> ``"Peri: STT-ATT (…, + decoder)"``):
    the page's title says which data and protocol its items come from."""
    label = re.sub(rf"\s*\({_SPLIT_NOTE}\)", "", label)
    return re.sub(rf";\s*{_SPLIT_NOTE}(?=\))", "", label).strip()


def page_title(data: dict[str, Any]) -> str:
    """The page's title from its data: the data set (its reader's title, :mod:`fraglib.data.readers`) and the
    protocol (``Explorer: Pascal1K, fold 0 of the ten-fold protocol``; ``Explorer: synthetic benchmark, test split of
    seed 0``)."""
    name = readers.title(data["dataset"])
    if data.get("protocol") == "folds":
        k = data.get("folds")
        return f"Explorer: {name}, fold {data['seed']} of the {WORDS.get(k, k)}-fold protocol"
    return f"Explorer: {name}, test split of seed {data['seed']}"


# explorer.json's fields (fraglib_study.experiments.explore writes them) and their types; each image and sentence record's too
FIELDS = {"dataset": str, "seed": int, "k": int, "runs": dict, "aligned": list, "images": list, "sentences": list}
IMAGE_FIELDS = {"id": int, "thumb": str}
SENTENCE_FIELDS = {"id": int, "image": int, "text": str}
RUN_FIELDS = {"label": str, "image_top": list, "sentence_top": list}
# optional per run: image_rank and sentence_rank, where the answer is (the rank of each image query's best-ranked own
# sentence, 0 for none, and of each sentence query's image); data written before fraglib_study.experiments.explore recorded them lack
# them, and the page then says that a rank beyond the top k is not stored
# optional: protocol ("folds") and folds (their number); missing, the runs not shown, each with its label, why and
# the command that makes what it lacks; rebuild, the command that then rebuilds data and page; per run: unit (the training shown, "0" or "0r1") and joint_space (a bool)
MISSING_FIELDS = {"run": str, "label": str, "reason": str, "command": str}
# a thumbnail: <folder ending in thumbs>/<id>.jpg, the folder relative to the data folder (thumbs/, or a page's own
# folder under reports/ such as ../../reports/explorer_thumbs/)
THUMB = r"(?:\.\./)*(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)*[A-Za-z0-9_.-]*thumbs/[^/\\]+\.jpg"
MAP_FIELDS = {"method": str, "images": list, "sentences": list, "n_images": list, "n_sentences": list}
ALIGN_FIELDS = {"boxes": list, "fragments": dict, "pairs": dict}
RUN_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # an aligned run's name: part of its script's file name
ALIGN_HEAD = "(window.EXPLORER_ALIGN = window.EXPLORER_ALIGN || {})["  # how every alignment script it writes starts


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
        if not re.fullmatch(THUMB, im["thumb"]):
            raise ValueError(f"{src}: images[{i}].thumb={im['thumb']!r}: not a thumbs/<id>.jpg of its own")
    n = len(data["images"])
    for i, s in enumerate(data["sentences"]):
        need(s, SENTENCE_FIELDS, f"sentences[{i}]")
        if not 0 <= s["image"] < n:
            raise ValueError(f"{src}: sentences[{i}].image={s['image']}: no such image (the data holds {n})")
    if data["k"] < 1:
        raise ValueError(f"{src}: explorer.k={data['k']}: expected at least 1 (items listed per query)")
    m = len(data["sentences"])
    if data.get("protocol", "folds") != "folds" or not _is_int(data.get("folds", 3)) or data.get("folds", 3) < 3:
        raise ValueError(f"{src}: protocol={data.get('protocol')!r}, folds={data.get('folds')!r}: expected folds, >= 3")
    if not isinstance(data.get("rebuild", ""), str):
        raise ValueError(f"{src}: explorer.rebuild={data['rebuild']!r:.60}: expected a str (a command)")
    missing = data.get("missing", [])
    if not isinstance(missing, list):
        raise ValueError(f"{src}: explorer.missing={missing!r:.60}: expected a list")
    for i, entry in enumerate(missing):
        need(entry, MISSING_FIELDS, f"missing[{i}]")
    for run, r in data["runs"].items():
        need(r, RUN_FIELDS, f"runs.{run}")
        for key, kind in (("unit", str), ("joint_space", bool)):
            if key in r and not isinstance(r[key], kind):
                raise ValueError(f"{src}: runs.{run}.{key}={r[key]!r}: expected a {kind.__name__}")
        for key, rows, of, what in (("image_top", n, m, "sentences"), ("sentence_top", m, n, "images")):
            top = r[key]
            if len(top) != rows:
                raise ValueError(f"{src}: runs.{run}.{key}: {len(top)} rows, expected one per query ({rows})")
            for q, row in enumerate(top):
                if not isinstance(row, list) or len(row) != data["k"]:
                    raise ValueError(
                        f"{src}: runs.{run}.{key}[{q}]={row!r}: expected a list of k={data['k']} positions"
                    )
                bad = [x for x in row if not _is_int(x) or not 0 <= x < of]
                if bad:
                    raise ValueError(
                        f"{src}: runs.{run}.{key}[{q}] holds {bad[0]!r}: not a position among the {of} {what}"
                    )
        owner = [s["image"] for s in data["sentences"]]
        correct = {  # the list position of each query's first correct item, None when its list holds none
            "image_rank": [
                next((p for p, j in enumerate(row) if owner[j] == q), None) for q, row in enumerate(r["image_top"])
            ],
            "sentence_rank": [
                next((p for p, i in enumerate(row) if i == owner[q]), None) for q, row in enumerate(r["sentence_top"])
            ],
        }
        for key, of, what, low in (("image_rank", m, "sentences", 0), ("sentence_rank", n, "images", 1)):
            if key not in r:  # older data: no rank beyond the lists
                continue
            ranks = r[key]
            if not isinstance(ranks, list) or len(ranks) != len(correct[key]):
                raise ValueError(
                    f"{src}: runs.{run}.{key}: expected a list of {len(correct[key])} ranks, one per query"
                )
            for q, (rank, pos) in enumerate(zip(ranks, correct[key])):
                if not _is_int(rank) or not low <= rank <= of:
                    raise ValueError(f"{src}: runs.{run}.{key}[{q}]={rank!r}: not a rank among the {of} {what}")
                # the metrics' ranks are pessimistic on ties: never above the first correct item's place in the
                # list, and within k only when the list holds one
                if (pos is None and 1 <= rank <= data["k"]) or (pos is not None and rank <= pos):
                    where = "not in" if pos is None else f"at place {pos + 1} of"
                    raise ValueError(f"{src}: runs.{run}.{key}[{q}]={rank}: its first correct item is {where} the list")
    bad = [r for r in data["aligned"] if r not in data["runs"]]
    if bad:
        raise ValueError(f"{src}: aligned names {bad[0]!r}, which is not among its runs")
    bad = [r for r in data["aligned"] if not re.fullmatch(RUN_NAME, r)]
    if bad:
        raise ValueError(f"{src}: aligned names {bad[0]!r}: not a run name (letters, digits, _ . -) for a file name")
    maps = data.get("maps", {})
    if not isinstance(maps, dict):
        raise ValueError(f"{src}: explorer.maps={maps!r}: expected an object")
    for run, M in maps.items():
        where = f"maps.{run}"
        if run not in data["runs"]:
            raise ValueError(f"{src}: {where}: not among its runs")
        need(M, MAP_FIELDS, where)
        for key, size in (("images", n), ("sentences", m)):
            if len(M[key]) != size:
                raise ValueError(f"{src}: {where}.{key}: {len(M[key])} points, expected {size} (one per item)")
            for i, pt in enumerate(M[key]):
                if not (isinstance(pt, list) and len(pt) == 2 and all(_is_number(x) and 0 <= x <= 1 for x in pt)):
                    raise ValueError(f"{src}: {where}.{key}[{i}]={pt!r}: expected [x, y], two numbers in [0, 1]")
            counts = M[f"n_{key}"]
            if len(counts) != size or not all(_is_int(c) and c >= 0 for c in counts):
                raise ValueError(f"{src}: {where}.n_{key}: expected {size} counts N_k (whole numbers >= 0)")
    return data


def check_alignments(src: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The alignments of ``src`` (an ``alignments_<run>.json`` of :mod:`fraglib_study.experiments.explore`) for the checked explorer
    ``data``: ValueError naming the file and what is wrong when it is not JSON or not that shape (``boxes`` per
    image, ``fragments`` per sentence, ``pairs`` ``"i,j"`` -> [box, score × 10, …] two numbers per fragment)."""

    def bad(what: str) -> ValueError:
        return ValueError(f"{src}: {what}; python -m fraglib_study explore writes it, rebuild it")

    def constant(name: str) -> None:
        raise ValueError(f"{name} is no JSON number")

    try:
        A = json.loads(src.read_text(encoding="utf-8"), parse_constant=constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not valid JSON ({exc})") from None
    if not isinstance(A, dict):
        raise bad(f"expected an object with {', '.join(ALIGN_FIELDS)}, got {type(A).__name__}")
    for key, kind in ALIGN_FIELDS.items():
        if not isinstance(A.get(key), kind):
            raise bad(
                f"{key}={A.get(key)!r:.60}: expected a{'n' * (kind is dict)} {'object' if kind is dict else 'list'}"
            )
    n, m = len(data["images"]), len(data["sentences"])
    if len(A["boxes"]) != n:
        raise bad(f"boxes: {len(A['boxes'])} images, expected {n}")
    for i, boxes in enumerate(A["boxes"]):
        ok = isinstance(boxes, list) and all(
            isinstance(b, list) and len(b) == 4 and all(_is_number(x) for x in b) for b in boxes
        )
        if not ok:
            raise bad(f"boxes[{i}]={boxes!r:.60}: expected a list of [x0, y0, x1, y1] boxes")
    for j, frags in A["fragments"].items():
        if not (re.fullmatch(r"\d+", j) and int(j) < m):
            raise bad(f"fragments.{j}: not a sentence position (the data holds {m})")
        if not isinstance(frags, list) or not all(isinstance(f, str) for f in frags):
            raise bad(f"fragments.{j}={frags!r:.60}: expected a list of texts")
    for key, flat in A["pairs"].items():
        pos = re.fullmatch(r"(\d+),(\d+)", key)
        if not pos or int(pos[1]) >= n or int(pos[2]) >= m:
            raise bad(f"pairs.{key}: not an image,sentence pair of positions (the data holds {n}, {m})")
        i, j = int(pos[1]), int(pos[2])
        frags = A["fragments"].get(str(j))
        ok = isinstance(flat, list) and all(_is_number(x) for x in flat) and frags is not None
        if not ok or len(flat) != 2 * len(frags):
            raise bad(f"pairs.{key}={flat!r:.60}: expected a box and a score per fragment of sentence {j}")
        if not all(_is_int(b) and 0 <= b < len(A["boxes"][i]) for b in flat[::2]):
            raise bad(f"pairs.{key}: a box outside the {len(A['boxes'][i])} of image {i}")
    return A


def written_scripts(folder: Path) -> list[Path]:
    """The alignment scripts in ``folder`` (a page's ``<stem>_files/``) that this command wrote: those starting with
    ``ALIGN_HEAD``; what ``--overwrite`` may replace or delete. Any other ``align_*.js`` there is never touched."""
    head = ALIGN_HEAD.encode()
    out = []
    for p in sorted(folder.glob("align_*.js")):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as fh:
                if fh.read(len(head)) == head:
                    out.append(p)
    return out


def page_data(data_dir: str | Path, html: str | Path) -> dict[str, Any]:
    """The explorer JSON of ``data_dir`` for a page at ``html``: thumbnails as paths from the page's folder.
    Raises FileNotFoundError naming a missing ``explorer.json`` or thumbnail and the command that builds it, and
    ValueError naming a damaged one's field (:func:`check_explorer`)."""
    data_dir = Path(data_dir)
    src = data_dir / "explorer.json"
    how = "the study's dvc.yaml stage that makes its figure or explorer data (python -m fraglib_study figures, explore) writes it"
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no explorer data; {how}")
    data = check_explorer(src)
    data.setdefault("maps", {})  # older data without maps: the page shows none
    folder = Path(html).resolve().parent
    for r in data["runs"].values():
        r["label"] = shown_label(r["label"])
    for m in data.get("missing", []):
        m["label"] = shown_label(m["label"])
    for im in data["images"]:
        thumb = data_dir / im["thumb"]
        if not thumb.is_file():
            raise FileNotFoundError(f"{thumb}: thumbnail of image {im['id']} missing; {how}")
        im["thumb"] = Path(os.path.relpath(thumb.resolve(), folder)).as_posix()
    return data


def build(data_dir: str | Path, html: str | Path, title: str = "") -> tuple[Path, Path]:
    """Write the page ``html``, its data script (:func:`data_file`) and one alignment script per aligned run;
    returns (page, data script). Raises FileNotFoundError as :func:`page_data`, ValueError naming a damaged
    alignments file (:func:`check_alignments`) and FileExistsError naming an ``align_<run>.js`` it would replace
    that it did not write (:func:`written_scripts`)."""
    import jinja2

    html = Path(html)
    data = page_data(data_dir, html)
    js = data_file(html)
    ours = set(written_scripts(js.parent))
    aligns = {}
    for run in data["aligned"]:
        src = Path(data_dir) / f"alignments_{run}.json"
        if not src.is_file():
            raise FileNotFoundError(
                f"{src}: alignments of run {run} missing; python -m fraglib_study explore writes them"
            )
        path = js.with_name(f"align_{run}.js")
        if (path.exists() or path.is_symlink()) and path not in ours:
            raise FileExistsError(
                f"{path}: not an alignment script this command wrote: refusing to replace it, with or without "
                "--overwrite; move it away or write the page elsewhere"
            )
        aligns[path] = (run, check_alignments(src, data))
    title = title or page_title(data)
    write_text(js, f"window.EXPLORER = {_script_json(json.dumps(data, separators=(',', ':')))};\n")
    for old in ours - set(aligns):  # a run no longer aligned; never a script it did not write
        remove(old)
    for path, (run, found) in aligns.items():  # re-serialised: only data reaches the script
        text = json.dumps(found, separators=(",", ":"), allow_nan=False)
        write_text(path, f"{ALIGN_HEAD}{json.dumps(run)}] = {_script_json(text)};\n")
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
    family = [html, data_file(html), *written_scripts(data_file(html).parent)]
    claim_cli(ap, family, family, args.overwrite, "fraglib_study.pages.explorer_page")
    try:
        page, js = build(args.data, html, args.title)
    except Refused:  # the output contract's own refusal: the command wrapper names it
        raise
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        ap.error(str(exc))
    print(f"wrote {page} ({page.stat().st_size / 1e3:.0f} kB) and {js} ({js.stat().st_size / 1e3:.0f} kB)")
