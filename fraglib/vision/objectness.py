"""A learned, class-agnostic objectness score for proposals (``vision.score: learned``).

R-CNN turned CNN features into detections with linear SVMs trained on annotated boxes. The
class-agnostic analogue here scores each proposal from its RoI descriptor (1280-d), the
descriptor of its surroundings (the box doubled in size, clipped to the image; ``context``) and
its geometry (log relative area, log aspect ratio, centre, border contact), with a one-hidden-
layer perceptron (``model: mlp``) or logistic regression (``model: linear``). Proposals are
labelled by IoU with the annotated boxes (positive ≥ 0.5 — the annotated boxes themselves
included, as in R-CNN — negative < 0.3, in between ignored), classes weighted to balance.

    python -m fraglib.vision objectness --dataset-dir data/pascal1k --annotations ROOT/annotations \
        --exclude-test-of data/pascal1k/split0 ... --out data/pascal1k/objectness.npz \
        [--regions data/pascal1k/regions.npz] [--cv-out data/pascal1k/objectness_cv.json]

Training images are those outside every listed study split's *test* set (and, for the synthetic
benchmark, its train split with the true boxes), so no test image of any study chose the score.
``--cv-out`` also writes a 2-fold cross-validation over those training images only: recall of
the top ``k`` boxes at IoU ≥ 0.5 for each NMS threshold — how ``nms_iou`` is chosen.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import load_with_overrides
from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_text
from fraglib.data import Dataset, open_npz, read_karpathy_json, save_npz
from fraglib.vision.rcnn import Backbone, VisionConfig, box_iou, nms_top_k, recall_at_iou, roi_descriptors

POS, NEG = 0.5, 0.3  # IoU thresholds of the labels


def geometry(boxes: np.ndarray, w: int, h: int) -> np.ndarray:
    """(R, 5) float32: log area fraction, log aspect, centre x, centre y (fractions), border contact."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    bw, bh = np.maximum(b[:, 2] - b[:, 0], 1), np.maximum(b[:, 3] - b[:, 1], 1)
    border = ((b[:, 0] <= 2) | (b[:, 1] <= 2) | (b[:, 2] >= w - 2) | (b[:, 3] >= h - 2)).astype(np.float64)
    return np.stack(
        [np.log(bw * bh / (w * h)), np.log(bw / bh), (b[:, 0] + bw / 2) / w, (b[:, 1] + bh / 2) / h, border], 1
    ).astype(np.float32)


def enlarge(boxes: np.ndarray, factor: float, w: int, h: int) -> np.ndarray:
    """Boxes scaled by ``factor`` about their centres, clipped to the (w, h) image."""
    b = np.asarray(boxes, np.float32).reshape(-1, 4)
    c, half = (b[:, :2] + b[:, 2:]) / 2, (b[:, 2:] - b[:, :2]) * factor / 2
    return np.clip(np.concatenate([c - half, c + half], 1), 0, [w, h, w, h]).astype(np.float32)


def region_inputs(fmap: torch.Tensor, boxes: np.ndarray, scale: float, w: int, h: int, context: bool) -> np.ndarray:
    """(R, 1285) [descriptor, geometry] or (R, 2565) [descriptor, context descriptor, geometry]."""
    parts = [roi_descriptors(fmap, boxes, scale).float().cpu().numpy()]
    if context:
        parts.append(roi_descriptors(fmap, enlarge(boxes, 2.0, w, h), scale).float().cpu().numpy())
    return np.concatenate(parts + [geometry(boxes, w, h)], 1)


