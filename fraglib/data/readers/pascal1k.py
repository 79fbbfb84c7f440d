"""Pascal1K (the UIUC Pascal Sentence data set): its reader, its k-fold partition and its download.

    python -m fraglib.data pascal1k --root DIR --out data/pascal1k [--split-seed N]
    python -m fraglib.data pascal1k --root DIR --out data/pascal1k/folds --folds 10 --partition P   # fold0 … fold9
    python -m fraglib.data download pascal1k --out ~/data/pascal1k        # needs the internet, once

``DIR`` holds ``sentences.json`` (``{file: {"category", "sentences"}}``) and ``images/``. The split is 800/100/100
stratified by category from ``--split-seed`` (the paper's split was never published); ``--folds K`` writes one data
folder per fold instead (``<out>/fold<f>/``: fold f the test set, f + 1 (mod K) the validation set, the others the
training set) and ``<out>/folds.json``.

The download reads the official page (``http://vision.cs.uiuc.edu/pascal-sentences/``), which lists every image
(``<category>/<file>.jpg``) followed by its sentences, writes the layout above and checks every image against
``fraglib/data/pascal1k_sha256.json`` (SHA-256 of the 1,000 official files); a mismatch stops with the names of the
files. Nothing else in fraglib touches the network.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

from fraglib.core.outputs import atomic, claim_cli, command, resumes, write_text
from fraglib.data import convert
from fraglib.data.dataset import (
    Dataset,
    fold_split,
    read_json,
    stratified_folds,
    stratified_split,
    tokenize,
    write_karpathy_json,
)

TITLE = "Pascal1K"
CREDIT = (
    "UIUC Pascal Sentence data set (Rashtchian, Young, Hodosh, Hockenmaier, NAACL HLT 2010 workshop; "
    "vision.cs.uiuc.edu/pascal-sentences/): PASCAL VOC 2008 images, Flickr photographs used under the PASCAL "
    "VOC terms (flickr.com terms of use). Thumbnails of one test split's or fold's images only."
)


def read_pascal1k(root: str | Path, split_seed: int = 0, fold: int | None = None, folds: int = 10) -> Dataset:
    """Pascal1K from ``root/sentences.json`` (``{file: {"category", "sentences"}}``) and
    ``root/images/``; split 800/100/100 stratified by category from ``split_seed`` (the paper's
    split was never published), or with ``fold``: fold ``fold`` of the ``folds`` stratified folds drawn
    from partition seed ``split_seed`` (:func:`stratified_folds`, :func:`fold_split`). Images are sorted by
    file name; sentids follow that order."""
    root = Path(root)
    path = root / "sentences.json"
    raw = read_json(path, "Pascal1K sentences not found (expected layout: README, 'Real data')")
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected an object {{file name: {{category, sentences}}}}")
    for f, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("category"), str) or not entry["category"]:
            raise ValueError(f"{path}: entry {f!r} has no 'category' (a non-empty string)")
        if not isinstance(entry.get("sentences"), list) or not all(isinstance(t, str) for t in entry["sentences"]):
            raise ValueError(f"{path}: entry {f!r}: 'sentences' must be a list of strings")
    files = sorted(raw)
    cats = [raw[f]["category"] for f in files]
    split = (
        stratified_split(cats, split_seed)
        if fold is None
        else fold_split(stratified_folds(cats, folds, split_seed), fold, folds)
    )
    images, sentences = [], []
    for imgid, (f, sp) in enumerate(zip(files, split)):
        images.append({"imgid": imgid, "filename": f, "split": sp, "category": raw[f]["category"]})
        for text in raw[f]["sentences"]:
            sentences.append({"sentid": len(sentences), "imgid": imgid, "raw": text, "tokens": tokenize(text)})
    return Dataset("pascal1k", root / "images", images, sentences)


PASCAL_URL = "http://vision.cs.uiuc.edu/pascal-sentences/"
MANIFEST = Path(__file__).parents[1] / "pascal1k_sha256.json"  # SHA-256 of the 1,000 official images


class _PageParser(HTMLParser):
    """Collects, in page order, image sources and the text of table cells after each image."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[str, list[str]]] = []
        self._in_td = False
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            src = dict(attrs).get("src") or ""
            if re.search(r"\.jpe?g$", src, re.I):
                self.items.append((src, []))
        elif tag == "td":
            self._in_td, self._buf = True, []

    def handle_endtag(self, tag):
        if tag == "td" and self._in_td:
            text = " ".join("".join(self._buf).split())
            if text and self.items:
                self.items[-1][1].append(html.unescape(text))
            self._in_td = False

    def handle_data(self, data):
        if self._in_td:
            self._buf.append(data)


