"""The explorer's data (reports/explorer.html): what each run retrieves on one test split, and where a fragment
run looks, from the checkpoints; small enough for git, so the page needs no checkpoint.

    python -m fraglib.explore --models-dir models/synthetic --out runs/synthetic/explorer \
        [--truth data/synthetic/ground_truth.json] [--seed 0] [--runs full,devise] [--overwrite]
        [--align-runs full] [--map-runs devise]     # default: params.yaml explorer

For one seed (split) of every run of ``study.runs`` (``<models-dir>/<run>/seed<seed>/best.pt``, scored on the data
it was trained on: :func:`fraglib.evaluate.load_trained`), ``<out>/explorer.json`` holds

* ``images`` (id, thumbnail, original width / height in px, category) and ``sentences`` (id, image position,
  text) of the test split (of its first gallery where it has galleries: the synthetic benchmark's first 100
  test images, ranked among each other as in the metrics), in split order; ``test_images``: the split's size; ``thumbs/<imgid>.jpg``: each test image, longer side ``thumb_px``;
* ``runs.<run>.label`` (``params.yaml: runs.<run>.label``), ``system``, ``image_top`` (n_images, k) and ``sentence_top`` (n_sentences, k): the positions of the top ``k``
  sentences of each image query and the top ``k`` images of each sentence query (ties by position), from
  :func:`fraglib.evaluate.score_matrix`; ``image_rank`` (n_images) and ``sentence_rank`` (n_sentences): where
  the answer is, the rank among the shown items of each image query's best-ranked own sentence and of each sentence
  query's image (1-based, pessimistic on ties as the metrics: :func:`correct_ranks`; data written before these two
  lists lack them, and the page then says the rank beyond the top ``k`` is not stored);
* ``aligned``: the fragment runs of ``explorer.align_runs``, each with its own ``alignments_<run>.json`` (a file
  under 1 MB): each test image's boxes (px of the original), each sentence's fragments ``rel(w1, w2)``, and for
  every pair that run lists or that is correct, per fragment the box it scores highest and that score (the paper's
  Figure 4: :func:`fraglib.alignment.align`);
* ``maps.<run>`` for the runs of ``explorer.map_runs``: a 2-D map of the test images and sentences in that run's
  joint space (:func:`embedding_map`) with their k-occurrence ``N_k`` (:func:`fraglib.hubness.k_occurrence`).
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

from fraglib.config import ConfigError, check_range, from_dict
from fraglib.evaluate import load_trained, score_matrix
from fraglib.hubness import k_occurrence
from fraglib.inputs import DataPaths
from fraglib.outputs import command, listed_files, write_bytes, write_text

SOURCES = {  # dataset -> where its pictures come from, shown on the page beside them
    "synthetic": "Synthetic benchmark drawn by fraglib.data.synthetic (this project; params.yaml synthetic).",
    "pascal1k": (
        "UIUC Pascal Sentence data set (Rashtchian, Young, Hodosh, Hockenmaier, NAACL HLT 2010 workshop; "
        "vision.cs.uiuc.edu/pascal-sentences/): PASCAL VOC 2008 images, Flickr photographs used under the PASCAL "
        "VOC terms (flickr.com terms of use). Thumbnails of one test split's or fold's images only."
    ),
}


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
    of sentence j's image; the metrics' ranks (:func:`fraglib.metrics.annotation_ranks`, :func:`search_ranks`:
    pessimistic on ties, so never above the item's place in :func:`top_k`'s lists), NaN ranked last as there."""
    from fraglib.metrics import annotation_ranks, search_ranks

    s = S.double()
    s = torch.where(torch.isnan(s), torch.full_like(s, float("-inf")), s)
    s = torch.where(s == float("inf"), torch.full_like(s, torch.finfo(s.dtype).max), s)
    si = np.asarray(sentence_image)
    return annotation_ranks(s, si, what="explorer scores"), search_ranks(s, si, what="explorer scores")