class Objectness:
    """Standardised inputs -> layers (ReLU between) -> one logit per proposal."""

    def __init__(
        self, mean: np.ndarray, std: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], meta: dict[str, Any]
    ) -> None:
        self.mean, self.std, self.layers, self.meta = mean, std, layers, meta

    @property
    def context(self) -> bool:
        return bool(self.meta.get("context", False))

    def logits(self, x: np.ndarray, chunk: int = 16384) -> np.ndarray:
        """(N,) logits of inputs ``x`` (N, D), in chunks of rows (x may be float16)."""
        out = []
        for a in range(0, len(x), chunk):
            z = (np.asarray(x[a : a + chunk], np.float32) - self.mean) / self.std
            for i, (W, b) in enumerate(self.layers):
                z = z @ W + b
                if i < len(self.layers) - 1:
                    z = np.maximum(z, 0)
            out.append(z[:, 0])
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def score(self, fmap: torch.Tensor, boxes: np.ndarray, scale: float, w: int, h: int) -> np.ndarray:
        """Logits of ``boxes`` (original px) of an image of size (w, h) with feature map ``fmap``."""
        return self.logits(region_inputs(fmap, boxes, scale, w, h, self.context))

    def save(self, path: str | Path) -> None:
        """Write the ``.npz`` file ``path`` atomically."""
        arrays = {f"{k}{i}": v for i, (W, b) in enumerate(self.layers) for k, v in (("W", W), ("b", b))}
        save_npz(path, mean=self.mean, std=self.std, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "Objectness":
        """The model in ``path``: FileNotFoundError when there is no such file (saying how to get one),
        ValueError when the file exists but is no readable model (damaged, another file, an older format)."""
        how = "python -m fraglib.vision objectness"
        if not Path(path).exists():
            raise FileNotFoundError(
                f"{path}: objectness model not found (vision.objectness_file); train one with {how}"
            )
        try:
            z, meta = open_npz(path, how)
            n = sum(1 for k in z.files if k.startswith("W"))
            if n == 0:
                raise ValueError(f"{path}: no layers W0, W1 ... (an older format, or another file); re-run {how}")
            return cls(z["mean"], z["std"], [(z[f"W{i}"], z[f"b{i}"]) for i in range(n)], meta)
        except ValueError as exc:
            raise ValueError(
                f"{path}: exists but cannot be read as an objectness model ({str(exc).removeprefix(f'{path}: ')})"
            ) from None


def collect(
    dataset: Dataset,
    truth: dict[int, np.ndarray],
    cfg: VisionConfig,
    progress: bool = True,
    regions: Any = None,
    context: bool = True,
) -> dict[str, Any]:
    """Every proposal of every image of ``dataset``, plus its annotated boxes (the positives R-CNN
    adds), as arrays: ``X`` (N, D) float16 inputs, ``iou`` (N,) best IoU with an annotated box,
    ``image`` (N,) position in ``dataset``, ``boxes`` (N, 4), ``annotated`` (N,) bool.
    ``regions``: a :class:`fraglib.vision.regions.Regions` cache holding these images (no CNN pass)."""
    from tqdm.auto import tqdm

    from fraglib.vision.regions import region_items

    device = torch.device("cpu")
    backbone = Backbone(cfg.cnn_variant) if regions is None else None
    out: dict[str, list] = {k: [] for k in ("X", "iou", "image", "boxes", "annotated")}
    for item in tqdm(
        region_items(dataset, cfg, backbone, device, regions),
        total=len(dataset.images),
        desc="objectness data",
        disable=not progress,
        mininterval=5,
    ):
        if "error" in item:  # a bad image is skipped here exactly as in features
            print(f"skipped {dataset.image_path(item['n'])}: {item['error']}")
            continue
        (w, h), gt = item["size"], truth[int(dataset.images[item["n"]]["imgid"])]
        boxes = np.concatenate([item["proposals"], gt]).astype(np.float32)
        out["X"].append(region_inputs(item["fmap"], boxes, item["scale"], w, h, context).astype(np.float16))
        out["iou"].append(box_iou(boxes, gt).max(axis=1) if len(gt) else np.zeros(len(boxes)))
        out["image"].append(np.full(len(boxes), item["n"]))
        out["boxes"].append(boxes)
        out["annotated"].append(np.arange(len(boxes)) >= len(item["proposals"]))
    return {k: np.concatenate(v) for k, v in out.items()}


def fit(
    X: np.ndarray,
    iou: np.ndarray,
    model: str = "mlp",
    hidden: int = 256,
    epochs: int = 4,
    l2: float = 1e-3,
    neg_share: float = 0.3,
    seed: int = 0,
    context: bool = True,
) -> Objectness:
    """Class-balanced objectness on inputs ``X`` labelled by ``iou`` (≥ 0.5 positive, < 0.3
    negative). ``linear``: L2-regularised logistic regression (L-BFGS, ``l2``); ``mlp``: one ReLU
    layer of ``hidden`` units with dropout 0.3, AdamW (lr 1e-3, weight decay 1e-4), ``epochs``
    passes in batches of 512 over the positives and a ``neg_share`` random share of the negatives
    (re-weighted). Deterministic for a given ``seed`` and thread count. ``context`` records whether
    ``X`` holds the context descriptor (as :func:`region_inputs` builds it)."""
    keep = (iou >= POS) | (iou < NEG)
    rng = np.random.default_rng(seed)
    pos = iou >= POS
    if model == "mlp":
        keep &= pos | (rng.random(len(iou)) < neg_share)
    Xk, yk = np.asarray(X[keep], np.float32), pos[keep].astype(np.float32)
    if not 0 < yk.sum() < len(yk):
        raise ValueError(f"objectness: {int(yk.sum())} positive of {len(yk)} examples; need both kinds")
    mean, std = Xk.mean(0), Xk.std(0) + 1e-6
    Xt, yt = torch.from_numpy((Xk - mean) / std), torch.from_numpy(yk)
    p = yt.mean()
    wts = torch.where(yt > 0, 0.5 / p, 0.5 / (1 - p))
    meta = {"model": model, "examples": int(len(yk)), "positives": int(yk.sum()), "seed": seed, "context": context}
    if model == "linear":
        Xd, yd, wd = Xt.double(), yt.double(), wts.double()
        w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
        b = torch.zeros((), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = (
                wd * torch.nn.functional.binary_cross_entropy_with_logits(Xd @ w + b, yd, reduction="none")
            ).mean() + l2 * (w**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        layers = [(w.detach().float().numpy()[:, None], b.detach().float().numpy().reshape(1))]
        return Objectness(mean, std, layers, {**meta, "l2": l2})
    if model != "mlp":
        raise ValueError(f"objectness model={model!r}: allowed linear, mlp")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(hidden, 1)
    )
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for a in range(0, len(perm), 512):
            i = perm[a : a + 512]
            loss = (
                wts[i]
                * torch.nn.functional.binary_cross_entropy_with_logits(net(Xt[i]).squeeze(1), yt[i], reduction="none")
            ).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    layers = [(m.weight.detach().T.contiguous().numpy(), m.bias.detach().numpy()) for m in (net[0], net[3])]
    return Objectness(mean, std, layers, {**meta, "hidden": hidden, "epochs": epochs, "neg_share": neg_share})


def top_k_recall(
    data: dict[str, Any], scores: np.ndarray, truth: list[np.ndarray], images: np.ndarray, nms_iou: float, k: int
) -> float:
    """Recall at IoU ≥ 0.5 of each image's top ``k`` proposals after NMS (annotated boxes excluded)."""
    dets, tbs = [], []
    for n in images:
        m = (data["image"] == n) & ~data["annotated"]
        keep = nms_top_k(data["boxes"][m], scores[m], nms_iou, k)
        dets.append(data["boxes"][m][keep])
        tbs.append(truth[n])
    return recall_at_iou(dets, tbs, 0.5)


def cross_validate(
    data: dict[str, Any], truth: list[np.ndarray], nms: list[float], k: int, folds: int = 2, **fit_args: Any
) -> dict[str, Any]:
    """Recall of the top ``k`` per NMS threshold, mean over ``folds`` folds of the images in
    ``data`` (each fold scored by a model fitted on the others)."""
    images = np.unique(data["image"])
    parts = [images[f::folds] for f in range(folds)]
    rec: dict[float, list[float]] = {t: [] for t in nms}
    for f, held in enumerate(parts):
        train = np.isin(data["image"], held, invert=True)
        model = fit(data["X"][train], data["iou"][train], **fit_args)
        scores = model.logits(data["X"])
        for t in nms:
            rec[t].append(top_k_recall(data, scores, truth, held, t, k))
    return {
        "folds": folds,
        "images": int(len(images)),
        "k": k,
        "fit": fit_args,
        "recall_by_nms_iou": {str(t): float(np.mean(v)) for t, v in rec.items()},
    }


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--annotations", help="VOC annotation folder (real data)")
    ap.add_argument("--truth", help="synthetic ground_truth.json (uses its train split)")
    ap.add_argument("--exclude-test-of", nargs="*", default=[], help="dataset dirs whose test images are never used")
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a vision parameter")
    ap.add_argument("--model", default="mlp", choices=("mlp", "linear"))
    ap.add_argument("--no-context", action="store_true", help="inputs without the surroundings' descriptor")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--l2", type=float, default=1e-3, help="linear model only")
    ap.add_argument("--regions", help="a fraglib.vision.regions cache of the dataset's images (no CNN pass)")
    ap.add_argument("--cv-out", help="also write a 2-fold cross-validation (recall per NMS threshold) here")
    ap.add_argument("--cv-nms", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6])
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    out = [Path(args.out)] + ([Path(args.cv_out)] if args.cv_out else [])
    claim_cli(ap, out, out, args.overwrite, "fraglib.vision.objectness")
    cfg = load_with_overrides(args.params, "vision", VisionConfig, args.set)
    ds = read_karpathy_json(Path(args.dataset_dir) / "dataset.json")
    excluded = set()
    for d in args.exclude_test_of:
        excluded |= {
            im["filename"] for im in read_karpathy_json(Path(d) / "dataset.json").images if im["split"] == "test"
        }
    if args.truth:
        from fraglib.data.synthetic import synthetic_truth

        images = [im for im in ds.images if im["split"] == "train" and im["filename"] not in excluded]
        truth = synthetic_truth(args.truth)
    else:
        from fraglib.data.voc import voc_truth

        images = [im for im in ds.images if im["filename"] not in excluded]
        truth = voc_truth(args.annotations, images)
    sub = Dataset(ds.name, ds.image_dir, images, [])
    regions = None
    if args.regions:
        from fraglib.vision.regions import Regions

        regions = Regions.load(args.regions)
    data = collect(sub, truth, cfg, regions=regions, context=not args.no_context)
    fit_args = {
        "model": args.model,
        "hidden": args.hidden,
        "epochs": args.epochs,
        "l2": args.l2,
        "context": not args.no_context,
    }
    model = fit(data["X"], data["iou"], **fit_args)
    model.meta.update({"images": len(images), "excluded_test_images": len(excluded), "dataset": ds.name})
    model.save(args.out)
    print(json.dumps(model.meta))
    if args.cv_out:
        cv = cross_validate(data, [truth[int(im["imgid"])] for im in images], args.cv_nms, cfg.k, **fit_args)
        write_text(args.cv_out, json.dumps(cv, indent=1, sort_keys=True) + "\n")
        print(json.dumps(cv["recall_by_nms_iou"]))
