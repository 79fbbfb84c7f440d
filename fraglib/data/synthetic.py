"""The embedded synthetic benchmark (docs/synthetic.md): real pixels, real sentences, known alignment.

Each image is a procedurally textured *scene* (grass, sand, snow, water, brick wall, night sky,
wooden floor) holding ``min_objects``..``max_objects`` non-overlapping *objects*. An object has a
shape, a colour, a surface pattern and a size class. Five captions per image are generated from a
small grammar; each caption mentions only a subset of the objects (1..3), with a random subset of
their attributes, in one of several syntactic frames:

* adjective stacks           "a small red striped circle"
* relative clauses           "a square that is red and dotted"    (long-range modifier)
* with-phrases               "a blue star with stripes"
* spatial relations          "a star above a blue square", "to the left of", "next to"
* passives / coordination    "a square is topped by a star", "a circle, a ring and a cross"
* scene phrases (grounded in the full frame)   "on the grass", "in front of a brick wall"
* phrases with no visual grounding             "on a sunny day", "in this picture"

Spatial relations are read off the actual geometry, so every caption is true of its image.

A fraction ``twin_fraction`` of images are *binding twins*: a copy of the previous image's layout
(shapes, sizes, patterns, positions) with the colours permuted among the objects (a derangement)
and a freshly drawn background. A twin pair is in the same split. A bag-of-attributes description
("red", "circle", "blue", "square") fits both images of a pair; only attribute *binding* ("red
circle" vs "blue circle") tells them apart. Twins are the benchmark's binding phenomenon made
explicit, not a device to favour any model: their share is a difficulty knob like the others.

Outputs (``write_benchmark``), all byte-identical for the same seed and configuration:

* ``images/NNNNNN.png``          RGB, ``image_size`` x ``image_size`` px
* ``dataset.json``               Karpathy format (docs/formats.md), splits train / val / test
* ``ground_truth.json``          per image: scene, objects (box ``[x0, y0, x1, y1]`` in px, exclusive
                                 right/bottom, attributes), twin link; per caption: which character
                                 span refers to which object (``mentions``), the scene span and
                                 the ungrounded phrase, if any
* ``stats.json``                 summary statistics (a DVC metric)
* ``caption_lengths.csv``        histogram of tokens per caption (a DVC plot)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from fraglib.core.config import ConfigError, check_range
from fraglib.core.outputs import OVERWRITE_HELP, atomic, claim, command, write_text
from fraglib.data.dataset import tokenize

# ----------------------------------------------------------------------------- vocabulary
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (205, 35, 35),
    "green": (40, 165, 55),
    "blue": (40, 75, 205),
    "yellow": (238, 205, 35),
    "purple": (135, 50, 165),
    "orange": (242, 130, 25),
    "white": (242, 242, 242),
    "black": (22, 22, 22),
}
SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond", "hexagon", "ring")
PATTERNS = ("plain", "striped", "dotted", "checkered")
PATTERN_ADJ = {"striped": ["striped"], "dotted": ["dotted", "spotted"], "checkered": ["checkered"]}
PATTERN_WITH = {"striped": ["stripes"], "dotted": ["dots", "spots"], "checkered": ["a checkered pattern"]}
SIZE_CLASSES = ("small", "medium", "large")
SIZE_WORDS = {"small": ["small", "little", "tiny"], "large": ["large", "big"], "medium": []}
SCENES = ("grass", "sand", "snow", "water", "brick", "night", "wood")
SCENE_PHRASES = {
    "grass": ["on the grass", "in a grassy field", "on a lawn"],
    "sand": ["on the sand", "at the beach"],
    "snow": ["in the snow", "on a snowy field"],
    "water": ["over the water", "on the sea"],
    "brick": ["in front of a brick wall", "against a brick wall"],
    "night": ["under the night sky", "at night"],
    "wood": ["on a wooden floor", "on the wooden boards"],
}
UNGROUNDED = ["on a sunny day", "in this picture", "in the afternoon", "as usual", "this morning", "for the kids"]
RELATION_PHRASES = {
    "above": ["above", "over"],
    "below": ["below", "under", "beneath"],
    "left": ["to the left of", "on the left of"],
    "right": ["to the right of", "on the right of"],
    "near": ["next to", "beside", "near"],
}


# ----------------------------------------------------------------------------- configuration
@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """Size and difficulty of the benchmark (``params.yaml`` section ``synthetic``)."""

    seed: int = 0
    n_train: int = 800
    n_val: int = 100
    n_test: int = 100
    gallery: int = 0  # > 0: test images ranked in consecutive galleries of this many (0: one gallery)
    image_size: int = 256  # px, square
    min_objects: int = 2
    max_objects: int = 4
    captions_per_image: int = 5
    max_mentions: int = 3  # objects a caption mentions at most
    twin_fraction: float = 0.2  # target share of colour-permuted twins (fewer where colours cannot be permuted)
    small_fraction: float = 0.35  # share of objects in the "small" size class
    ungrounded_prob: float = 0.3  # chance a caption carries a phrase with no visual grounding
    scene_prob: float = 0.5  # chance a caption names the scene
    pixel_noise: float = 6.0  # std of additive Gaussian pixel noise, in 0..255 units

    def validate(self) -> "SynthConfig":
        p = "synthetic"
        for name in ("n_train", "n_val", "n_test"):
            check_range(f"{p}.{name}", getattr(self, name), 1, 1_000_000, int)
        check_range(f"{p}.seed", self.seed, 0, 2**32 - 1, int)
        check_range(f"{p}.gallery", self.gallery, 0, self.n_test, int)
        if self.gallery and self.n_test % self.gallery:
            raise ConfigError(
                f"{p}.gallery={self.gallery}: the {self.n_test} test images (synthetic.n_test) do not cut into "
                "galleries of that size (choose a divisor of n_test, or 0 for one gallery)"
            )
        check_range(f"{p}.image_size", self.image_size, 64, 1024, int)
        check_range(f"{p}.min_objects", self.min_objects, 1, self.max_fit(), int)
        check_range(f"{p}.max_objects", self.max_objects, self.min_objects, self.max_fit(), int)
        check_range(f"{p}.captions_per_image", self.captions_per_image, 1, 20, int)
        check_range(f"{p}.max_mentions", self.max_mentions, 1, 3, int)
        check_range(f"{p}.twin_fraction", self.twin_fraction, 0.0, 0.5, float)  # a twin never follows a twin
        for name in ("small_fraction", "ungrounded_prob", "scene_prob"):
            check_range(f"{p}.{name}", getattr(self, name), 0.0, 1.0, float)
        check_range(f"{p}.pixel_noise", self.pixel_noise, 0.0, 64.0, float)
        return self

    @staticmethod
    def max_fit() -> int:
        """Most objects that still place reliably without overlap (worst case: all large)."""
        return 6

    @property
    def n_images(self) -> int:
        return self.n_train + self.n_val + self.n_test

    def digest(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ----------------------------------------------------------------------------- scene layout
SIZE_RANGE = {"small": (0.09, 0.14), "medium": (0.18, 0.25), "large": (0.28, 0.36)}  # x image side


def _derangement(rng: np.random.Generator, n: int) -> list[int]:
    while True:
        perm = list(rng.permutation(n))
        if all(perm[i] != i for i in range(n)):
            return perm


def _sample_layout(rng: np.random.Generator, cfg: SynthConfig) -> list[dict[str, Any]]:
    """Objects with attributes and non-overlapping square boxes ``[x0, y0, x1, y1]``."""
    S = cfg.image_size
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    for _attempt in range(50):
        objects: list[dict[str, Any]] = []
        for _k in range(n):
            size = "small" if rng.random() < cfg.small_fraction else str(rng.choice(["medium", "large"]))
            lo, hi = SIZE_RANGE[size]
            side = int(round(S * rng.uniform(lo, hi)))
            for _try in range(200):
                x0 = int(rng.integers(2, S - side - 2))
                y0 = int(rng.integers(2, S - side - 2))
                box = [x0, y0, x0 + side, y0 + side]
                gap = 4
                if all(
                    box[0] >= o["box"][2] + gap
                    or box[2] + gap <= o["box"][0]
                    or box[1] >= o["box"][3] + gap
                    or box[3] + gap <= o["box"][1]
                    for o in objects
                ):
                    break
            else:
                break  # restart the whole image
            objects.append(
                {
                    "box": box,
                    "shape": str(rng.choice(SHAPES)),
                    "colour": str(rng.choice(list(COLOURS))),
                    "pattern": str(rng.choice(PATTERNS)),
                    "size": size,
                }
            )
        if len(objects) == n:
            return objects
    raise ConfigError(
        f"synthetic: could not place {n} non-overlapping objects in a {S}px image after 50 attempts; "
        f"lower synthetic.max_objects (now {cfg.max_objects}) or synthetic.small_fraction"
    )


def _twin_of(rng: np.random.Generator, objects: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Same layout, colours permuted among objects so that every object's colour changes."""
    colours = [o["colour"] for o in objects]
    if len(set(colours)) < 2:
        return None
    for _ in range(20):
        perm = _derangement(rng, len(objects))
        new = [colours[perm[i]] for i in range(len(objects))]
        if all(a != b for a, b in zip(new, colours)):
            return [dict(o, colour=c) for o, c in zip(objects, new)]
    return None


