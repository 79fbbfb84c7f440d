"""``python -m fraglib.data``: convert a dataset to the internal (Karpathy) format; ``python -m fraglib.data
synthetic`` generates the synthetic benchmark, ``python -m fraglib.data download pascal1k`` fetches Pascal1K."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_text
from fraglib.data.dataset import read_karpathy_json, read_pascal1k, write_karpathy_json


def main(argv: list[str] | None = None) -> None:
    """``synthetic`` and ``download`` run their modules' commands; any other first word is a dataset to convert."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["synthetic"]:
        from fraglib.data.synthetic import main as run
    elif argv[:1] == ["download"]:
        from fraglib.data.download import main as run
    else:
        return convert(argv)
    sys.argv[0] = f"python -m fraglib.data {argv[0]}"
    return run(argv[1:])


@command
def convert(argv: list[str] | None = None) -> None:
    """Convert a dataset to the internal (Karpathy) format::

    python -m fraglib.data pascal1k  --root DIR --out data/pascal1k [--split-seed N]
    python -m fraglib.data pascal1k  --root DIR --out data/pascal1k/folds --folds 10 --partition P   # fold0 … fold9
    python -m fraglib.data flickr8k  --root TEXT_DIR --images DIR --out data/flickr8k
    python -m fraglib.data flickr8k  --root TEXT_DIR --text-only --out data/flickr8k   # captions only
    python -m fraglib.data flickr30k --token results_20130124.token --images DIR --out data/flickr30k
    python -m fraglib.data karpathy  --json dataset_flickr30k.json --images DIR --out data/flickr30k
    python -m fraglib.data karpathy  --json dataset_coco.json --images COCO_ROOT --out data/coco   # train2014/, val2014/
    python -m fraglib.data precomp   --root data/coco_precomp --splits train,dev,testall --out data/coco_precomp
    """
    import argparse

    ap = argparse.ArgumentParser(description=convert.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=["pascal1k", "flickr8k", "flickr30k", "karpathy", "precomp"])
    ap.add_argument("--root", help="pascal1k: folder with sentences.json and images/; flickr8k: the text release")
    ap.add_argument("--images", help="image folder (flickr8k, flickr30k, karpathy)")
    ap.add_argument("--token", help="flickr30k: the results token file")
    ap.add_argument("--json", help="karpathy: a dataset_*.json file")
    ap.add_argument("--splits", default="train,dev,test", help="precomp: which {split}_ims.npy / {split}_caps.txt")
    ap.add_argument(
        "--text-only", action="store_true", help="flickr8k: captions only, no image folder (image view 'none')"
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument(
        "--folds",
        type=int,
        help="pascal1k: k stratified folds instead of one split: <out>/fold<f>/ for f < k, fold f the test set, "
        "f + 1 (mod k) the validation set, the others the training set",
    )
    ap.add_argument("--partition", type=int, default=0, help="pascal1k with --folds: the seed of the fold partition")
    ap.add_argument("--n-val", type=int, default=1000, help="flickr30k from the token file: val images")
    ap.add_argument("--n-test", type=int, default=1000, help="flickr30k from the token file: test images")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP + " (precomp: its feature caches too)")
    args = ap.parse_args(argv)
    need = {
        "pascal1k": ["root"],
        "flickr8k": ["root"] + ([] if args.text_only else ["images"]),
        "flickr30k": ["token", "images"],
        "karpathy": ["json", "images"],
        "precomp": ["root"],
    }[args.dataset]
    for n in need:
        if not getattr(args, n):
            ap.error(f"{args.dataset} needs --{n}")
    uses = {  # the options each converter reads: any other one given is refused, never silently ignored
        "pascal1k": {"root", "split_seed", "folds", "partition"},
        "flickr8k": {"root", "images", "text_only"},
        "flickr30k": {"token", "images", "split_seed", "n_val", "n_test"},
        "karpathy": {"json", "images"},
        "precomp": {"root", "splits"},
    }[args.dataset]
    ignored = [
        f"--{k.replace('_', '-')}"
        for k in ("root", "images", "token", "json", "splits", "text_only", "split_seed", "folds", "partition")
        + ("n_val", "n_test")
        if k not in uses and getattr(args, k) != ap.get_default(k)
    ]
    if ignored:
        ap.error(
            f"{args.dataset} does not read {', '.join(ignored)}: leave {'it' if len(ignored) == 1 else 'them'} out"
        )
    if args.text_only and (args.dataset != "flickr8k" or args.images):
        ap.error("--text-only: flickr8k only, without --images")
    if args.folds is not None:
        if args.dataset != "pascal1k":
            ap.error("--folds: pascal1k only")
        write_folds(ap, args)
        return
    report: dict[str, Any] = {}
    out = Path(args.out)
    family = [out / "dataset.json", out / "conversion.json"]
    if args.dataset == "precomp":
        from fraglib.data.cache import cache_family
        from fraglib.data.precomp import cache_paths, read_precomp, write_cache

        try:
            ds, feats, counts = read_precomp(args.root, args.splits.split(","))
        except (ValueError, FileNotFoundError) as exc:
            ap.error(str(exc))
        claim_cli(
            ap,
            family + cache_family(out / "features"),
            family[:1] + cache_paths(counts, out),
            args.overwrite,
            f"python -m fraglib.data precomp --out {out}",
        )
        write_karpathy_json(ds, Path(args.out) / "dataset.json")
        paths = write_cache(ds, feats, counts, args.out)
        print(f"wrote {ds} to {args.out}/dataset.json and {', '.join(map(str, paths))}")
        return
    if args.dataset == "pascal1k":
        ds = read_pascal1k(args.root, args.split_seed)
        image_root = Path(args.root).resolve() / "images"
    elif args.dataset == "karpathy":
        ds = read_karpathy_json(args.json, args.images)
        image_root = Path(args.images).resolve()
    else:
        from fraglib.data.flickr import read_flickr8k, read_flickr30k

        ds, report = (
            read_flickr8k(args.root, args.images)
            if args.dataset == "flickr8k"
            else read_flickr30k(args.token, args.images, args.split_seed, args.n_val, args.n_test)
        )
        image_root = Path(args.images).resolve() if args.images else None
    claim_cli(
        ap,
        family,
        family if report else family[:1],
        args.overwrite,
        f"python -m fraglib.data {args.dataset} --out {out}",
    )
    write_karpathy_json(ds, Path(args.out) / "dataset.json", image_root=image_root)
    if report:
        write_text(Path(args.out) / "conversion.json", json.dumps(report, indent=1) + "\n")
        print("skipped/counted: " + ", ".join(f"{k}={v}" for k, v in report.items()))
    print(f"wrote {ds} to {args.out}/dataset.json")


def write_folds(ap: Any, args: Any) -> None:
    """``pascal1k --folds K --partition P``: one data folder per fold (``<out>/fold<f>/dataset.json``) and
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


if __name__ == "__main__":
    main()
