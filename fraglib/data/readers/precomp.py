"""Precomputed features in the VSE++ / SCAN layout: ``{split}_ims.npy`` + ``{split}_caps.txt`` (docs/formats.md).

    python -m fraglib.data precomp --root data/coco_precomp --out data/coco [--splits train,dev,testall]

Writes ``dataset.json`` and the feature caches the systems read (:mod:`fraglib.data.precomp` says which); there are
no pictures. ``--overwrite`` replaces the caches too.
"""

from __future__ import annotations

from pathlib import Path

from fraglib.core.outputs import claim_cli, command
from fraglib.data import convert
from fraglib.data.cache import cache_family
from fraglib.data.dataset import write_karpathy_json
from fraglib.data.precomp import cache_paths, read_precomp, write_cache

TITLE = "precomputed features"
CREDIT = ""  # no pictures


@command
def main(argv: list[str] | None = None) -> None:
    ap = convert.parser("precomp", __doc__)
    ap.add_argument("--root", required=True, help="the folder of {split}_ims.npy and {split}_caps.txt")
    ap.add_argument("--splits", default="train,dev,test", help="which {split}_ims.npy / {split}_caps.txt")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        ds, feats, counts = read_precomp(args.root, args.splits.split(","))
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    family = [out / "dataset.json", out / "conversion.json"]
    claim_cli(
        ap,
        family + cache_family(out / "features"),
        family[:1] + cache_paths(counts, out),
        args.overwrite,
        f"{ap.prog} --out {out}",
    )
    write_karpathy_json(ds, out / "dataset.json")
    paths = write_cache(ds, feats, counts, out)
    print(f"wrote {ds} to {out}/dataset.json and {', '.join(map(str, paths))}")
