"""Kernel CCA, the closed-form baseline of Socher et al. 2014 (docs/systems.md).

Sentences are the mean of their (fixed, 50-d) GloVe vectors, images the standardised full-frame
CNN descriptor; every training pair (image, one of its sentences) is a row. Both sides are mapped
to a feature space — themselves (``kernel: linear``) or random Fourier features of a Gaussian
kernel (``kernel: rbf``, ``rff_dim`` features, width from the median pairwise distance times
``rbf_scale``; Rahimi & Recht 2007, the randomized kernel CCA of Lopez-Paz et al. 2014 — an
approximation of the exact dual kCCA, stated as such) — and regularised linear CCA is solved there
in closed form:

    C_xx = Φxᵀ Φx / n + κ I,  C_yy = Φyᵀ Φy / n + κ I,  C_xy = Φxᵀ Φy / n   (features centred)
    C_xx^{-1/2} C_xy C_yy^{-1/2} = U diag(ρ) Vᵀ,   A = C_xx^{-1/2} U_p,   B = C_yy^{-1/2} V_p

with κ = ``reg`` (relative to the mean feature variance) and p = ``components``. Scores are inner
products of the projections ``(Φx A) diag(ρ)^w`` and ``Φy B`` (``weight_by_rho``: w = 1, else 0),
or ``−‖·‖`` of their difference (``distance: euclidean``, the kCCA row of Socher's Table 2; with w = 1
the image projection is the least-squares prediction of the sentence's canonical variates).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from fraglib.core.batches import Rows, Views, mean_rows
from fraglib.core.config import check_choice, check_range
from fraglib.systems.base import System, add_input_buffers, fill_input_buffers


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.kcca``."""

    kernel: str = "rbf"  # linear | rbf (random Fourier features, both sides)
    components: int = 50  # p, canonical directions kept
    reg: float = 0.1  # κ, relative to the mean feature variance
    rff_dim: int = 2000  # random features per side (rbf)
    rbf_scale: float = 1.0  # Gaussian width = rbf_scale x median pairwise distance (train)
    weight_by_rho: bool = True  # weigh the image projection by the canonical correlations
    images: str = "fullframe"  # fullframe | rcnn (mean of detections)
    distance: str = "inner"  # inner (Table 1) | euclidean (Table 2: −‖a − b‖)

    def validate(self) -> "Config":
        p = "systems.kcca"
        check_choice(f"{p}.kernel", self.kernel, ("linear", "rbf"))
        check_range(f"{p}.components", self.components, 1, 10_000, int)
        check_range(f"{p}.reg", self.reg, 1e-9, 1e6, float)
        check_range(f"{p}.rff_dim", self.rff_dim, 1, 100_000, int)
        check_range(f"{p}.rbf_scale", self.rbf_scale, 1e-6, 1e6, float)
        check_choice(f"{p}.weight_by_rho", self.weight_by_rho, (True, False))
        check_choice(f"{p}.images", self.images, ("fullframe", "rcnn", "groundtruth"))
        check_choice(f"{p}.distance", self.distance, ("inner", "euclidean"))
        return self


