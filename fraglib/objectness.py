"""A learned, class-agnostic objectness score for proposals (``vision.score: learned``).

R-CNN turned CNN features into detections with linear SVMs trained on annotated boxes. The
class-agnostic analogue here: logistic regression on each proposal's RoI descriptor (1280-d) plus
its geometry (log relative area, log aspect ratio, centre, border contact), trained on proposals
labelled by IoU with annotated boxes (positive ≥ 0.5 — the annotated boxes themselves included,
as in R-CNN — negative < 0.3, in between ignored), classes weighted to balance.

    python -m fraglib.objectness --dataset-dir data/pascal1k --annotations ROOT/annotations \
        --exclude-test-of data/pascal1k/split0 ... --out data/pascal1k/objectness.npz

Training images are those outside every listed study split's *test* set (and, for the synthetic
benchmark, its train split with the true boxes), so no test image of any study chose the score.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.config import load_with_overrides
from fraglib.data import Dataset, read_karpathy_json
from fraglib.vision import Backbone, VisionConfig, box_iou, roi_descriptors


def geometry(boxes: np.ndarray, w: int, h: int) -> np.ndarray:
    """(R, 5) float32: log area fraction, log aspect, centre x, centre y (fractions), border contact."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    bw, bh = np.maximum(b[:, 2] - b[:, 0], 1), np.maximum(b[:, 3] - b[:, 1], 1)
    border = ((b[:, 0] <= 2) | (b[:, 1] <= 2) | (b[:, 2] >= w - 2) | (b[:, 3] >= h - 2)).astype(np.float64)
    return np.stack([np.log(bw * bh / (w * h)), np.log(bw / bh), (b[:, 0] + bw / 2) / w, (b[:, 1] + bh / 2) / h,
                     border], 1).astype(np.float32)


class Objectness:
    """Logistic regression over standardised [descriptor, geometry]; ``score`` returns logits."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, weight: np.ndarray, bias: float, meta: dict[str, Any]) -> None:
        self.mean, self.std, self.weight, self.bias, self.meta = mean, std, weight, float(bias), meta

    def score(self, desc: torch.Tensor | np.ndarray, boxes: np.ndarray, w: int, h: int) -> np.ndarray:
        d = desc.float().cpu().numpy() if isinstance(desc, torch.Tensor) else np.asarray(desc, np.float32)
        x = np.concatenate([d, geometry(boxes, w, h)], 1)
        return ((x - self.mean) / self.std) @ self.weight + self.bias

    def save(self, path: str | Path) -> None:
        np.savez(path, mean=self.mean, std=self.std, weight=self.weight, bias=np.array(self.bias),
                 meta=np.array(json.dumps(self.meta, sort_keys=True)))

    @classmethod
    def load(cls, path: str | Path) -> "Objectness":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: objectness model not found (vision.objectness_file; run fraglib.objectness)")
        z = np.load(path, allow_pickle=False)
        return cls(z["mean"], z["std"], z["weight"], float(z["bias"]), json.loads(str(z["meta"])))


def collect(dataset: Dataset, truth: dict[int, np.ndarray], cfg: VisionConfig, progress: bool = True,
            regions: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Labelled proposal features of every image of ``dataset``: X (N, 1285), y (N,) in {0, 1}.
    ``regions``: a :class:`fraglib.regions.Regions` cache holding these images (no CNN pass)."""
    from tqdm.auto import tqdm

    from fraglib.regions import region_items

    device = torch.device("cpu")
    backbone = Backbone(cfg.cnn_variant) if regions is None else None
    xs, ys = [], []
    for item in tqdm(region_items(dataset, cfg, backbone, device, regions), total=len(dataset.images),
                     desc="objectness data", disable=not progress, mininterval=5):
        if "error" in item:  # a bad image is skipped here exactly as in features
            print(f"skipped {dataset.image_path(item['n'])}: {item['error']}")
            continue
        (w, h), gt = item["size"], truth[int(dataset.images[item["n"]]["imgid"])]
        boxes = np.concatenate([item["proposals"], gt]).astype(np.float32)
        desc = roi_descriptors(item["fmap"], boxes, item["scale"]).numpy()
        iou = box_iou(boxes, gt).max(axis=1) if len(gt) else np.zeros(len(boxes))
        keep = (iou >= 0.5) | (iou < 0.3)
        xs.append(np.concatenate([desc, geometry(boxes, w, h)], 1)[keep])
        ys.append((iou[keep] >= 0.5).astype(np.float32))
    return np.concatenate(xs), np.concatenate(ys)


def fit(X: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 200) -> Objectness:
    """Class-balanced L2-regularised logistic regression (L-BFGS, deterministic)."""
    mean, std = X.mean(0), X.std(0) + 1e-6
    Xt = torch.from_numpy((X - mean) / std).double()
    yt = torch.from_numpy(y).double()
    pos = yt.mean().clamp(1e-6, 1 - 1e-6)
    wts = torch.where(yt > 0, 0.5 / pos, 0.5 / (1 - pos))
    w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (wts * torch.nn.functional.binary_cross_entropy_with_logits(Xt @ w + b, yt, reduction="none")).mean() \
            + l2 * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return Objectness(mean.astype(np.float32), std.astype(np.float32), w.detach().float().numpy(), float(b),
                      {"l2": l2, "examples": int(len(y)), "positives": int(y.sum())})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--annotations", help="VOC annotation folder (real data)")
    ap.add_argument("--truth", help="synthetic ground_truth.json (uses its train split)")
    ap.add_argument("--exclude-test-of", nargs="*", default=[], help="dataset dirs whose test images are never used")
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a vision parameter")
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--regions", help="a fraglib.regions cache of the dataset's images (no CNN pass)")
    args = ap.parse_args(argv)
    cfg = load_with_overrides(args.params, "vision", VisionConfig, args.set)
    ds = read_karpathy_json(Path(args.dataset_dir) / "dataset.json")
    excluded = set()
    for d in args.exclude_test_of:
        excluded |= {im["filename"] for im in read_karpathy_json(Path(d) / "dataset.json").images if im["split"] == "test"}
    if args.truth:
        from fraglib.features import synthetic_truth

        images = [im for im in ds.images if im["split"] == "train" and im["filename"] not in excluded]
        truth = synthetic_truth(args.truth)
    else:
        from fraglib.voc import voc_truth

        images = [im for im in ds.images if im["filename"] not in excluded]
        truth = voc_truth(args.annotations, images)
    sub = Dataset(ds.name, ds.image_dir, images, [])
    regions = None
    if args.regions:
        from fraglib.regions import Regions

        regions = Regions.load(args.regions)
    X, y = collect(sub, truth, cfg, regions=regions)
    model = fit(X, y, args.l2)
    model.meta.update({"images": len(images), "excluded_test_images": len(excluded), "dataset": ds.name})
    model.save(args.out)
    print(json.dumps(model.meta))


if __name__ == "__main__":
    main()
