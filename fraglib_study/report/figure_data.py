"""The data of a study's figures, small enough for git, so its results page draws them with no data or checkpoint:

    python -m fraglib_study figures --dataset-dir "data/pascal1k/split{seed}" --splits 0,1,2,3,4 \
        --parse data/pascal1k/parse.conllu --triplet-run models/pascal1k/fr_lr01/seed0 \
        --triplets "amod dog black;prep_on cat sofa;nsubj flying airplane" \
        --relation-run "models/pascal1k/sdtrnn/seed{seed}" --models-dir models/pascal1k --runs fr_lr01,devise_d2048 \
        --align-runs fr_lr01 --map-runs devise_d2048 --out runs/pascal1k/figures

* ``queries.json``: per split (``{seed}`` of ``--dataset-dir``), its test queries in the order of ``ranks.json``
  (:func:`fraglib_study.report.breakdown.query_record`): each test image's category, each test sentence's image (position among the test
  images), token count and, with the parse, whether it has a verb: what the breakdowns by category, caption length
  and verb need;
* ``triplets.json`` and ``crops/``: the paper's Figure 5 for one fragment run (:func:`triplet_record`): for each
  triplet its ``top`` highest-scoring boxes (test image id, box in px of the original, score) and each box's crop,
  a JPEG whose longer side is at most ``px``;
* ``relation_norms.csv``: with ``--relation-run`` (an SDT-RNN's seed folders, ``{seed}`` for the split), Socher et
  al. §6.7's table (:func:`relation_norms`): each relation matrix's Frobenius norm, mean and sd over
  ``--splits``, with its count among the training tree edges.

* ``explorer.json``, ``alignments_<run>.json`` and the thumbnails (``--thumbs``, default ``thumbs/``): with
  ``--models-dir`` and ``--runs``, what each run of ``--runs`` retrieves on split ``splits[0]`` and where its
  fragments look (:func:`fraglib_study.experiments.explore.build`, ``params.yaml: explorer``): the paper's Figure 4,
  the caption galleries' pictures and, for the synthetic study, the explorer page;
* ``alignment.csv``: with ``--truth`` (the synthetic benchmark's ground truth), the alignment accuracy of each
  fragment run of ``--runs`` on each split (:func:`fraglib_study.experiments.alignment.alignment_accuracy`).

This command is the only producer of a results page's figure data: the page reads this folder and no checkpoint
(one path per figure), so rendering it loads neither torch nor a system. The photographs (their reader's ``CREDIT``,
:mod:`fraglib.data.readers`) are named in ``triplets.json``'s and ``explorer.json``'s ``source``.

    python -m fraglib_study figures --dataset-dir data/synthetic --parse data/synthetic/parse.conllu \
        --models-dir models/synthetic --thumbs reports/explorer_thumbs \
        --truth data/synthetic/ground_truth.json --out runs/synthetic/figures
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.core.outputs import command, listed_files, remove, write_bytes, write_text
from fraglib.data import readers
from fraglib_study.experiments import explore
from fraglib_study.experiments.explore import compact
from fraglib_study.report.breakdown import query_record


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


def relation_norms(
    seed_dirs: list[str | Path], dataset_dirs: list[str | Path], features_dir: str | Path | None = None
) -> pd.DataFrame:
    """Socher et al. §6.7: the Frobenius norm of each relation matrix of trained SDT-RNNs (one seed
    dir per split, each with its dataset dir), with the relation's count among that split's
    training tree edges; mean over splits, largest first. Columns: relation, norm, norm_sd, train_edges."""
    from fraglib.run.evaluate import load_trained
    from fraglib.run.inputs import DataPaths

    rows = []
    for seed_dir, dataset_dir in zip(seed_dirs, dataset_dirs):
        system, ck, train = load_trained(seed_dir, DataPaths(dataset_dir, features_dir), "train")
        if getattr(system.cfg, "encoder", None) != "sdtrnn":
            raise ValueError(
                f"{seed_dir}: not an SDT-RNN (system {ck['system']}); relation matrices need encoder sdtrnn"
            )
        names = ck["info"]["relations"]
        counts = np.bincount(train.sentences.data["rel"].numpy(), minlength=len(names))
        norms = system.W.detach().flatten(1).norm(dim=1).numpy()
        rows += [{"relation": r, "norm": float(norms[k]), "train_edges": int(counts[k])} for k, r in enumerate(names)]
    df = (
        pd.DataFrame(rows)
        .groupby("relation", as_index=False)
        .agg(norm=("norm", "mean"), norm_sd=("norm", "std"), train_edges=("train_edges", "mean"))
    )
    return df.sort_values("norm", ascending=False, ignore_index=True)


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


def accuracy_table(seed_dirs: dict[str, list[Path]], dataset_dir: str, splits: list[int], truth_file: str | Path):
    """``alignment.csv``'s rows: per fragment run (run -> its seed folder per split of ``splits``) and split, the
    alignment accuracy against the synthetic ground truth, its chance level and the fragments counted
    (:func:`fraglib_study.experiments.alignment.alignment_accuracy`)."""
    from fraglib_study.experiments.alignment import alignment_accuracy

    rows = [
        {"run": run, "seed": s, **alignment_accuracy(d, dataset_dir.format(seed=s), truth_file)}
        for run, dirs in seed_dirs.items()
        for s, d in zip(splits, dirs)
    ]
    return pd.DataFrame(rows, columns=["run", "seed", "accuracy", "chance", "fragments"])


@command
def main(argv: list[str] | None = None) -> None:
    from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, prune
    from fraglib_study.schema import read_checked

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True, help='one split per seed, e.g. "data/pascal1k/split{seed}"')
    ap.add_argument("--splits", default="0", help="comma-separated split seeds (the first: the shown runs' split)")
    ap.add_argument("--parse", help="CoNLL-U parse of the captions (the verb split)")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features (as the run was trained)")
    ap.add_argument("--triplet-run", help="a fragment run's seed folder (best.pt) for the triplet search")
    ap.add_argument("--triplets", default="", help='"rel w1 w2;..." (the results page\'s query_triplets)')
    ap.add_argument(
        "--relation-run", default="", help='an SDT-RNN\'s seed folders, e.g. "models/pascal1k/sdtrnn/seed{seed}"'
    )
    ap.add_argument("--models-dir", help="the study's checkpoints, <models-dir>/<run>/seed<split>/ (--runs)")
    ap.add_argument(
        "--runs",
        help="comma-separated runs whose top-k lists, alignments and thumbnails are kept (explorer.json; with "
        "--models-dir, default: params.yaml study.runs)",
    )
    ap.add_argument(
        "--align-runs", help="of --runs, the fragment runs whose alignments are kept (default: explorer.align_runs)"
    )
    ap.add_argument("--map-runs", help="of --runs, those with a 2-D map, or all (default: explorer.map_runs)")
    ap.add_argument("--thumbs", help="folder of the thumbnails (default <out>/thumbs; e.g. reports/explorer_thumbs)")
    ap.add_argument(
        "--truth",
        help="the synthetic benchmark's ground_truth.json: the images' categories, and the alignment accuracy of "
        "every fragment run of --runs on every split (alignment.csv)",
    )
    ap.add_argument(
        "--dataset",
        choices=readers.names(),
        help="its reader, which names the pictures' source (default: the data's own name, its dataset.json's)",
    )
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", required=True, help="folder of the figure data (queries.json, triplets.json, crops/, ...)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    out = Path(args.out)
    splits = [int(s) for s in args.splits.split(",") if s]
    if args.runs is not None and not args.models_dir:
        ap.error("--runs reads the checkpoints: name them with --models-dir")
    ignored = [f"--{k.replace('_', '-')}" for k in ("truth", "align_runs", "map_runs", "thumbs") if getattr(args, k)]
    if ignored and not args.models_dir:
        ap.error(f"{', '.join(ignored)} shape the runs' explorer record: name the checkpoints with --models-dir")
    params = read_checked(args.params) if args.models_dir else {}
    runs = explore._runs_arg(args.runs) if args.runs is not None else list(params["study"]["runs"]) if params else []
    models = Path(args.models_dir or ".")

    def trained(seed_dir: str, what: str) -> str:
        """``seed_dir``, or "" for a run that a study of ``study.runs`` (no --runs) does not train (``dvc exp run -S
        study.runs=...``): that figure is left out, said here, and its page section says what it lacks."""
        run = run_name(seed_dir.format(seed=splits[0])) if seed_dir else ""
        if run and args.models_dir and args.runs is None and run not in runs:
            print(f"[figures] {what}: run {run} is not in study.runs ({', '.join(runs)}): left out", flush=True)
            return ""
        return seed_dir

    triplet_run = trained(args.triplet_run or "", "Figure 5's triplet search")
    relation_run = trained(args.relation_run, "the relation norms")
    needed = [Path(triplet_run)] if triplet_run else []
    needed += [Path(relation_run.format(seed=s)) for s in splits] if relation_run else []
    needed += [models / r / f"seed{splits[0]}" for r in runs]
    needed += [models / r / f"seed{s}" for r in runs for s in splits] if args.truth else []
    lacking = list(dict.fromkeys(str(d) for d in needed if not (d / "best.pt").is_file()))
    if lacking:
        ap.error(f"no best.pt in {', '.join(lacking[:3])}{' …' * (len(lacking) > 3)}: train those runs first")
    family = [
        out / "queries.json", out / "triplets.json", out / "relation_norms.csv", out / "alignment.csv",
        out / "explorer.json", *out.glob("alignments_*.json"), *written_crops(out), *explore.written_thumbnails(out),
    ]  # fmt: skip
    # nothing is deleted before the work: the earlier set stays whole until the new one is written (then pruned)
    claim_cli(ap, family, family, args.overwrite, "fraglib_study.report.figure_data")
    build(
        out,
        args.dataset_dir,
        splits,
        args.parse,
        triplet_run,
        args.triplets,
        args.features_dir,
        args.dataset,
        relation_run=relation_run,
    )
    if runs:
        cfg, labels = explore.settings(params, args.align_runs, args.map_runs)
        seed_dirs = {r: models / r / f"seed{splits[0]}" for r in runs}
        shown = explore.build(seed_dirs, cfg, out, args.dataset, args.truth, splits[0], labels, args.thumbs)
        fragment_runs = [r for r, e in shown["runs"].items() if e["system"] == "fragment"]
        if args.truth and fragment_runs:
            dirs = {r: [models / r / f"seed{s}" for s in splits] for r in fragment_runs}
            table = accuracy_table(dirs, args.dataset_dir, splits, args.truth)
            write_text(out / "alignment.csv", table.round(4).to_csv(index=False))
    prune(family)  # what the earlier run wrote and this one did not (its triplets, when none were asked for)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {len(splits)} splits' queries, {len(runs)} runs' top-k lists, {size / 1e3:.0f} kB")
