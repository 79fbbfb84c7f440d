"""The library installed light (``pip install .``: torch, numpy, pillow, pyyaml, tqdm; no extra): run by ``make light``
in a virtual environment of its own. Scores another tool's matrix with ``python -m fraglib.run evaluate --scores``
and trains a small system for a few steps on a made batch; fails when a study or extra package is importable (the
environment is not light) or when either job fails. Not a pytest module: the light environment has no pytest."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HEAVY = ("torchvision", "pandas", "scipy", "spacy", "stanza", "cv2", "dvc", "papermill", "matplotlib", "pytest")


def made_dataset(root: Path, n: int = 12, per: int = 3) -> Path:
    """A Karpathy-format dataset.json of ``n`` test images with ``per`` sentences each (no pictures)."""
    images, sid = [], 0
    for i in range(n):
        sents = [
            {"raw": f"image {i} sentence {k}", "tokens": ["image", str(i)], "imgid": i, "sentid": sid + k}
            for k in range(per)
        ]
        images.append(
            {
                "imgid": i,
                "filename": f"{i}.jpg",
                "split": "test",
                "sentids": [s["sentid"] for s in sents],
                "sentences": sents,
            }
        )
        sid += per
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset.json").write_text(json.dumps({"dataset": "made", "images": images}))
    return root


def score_a_matrix(tmp: Path) -> dict:
    data = made_dataset(tmp / "data")
    n, per = 12, 3
    rng = np.random.default_rng(0)
    S = rng.normal(size=(n, n * per)).astype(np.float32)
    S[np.arange(n).repeat(per), np.arange(n * per)] += 3.0  # the matching sentences score higher: a good system
    np.save(tmp / "S.npy", S)
    out = tmp / "metrics.json"
    cmd = [
        sys.executable,
        "-m",
        "fraglib.run",
        "evaluate",
        "--scores",
        str(tmp / "S.npy"),
        "--dataset-dir",
        str(data),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True)
    m = json.loads(out.read_text())
    return m


def train_a_system() -> list[float]:
    """VSE's GRU text encoder against image features, the hardest-negative hinge, a few Adam steps on one made batch
    of 8 pairs; the loss must fall."""
    from fraglib.core.batches import Rows
    from fraglib.systems.vse import VseSystem

    torch.manual_seed(0)
    cfg = VseSystem.Config(embed_dim=16, word_dim=8, hidden=16)
    system = VseSystem(cfg, {"n_relations": 30, "n_words": 30, "word_dim": 50, "img_dim": 10})
    n = 8
    images = Rows({"x": torch.randn(n, 10)}, torch.arange(n), n, np.arange(n))
    caps = [[1 + (3 * k + j) % 29 for j in range(2 + k % 4)] for k in range(n)]
    rel = torch.tensor([t for c in caps for t in c])
    owner = torch.tensor([k for k, c in enumerate(caps) for _ in c])
    sentences = Rows({"rel": rel, "w1": rel.clone()}, owner, n, np.arange(n))
    opt = torch.optim.Adam(system.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        cost, _parts = system.loss(system.encode_images(images), system.encode_sentences(sentences), 0)
        opt.zero_grad()
        cost.backward()
        opt.step()
        losses.append(float(cost.detach()))
    return losses


def main() -> int:
    present = [m for m in HEAVY if importlib.util.find_spec(m) is not None]
    if present:
        print(f"not a light environment: {', '.join(present)} importable", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as d:
        m = score_a_matrix(Path(d))
    r1 = [v for k, v in _flat(m) if k.endswith("r1")]
    if not r1 or not all(50 <= v <= 100 for v in r1):
        print(f"evaluate --scores: R@1 {r1} (expected the made matrix's matches near the top)", file=sys.stderr)
        return 1
    losses = train_a_system()
    if not losses[-1] < losses[0]:
        print(f"training: the loss did not fall ({losses[0]:.4f} -> {losses[-1]:.4f})", file=sys.stderr)
        return 1
    print(
        f"light install: evaluate --scores R@1 {', '.join(f'{v:.1f}' for v in r1)}; VSE trained 30 steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}"
    )
    return 0


def _flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield f"{prefix}{k}", float(v)


if __name__ == "__main__":
    sys.exit(main())
