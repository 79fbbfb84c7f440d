"""The data of a study's figures, small enough for git, so its results page draws them with no data or checkpoint:

    python -m fraglib_study figures --dataset-dir "data/pascal1k/split{seed}" --splits 0,1,2,3,4 \
        --parse data/pascal1k/parse.conllu --triplet-run models/pascal1k/fr_lr01/seed0 \
        --triplets "amod dog black;prep_on cat sofa;nsubj flying airplane" \
        --relation-run "models/pascal1k/sdtrnn/seed{seed}" --out runs/pascal1k/figures

* ``queries.json``: per split (``{seed}`` of ``--dataset-dir``), its test queries in the order of ``ranks.json``
  (:func:`fraglib_study.report.breakdown.query_record`): each test image's category, each test sentence's image (position among the test
  images), token count and, with the parse, whether it has a verb: what the breakdowns by category, caption length
  and verb need;
* ``triplets.json`` and ``crops/``: the paper's Figure 5 for one fragment run (:func:`triplet_record`): for each
  triplet its ``top`` highest-scoring boxes (test image id, box in px of the original, score) and each box's crop,
  a JPEG whose longer side is at most ``px``;
* ``relation_norms.csv``: with ``--relation-run`` (an SDT-RNN's seed folders, ``{seed}`` for the split), Socher et
  al. §6.7's table (:func:`fraglib_study.report.live.relation_norms`): each relation matrix's Frobenius norm, mean and sd over
  ``--splits``, with its count among the training tree edges.

The photographs (their reader's ``CREDIT``, :mod:`fraglib.data.readers`) are named in ``triplets.json``'s ``source``. The results
page reads them (:func:`fraglib_study.report.breakdown.test_groups`, :func:`fraglib_study.report.galleries.read_triplets`, ``relation_norms.csv``)
where the data or the checkpoints are absent.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.outputs import command, listed_files, remove, write_bytes, write_text
from fraglib.data import readers
from fraglib_study.experiments.explore import compact
from fraglib_study.report.breakdown import query_record
from fraglib_study.report.live import relation_norms


def crop_jpeg(image: np.ndarray, box, px: int, quality: int) -> bytes:
    """The region ``box`` ([x0, y0, x1, y1] px) of ``image`` (H, W, 3) as a JPEG, longer side at most ``px``."""
    from PIL import Image

    x0, y0, x1, y1 = np.round(np.asarray(box, dtype=float)).astype(int)
    crop = image[max(0, y0) : max(y0 + 1, y1), max(0, x0) : max(x0 + 1, x1)]
    pic = Image.fromarray(np.ascontiguousarray(crop))
    pic.thumbnail((px, px), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    pic.save(buf, "JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def triplet_record(
    seed_dir: str | Path,
    dataset_dir: str | Path,
    features_dir: str | Path | None,
    queries: str,
    out: str | Path,
    top: int = 6,
    px: int = 160,
    quality: int = 80,
) -> list[dict[str, Any]]:
    """Figure 5 of one fragment run: for each query ``"rel w1 w2"`` of ``queries`` (";"-separated), its ``top``
    hits (:func:`fraglib_study.experiments.alignment.triplet_search`) as ``{"image": test image id, "box", "score", "crop"}`` with
    the crop written to ``out/crops/<rel>_<w1>_<w2>_<n>.jpg`` (:func:`crop_jpeg`), or ``{"reason"}`` when the
    run cannot express it. Returns the list, one entry per query (``query``: ``rel(w1, w2)``)."""
    from fraglib.run.evaluate import load_trained
    from fraglib.run.inputs import DataPaths
    from fraglib.vision.rcnn import load_image
    from fraglib_study.experiments.alignment import FragmentView, glove_words, triplet_search

    paths = DataPaths(dataset_dir, features_dir)
    system, _, _ = load_trained(seed_dir, paths)
    view = FragmentView(system, paths)
    index = {w: i for i, w in enumerate(glove_words())}
    out = Path(out)
    entries = []
    for q in [t.split() for t in queries.split(";") if t.strip()]:
        if len(q) != 3:
            raise ValueError(f"triplet {' '.join(q)!r}: expected 'relation word1 word2'")
        title = f"{q[0]}({q[1]}, {q[2]})"
        hits = triplet_search(view, *q, index, top)
        if isinstance(hits, str):
            entries.append({"query": title, "reason": hits})
            continue
        rows = []
        for n, (k, box, score) in enumerate(hits, 1):
            name = f"crops/{'_'.join(q)}_{n}.jpg"
            image = load_image(view.dataset.image_path(view.image_rows[k]))[0]
            write_bytes(out / name, crop_jpeg(image, box, px, quality))
            rows.append(
                {
                    "image": view.images[k]["imgid"],
                    "box": np.round(np.asarray(box, dtype=float)).astype(int).tolist(),
                    "score": round(float(score), 3),
                    "crop": name,
                }
            )
        entries.append({"query": title, "hits": rows})
    return entries


def written_crops(out: str | Path) -> list[Path]:
    """The crops an earlier run wrote into ``out`` (those its ``triplets.json`` lists): the only files of
    ``out/crops/`` this module ever deletes (none when ``triplets.json`` is absent or damaged)."""
    return listed_files(
        out, "triplets.json", lambda data: (h["crop"] for e in data["queries"] for h in e.get("hits", [])), "crops"
    )


def run_name(seed_dir: str | Path) -> str:
    """The run of a seed folder: ``models/<study>/<run>/seed0`` or ``runs/<study>/<run>/seeds/seed0``."""
    parent = Path(seed_dir).resolve().parent
    return parent.parent.name if parent.name == "seeds" else parent.name


def data_name(dataset_dir: str | Path) -> str:
    """The name a data folder's ``dataset.json`` gives its data (its reader's, :mod:`fraglib.data.readers`)."""
    return str(json.loads((Path(dataset_dir) / "dataset.json").read_text(encoding="utf-8")).get("dataset", ""))


def build(
    out: str | Path,
    dataset_dir: str,
    splits: list[int],
    parse_file: str | Path | None = None,
    triplet_run: str | Path | None = None,
    triplets: str = "",
    features_dir: str | Path | None = None,
    dataset: str | None = None,
    top: int = 6,
    px: int = 160,
    quality: int = 80,
    relation_run: str = "",
) -> dict[str, Any]:
    """Write ``out/queries.json`` (every split of ``splits``); with ``triplet_run`` (a seed folder of a
    fragment run, trained on split ``splits[0]``), ``out/triplets.json`` and its crops; with ``relation_run`` (an
    SDT-RNN's seed folder per split, ``{seed}`` for the split), ``out/relation_norms.csv``. Returns what was
    written (``queries``, ``triplets``, ``relation_norms``). The crops of the earlier ``triplets.json`` are removed
    once the new ones are written (:func:`written_crops`, :func:`fraglib.core.outputs.prune`; no other file of ``crops/``)."""
    out = Path(out)
    queries = {str(s): query_record(dataset_dir.format(seed=s), parse_file) for s in splits}
    write_text(out / "queries.json", compact(queries))
    written: dict[str, Any] = {"queries": queries}
    old = written_crops(out)  # removed once the new crops are written (prune, below), never before
    if triplet_run:
        seed = splits[0]
        entries = triplet_record(
            triplet_run, dataset_dir.format(seed=seed), features_dir, triplets, out, top, px, quality
        )
        record = {
            "run": run_name(triplet_run),
            "seed": seed,
            "source": readers.credit(dataset or data_name(dataset_dir.format(seed=seed))),
            "queries": entries,
        }
        write_text(out / "triplets.json", json.dumps(record, indent=1) + "\n")
        written["triplets"] = record
    new = {out / h["crop"] for e in written.get("triplets", {}).get("queries", []) for h in e.get("hits", [])}
    for p in old:
        if p not in new:
            remove(p)
    if relation_run:
        norms = relation_norms(
            [relation_run.format(seed=s) for s in splits], [dataset_dir.format(seed=s) for s in splits], features_dir
        )
        write_text(out / "relation_norms.csv", norms.round(4).to_csv(index=False))
        written["relation_norms"] = norms
    return written


@command
def main(argv: list[str] | None = None) -> None:
    from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, prune

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True, help='one split per seed, e.g. "data/pascal1k/split{seed}"')
    ap.add_argument("--splits", default="0", help="comma-separated split seeds (the first: the triplet run's)")
    ap.add_argument("--parse", help="CoNLL-U parse of the captions (the verb split)")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features (as the run was trained)")
    ap.add_argument("--triplet-run", help="a fragment run's seed folder (best.pt) for the triplet search")
    ap.add_argument("--triplets", default="", help='"rel w1 w2;..." (the results page\'s query_triplets)')
    ap.add_argument(
        "--relation-run", default="", help='an SDT-RNN\'s seed folders, e.g. "models/pascal1k/sdtrnn/seed{seed}"'
    )
    ap.add_argument(
        "--dataset",
        choices=readers.names(),
        help="its reader, which names the pictures' source (default: the data's own name, its dataset.json's)",
    )
    ap.add_argument("--out", required=True, help="folder of queries.json, triplets.json and crops/")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    out = Path(args.out)
    family = [out / "queries.json", out / "triplets.json", out / "relation_norms.csv", *written_crops(out)]
    # nothing is deleted before the work: the earlier set stays whole until the new one is written (then pruned)
    claim_cli(ap, family, family, args.overwrite, "fraglib_study.report.figure_data")
    if args.triplet_run and not (Path(args.triplet_run) / "best.pt").is_file():
        ap.error(f"no best.pt in {args.triplet_run}: train that run first")
    splits = [int(s) for s in args.splits.split(",") if s]
    for s in splits if args.relation_run else []:
        if not (Path(args.relation_run.format(seed=s)) / "best.pt").is_file():
            ap.error(f"no best.pt in {args.relation_run.format(seed=s)}: train that run first")
    build(
        out,
        args.dataset_dir,
        splits,
        args.parse,
        args.triplet_run,
        args.triplets,
        args.features_dir,
        args.dataset,
        relation_run=args.relation_run,
    )
    prune(family)  # what the earlier run wrote and this one did not (its triplets, when none were asked for)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {len(splits)} splits' queries, {size / 1e3:.0f} kB")