def written_thumbnails(out: Path) -> list[Path]:
    """The thumbnails an earlier run wrote into ``out`` (those its ``explorer.json`` lists): what ``--overwrite``
    may delete; any other file in ``out/thumbs/`` is never touched. None of them when ``explorer.json`` is damaged (it
    then vouches for no thumbnail: one to be written over is refused, naming it)."""
    return listed_files(out, "explorer.json", lambda data: (im["thumb"] for im in data["images"]), "thumbs")


def thumbnails(dataset, rows: list[int], out: Path, px: int, quality: int) -> list[dict[str, Any]]:
    """Write ``out/thumbs/<imgid>.jpg`` for dataset ``rows`` (longer side ``px``); their records (id, file relative
    to ``out``, original width / height, category)."""
    from PIL import Image

    from fraglib.vision.rcnn import load_image

    recs = []
    for r in rows:
        im = dataset.images[r]
        arr = load_image(dataset.image_path(r))[0]
        pic = Image.fromarray(arr)
        pic.thumbnail((px, px), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        pic.save(buf, "JPEG", quality=quality, optimize=True)
        name = f"thumbs/{im['imgid']}.jpg"
        write_bytes(out / name, buf.getvalue())
        recs.append({"id": im["imgid"], "thumb": name, "w": int(arr.shape[1]), "h": int(arr.shape[0])})
    return recs


def alignments(
    system, paths: DataPaths, pairs: set[tuple[int, int]], sentids: np.ndarray, image_pos: np.ndarray
) -> dict[str, Any]:
    """A fragment run's alignments of ``pairs`` (image, sentence), positions in the shown images
    ``image_pos`` (their positions in the test split) and sentences ``sentids``: ``boxes`` per shown image
    ([x0, y0, x1, y1] px, rounded), ``fragments`` per sentence (``rel(w1, w2)``) and ``pairs``
    ``{"i,j": [box, score × 10 rounded, box, score, …] two numbers per fragment}``."""
    from fraglib.alignment import FragmentView, align, glove_words

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


@torch.no_grad()
def joint_vectors(system, split) -> tuple[np.ndarray, np.ndarray] | None:
    """(images (n, h), sentences (m, h)) of a system whose encoders give one vector per item in one space,
    else None."""
    system.eval()
    a = system.encode_images(split.images.take(np.arange(split.n_images)))
    b = system.encode_sentences(split.sentences.take(np.arange(split.n_sentences)))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.ndim != 2 or a.shape[1:] != b.shape[1:]:
        return None
    return a.float().cpu().numpy(), b.float().cpu().numpy()


def build(
    seed_dirs: dict[str, Path],
    cfg: ExplorerConfig,
    out: str | Path,
    dataset_name: str = "synthetic",
    truth_file: str | Path | None = None,
    seed: int = 0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``out/explorer.json`` and ``out/thumbs/`` for the runs of ``seed_dirs`` (run -> folder of its
    ``best.pt``); returns the JSON's content. Every run must be trained on the same test split; ``truth_file``
    (the synthetic benchmark's ground truth) gives each image's scene as its category; ``labels``: run -> the
    name the page shows (default: the run's)."""
    from fraglib.data import read_karpathy_json

    cfg = cfg.validate()
    out = Path(out)
    data: dict[str, Any] = {"dataset": dataset_name, "seed": seed, "k": cfg.k, "source": SOURCES.get(dataset_name, "")}
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
            rows = [n for n, im in enumerate(ds.images) if im["split"] == "test"]
            rows = [rows[i] for i in shown]
            data["images"] = thumbnails(ds, rows, out, cfg.thumb_px, cfg.quality)
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
        data["runs"][run] = {
            "label": (labels or {}).get(run, run),
            "system": ck["system"],
            "image_top": image_top.tolist(),
            "sentence_top": sentence_top.tolist(),
            "image_rank": image_rank.tolist(),
            "sentence_rank": sentence_rank.tolist(),
        }
        if run in cfg.align_runs:
            if not hasattr(system, "embed_images"):
                raise ConfigError(f"explorer.align_runs: run {run} is no fragment run (it has no image fragments)")
            pairs = {(i, int(j)) for i, row in enumerate(image_top) for j in row}
            pairs |= {(int(i), j) for j, row in enumerate(sentence_top) for i in row}
            pairs |= {(s["image"], j) for j, s in enumerate(data["sentences"])}
            data["aligned"].append(run)
            found = alignments(system, paths, pairs, split.sentids[cols], shown)
            write_text(out / f"alignments_{run}.json", compact(found))
        if run in cfg.map_runs:
            vec = joint_vectors(system, split)
            if vec is None:
                raise ConfigError(f"explorer.map_runs: run {run} has no joint space (one vector per item)")
            xy = embedding_map(vec[0][shown], vec[1][cols], seed=seed)
            data["maps"][run] = {
                "method": MAP_METHOD,
                "images": np.round(xy[: len(shown)], 4).tolist(),
                "sentences": np.round(xy[len(shown) :], 4).tolist(),
                "n_images": k_occurrence(S.T, cfg.k).tolist(),  # N_k of each image over the sentence queries
                "n_sentences": k_occurrence(S, cfg.k).tolist(),
            }
    write_text(out / "explorer.json", compact(data))
    return data


@command
def main(argv: list[str] | None = None) -> None:
    from fraglib.outputs import OVERWRITE_HELP, claim_cli, prune
    from fraglib.params import read_params

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models-dir", required=True, help="the study's checkpoints: <models-dir>/<run>/seed<seed>/")
    ap.add_argument("--out", required=True, help="folder of explorer.json and thumbs/ (e.g. runs/synthetic/explorer)")
    ap.add_argument("--dataset", default="synthetic", choices=tuple(SOURCES), help="names the pictures' source")
    ap.add_argument("--truth", help="the synthetic benchmark's ground_truth.json (each image's scene: its category)")
    ap.add_argument("--seed", type=int, default=0, help="the seed (split) shown")
    ap.add_argument("--runs", help="comma-separated runs (default: params.yaml study.runs)")
    ap.add_argument(
        "--align-runs", help="comma-separated runs whose alignments are kept (default: explorer.align_runs)"
    )
    ap.add_argument("--map-runs", help="comma-separated runs whose 2-D map is kept (default: explorer.map_runs)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    params = read_params(args.params)
    cfg = from_dict("explorer", params.get("explorer"), ExplorerConfig)
    for key in ("align_runs", "map_runs"):  # a study whose runs are not the synthetic study's names its own
        if getattr(args, key) is not None:
            cfg = dataclasses.replace(cfg, **{key: tuple(r for r in getattr(args, key).split(",") if r)})
    runs = args.runs.split(",") if args.runs else list(params["study"]["runs"])
    seed_dirs = {r: Path(args.models_dir) / r / f"seed{args.seed}" for r in runs}
    missing = [str(d) for d in seed_dirs.values() if not (d / "best.pt").is_file()]
    if missing:
        ap.error(f"no best.pt in {', '.join(missing[:3])}{' …' * (len(missing) > 3)}: train those runs first")
    out = Path(args.out)
    family = [out / "explorer.json", *out.glob("alignments_*.json"), *written_thumbnails(out)]
    # nothing is deleted before the work: the earlier set stays whole until the new one is written (then pruned)
    claim_cli(ap, family, family, args.overwrite, "fraglib.explore")
    labels = {r: (params["runs"].get(r) or {}).get("label", r) for r in runs}
    data = build(seed_dirs, cfg, out, args.dataset, args.truth, args.seed, labels)
    prune(family)  # the earlier run's alignments and thumbnails the new data no longer has
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {len(data['runs'])} runs, {len(data['images'])} images, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
