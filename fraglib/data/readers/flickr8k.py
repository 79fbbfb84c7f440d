"""Flickr8K from its official text release (``Flickr8k.token.txt`` and ``Flickr_8k.{train,dev,test}Images.txt``).

    python -m fraglib.data flickr8k --root TEXT_DIR --images DIR --out data/flickr8k
    python -m fraglib.data flickr8k --root TEXT_DIR --text-only --out data/flickr8k   # captions only

The official lists give the split (6000/1000/1000); images in the token file but in no list are left out and counted
(:func:`fraglib.data.flickr.read_flickr`). ``--text-only``: no image folder, every listed image kept and none read
(the image view ``none``: the paraphrasing branch's captions, docs/formats.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fraglib.core.outputs import command
from fraglib.data import convert
from fraglib.data.dataset import Dataset
from fraglib.data.flickr import read_flickr

TITLE = "Flickr8K"
CREDIT = "Flickr8K (Hodosh, Young, Hockenmaier, JAIR 2013): Flickr photographs under the data set's terms of use."


def read_flickr8k(root: str | Path, image_dir: str | Path | None) -> tuple[Dataset, dict[str, Any]]:
    """Flickr8K from the official text release in ``root`` and the images in ``image_dir`` (None: text only)."""
    root = Path(root)
    lists = {s: root / f"Flickr_8k.{n}Images.txt" for s, n in (("train", "train"), ("val", "dev"), ("test", "test"))}
    for p in lists.values():
        if not p.exists():
            raise FileNotFoundError(f"{p}: Flickr8K split list not found")
    return read_flickr("flickr8k", root / "Flickr8k.token.txt", image_dir, lists)


@command
def main(argv: list[str] | None = None) -> None:
    ap = convert.parser("flickr8k", __doc__)
    ap.add_argument("--root", required=True, help="the text release: Flickr8k.token.txt and the split lists")
    ap.add_argument("--images", help="the image folder (or --text-only)")
    ap.add_argument("--text-only", action="store_true", help="captions only, no image folder (image view 'none')")
    args = ap.parse_args(argv)
    if bool(args.images) == args.text_only:
        ap.error("give the image folder (--images DIR) or --text-only, not both")
    ds, report = read_flickr8k(args.root, args.images)
    convert.write(ap, args, ds, report, Path(args.images).resolve() if args.images else None)
