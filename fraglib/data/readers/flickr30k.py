"""Flickr30K from its results token file (``results_20130124.token``) and its images.

    python -m fraglib.data flickr30k --token results_20130124.token --images DIR --out data/flickr30k

There are no official split lists: ``--n-val`` and ``--n-test`` images (1000 each) are drawn from ``--split-seed``
and the rest is train. Karpathy's standard split is ``dataset_flickr30k.json``: read it with the ``karpathy`` reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fraglib.core.outputs import command
from fraglib.data import convert
from fraglib.data.dataset import Dataset
from fraglib.data.flickr import read_flickr

TITLE = "Flickr30K"
CREDIT = "Flickr30K (Young, Lai, Hodosh, Hockenmaier, TACL 2014): Flickr photographs under the data set's terms of use."


def read_flickr30k(
    token_file: str | Path, image_dir: str | Path, split_seed: int = 0, n_val: int = 1000, n_test: int = 1000
) -> tuple[Dataset, dict[str, Any]]:
    """Flickr30K from its results token file; a seeded ``n_val``/``n_test`` split (see the module docstring)."""
    return read_flickr("flickr30k", token_file, image_dir, None, split_seed, n_val, n_test)


@command
def main(argv: list[str] | None = None) -> None:
    ap = convert.parser("flickr30k", __doc__)
    ap.add_argument("--token", required=True, help="the results token file")
    ap.add_argument("--images", required=True, help="the image folder")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--n-val", type=int, default=1000, help="validation images drawn")
    ap.add_argument("--n-test", type=int, default=1000, help="test images drawn")
    args = ap.parse_args(argv)
    ds, report = read_flickr30k(args.token, args.images, args.split_seed, args.n_val, args.n_test)
    convert.write(ap, args, ds, report, Path(args.images).resolve())
