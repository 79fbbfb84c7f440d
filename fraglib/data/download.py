"""Download Pascal1K from the official UIUC page, verified against known checksums.

    python -m fraglib.data download pascal1k --out ~/data/pascal1k        # needs the internet, once

The page (``http://vision.cs.uiuc.edu/pascal-sentences/``) lists every image
(``<category>/<file>.jpg``) followed by its sentences. This writes the project's layout —
``sentences.json`` (``{file: {"category", "sentences"}}``) and ``images/<file>.jpg`` — and checks
every image against ``fraglib/data/pascal1k_sha256.json`` (SHA-256 of the 1,000 official
files); a mismatch stops with the names of the files. Nothing else in fraglib touches the network.
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

from fraglib.core.outputs import atomic, command, resumes, write_text

PASCAL_URL = "http://vision.cs.uiuc.edu/pascal-sentences/"
MANIFEST = Path(__file__).parent / "pascal1k_sha256.json"


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", choices=["pascal1k"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--url", default=PASCAL_URL)
    ap.add_argument("--allow-unverified", action="store_true", help="accept images the checksum manifest does not list")
    args = ap.parse_args(argv)
    resumes(args.out)  # keeps the images whose checksums verify
    print(download_pascal1k(args.out, args.url, allow_unverified=args.allow_unverified))
