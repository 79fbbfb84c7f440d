"""Any data set in Karpathy's ``dataset.json`` format (his ``dataset_{flickr8k,flickr30k,coco}.json``, or yours).

    python -m fraglib.data karpathy --json dataset_flickr30k.json --images DIR --out data/flickr30k
    python -m fraglib.data karpathy --json dataset_coco.json --images COCO_ROOT --out data/coco   # train2014/, val2014/

The format and what it must hold: docs/formats.md (:func:`fraglib.data.read_karpathy_json` checks it).
"""

from __future__ import annotations

from pathlib import Path

from fraglib.core.outputs import command
from fraglib.data import convert
from fraglib.data.dataset import read_karpathy_json

TITLE = "Karpathy-format data"
CREDIT = ""  # the pictures' source is the data set's own: a page showing them names it from its study's dataset


@command
def main(argv: list[str] | None = None) -> None:
    ap = convert.parser("karpathy", __doc__)
    ap.add_argument("--json", required=True, help="a dataset_*.json file")
    ap.add_argument("--images", required=True, help="the image folder (an image's filepath/filename under it)")
    args = ap.parse_args(argv)
    convert.write(ap, args, read_karpathy_json(args.json, args.images), None, Path(args.images).resolve())