def parse_page(page: str) -> dict[str, dict]:
    """``{file: {"category", "sentences", "src"}}`` from the page's HTML."""
    p = _PageParser()
    p.feed(page)
    out: dict[str, dict] = {}
    for src, sentences in p.items:
        parts = src.strip("/").split("/")
        if parts[-1] in out:
            raise ValueError(
                f"the page lists the image {parts[-1]!r} twice ({out[parts[-1]]['src']} and {src}): "
                "its captions would be ambiguous"
            )
        out[parts[-1]] = {"category": parts[-2] if len(parts) > 1 else "", "sentences": sentences, "src": src}
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download_pascal1k(
    out: str | Path, url: str = PASCAL_URL, manifest: Path = MANIFEST, allow_unverified: bool = False
) -> dict[str, int]:
    """Fetch the page and its images into ``out``; every image must be in ``manifest`` with the
    right SHA-256 (``allow_unverified`` accepts, and counts, images the manifest does not know)."""
    out = Path(out)
    if not manifest.exists():
        raise FileNotFoundError(f"{manifest}: checksum manifest not found (it ships with fraglib)")
    known = json.loads(manifest.read_text())
    with urllib.request.urlopen(url if not url.endswith("/") else urljoin(url, "index.html")) as r:  # offline-ok
        items = parse_page(r.read().decode("utf-8", errors="replace"))
    if not items:
        raise RuntimeError(f"{url}: no images found on the page (has its layout changed?)")
    unlisted = sorted(k for k in items if k not in known)
    if unlisted and not allow_unverified:
        raise RuntimeError(
            f"{len(unlisted)} image(s) on the page are not in the checksum manifest {manifest.name}, "
            f"e.g. {unlisted[:5]}: not the expected Pascal1K (pass --allow-unverified to take them anyway)"
        )
    (out / "images").mkdir(parents=True, exist_ok=True)
    bad, fetched = [], 0
    for name, item in items.items():
        dest = out / "images" / name
        if not dest.exists() or (name in known and sha256(dest) != known[name]):
            with atomic(dest) as tmp:
                urllib.request.urlretrieve(urljoin(url, item["src"]), tmp)  # offline-ok: the documented download step
            fetched += 1
        if name in known and sha256(dest) != known[name]:
            bad.append(name)
    if bad:
        raise RuntimeError(f"checksum mismatch for {len(bad)} images, e.g. {bad[:5]} (re-run, or check the source)")
    write_text(
        out / "sentences.json",
        json.dumps(
            {k: {"category": v["category"], "sentences": v["sentences"]} for k, v in sorted(items.items())}, indent=1
        )
        + "\n",
    )
    return {
        "images": len(items),
        "downloaded": fetched,
        "verified": len(items) - len(unlisted),
        "not_in_manifest": len(unlisted),
        "manifest_not_on_page": len(set(known) - set(items)),
    }


@command
def main(argv: list[str] | None = None) -> None:
    ap = convert.parser("pascal1k", __doc__)
    ap.add_argument("--root", required=True, help="the folder with sentences.json and images/")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument(
        "--folds",
        type=int,
        help="k stratified folds instead of one split: <out>/fold<f>/ for f < k, fold f the test set, "
        "f + 1 (mod k) the validation set, the others the training set",
    )
    ap.add_argument("--partition", type=int, default=0, help="with --folds: the seed of the fold partition")
    args = ap.parse_args(argv)
    if args.folds is None:
        if args.partition != 0:
            ap.error("--partition: with --folds only (the one split's seed is --split-seed)")
        convert.write(ap, args, read_pascal1k(args.root, args.split_seed), None, Path(args.root).resolve() / "images")
        return
    if args.split_seed != 0:
        ap.error("--split-seed: without --folds only (the folds' seed is --partition)")
    write_folds(ap, args)


def write_folds(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--folds K --partition P``: one data folder per fold (``<out>/fold<f>/dataset.json``) and
    ``<out>/folds.json`` naming the partition."""
    out = Path(args.out)
    try:
        folds = [read_pascal1k(args.root, args.partition, f, args.folds) for f in range(args.folds)]
    except ValueError as exc:
        ap.error(f"--folds {args.folds}: {exc}")
    files = [out / f"fold{f}" / "dataset.json" for f in range(args.folds)] + [out / "folds.json"]
    claim_cli(ap, files, files, args.overwrite, f"python -m fraglib.data pascal1k --folds {args.folds} --out {out}")
    image_root = Path(args.root).resolve() / "images"
    for f, ds in enumerate(folds):
        write_karpathy_json(ds, files[f], image_root=image_root)
    write_text(out / "folds.json", json.dumps({"folds": args.folds, "partition": args.partition}) + "\n")
    print(f"wrote {args.folds} folds of {folds[0]} (partition {args.partition}) to {out}/fold0 … fold{args.folds - 1}")


@command
def download(argv: list[str] | None = None) -> None:
    """``python -m fraglib.data download pascal1k --out DIR``: the images and sentences from the official page."""
    ap = argparse.ArgumentParser(prog="python -m fraglib.data download pascal1k", description=download.__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--url", default=PASCAL_URL)
    ap.add_argument("--allow-unverified", action="store_true", help="accept images the checksum manifest does not list")
    args = ap.parse_args(argv)
    resumes(args.out)  # keeps the images whose checksums verify
    print(download_pascal1k(args.out, args.url, allow_unverified=args.allow_unverified))