def cca(X: np.ndarray, Y: np.ndarray, reg: float, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Regularised linear CCA of paired rows (n, dx), (n, dy), centred here: (A (dx, p), B (dy, p),
    ρ (p,)) with ρ the canonical correlations, largest first. ``reg`` is added to both covariance
    diagonals as a fraction of that side's mean variance.

    Whitening by Cholesky factors (C = L Lᵀ): M = Lx⁻¹ Cxy Ly⁻ᵀ, whose singular pairs come from the
    eigenvectors of the smaller of M Mᵀ, Mᵀ M; then A = Lx⁻ᵀ U, B = Ly⁻ᵀ V. The same directions as
    C^{-1/2} whitening and an SVD, at about a third of the cost (tests/test_recursive.py)."""
    Xt, Yt = torch.from_numpy(X - X.mean(0)), torch.from_numpy(Y - Y.mean(0))
    n = len(Xt)
    Cxx, Cyy, Cxy = Xt.T @ Xt / n, Yt.T @ Yt / n, Xt.T @ Yt / n
    Lx, Ly = (
        torch.linalg.cholesky(C + reg * torch.trace(C) / len(C) * torch.eye(len(C), dtype=C.dtype)) for C in (Cxx, Cyy)
    )
    M = torch.linalg.solve_triangular(Ly, torch.linalg.solve_triangular(Lx, Cxy, upper=False).T, upper=False).T
    tall = M.shape[0] > M.shape[1]
    w, E = torch.linalg.eigh(M.T @ M if tall else M @ M.T)
    p = min(p, len(w))
    rho = w.flip(0)[:p].clamp_min(0).sqrt()
    E = E.flip(1)[:, :p]
    other = (M @ E if tall else M.T @ E) / rho.clamp_min(1e-12)
    U, V = (other, E) if tall else (E, other)
    A = torch.linalg.solve_triangular(Lx.T, U, upper=True)
    B = torch.linalg.solve_triangular(Ly.T, V, upper=True)
    return A.numpy(), B.numpy(), rho.numpy()


class KccaSystem(System):
    """``dims``: n_words, word_dim, img_dim. Fitted once (``fit``); nothing is stepped."""

    NAME = "kcca"
    Config = Config
    TRAINABLE = False
    SENTENCE_SPACE = True

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, "bow", pooled=True)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        add_input_buffers(self, dims)
        dx, dy = dims["img_dim"], dims["word_dim"]
        fx, fy = (cfg.rff_dim, cfg.rff_dim) if cfg.kernel == "rbf" else (dx, dy)
        g = torch.Generator().manual_seed(seed)
        # random Fourier features (rbf): unit-width draws, divided by the fitted widths
        self.register_buffer("omega_x", torch.randn(dx, fx, generator=g) if cfg.kernel == "rbf" else torch.zeros(0))
        self.register_buffer(
            "phase_x", torch.rand(fx, generator=g) * 2 * math.pi if cfg.kernel == "rbf" else torch.zeros(0)
        )
        self.register_buffer("omega_y", torch.randn(dy, fy, generator=g) if cfg.kernel == "rbf" else torch.zeros(0))
        self.register_buffer(
            "phase_y", torch.rand(fy, generator=g) * 2 * math.pi if cfg.kernel == "rbf" else torch.zeros(0)
        )
        self.register_buffer("width", torch.ones(2))
        p = min(cfg.components, fx, fy)
        self.register_buffer("mean_x", torch.zeros(fx))
        self.register_buffer("mean_y", torch.zeros(fy))
        self.register_buffer("A", torch.zeros(fx, p))
        self.register_buffer("B", torch.zeros(fy, p))
        self.register_buffer("rho", torch.zeros(p))

    def prepare(self, train: Any) -> None:
        fill_input_buffers(self, train)

    # ------------------------------------------------------------------ features
    def _image_inputs(self, rows: Rows) -> torch.Tensor:
        return (mean_rows(rows.data["x"], rows.owner, rows.n) - self.img_mean) / self.img_std

    def _sentence_inputs(self, rows: Rows) -> torch.Tensor:
        return mean_rows(self.words[rows.data["w1"]], rows.owner, rows.n)

    def _features(self, v: torch.Tensor, side: int) -> torch.Tensor:
        if self.cfg.kernel == "linear":
            return v
        omega, phase = (self.omega_x, self.phase_x) if side == 0 else (self.omega_y, self.phase_y)
        return math.sqrt(2.0 / omega.shape[1]) * torch.cos(v @ omega / self.width[side] + phase)

    def fit(self, train: Any) -> None:
        """Closed form on every usable training pair (image, sentence)."""
        ok = np.nonzero(train.usable_sentences())[0]
        X = self._image_inputs(train.images.take(train.sentence_image[ok])).double()
        Y = self._sentence_inputs(train.sentences.take(ok)).double()
        if self.cfg.kernel == "rbf":
            for side, V in ((0, X), (1, Y)):
                sub = V[torch.randperm(len(V), generator=torch.Generator().manual_seed(0))[:1000]]
                d = torch.cdist(sub, sub)
                self.width[side] = self.cfg.rbf_scale * d[d > 0].median().float()
        # the eigenproblem in float64 NumPy on the host, whatever the device of the inputs
        Fx, Fy = (self._features(V.float(), side).double().cpu().numpy() for side, V in ((0, X), (1, Y)))
        A, B, rho = cca(Fx, Fy, self.cfg.reg, self.A.shape[1])
        self.mean_x.copy_(torch.from_numpy(Fx.mean(0)))
        self.mean_y.copy_(torch.from_numpy(Fy.mean(0)))
        p = len(rho)
        self.A.zero_()[:, :p] = torch.from_numpy(A).float().to(self.A.device)
        self.B.zero_()[:, :p] = torch.from_numpy(B).float().to(self.B.device)
        self.rho.zero_()[:p] = torch.from_numpy(rho).float().to(self.rho.device)

    # ------------------------------------------------------------------ protocol
    def encode_images(self, rows: Rows) -> torch.Tensor:
        z = (self._features(self._image_inputs(rows), 0) - self.mean_x) @ self.A
        return z * self.rho if self.cfg.weight_by_rho else z

    def encode_sentences(self, rows: Rows) -> torch.Tensor:
        return (self._features(self._sentence_inputs(rows), 1) - self.mean_y) @ self.B

    def scores(self, images: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
        return images @ sentences.T if self.cfg.distance == "inner" else -torch.cdist(images, sentences)

    def sentence_scores(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.scores(a, b)

    def loss(self, images: Any, sentences: Any, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        raise RuntimeError("kcca is fitted in closed form (fit), never stepped")