# ----------------------------------------------------------------------------- rendering
def _jitter(rng: np.random.Generator, rgb: tuple[int, int, int], amount: int) -> tuple[int, int, int]:
    return tuple(int(np.clip(c + rng.integers(-amount, amount + 1), 0, 255)) for c in rgb)  # type: ignore


def _background(rng: np.random.Generator, scene: str, S: int) -> np.ndarray:
    """Procedural texture for a scene, float32 (S, S, 3) in 0..255."""
    yy, xx = np.mgrid[0:S, 0:S].astype(np.float32) / S
    noise = rng.normal(0, 1, (S, S)).astype(np.float32)
    coarse = np.asarray(
        Image.fromarray(rng.normal(0, 1, (S // 16, S // 16)).astype(np.float32)).resize((S, S), Image.BILINEAR)
    )

    def tint(base, var):
        base = np.array(_jitter(rng, base, 18), np.float32)
        return base[None, None, :] + var[..., None]

    if scene == "grass":
        streaks = np.asarray(Image.fromarray(noise).resize((S, S // 8)).resize((S, S)))
        img = tint((70, 140, 50), 14 * streaks + 10 * coarse)
    elif scene == "sand":
        img = tint((214, 190, 140), 6 * noise + 8 * coarse + 6 * np.sin(40 * yy + 6 * coarse))
    elif scene == "snow":
        img = tint((232, 236, 245), 4 * noise + 6 * coarse - 20 * yy)
    elif scene == "water":
        img = tint((40, 95, 165), 12 * np.sin(60 * yy + 3 * np.sin(9 * xx)) + 6 * coarse + 30 * yy)
    elif scene == "brick":
        rows = (yy * 12).astype(int)
        shift = (rows % 2) * 0.5 / 6
        mortar = ((yy * 12) % 1 < 0.1) | (((xx + shift) * 6) % 1 < 0.05)
        img = tint((150, 60, 45), 8 * noise + 10 * coarse)
        img[mortar] = np.array((190, 185, 175), np.float32)
    elif scene == "night":
        img = tint((15, 20, 55), 25 * yy + 3 * noise)
        stars = rng.random((S, S)) < 0.002
        img[stars] = 230
    elif scene == "wood":
        planks = np.sin(2 * math.pi * 5 * xx) * 6 + np.sin(80 * xx + 4 * coarse) * 8
        img = tint((150, 100, 55), planks + 4 * noise)
    else:  # pragma: no cover - guarded by SCENES
        raise ValueError(scene)
    return img


def _shape_polygon(shape: str, s: float) -> list[tuple[float, float]] | None:
    c = s / 2
    r = s / 2 * 0.96

    def regular(k, r0, phase):
        return [
            (c + r0 * math.cos(phase + 2 * math.pi * i / k), c + r0 * math.sin(phase + 2 * math.pi * i / k))
            for i in range(k)
        ]

    if shape == "square":
        m = s * 0.1
        return [(m, m), (s - m, m), (s - m, s - m), (m, s - m)]
    if shape == "triangle":
        return [(c, s * 0.04), (s * 0.97, s * 0.94), (s * 0.03, s * 0.94)]
    if shape == "diamond":
        return [(c, s * 0.02), (s * 0.85, c), (c, s * 0.98), (s * 0.15, c)]
    if shape == "hexagon":
        return regular(6, r, 0.0)
    if shape == "star":
        pts = []
        for i in range(10):
            rr = r if i % 2 == 0 else r * 0.45
            a = -math.pi / 2 + math.pi * i / 5
            pts.append((c + rr * math.cos(a), c + rr * math.sin(a)))
        return pts
    if shape == "cross":
        a, b = s * 0.34, s * 0.66
        return [(a, 0), (b, 0), (b, a), (s, a), (s, b), (b, b), (b, s), (a, s), (a, b), (0, b), (0, a), (a, a)]
    return None  # circle, ring: ellipses


def _render_object(rng: np.random.Generator, obj: dict[str, Any]) -> Image.Image:
    """RGBA tile of the object, drawn at 3x and downsampled (anti-aliased)."""
    side = obj["box"][2] - obj["box"][0]
    ss = 3
    s = side * ss
    mask = Image.new("L", (s, s), 0)
    d = ImageDraw.Draw(mask)
    poly = _shape_polygon(obj["shape"], s)
    if poly is not None:
        d.polygon(poly, fill=255)
    else:
        d.ellipse([s * 0.02, s * 0.02, s * 0.98, s * 0.98], fill=255)
        if obj["shape"] == "ring":
            d.ellipse([s * 0.3, s * 0.3, s * 0.7, s * 0.7], fill=0)
    base = _jitter(rng, COLOURS[obj["colour"]], 14)
    second = tuple(int(c * 0.45) for c in base) if sum(base) > 200 else (200, 200, 200)
    fill = Image.new("RGB", (s, s), base)
    fd = ImageDraw.Draw(fill)
    period = max(6 * ss, s // 6)
    if obj["pattern"] == "striped":
        for k in range(-s, 2 * s, period):
            fd.polygon([(k, 0), (k + period // 2, 0), (k + period // 2 - s, s), (k - s, s)], fill=second)
    elif obj["pattern"] == "dotted":
        rad = period * 0.22
        for y in range(period // 2, s, period):
            for x in range(period // 2, s, period):
                fd.ellipse([x - rad, y - rad, x + rad, y + rad], fill=second)
    elif obj["pattern"] == "checkered":
        cell = max(1, period // 2)
        for y in range(0, s, cell):
            for x in range(0, s, cell):
                if (x // cell + y // cell) % 2 == 0:
                    fd.rectangle([x, y, x + cell - 1, y + cell - 1], fill=second)
    # downsample (anti-aliasing), then a thin dark outline as drawn objects usually have
    mask = mask.resize((side, side), Image.LANCZOS)
    fill = fill.resize((side, side), Image.LANCZOS)
    outline = mask.filter(ImageFilter.MaxFilter(3))
    tile = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    tile.paste(Image.new("RGB", (side, side), tuple(int(c * 0.5) for c in base)), (0, 0), outline)
    tile.paste(fill, (0, 0), mask)
    return tile


def render_image(rng: np.random.Generator, scene: str, objects: list[dict[str, Any]], cfg: SynthConfig) -> Image.Image:
    """RGB image of ``objects`` on a ``scene`` background."""
    S = cfg.image_size
    bg = _background(rng, scene, S)
    img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8), "RGB")
    for obj in objects:
        tile = _render_object(rng, obj)
        img.paste(tile, (obj["box"][0], obj["box"][1]), tile)
    arr = np.asarray(img, np.float32)
    if cfg.pixel_noise > 0:
        arr = arr + rng.normal(0, cfg.pixel_noise, arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "RGB")


# ----------------------------------------------------------------------------- captions
def spatial_relation(a: dict[str, Any], b: dict[str, Any], image_size: int) -> str:
    """Relation of object ``a`` to object ``b`` from box centres: above/below/left/right/near."""
    ax, ay = (a["box"][0] + a["box"][2]) / 2, (a["box"][1] + a["box"][3]) / 2
    bx, by = (b["box"][0] + b["box"][2]) / 2, (b["box"][1] + b["box"][3]) / 2
    dx, dy = ax - bx, ay - by
    thresh = 0.12 * image_size
    if abs(dy) >= abs(dx) and abs(dy) > thresh:
        return "above" if dy < 0 else "below"
    if abs(dx) > thresh and abs(dx) > 1.5 * abs(dy):
        return "left" if dx < 0 else "right"
    return "near"


class _Caption:
    """Assembles a caption from pieces while tracking character spans of mentions."""

    def __init__(self) -> None:
        self.text = ""
        self.mentions: list[dict[str, Any]] = []
        self.scene_span: list[int] | None = None
        self.ungrounded_span: list[int] | None = None
        self.constructions: set[str] = set()
        self.relations: list[dict[str, Any]] = []

    def add(self, piece: str) -> None:
        if piece in ("there is", "there are"):
            self.constructions.add("existential")
        if piece:
            self.text = f"{self.text} {piece}" if self.text and not piece.startswith(",") else self.text + piece

    def add_np(self, np_text: str, head_offset: int, head: str, obj_index: int, attrs: list[str], frame: str) -> None:
        self.constructions.add(frame)
        start = len(self.text) + (1 if self.text else 0)
        self.add(np_text)
        self.mentions.append(
            {
                "object": obj_index,
                "span": [start, start + len(np_text)],
                "head": [start + head_offset, start + head_offset + len(head)],
                "attributes": attrs,
            }
        )

    def add_scene(self, phrase: str) -> None:
        start = len(self.text) + (1 if self.text else 0)
        self.add(phrase)
        self.scene_span = [start, start + len(phrase)]
        self.constructions.add("scene_phrase")

    def add_ungrounded(self, phrase: str) -> None:
        start = len(self.text) + (1 if self.text else 0)
        self.add(phrase)
        self.ungrounded_span = [start, start + len(phrase)]
        self.constructions.add("ungrounded_phrase")

    def finish(self) -> dict[str, Any]:
        text = self.text[0].upper() + self.text[1:] + "."
        return {
            "raw": text,
            "mentions": self.mentions,
            "scene_span": self.scene_span,
            "ungrounded_span": self.ungrounded_span,
            "constructions": sorted(self.constructions | ({"spatial_relation"} if self.relations else set())),
            "relations": self.relations,
        }


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def noun_phrase(
    rng: np.random.Generator, obj: dict[str, Any], definite: bool = False
) -> tuple[str, int, list[str], str]:
    """A noun phrase for ``obj``: (text, head noun's character offset, attributes named, frame).

    ``frame`` is ``adjective_stack`` (also for a bare noun), ``relative_clause`` or ``with_phrase``.

    Frames: prenominal adjective stack, relative clause ("that is red and dotted"), or a
    with-phrase ("with stripes"). Any subset of colour / size / pattern may be named.
    """
    attrs = [
        a for a in ("colour", "size", "pattern") if rng.random() < {"colour": 0.8, "size": 0.45, "pattern": 0.45}[a]
    ]
    if obj["size"] == "medium" and "size" in attrs:
        attrs.remove("size")
    if obj["pattern"] == "plain" and "pattern" in attrs:
        attrs.remove("pattern")
    words = {
        "colour": obj["colour"],
        "size": str(rng.choice(SIZE_WORDS[obj["size"]])) if SIZE_WORDS[obj["size"]] else "",
        "pattern": str(rng.choice(PATTERN_ADJ[obj["pattern"]])) if obj["pattern"] != "plain" else "",
    }
    frame = rng.choice(["stack", "stack", "relative", "with"]) if attrs else "stack"
    noun = obj["shape"]
    if frame == "relative":
        pre: list[str] = []
        post_attrs = list(attrs)
        if len(post_attrs) == 3:  # keep one prenominal, two in the clause
            pre, post_attrs = [words[post_attrs[1]]], [post_attrs[0], post_attrs[2]]
        pron = str(rng.choice(["that", "which"]))
        clause = " and ".join(words[a] for a in post_attrs)
        head_words = pre + [noun]
        det = "the" if definite else _article(head_words[0])
        prefix = f"{det} {' '.join(head_words[:-1])} ".replace("  ", " ")
        text = f"{prefix}{noun} {pron} is {clause}"
        return text, len(prefix), attrs, "relative_clause"
    if frame == "with" and "pattern" in attrs:
        stack = [words[a] for a in ("size", "colour") if a in attrs]
        det = "the" if definite else _article((stack + [noun])[0])
        prefix = " ".join([det] + stack) + " "
        text = f"{prefix}{noun} with {rng.choice(PATTERN_WITH[obj['pattern']])}"
        return text, len(prefix), attrs, "with_phrase"
    stack = [words[a] for a in ("size", "colour", "pattern") if a in attrs]
    det = "the" if definite else _article((stack + [noun])[0])
    prefix = " ".join([det] + stack) + " "
    return f"{prefix}{noun}", len(prefix), attrs, "adjective_stack"


def make_caption(
    rng: np.random.Generator, scene: str, objects: list[dict[str, Any]], cfg: SynthConfig
) -> dict[str, Any]:
    """One caption mentioning 1..max_mentions objects of the image, true of its geometry."""
    k_max = min(cfg.max_mentions, len(objects))
    k = int(rng.integers(1, k_max + 1))
    chosen = [int(i) for i in rng.choice(len(objects), size=k, replace=False)]
    cap = _Caption()
    if rng.random() < cfg.ungrounded_prob and rng.random() < 0.5:
        cap.add_ungrounded(str(rng.choice(UNGROUNDED)))
        cap.add(",")

    def np_of(i, definite=False):
        text, off, attrs, np_frame = noun_phrase(rng, objects[i], definite)
        cap.add_np(text, off, objects[i]["shape"], i, attrs, np_frame)

    scene_phrase = str(rng.choice(SCENE_PHRASES[scene])) if rng.random() < cfg.scene_prob else None
    if k == 1:
        frame = rng.choice(["bare", "there", "passive", "verb"])
        if frame == "there":
            cap.add("there is")
        np_of(chosen[0], definite=(frame == "verb" and rng.random() < 0.5))
        if frame == "passive":
            cap.constructions.add("passive")
            cap.add(str(rng.choice(["is shown", "is drawn", "is placed", "can be seen"])))
        elif frame == "verb":
            cap.add(str(rng.choice(["sits", "rests", "lies"])))
        if scene_phrase is None and frame in ("passive", "verb"):
            scene_phrase = str(rng.choice(SCENE_PHRASES[scene]))
    elif k == 2:
        a, b = chosen
        rel = spatial_relation(objects[a], objects[b], cfg.image_size)
        relp = str(rng.choice(RELATION_PHRASES[rel]))
        frame = rng.choice(["bare", "copula", "verb", "passive", "coord", "there"])
        if frame == "passive":
            cap.constructions.add("passive")
        if frame != "coord":
            cap.relations.append({"subject": a, "relation": rel, "object": b})
        if frame == "passive" and rel == "above":
            np_of(b)
            cap.add("is topped by")
            np_of(a)
        elif frame == "passive":
            np_of(a)
            cap.add(str(rng.choice(["is placed", "is drawn", "is shown"])) + " " + relp)
            np_of(b)
        elif frame == "coord":
            cap.constructions.add("coordination")
            np_of(a)
            cap.add("and")
            np_of(b)
        else:
            if frame == "there":
                cap.add("there is")
            np_of(a, definite=(frame in ("copula", "verb") and rng.random() < 0.3))
            cap.add(
                {"bare": "", "there": "", "copula": "is", "verb": str(rng.choice(["sits", "floats", "stands"]))}[frame]
            )
            cap.add(relp)
            np_of(b)
    else:
        frame = rng.choice(["list", "relation_and"])
        cap.constructions.add("coordination")
        if frame == "list":
            if rng.random() < 0.4:
                cap.add(str(rng.choice(["we can see", "the picture shows", "there are"])))
            for n, i in enumerate(chosen):
                if n == len(chosen) - 1:
                    cap.add("and")
                elif n > 0:
                    cap.add(",")
                np_of(i)
        else:
            a, b, c = chosen
            rel = spatial_relation(objects[a], objects[b], cfg.image_size)
            cap.relations.append({"subject": a, "relation": rel, "object": b})
            np_of(a)
            cap.add(str(rng.choice(RELATION_PHRASES[rel])))
            np_of(b)
            cap.add("and")
            np_of(c)
    if scene_phrase is not None:
        cap.add_scene(scene_phrase)
    if cap.ungrounded_span is None and rng.random() < cfg.ungrounded_prob:
        cap.add_ungrounded(str(rng.choice(UNGROUNDED)))
    return cap.finish()


# ----------------------------------------------------------------------------- whole benchmark
def generate_image_record(
    cfg: SynthConfig, index: int, previous: dict[str, Any] | None
) -> tuple[Image.Image, dict[str, Any]]:
    """Image ``index`` and its ground truth. ``previous`` is the record of image ``index - 1``."""
    rng = np.random.default_rng([cfg.seed, index])
    twin_of = None
    objects = None
    if (
        previous is not None
        and previous["twin_of"] is None
        and rng.random() < cfg.twin_fraction / max(1e-9, 1 - cfg.twin_fraction)
    ):
        objects = _twin_of(rng, previous["objects"])
        if objects is not None:
            twin_of = previous["imgid"]
    if objects is None:
        objects = _sample_layout(rng, cfg)
    scene = previous["scene"] if twin_of is not None else str(rng.choice(SCENES))
    image = render_image(rng, scene, objects, cfg)
    captions = [make_caption(rng, scene, objects, cfg) for _ in range(cfg.captions_per_image)]
    return image, {"imgid": index, "scene": scene, "objects": objects, "twin_of": twin_of, "captions": captions}


def _split_of(cfg: SynthConfig, index: int) -> str:
    if index < cfg.n_train:
        return "train"
    return "val" if index < cfg.n_train + cfg.n_val else "test"


def _gallery_of(cfg: SynthConfig, index: int) -> int | None:
    """The test gallery of image ``index`` (None: not a test image, or ``cfg.gallery`` 0)."""
    if not cfg.gallery or _split_of(cfg, index) != "test":
        return None
    return (index - cfg.n_train - cfg.n_val) // cfg.gallery


def generate(cfg: SynthConfig, progress: bool = True):
    """Yield ``(filename, PIL image, ground-truth record)`` for every image, in order.

    A twin never crosses a split or gallery boundary: the first image of each split and of each test
    gallery is never a twin.
    """
    from tqdm.auto import tqdm

    cfg.validate()
    previous = None
    for index in tqdm(range(cfg.n_images), desc="synthetic images", disable=not progress):
        block = (_split_of(cfg, index), _gallery_of(cfg, index))
        if previous is not None and block != (_split_of(cfg, index - 1), _gallery_of(cfg, index - 1)):
            previous = None
        image, record = generate_image_record(cfg, index, previous)
        record["split"] = _split_of(cfg, index)
        if block[1] is not None:
            record["gallery"] = block[1]
        record["filename"] = image_name(index)
        record["width"] = record["height"] = cfg.image_size
        previous = record
        yield record["filename"], image, record


def _dump_json(obj: Any, path: Path) -> None:
    write_text(path, json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=True) + "\n")


def summarize(records: list[dict[str, Any]], dataset: dict[str, Any]) -> dict[str, Any]:
    """Statistics of the benchmark (all plain numbers, for ``stats.json`` and the report)."""
    n_obj = [len(r["objects"]) for r in records]
    mentions = [len(c["mentions"]) for r in records for c in r["captions"]]
    mentioned_frac = [
        len({m["object"] for c in r["captions"] for m in c["mentions"]}) / len(r["objects"]) for r in records
    ]
    lengths = [len(s["tokens"]) for im in dataset["images"] for s in im["sentences"]]
    vocab = {t for im in dataset["images"] for s in im["sentences"] for t in s["tokens"]}
    small = [o["size"] == "small" for r in records for o in r["objects"]]
    small_mentioned = [
        any(m["object"] == i for c in r["captions"] for m in c["mentions"])
        for r in records
        for i, o in enumerate(r["objects"])
        if o["size"] == "small"
    ]
    return {
        "images": len(records),
        "captions": len(mentions),
        "splits": {s: sum(r["split"] == s for r in records) for s in ("train", "val", "test")},
        "vocabulary": len(vocab),
        "caption_tokens_mean": float(np.mean(lengths)),
        "caption_tokens_max": int(np.max(lengths)),
        "objects_per_image_mean": float(np.mean(n_obj)),
        "mentions_per_caption_mean": float(np.mean(mentions)),
        "objects_mentioned_by_some_caption": float(np.mean(mentioned_frac)),
        "small_object_share": float(np.mean(small)),
        "small_objects_mentioned_by_some_caption": float(np.mean(small_mentioned)) if small_mentioned else 0.0,
        "twin_images": sum(r["twin_of"] is not None for r in records),
        "captions_with_ungrounded_phrase": float(
            np.mean([c["ungrounded_span"] is not None for r in records for c in r["captions"]])
        ),
        "captions_with_scene_phrase": float(
            np.mean([c["scene_span"] is not None for r in records for c in r["captions"]])
        ),
    }


OUTPUT_FILES = ("dataset.json", "ground_truth.json", "stats.json", "caption_lengths.csv")
IMAGE_NAME = re.compile(r"[0-9]{6,}\.png")  # the generator's image names (image_name), nothing else in images/


def image_name(index: int) -> str:
    """The file name of image ``index`` in ``images/`` (``NNNNNN.png``)."""
    return f"{index:06d}.png"


def benchmark_files(out_dir: str | Path) -> list[Path]:
    """The files of a benchmark in ``out_dir`` that the generator writes, those there now: :data:`OUTPUT_FILES` and
    the images named as it names them (:data:`IMAGE_NAME`); another file in ``images/`` (a user's
    ``holiday.png``) is not the benchmark's."""
    out = Path(out_dir)
    img_dir = out / "images"
    images = sorted(p for p in img_dir.glob("*.png") if IMAGE_NAME.fullmatch(p.name)) if img_dir.is_dir() else []
    return [out / f for f in OUTPUT_FILES] + images


def write_benchmark(
    cfg: SynthConfig, out_dir: str | Path, progress: bool = True, overwrite: bool = False
) -> dict[str, Any]:
    """Generate the benchmark into ``out_dir``; returns the statistics.

    An earlier benchmark there (:func:`benchmark_files`: its ``images/NNNNNN.png`` and :data:`OUTPUT_FILES`)
    is an error unless ``overwrite``, which replaces it completely (see :mod:`fraglib.core.outputs`); any other
    file (a user's picture in ``images/``) is neither listed nor deleted.
    """
    out = Path(out_dir)
    img_dir = out / "images"
    outputs = [out / f for f in OUTPUT_FILES]
    claim(benchmark_files(out), outputs, overwrite, f"synthetic benchmark in {out}")
    img_dir.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    sentid = 0
    t0 = time.perf_counter()
    for filename, image, record in generate(cfg, progress):
        with atomic(img_dir / filename) as tmp:
            image.save(tmp, format="PNG", optimize=False)
        sents = []
        for cap in record["captions"]:
            cap["sentid"] = sentid
            sents.append(
                {"raw": cap["raw"], "tokens": tokenize(cap["raw"]), "imgid": record["imgid"], "sentid": sentid}
            )
            sentid += 1
        images.append(
            {
                "imgid": record["imgid"],
                "filename": filename,
                "split": record["split"],
                **({"gallery": record["gallery"]} if "gallery" in record else {}),
                "sentids": [s["sentid"] for s in sents],
                "sentences": sents,
            }
        )
        records.append(record)
    seconds = time.perf_counter() - t0
    dataset = {"dataset": "synthetic", "images": images}
    _dump_json(dataset, out / "dataset.json")
    _dump_json(
        {
            "config": dataclasses.asdict(cfg),
            "config_digest": cfg.digest(),
            "colours": list(COLOURS),
            "shapes": list(SHAPES),
            "patterns": list(PATTERNS),
            "scenes": list(SCENES),
            "images": records,
        },
        out / "ground_truth.json",
    )
    stats = summarize(records, dataset)
    _dump_json(stats, out / "stats.json")
    lengths = np.bincount([len(s["tokens"]) for im in images for s in im["sentences"]])
    write_text(
        out / "caption_lengths.csv", "tokens,captions\n" + "".join(f"{n},{c}\n" for n, c in enumerate(lengths) if c)
    )
    stats["_seconds"] = seconds
    return stats


@command
def main(argv: list[str] | None = None) -> None:
    import argparse

    from fraglib.core.config import load_section

    ap = argparse.ArgumentParser(description="Generate the synthetic benchmark from params.yaml's `synthetic` section.")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="data/synthetic")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    cfg = load_section(args.params, "synthetic", SynthConfig)
    try:
        stats = write_benchmark(cfg, args.out, overwrite=args.overwrite)
    except FileExistsError as exc:  # refused before any image is drawn
        ap.error(str(exc))
    print(f"wrote {stats['images']} images, {stats['captions']} captions to {args.out} in {stats['_seconds']:.1f} s")


def synthetic_truth(path: str | Path) -> dict[int, np.ndarray]:
    """imgid -> true boxes (float32 (M, 4)) from a synthetic ``ground_truth.json``."""
    gt = json.loads(Path(path).read_text())
    return {
        int(r["imgid"]): np.array([o["box"] for o in r["objects"]], np.float32).reshape(-1, 4) for r in gt["images"]
    }
