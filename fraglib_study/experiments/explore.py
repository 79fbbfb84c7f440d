"""The explorer's data (reports/explorer.html): what each run retrieves on one test split, and where a fragment
run looks, from the checkpoints; small enough for git, so the page needs no checkpoint. :func:`build` writes them;
a study's record of one split (its pages' figures, the synthetic explorer) is written by ``python -m fraglib_study
figures`` (:mod:`fraglib_study.report.figure_data`, the one producer of a study's figure data); this command writes
the fold explorer's (``--folds``) and moves thumbnails:

    python -m fraglib_study explore --folds --dataset pascal1k --models-dir models/pascal1k_folds \
        --out runs/pascal1k_folds/explorer --thumbs reports/pascal1k/explorer_thumbs \
        --train-command "dvc repro studies/pascal1k/dvc.yaml:train_folds@{run}" [--skip stt]
    python -m fraglib_study explore --out DIR --thumbs reports/explorer_thumbs --move-thumbs

For one seed (split) of every run asked for (``<models-dir>/<run>/seed<seed>/best.pt``, scored on the data
it was trained on: :func:`fraglib.run.evaluate.load_trained`), ``<out>/explorer.json`` holds

* ``images`` (id, thumbnail, original width / height in px, category) and ``sentences`` (id, image position,
  text) of the test split (of its first gallery where it has galleries: the synthetic benchmark's first 100
  test images, ranked among each other as in the metrics), in split order; ``test_images``: the split's size;
  each image's ``thumb``: its JPEG (longer side ``thumb_px``) as a path from ``<out>``, in the folder ``--thumbs``
  (default ``<out>/thumbs``; a page's own folder under ``reports/`` so that the pictures travel with the page, and
  only one copy of them is in git);
* ``runs.<run>.label`` (``params.yaml: runs.<run>.label``; the page drops its notes on another protocol's splits:
  :func:`fraglib_study.pages.explorer_page.shown_label`), ``system``, ``unit`` (the training unit shown: ``"0"`` the
  first training of seed or fold 0, ``"0r1"`` its replicate 1), ``image_top`` (n_images, k) and ``sentence_top``
  (n_sentences, k): the positions of the top ``k``
  sentences of each image query and the top ``k`` images of each sentence query (ties by position), from
  :func:`fraglib.run.evaluate.score_matrix`; ``image_rank`` (n_images) and ``sentence_rank`` (n_sentences): where
  the answer is, the rank among the shown items of each image query's best-ranked own sentence and of each sentence
  query's image (1-based, pessimistic on ties as the metrics: :func:`correct_ranks`; data written before these two
  lists lack them, and the page then says the rank beyond the top ``k`` is not stored); ``joint_space``: whether
  the run embeds every item as one vector in one space (:func:`joint_vectors`; a fragment run scores sets of
  fragments, an attention run attends over regions: no map);
* ``aligned``: the fragment runs of ``explorer.align_runs``, each with its own ``alignments_<run>.json`` (a file
  under 1 MB): each test image's boxes (px of the original), each sentence's fragments ``rel(w1, w2)``, and for
  every pair that run lists or that is correct, per fragment the box it scores highest and that score (the paper's
  Figure 4: :func:`fraglib_study.experiments.alignment.align`);
* ``maps.<run>`` for the runs of ``explorer.map_runs`` (``all``: every run with a joint space): a 2-D map of the
  test images and sentences in that run's joint space (:func:`embedding_map`) with their k-occurrence ``N_k``
  (:func:`fraglib.metrics.hubness.k_occurrence`);
* with ``--folds`` (the k-fold protocol, ``<dataset>.folds``; ``--seed`` is the fold): ``protocol`` ``"folds"``
  and ``folds``; the runs are ``<dataset>.fold_runs`` (the claims' and the fight's runs) unless ``--runs`` names
  them, each shown by its fold's first training (``<models-dir>/<run>/seed<fold>/best.pt``) or, where only a
  replicate's checkpoint is here, by the first replicate that has one (``seed<fold>r<n>``); ``missing``: the runs
  not shown, each with its ``label``, ``reason`` and the ``command`` that makes what it lacks (``--train-command``,
  ``{run}`` its name), so the page lists them; ``rebuild``: the command that then rebuilds the data and the page
  (``--rebuild-command``).

``--move-thumbs`` (no checkpoint needed) moves the thumbnails an earlier build wrote (those its ``explorer.json``
lists) into ``--thumbs`` and rewrites their paths in ``explorer.json``; nothing else changes: data built before
``--thumbs`` existed then give pages whose pictures travel with ``reports/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import ConfigError, check_range, from_dict
from fraglib.core.outputs import command, write_bytes, write_text
from fraglib.data import readers
from fraglib.metrics.hubness import k_occurrence
from fraglib.run.evaluate import load_trained, score_matrix
from fraglib.run.inputs import DataPaths


@dataclasses.dataclass(frozen=True)
class ExplorerConfig:
    """``params.yaml: explorer``."""

    k: int = 10  # items listed per query, both directions
    thumb_px: int = 160  # longer side of a thumbnail, px
    quality: int = 80  # JPEG quality of the thumbnails
    align_runs: tuple[str, ...] = ("full",)  # fragment runs whose alignments are kept
    map_runs: tuple[str, ...] = ("devise",)  # runs with a joint space whose 2-D map is kept

    def validate(self) -> "ExplorerConfig":
        check_range("explorer.k", self.k, 1, 100, int)
        check_range("explorer.thumb_px", self.thumb_px, 16, 160, int)
        check_range("explorer.quality", self.quality, 20, 95, int)
        for key in ("align_runs", "map_runs"):
            runs = getattr(self, key)
            if not isinstance(runs, (list, tuple)) or not all(isinstance(r, str) for r in runs):
                raise ConfigError(f"explorer.{key}={getattr(self, key)!r}: expected a list of run names")
        return self


def compact(data: Any) -> str:
    """JSON without spaces, keys in insertion order (the study's run order)."""
    return json.dumps(data, separators=(",", ":"))


def top_k(S: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(image_top (n_images, k), sentence_top (n_sentences, k)) positions of the highest scores of ``S``
    (n_images, n_sentences) per row and per column, best first; ties go to the lower position, -inf last.
    Raises ValueError when ``k`` is not below both sides (the lists would hold every item)."""
    if not 1 <= k < min(S.shape):
        raise ValueError(f"explorer.k={k}: needs 1 <= k < {min(S.shape)} (the split's images and sentences)")
    s = S.double().numpy()
    s = np.where(np.isnan(s), -np.inf, s)
    rows = np.argsort(-s, axis=1, kind="stable")[:, :k]
    cols = np.argsort(-s.T, axis=1, kind="stable")[:, :k]
    return rows, cols


def correct_ranks(S: torch.Tensor, sentence_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(image_rank (n_images,), sentence_rank (n_sentences,)): the 1-based rank of each image query's best-ranked
    own sentence (0: an image without sentences) and of each sentence query's image, ``sentence_image[j]`` the row
    of sentence j's image; the metrics' ranks (:func:`fraglib.metrics.retrieval.annotation_ranks`, :func:`search_ranks`:
    pessimistic on ties, so never above the item's place in :func:`top_k`'s lists), NaN ranked last as there."""
    from fraglib.metrics.retrieval import annotation_ranks, search_ranks

    s = S.double()
    s = torch.where(torch.isnan(s), torch.full_like(s, float("-inf")), s)
    s = torch.where(s == float("inf"), torch.full_like(s, torch.finfo(s.dtype).max), s)
    si = np.asarray(sentence_image)
    return annotation_ranks(s, si, what="explorer scores"), search_ranks(s, si, what="explorer scores")


# a thumbnail's path in explorer.json, relative to the data folder: <a folder whose name ends in thumbs>/<name>.jpg,
# beside the data (thumbs/) or a page's own folder under reports/ (../../reports/explorer_thumbs/)
THUMB_PATH = r"(?:\.\./)*(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)*[A-Za-z0-9_.-]*thumbs/[^/\\]+\.jpg"


def written_thumbnails(out: Path) -> list[Path]:
    """The thumbnails an earlier run wrote (those its ``out/explorer.json`` lists, each in a folder whose name ends
    in ``thumbs``: :data:`THUMB_PATH`): what ``--overwrite`` may delete; any other file there is never touched.
    None of them when ``explorer.json`` is damaged (it then vouches for no thumbnail: one to be written over is
    refused, naming it)."""
    import re

    try:
        names = [im["thumb"] for im in json.loads((Path(out) / "explorer.json").read_text(encoding="utf-8"))["images"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [Path(out) / n for n in names if isinstance(n, str) and re.fullmatch(THUMB_PATH, n)]


def thumbnails(
    dataset, rows: list[int], out: Path, px: int, quality: int, folder: Path | None = None
) -> list[dict[str, Any]]:
    """Write ``<folder>/<imgid>.jpg`` (default folder ``out/thumbs``) for dataset ``rows`` (longer side ``px``);
    their records (id, file as a path from ``out``, original width / height)."""
    import os

    from PIL import Image

    from fraglib.vision.rcnn import load_image

    folder = Path(folder) if folder is not None else out / "thumbs"
    rel = Path(os.path.relpath(folder.resolve(), out.resolve())).as_posix()
    recs = []
    for r in rows:
        im = dataset.images[r]
        arr = load_image(dataset.image_path(r))[0]
        pic = Image.fromarray(arr)
        pic.thumbnail((px, px), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        pic.save(buf, "JPEG", quality=quality, optimize=True)
        write_bytes(folder / f"{im['imgid']}.jpg", buf.getvalue())
        recs.append(
            {"id": im["imgid"], "thumb": f"{rel}/{im['imgid']}.jpg", "w": int(arr.shape[1]), "h": int(arr.shape[0])}
        )
    return recs


def move_thumbnails(out: str | Path, folder: str | Path) -> int:
    """Move the thumbnails ``out/explorer.json`` lists (:func:`written_thumbnails`) into ``folder`` and rewrite their
    paths there; nothing else in the data changes. Returns how many moved. FileNotFoundError naming a listed
    thumbnail that is not there; FileExistsError (the output contract's refusal) for a file in ``folder`` that this
    command did not claim."""
    import os

    from fraglib.core.outputs import remove

    out, folder = Path(out), Path(folder)
    src = out / "explorer.json"
    data = json.loads(src.read_text(encoding="utf-8"))
    listed = written_thumbnails(out)
    if len(listed) != len(data["images"]):
        raise FileNotFoundError(
            f"{src}: not every thumbnail it lists is in a thumbs folder of its own; rebuild the data"
        )
    rel = Path(os.path.relpath(folder.resolve(), out.resolve())).as_posix()
    moved = []
    for im, path in zip(data["images"], listed):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: thumbnail of image {im['id']} missing; rebuild the data")
        target = folder / path.name
        if target.resolve() != path.resolve():
            write_bytes(target, path.read_bytes())
            moved.append(path)
        im["thumb"] = f"{rel}/{path.name}"
    write_text(src, compact(data))
    for path in moved:  # only once the data name the new place
        remove(path)
    return len(moved)


def alignments(
    system, paths: DataPaths, pairs: set[tuple[int, int]], sentids: np.ndarray, image_pos: np.ndarray
) -> dict[str, Any]:
    """A fragment run's alignments of ``pairs`` (image, sentence), positions in the shown images
    ``image_pos`` (their positions in the test split) and sentences ``sentids``: ``boxes`` per shown image
    ([x0, y0, x1, y1] px, rounded), ``fragments`` per sentence (``rel(w1, w2)``) and ``pairs``
    ``{"i,j": [box, score × 10 rounded, box, score, …] two numbers per fragment}``."""
    from fraglib_study.experiments.alignment import FragmentView, align, glove_words

    view = FragmentView(system, paths)
    vocab = glove_words()
    image_emb = [view.image_fragments(int(i)) for i in image_pos]
    sent = {j: view.sentence_fragments(int(sentids[j])) for j in sorted({j for _, j in pairs})}
    out = {
        "boxes": [np.round(b).astype(int).tolist() for _, b in image_emb],
        "fragments": {str(j): [f"{r}({vocab[u]}, {vocab[v]})" for r, u, v in w] for j, (_, w) in sent.items()},
        "pairs": {},
    }
    for i, j in sorted(pairs):
        best, score = align(image_emb[i][0], sent[j][0])
        out["pairs"][f"{i},{j}"] = [x for b, s in zip(best, score) for x in (int(b), round(float(s) * 10))]
    return out


def first_gallery(split) -> tuple[np.ndarray, np.ndarray]:
    """(image positions, sentence positions) of the items the explorer shows: a split with ``galleries``
    (the synthetic test split: ``synthetic.gallery``), its first gallery; else the whole split."""
    keep = np.ones(split.n_images, bool) if split.galleries is None else split.galleries == split.galleries.min()
    return np.flatnonzero(keep), np.flatnonzero(keep[split.sentence_image])


MAP_METHOD = "t-SNE of the L2-normalised vectors"


def embedding_map(images: np.ndarray, sentences: np.ndarray, seed: int = 0) -> np.ndarray:
    """(n_images + n_sentences, 2) coordinates in [0, 1] of one joint space's test images (rows first) and
    sentences: t-SNE (scikit-learn, Barnes-Hut, PCA start, perplexity 30 or a third of the points) of the
    L2-normalised vectors, seeded by ``seed`` and on one thread (the same coordinates on every run)."""
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    x = np.concatenate([images, sentences]).astype(np.float64)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    perplexity = float(min(30, max(2, (len(x) - 1) // 3)))
    with threadpool_limits(1):
        y = TSNE(2, perplexity=perplexity, init="pca", random_state=seed, n_jobs=1).fit_transform(x)
    lo, hi = y.min(0), y.max(0)
    return (y - lo) / np.where(hi > lo, hi - lo, 1.0)


def _one_vector_each(encoded: Any) -> torch.Tensor | None:
    """The (n, h) vectors of an encoder's output when it gives one vector per item: a tensor (DeViSE, kCCA, a VSE
    sentence), a VSE image's (vectors, no mask, positions), Socher et al.'s ``Encoded.vec``; else None (a fragment
    run's sets of fragments, an attention run's regions)."""
    if isinstance(encoded, tuple) and encoded and (len(encoded) < 2 or encoded[1] is None):
        encoded = encoded[0]
    encoded = getattr(encoded, "vec", encoded)
    return encoded if isinstance(encoded, torch.Tensor) and encoded.ndim == 2 else None


@torch.no_grad()
def joint_vectors(system, split) -> tuple[np.ndarray, np.ndarray] | None:
    """(images (n, h), sentences (m, h)) of a system whose encoders give one vector per item in one space
    (:func:`_one_vector_each`), else None."""
    system.eval()
    a = _one_vector_each(system.encode_images(split.images.take(np.arange(split.n_images))))
    b = _one_vector_each(system.encode_sentences(split.sentences.take(np.arange(split.n_sentences))))
    if a is None or b is None or a.shape[1:] != b.shape[1:]:
        return None
    return a.float().cpu().numpy(), b.float().cpu().numpy()


def fold_unit(models_dir: str | Path, run: str, fold: int) -> tuple[str, Path] | None:
    """(unit, folder) of the training of ``run`` on fold ``fold`` that the explorer shows: its first training
    (``<models-dir>/<run>/seed<fold>``) when its ``best.pt`` is here, else the lowest replicate that has one
    (``seed<fold>r<n>``); None when none has (checkpoints are DVC outputs: a clone or another machine may lack
    them)."""
    import re

    from fraglib.core.outputs import unit_key

    base = Path(models_dir) / run
    reps = sorted(
        int(m[1])
        for p in base.glob(f"seed{fold}r*")
        if (m := re.fullmatch(rf"seed{fold}r(\d+)", p.name)) and int(m[1]) > 0
    )
    for r in [0, *reps]:
        folder = base / f"seed{unit_key(fold, r)}"
        if (folder / "best.pt").is_file():
            return unit_key(fold, r), folder
    return None


def build(
    seed_dirs: dict[str, Path],
    cfg: ExplorerConfig,
    out: str | Path,
    dataset_name: str | None = None,
    truth_file: str | Path | None = None,
    seed: int = 0,
    labels: dict[str, str] | None = None,
    thumbs: str | Path | None = None,
    units: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``out/explorer.json``, the thumbnails (in ``thumbs``, default ``out/thumbs``) and the alignments for
    the runs of ``seed_dirs`` (run -> folder of its ``best.pt``); returns the JSON's content. Every run must be
    trained on the same test split; ``truth_file`` (the synthetic benchmark's ground truth) gives each image's
    scene as its category; ``labels``: run -> the name the page shows (default: the run's); ``units``: run -> the training unit shown
    (default ``str(seed)``); ``extra``: further top-level fields (the fold protocol's ``protocol``, ``folds``,
    ``missing``). ``cfg.map_runs`` ``("all",)``: a map of every run with a joint space."""
    from fraglib.data import read_karpathy_json

    cfg = cfg.validate()
    out = Path(out)
    map_all = "all" in cfg.map_runs
    data: dict[str, Any] = {"dataset": dataset_name, "seed": seed, "k": cfg.k, "source": ""}  # filled from the data
    data.update(extra or {})
    data.update(runs={}, aligned=[], maps={})
    split_ids = None
    for run, seed_dir in seed_dirs.items():
        system, ck, split = load_trained(seed_dir)
        info = ck["info"]
        paths = DataPaths(info["dataset_dir"], info.get("features_dir"))  # the data it was trained on
        ids = (split.sentids.tolist(), split.sentence_image.tolist())
        shown, cols = first_gallery(split)
        if split_ids is None:
            split_ids = ids
            ds = read_karpathy_json(Path(info["dataset_dir"]) / "dataset.json")
            data["dataset"] = dataset_name or ds.name  # default: the data's own name (its reader's)
            data["source"] = readers.credit(data["dataset"])
            rows = [n for n, im in enumerate(ds.images) if im["split"] == "test"]
            rows = [rows[i] for i in shown]
            data["images"] = thumbnails(ds, rows, out, cfg.thumb_px, cfg.quality, thumbs)
            data["test_images"] = split.n_images
            truth = {r["imgid"]: r for r in json.loads(Path(truth_file).read_text())["images"]} if truth_file else {}
            for rec, r in zip(data["images"], rows):
                rec["category"] = ds.images[r].get("category") or truth.get(rec["id"], {}).get("scene", "")
            text = {s["sentid"]: s["raw"] for s in ds.sentences}
            at = {int(i): n for n, i in enumerate(shown)}
            data["sentences"] = [
                {"id": int(split.sentids[j]), "image": at[int(split.sentence_image[j])], "text": text[split.sentids[j]]}
                for j in cols
            ]
        elif ids != split_ids:
            raise ValueError(f"{seed_dir}: run {run} was tested on another split than {next(iter(seed_dirs))}")
        S = score_matrix(system, split)[np.ix_(shown, cols)]
        image_top, sentence_top = top_k(S, cfg.k)
        image_rank, sentence_rank = correct_ranks(S, np.array([s["image"] for s in data["sentences"]], np.int64))
        vec = joint_vectors(system, split) if map_all or run in cfg.map_runs else None
        data["runs"][run] = {
            "label": (labels or {}).get(run, run),
            "system": ck["system"],
            "unit": (units or {}).get(run, str(seed)),
            "image_top": image_top.tolist(),
            "sentence_top": sentence_top.tolist(),
            "image_rank": image_rank.tolist(),
            "sentence_rank": sentence_rank.tolist(),
        }
        if map_all or run in cfg.map_runs:
            data["runs"][run]["joint_space"] = vec is not None
        if run in cfg.align_runs:
            if not hasattr(system, "embed_images"):
                raise ConfigError(f"explorer.align_runs: run {run} is no fragment run (it has no image fragments)")
            pairs = {(i, int(j)) for i, row in enumerate(image_top) for j in row}
            pairs |= {(int(i), j) for j, row in enumerate(sentence_top) for i in row}
            pairs |= {(s["image"], j) for j, s in enumerate(data["sentences"])}
            data["aligned"].append(run)
            found = alignments(system, paths, pairs, split.sentids[cols], shown)
            write_text(out / f"alignments_{run}.json", compact(found))
        if run in cfg.map_runs and vec is None:
            raise ConfigError(f"explorer.map_runs: run {run} has no joint space (one vector per item)")
        if vec is not None:
            xy = embedding_map(vec[0][shown], vec[1][cols], seed=seed).astype(np.float64)  # 0.123, not 0.12300000xxx
            data["maps"][run] = {
                "method": MAP_METHOD,
                "images": np.round(xy[: len(shown)], 3).tolist(),
                "sentences": np.round(xy[len(shown) :], 3).tolist(),
                "n_images": k_occurrence(S.T, cfg.k).tolist(),  # N_k of each image over the sentence queries
                "n_sentences": k_occurrence(S, cfg.k).tolist(),
            }
        print(f"[explore] {run} (unit {data['runs'][run]['unit']}): listed"
              + (", aligned" if run in data["aligned"] else "") + (", mapped" if run in data["maps"] else ""),
              flush=True)  # fmt: skip
    if not data["runs"]:
        raise ValueError("no run to show: every run asked for lacks its checkpoint (see missing)")
    write_text(out / "explorer.json", compact(data))
    return data


def _runs_arg(text: str | None) -> list[str] | None:
    return None if text is None else [r for r in text.split(",") if r]


def settings(
    params: dict[str, Any], align_runs: str | None = None, map_runs: str | None = None
) -> tuple[ExplorerConfig, dict[str, str]]:
    """(``params.yaml: explorer`` with ``align_runs`` / ``map_runs`` in its place where given as comma-separated
    runs (a study whose runs are not the synthetic study's names its own), each run's label)."""
    cfg = from_dict("explorer", params.get("explorer"), ExplorerConfig)
    for key, text in (("align_runs", align_runs), ("map_runs", map_runs)):
        if text is not None:
            cfg = dataclasses.replace(cfg, **{key: tuple(_runs_arg(text))})
    return cfg, {r: (e or {}).get("label", r) for r, e in (params.get("runs") or {}).items()}


@command
def main(argv: list[str] | None = None) -> None:
    from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, prune
    from fraglib_study.params import dataset_folds
    from fraglib_study.schema import read_checked

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--models-dir", help="the study's checkpoints: <models-dir>/<run>/seed<seed>/ (not with --move-thumbs)"
    )
    ap.add_argument("--out", required=True, help="folder of explorer.json (e.g. runs/pascal1k_folds/explorer)")
    ap.add_argument("--thumbs", help="folder of the thumbnails (default <out>/thumbs; e.g. reports/explorer_thumbs)")
    ap.add_argument(
        "--dataset",
        help="the data's name, whose reader names the pictures' source (default: the data's own, its dataset.json's); "
        "with --folds, its params.yaml section",
    )
    ap.add_argument("--truth", help="the synthetic benchmark's ground_truth.json (each image's scene: its category)")
    ap.add_argument("--seed", type=int, default=0, help="the fold shown")
    ap.add_argument(
        "--folds",
        action="store_true",
        help="the k-fold protocol of <dataset>.folds: each run's first training on fold --seed, else its first "
        "replicate with a checkpoint; runs without one are listed as missing (default runs: <dataset>.fold_runs)",
    )
    ap.add_argument("--runs", help="comma-separated runs (default: <dataset>.fold_runs)")
    ap.add_argument("--skip", help="comma-separated runs left out of this build (--folds: listed as not shown)")
    ap.add_argument(
        "--skip-reason", default="left out when these data were built", help="why --skip's runs are not shown"
    )
    ap.add_argument(
        "--train-command",
        default="",
        help="--folds: the command that makes a missing run's checkpoints ({run}: its name)",
    )
    ap.add_argument(
        "--rebuild-command", default="", help="--folds: the command that rebuilds these data and their page (shown)"
    )
    ap.add_argument(
        "--align-runs", help="comma-separated runs whose alignments are kept (default: explorer.align_runs)"
    )
    ap.add_argument(
        "--map-runs",
        help="comma-separated runs whose 2-D map is kept, or all: every run with a joint space "
        "(default: explorer.map_runs)",
    )
    ap.add_argument("--move-thumbs", action="store_true", help="only move the thumbnails of --out's data into --thumbs")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.move_thumbs:
        if not args.thumbs:
            ap.error("--move-thumbs: name the folder with --thumbs")
        own = [out / "explorer.json", *written_thumbnails(out)]  # rewritten, and moved (removed once copied)
        claim_cli(ap, own, own, True, "fraglib_study.experiments.explore")
        try:
            n = move_thumbnails(out, args.thumbs)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            ap.error(str(exc))
        print(f"moved {n} thumbnails of {out} into {args.thumbs}")
        return
    if not args.folds:
        ap.error(
            "a study's explorer record of one split is its figure data: python -m fraglib_study figures --models-dir "
            "... --runs ... (this command writes the fold explorer's, --folds)"
        )
    if not args.models_dir:
        ap.error("--models-dir is required (the checkpoints)")
    params = read_checked(args.params)
    cfg, labels = settings(params, args.align_runs, args.map_runs)
    skip = _runs_arg(args.skip) or []
    units: dict[str, str] = {}
    if not args.dataset:
        ap.error("--folds: name the dataset whose <dataset>.folds to read (--dataset)")
    k, _ = dataset_folds(params, args.dataset)
    if not 0 <= args.seed < k:
        ap.error(f"--seed {args.seed}: not a fold of {args.dataset}.folds={k}")
    runs = _runs_arg(args.runs) or list((params.get(args.dataset) or {}).get("fold_runs") or [])
    missing, seed_dirs = [], {}
    for r in runs:
        found = None if r in skip else fold_unit(args.models_dir, r, args.seed)
        if found is None:
            reason = (
                args.skip_reason
                if r in skip
                else (
                    f"no checkpoint of its fold-{args.seed} trainings where these data were built "
                    f"({args.models_dir}/{r}/seed{args.seed}*/best.pt)"
                )
            )
            command_ = "" if r in skip else args.train_command.replace("{run}", r)
            missing.append({"run": r, "label": labels.get(r, r), "reason": reason, "command": command_})
            continue
        units[r], seed_dirs[r] = found
    extra = {"protocol": "folds", "folds": k, "missing": missing, "rebuild": args.rebuild_command}
    print(f"[explore] fold {args.seed}: {len(seed_dirs)} of {len(runs)} runs have a checkpoint here"
          + (f"; not shown: {', '.join(m['run'] for m in missing)}" if missing else ""), flush=True)  # fmt: skip
    family = [out / "explorer.json", *out.glob("alignments_*.json"), *written_thumbnails(out)]
    # nothing is deleted before the work: the earlier set stays whole until the new one is written (then pruned)
    claim_cli(ap, family, family, args.overwrite, "fraglib_study.experiments.explore")
    data = build(seed_dirs, cfg, out, args.dataset, args.truth, args.seed, labels, args.thumbs, units, extra)
    prune(family)  # the earlier run's alignments and thumbnails the new data no longer has
    thumbs = {(out / im["thumb"]).resolve() for im in data["images"]}
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.resolve() not in thumbs)
    size_t = sum(p.stat().st_size for p in thumbs)
    print(f"wrote {out}: {len(data['runs'])} runs, {len(data['images'])} images, {size / 1e6:.2f} MB of data, "
          f"{size_t / 1e6:.2f} MB of thumbnails in {Path(args.thumbs or out / 'thumbs')}")  # fmt: skip
