"""The one evaluation of a trained system on a split (docs/evaluation.md): score it, rank, and report.

:func:`evaluate_split` is the test evaluation of every run — the study calls it after fitting
(:func:`fraglib.run.train.train`), ``python -m fraglib.run evaluate`` re-scores a checkpoint with it, and a search never
calls it (a trial scores validation only). Its settings are ``params.yaml: evaluation`` (:class:`EvalConfig`):
they are not part of a checkpoint's identity, so changing ``n_boot`` re-scores ``best.pt`` and never retrains.
Scores come from the system in tiles (:func:`score_matrix`); the ranking arithmetic is :mod:`fraglib.metrics.retrieval`,
hubness and its corrections :mod:`fraglib.metrics.hubness`.

    python -m fraglib.run evaluate runs/synthetic/full/seeds/seed0 [--split val] [--set n_boot=200] [--out m.json]
    python -m fraglib.run evaluate --scores S.npy --dataset-dir D [--val-scores V.npy --banks B.npz] [--against S2.npy]
    python -m fraglib.run evaluate --image-emb I.npy --sentence-emb T.npy --dataset-dir D [--metric cosine|dot]

Another tool's scores go through the same :func:`evaluate_matrix` as every run (:func:`evaluate_files`): ranks
pessimistic on ties, R@K, median and mean rank, the fold protocol, hubness and its corrections, bootstrap CIs;
``--against`` adds a paired comparison. Every file is checked where it enters (:func:`checked_matrix`, the flag and
the file named: NaN, +inf, empty, its shape; embeddings -inf too) and ranked in its own precision (float16/32 in
float32 as always, float64 and integers in float64: never cast to float32, whose ties and overflows would change
the ranks). Options that would be ignored together are refused (:func:`_refused_together`). docs/evaluation.md
"Scores from another tool" has a worked example.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import ConfigError, check_choice, check_range, from_dict
from fraglib.core.outputs import command
from fraglib.metrics import hubness
from fraglib.metrics.retrieval import (
    DIRECTIONS,
    KS,
    N_BOOT,
    bootstrap_ci,
    check_matrix,
    check_scores,
    evaluate_scores,
    fold_metrics,
    recall_table,
    similarity_ranks,
)
from fraglib.run.checkpoint import best_of, fingerprint, load_system
from fraglib.run.inputs import DataPaths, load_splits


# ----------------------------------------------------------------------------- from a system to ranks
@torch.no_grad()
def score_matrix(
    system,
    split,
    chunk: int = 64,
    sent_chunk: int = 4096,
    image_items: np.ndarray | None = None,
    sentences=None,
    sentence_items: np.ndarray | None = None,
) -> torch.Tensor:
    """(n_images, n_sentences) float32 scores of ``system`` on ``split`` (:class:`fraglib.run.inputs.Split`),
    in tiles: images encoded once in tiles of ``chunk`` (kept), sentences in tiles of ``sent_chunk``,
    each pair of tiles scored apart. Peak memory ≈ all image encodings + one sentence tile's encoding +
    one tile pair's scoring intermediates + the float32 output on the CPU (COCO 5K: 5,000 x 25,000 =
    0.5 GB; measured per system by ``python -m fraglib_study bench coco_eval``). Images or sentences without rows
    in the system's views score -inf (they rank last). ``image_items`` / ``sentence_items`` (positions)
    score only those items; ``sentences`` (another split's :class:`fraglib.run.inputs.Ragged`) replaces the
    split's sentences (a hubness bank: :func:`hubness_banks`). A split with ``galleries`` (scored whole) is
    scored gallery by gallery: pairs across galleries score -inf, so each query ranks only its own gallery's
    items and the cost grows linearly with the number of galleries."""
    system.eval()
    if split.galleries is not None and image_items is None and sentence_items is None and sentences is None:
        S = torch.full((split.n_images, split.n_sentences), float("-inf"))
        for g in np.unique(split.galleries):
            rows = np.flatnonzero(split.galleries == g)
            cols = np.flatnonzero(split.galleries[split.sentence_image] == g)
            S[np.ix_(rows, cols)] = score_matrix(system, split, chunk, sent_chunk, rows, None, cols)
        return S
    items = np.arange(split.n_images) if image_items is None else np.asarray(image_items, np.int64)
    sent = split.sentences if sentences is None else sentences
    cols = np.arange(sent.n) if sentence_items is None else np.asarray(sentence_items, np.int64)
    return _score_tiles(
        system,
        split.images,
        items,
        list(_encoded(system.encode_images, split.images, items, chunk)),
        sent,
        cols,
        _encoded(system.encode_sentences, sent, cols, sent_chunk),
        sent_chunk,
    )


def _encoded(encode, rows, items: np.ndarray, size: int) -> Iterator[tuple[int, Any]]:
    """``(start, encode(rows.take(items[start:start + size])))`` tile by tile, lazily."""
    return ((a, encode(rows.take(items[a : a + size]))) for a in range(0, len(items), size))


def _score_tiles(
    system,
    images,
    items: np.ndarray,
    image_tiles: list[tuple[int, Any]],
    sentences,
    cols: np.ndarray,
    sentence_tiles: Iterable[tuple[int, Any]],
    sent_chunk: int,
) -> torch.Tensor:
    """(len(items), len(cols)) float32 scores of every image tile against every sentence tile (each
    sentence tile encoded once, when reached); items without rows in ``images`` / ``sentences`` -inf."""
    from tqdm.auto import tqdm

    out = torch.empty((len(items), len(cols)))
    # a bar only on a terminal (disable=None), never in a stage's log
    bar = tqdm(total=len(image_tiles) * -(-len(cols) // sent_chunk), desc="scoring", disable=None, leave=False)
    for b, sents in sentence_tiles:
        for a, enc in image_tiles:
            s = system.scores(enc, sents).float().cpu()
            out[a : a + s.shape[0], b : b + s.shape[1]] = s
            bar.update()
    bar.close()
    out[:, torch.from_numpy(sentences.counts()[cols] == 0)] = float("-inf")
    out[torch.from_numpy(images.counts()[items] == 0), :] = float("-inf")
    return out


def bank_items(train, n_bank: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the training images and sentences with rows, at most ``n_bank`` of each (a sorted
    draw of ``seed``): the queries of the inductive hubness banks."""

    def pick(ok: np.ndarray) -> np.ndarray:
        idx = np.flatnonzero(ok)
        if len(idx) > n_bank:
            idx = np.sort(np.random.default_rng(seed).choice(idx, n_bank, replace=False))
        return idx

    return pick(train.images.counts() > 0), pick(train.usable_sentences())


@torch.no_grad()
def hubness_banks(
    system, splits: dict[str, Any], train, n_bank: int = 5000, chunk: int = 64, seed: int = 0, sent_chunk: int = 4096
) -> dict[str, dict[str, torch.Tensor]]:
    """The inductive banks of each split of ``splits`` (name -> split; docs/evaluation.md "Hubness"),
    query x candidate: ``annotation`` (training images x the split's sentences), ``search`` (training
    sentences x the split's images). Only training items with rows; at most ``n_bank`` of each, a fixed
    draw of ``seed`` (:func:`bank_items`). The training items are encoded once for all splits, in the
    tiles of :func:`score_matrix`, so each bank equals the matrix it would score."""
    system.eval()
    imgs, sents = bank_items(train, n_bank, seed)
    train_imgs = list(_encoded(system.encode_images, train.images, imgs, chunk))
    train_sents = list(_encoded(system.encode_sentences, train.sentences, sents, sent_chunk))
    banks = {}
    for name, split in splits.items():
        cols, items = np.arange(split.sentences.n), np.arange(split.n_images)
        banks[name] = {
            "annotation": _score_tiles(
                system,
                train.images,
                imgs,
                train_imgs,
                split.sentences,
                cols,
                _encoded(system.encode_sentences, split.sentences, cols, sent_chunk),
                sent_chunk,
            ),
            "search": _score_tiles(
                system,
                split.images,
                items,
                list(_encoded(system.encode_images, split.images, items, chunk)),
                train.sentences,
                sents,
                train_sents,
                sent_chunk,
            ).T.contiguous(),
        }
    return banks


@torch.no_grad()
def similarity_hubness(sim: torch.Tensor) -> dict[str, float]:
    """Hubness of the sentence-similarity task (:func:`fraglib.metrics.hubness.hubness_stats` with k = 1): each
    sentence queries the *other* sentences by ``sim`` (n_s, n_s); N₁ of a sentence = the queries it is
    the nearest neighbour of (pessimistic on ties)."""
    S = torch.as_tensor(sim).clone().float()
    S.fill_diagonal_(float("-inf"))
    return hubness.hubness_stats(hubness.k_occurrence(S, 1), 1)


def similarity_matrix(system, split) -> torch.Tensor | None:
    """(n_sentences, n_sentences) sentence–sentence scores of a system with a sentence space
    (``SENTENCE_SPACE``), else None. Sentences without rows score -inf."""
    if not system.SENTENCE_SPACE:
        return None
    system.eval()
    enc = system.encode_sentences(split.sentences.take(np.arange(split.n_sentences)))
    sim = system.sentence_scores(enc, enc).float().cpu()
    empty = torch.from_numpy(split.sentences.counts() == 0)
    sim[:, empty] = float("-inf")
    if split.galleries is not None:  # a sentence queries its own gallery's sentences only
        g = torch.from_numpy(split.galleries[split.sentence_image])
        sim[g[:, None] != g[None, :]] = float("-inf")
    return sim


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """``params.yaml: evaluation``: how a trained system is scored. Not part of a checkpoint's identity
    (:mod:`fraglib.run.checkpoint`): a change re-scores ``best.pt``, it never retrains."""

    eval_chunk: int = 64  # images per score-matrix tile (validation during fitting too)
    test_folds: int = 0  # > 1: also the fold protocol on test (COCO "1K" = 5 folds of the 5K test)
    n_boot: int = N_BOOT  # bootstrap resamples for the test CIs
    hubness: bool = True  # also hubness and its corrections on test (fraglib.metrics.hubness; docs/evaluation.md)
    hub_k: int = 10  # k of the k-occurrence
    hub_bank: int = 5000  # at most this many training images / sentences in an inductive bank

    def validate(self) -> "EvalConfig":
        p = "evaluation"
        check_range(f"{p}.eval_chunk", self.eval_chunk, 1, 1_000_000, int)
        check_range(f"{p}.test_folds", self.test_folds, 0, 1000, int)
        check_range(f"{p}.n_boot", self.n_boot, 10, 1_000_000, int)
        check_choice(f"{p}.hubness", self.hubness, (True, False))
        check_range(f"{p}.hub_k", self.hub_k, 1, 1_000_000, int)
        check_range(f"{p}.hub_bank", self.hub_bank, 2, 10_000_000, int)
        return self


def eval_config(params: dict[str, Any], extra: dict[str, Any] | None = None) -> EvalConfig:
    """The checked :class:`EvalConfig` of a params dict's ``evaluation`` section (absent: the defaults), with
    ``extra`` keys (command-line ``--set``) on top. A section that is not a mapping (``evaluation: 5``) is a
    ConfigError naming it. The commands read the file with :func:`fraglib.core.config.read_settings`, so a misspelt
    section (``evaluaton:``) is refused as by every command."""
    section = params.get("evaluation")
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"evaluation: expected a mapping of evaluation settings, got {section!r}")
    return from_dict("evaluation", {**(section or {}), **(extra or {})}, EvalConfig)


def check_evaluable(ec: EvalConfig, test: Any, where: str) -> None:
    """Refuse settings the test split cannot be scored with (called before any training, not after it):
    the hubness needs ``hub_k`` below the split's images and sentences, the fold protocol ``test_folds`` equal
    folds of its images."""
    if ec.test_folds > 1 and test.n_images % ec.test_folds:
        raise ValueError(
            f"evaluation.test_folds={ec.test_folds}: {where}'s test split has {test.n_images} images, which do not "
            f"cut into {ec.test_folds} equal folds (set evaluation.test_folds: 0, or a divisor of {test.n_images})"
        )
    if ec.hubness and ec.hub_k >= min(test.n_images, test.n_sentences):
        raise ValueError(
            f"evaluation.hub_k={ec.hub_k}: the hubness of {where}'s test split needs k below its "
            f"{test.n_images} images and {test.n_sentences} sentences (lower evaluation.hub_k or set "
            "evaluation.hubness: false)"
        )


def evaluate_matrix(
    S: torch.Tensor | np.ndarray,
    sentence_image: np.ndarray,
    ec: EvalConfig,
    seed: int,
    what: str = "scores",
    val: tuple[torch.Tensor | np.ndarray, np.ndarray] | None = None,
    banks: dict[str, dict[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """The metrics of one (n_images, n_sentences) score matrix ``S`` with its sentence -> image index, whatever
    made it (a trained system: :func:`evaluate_split`; another tool's file: :func:`evaluate_files`): both
    directions' metrics, bootstrap CIs seeded by ``seed`` and per-query ranks (:func:`fraglib.metrics.retrieval.evaluate_scores`);
    ``ec.test_folds`` > 1 adds the fold protocol (key ``folds``); ``ec.hubness`` adds the hubness statistics and,
    given ``val`` = (validation scores, their index) to choose parameters on, the corrections (key ``hubness``):
    both protocols with ``banks`` (:func:`hubness_banks`' layout), the transductive one alone without."""
    m = evaluate_scores(S, sentence_image, ec.n_boot, seed, what)
    if ec.test_folds > 1:
        m["folds"] = fold_metrics(S, sentence_image, ec.test_folds, what)
    if ec.hubness:
        v, vi = val if val is not None else (None, None)
        protocols = hubness.PROTOCOLS if banks is not None else ("transductive",)
        m["hubness"], m["ranks"]["hubness"] = hubness.evaluate(
            torch.as_tensor(S),
            sentence_image,
            None if v is None else torch.as_tensor(v),
            vi,
            banks,
            ec.hub_k,
            protocols,
        )
    return m


def evaluate_split(
    system, splits: dict[str, Any], ec: EvalConfig, seed: int, split: str = "test", what: str = "scores"
) -> dict[str, Any]:
    """The one evaluation of ``system`` on ``splits[split]``: :func:`evaluate_matrix` of its scores, on test with
    the validation matrix and both splits' inductive banks (:func:`hubness_banks`: read from the train and val
    splits) when ``ec.hubness``; a system with a sentence space adds the sentence-similarity task (keys
    ``similarity``, ``similarity_ci``, ``ranks.similarity``, and with the hubness ``hubness.similarity``).
    ``what`` names the matrix in a :class:`fraglib.metrics.retrieval.ScoreError`."""
    sp = splits[split]
    S = score_matrix(system, sp, ec.eval_chunk)
    val = banks = None
    if ec.hubness and split == "test":
        pair = {name: splits[name] for name in ("val", "test")}
        banks = hubness_banks(system, pair, splits["train"], ec.hub_bank, ec.eval_chunk)
        val = (score_matrix(system, splits["val"], ec.eval_chunk), splits["val"].sentence_image)
    m = evaluate_matrix(S, sp.sentence_image, dataclasses.replace(ec, hubness=val is not None), seed, what, val, banks)
    sim = similarity_matrix(system, sp)
    if sim is not None:
        r = similarity_ranks(sim, sp.sentence_image, what=f"{what} (sentence similarities)")
        m["similarity"], m["similarity_ci"] = recall_table(r), bootstrap_ci(r, ec.n_boot, seed + 2)
        m["ranks"]["similarity"] = r.tolist()
        if "hubness" in m:  # how many sentences each is the nearest of
            m["hubness"]["similarity"] = similarity_hubness(sim)
    return m


def check_inputs(ck: dict[str, Any], files: dict[str, Path], where: Any) -> None:
    """Refuse to score a checkpoint on files other than those it was trained on (``ck["fingerprint"]``: the
    SHA-256 of each input file, recorded at training): the paths a checkpoint records are where its data were,
    not a promise of what lies there now."""
    now = fingerprint(files)
    moved = [f"{role} ({files[role]})" for role in ck["fingerprint"] if now.get(role) != ck["fingerprint"][role]]
    if moved:
        raise ValueError(
            f"{where}: best.pt was trained on other data than {', '.join(moved)} now holds; pass "
            "--dataset-dir / --features-dir of the data it was trained on (or retrain)"
        )


def load_trained(
    seed_dir: str | Path,
    paths: DataPaths | None = None,
    split: str | None = "test",
    sentences_file: str | Path | None = None,
    images: str | None = None,
):
    """(system, checkpoint, split) of a trained seed: the system rebuilt from ``best.pt`` alone, the
    split (None: a dict of all three) read in the system's own views from ``paths`` (default: the data it was
    trained on, checked against the checkpoint's fingerprint: :func:`check_inputs`); ``sentences_file``
    replaces the sentence view's file, ``images`` the image view (``none``: text only). The split's
    word / relation ids must be the checkpoint's (other data: re-encode them, ``fraglib.text.build.run_tokens``)."""
    system, ck = load_system(best_of(seed_dir))
    info = ck["info"]
    views = system.views(system.cfg)
    if paths is None:
        paths = DataPaths(info["dataset_dir"], info.get("features_dir"))
        if sentences_file is None and not images:
            check_inputs(ck, paths.files(views), seed_dir)
    views = dataclasses.replace(views, images=images) if images else views
    splits, _, got = load_splits(paths, views, torch.device("cpu"), sentences_file)
    if got["relations"] != info["relations"]:
        raise ValueError(
            f"{seed_dir}: the sentences of {paths.dataset} are encoded with another "
            f"vocabulary ({len(got['relations'])} ids, the model's {len(info['relations'])}); re-encode "
            "them in the model's: `python -m fraglib_study captions … --parse-file <their parse>`"
        )
    return system, ck, splits if split is None else splits[split]


def evaluate_run(
    seed_dir, ec: EvalConfig | None = None, split: str = "test", paths: DataPaths | None = None
) -> dict[str, Any]:
    """Re-score a trained run from its ``best.pt`` alone (the data are read only to be scored) by
    :func:`evaluate_split`, the study's own evaluation: the same numbers as the run's ``metrics.json`` for the
    same :class:`EvalConfig` (default: its defaults); ``paths``: other data than it was trained on."""
    system, ck, splits = load_trained(seed_dir, paths, None)
    ec = (ec or EvalConfig()).validate()
    if split == "test":
        check_evaluable(ec, splits["test"], str(seed_dir))
    return evaluate_split(
        system, splits, ec, ck["train_config"]["seed"], split, f"{seed_dir}: {split} scores of best.pt"
    )


# ----------------------------------------------------------------------------- scores from anywhere
BANK_KEYS = tuple(f"{split}_{d}" for split in ("val", "test") for d in DIRECTIONS)  # a banks file's arrays


def load_numpy(path: str | Path, what: str) -> Any:
    """``np.load`` of ``path`` without pickles; a missing file or another format is an error naming ``what``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what}: {path} not found")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {path} is not a NumPy .npy/.npz file ({exc})") from None


def read_array(path: str | Path, what: str, finite: bool = False) -> np.ndarray:
    """A 2-D array of real numbers from a ``.npy`` file (or a ``.npz`` holding exactly one array), checked where
    it enters (:func:`checked_matrix`); clear errors naming ``what`` and the file for a missing or unreadable
    file, object or complex arrays, other shapes, an empty array, NaN or +inf (``finite``: -inf too: embeddings)."""
    a = load_numpy(path, what)
    if isinstance(a, np.lib.npyio.NpzFile):
        with a:
            if len(a.files) != 1:
                raise ValueError(f"{what}: {path} holds arrays {a.files}; give a .npy or a .npz of one array")
            a = a[a.files[0]]
    return checked_matrix(a, f"{what} {path}", finite)


def checked_matrix(a: Any, what: str, finite: bool = False) -> np.ndarray:
    """``a`` in the precision ranks are computed in, checked (:func:`fraglib.metrics.retrieval.check_matrix`: 2-D, not empty,
    no NaN or +inf, with ``finite`` no -inf): float16 and float32 stay as they are (ranked in float32 as always),
    any other real type becomes float64 — never a lossy float32, whose ties and overflows would change the ranks.
    A value beyond float64's range (a long double) is refused, not called infinite. ``what`` names it in errors."""
    a = np.asarray(a)
    if a.ndim != 2 or a.dtype.kind not in "fiu":
        raise ValueError(f"{what}: holds a {a.ndim}-D {a.dtype} array; a 2-D array of real numbers is needed")
    if a.dtype.kind == "f" and a.dtype.itemsize <= 4:
        a = a.astype(a.dtype.newbyteorder("="), copy=False)
    else:
        wide = a
        with np.errstate(over="ignore"):  # refused below, by name
            a = a.astype(np.float64)
        if wide.dtype.kind == "f" and wide.dtype.itemsize > 8:
            grew = np.isinf(a) & np.isfinite(wide)
            if grew.any():
                i, j = (int(x) for x in np.argwhere(grew)[0])
                raise ValueError(
                    f"{what}: {int(grew.sum())} values lie beyond float64's range (±{np.finfo(np.float64).max:.3g}; "
                    f"first at [{i}, {j}]: {wide[i, j]}); rescale them"
                )
    check_matrix(a, what, finite)
    return a


def embedding_scores(
    images: np.ndarray,
    sentences: np.ndarray,
    metric: str = "cosine",
    what: str = "",
    names: tuple[str, str] = ("image embeddings", "sentence embeddings"),
) -> np.ndarray:
    """(n_images, n_sentences) scores of two embedding arrays (n, D), computed in float64: ``cosine`` (rows
    L2-normalised before they are multiplied; a zero row is refused) or ``dot`` (inner product; products beyond
    float64's range are refused). float32 when both inputs are float16/32 (as always), float64 otherwise.
    Each array is checked first (:func:`checked_matrix`: NaN, ±inf, empty); errors name them ``what: names[i]``
    (``names`` alone when ``what`` is empty: a command's flags and files)."""
    check_choice("--metric", metric, ("cosine", "dot"))
    narrow = all(np.asarray(x).dtype in (np.float16, np.float32) for x in (images, sentences))
    img_name, sent_name = (f"{what}: {n}" if what else n for n in names)
    images, sentences = checked_matrix(images, img_name, True), checked_matrix(sentences, sent_name, True)
    if images.shape[1] != sentences.shape[1]:
        raise ValueError(
            f"{img_name} {tuple(images.shape)} has {images.shape[1]} dims, {sent_name} {tuple(sentences.shape)} "
            f"{sentences.shape[1]}: their {metric} cannot be taken"
        )
    a, b = np.asarray(images, np.float64), np.asarray(sentences, np.float64)
    if metric == "cosine":
        a, b = _unit_rows(a, img_name), _unit_rows(b, sent_name)
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, by name
        out = a @ b.T
    if not np.isfinite(out).all():  # only a dot product of huge rows gets here
        raise ValueError(
            f"the dot products of {img_name} and {sent_name} overflow float64 (largest |entries| "
            f"{np.abs(a).max():.3g} and {np.abs(b).max():.3g}): rescale them, or use --metric cosine"
        )
    return out.astype(np.float32) if narrow else out


def _unit_rows(x: np.ndarray, what: str) -> np.ndarray:
    """The rows of float64 ``x`` divided by their L2 norms. Each row is first scaled by a power of two into
    [0.5, 1) (exact: the result is bit for bit ``x / ‖x‖`` wherever that is computable) so rows of 1e200 or
    1e-200, whose squares leave float64, are normalised too; a zero row is refused."""
    top = np.abs(x).max(axis=1)
    if not (top > 0).all():
        raise ValueError(f"{what}: row {int(np.argmin(top))} is zero: no cosine")
    x = np.ldexp(x, -np.frexp(top)[1][:, None])
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def split_index(dataset_dir: str | Path, split: str) -> dict[str, np.ndarray]:
    """The order a score file must follow on ``split`` of ``<dataset_dir>/dataset.json``, the order every run
    scores in: ``imgid`` (n_images,) and ``sentid`` (n_sentences,) in the file's order (a split's images, and
    their sentences), and ``sentence_image`` (n_sentences,) the row of each sentence's image."""
    from fraglib.data import read_karpathy_json

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json").split(split)
    return {
        "imgid": np.array([im["imgid"] for im in ds.images], np.int64),
        "sentid": np.array([x["sentid"] for x in ds.sentences], np.int64),
        "sentence_image": ds.sentence_image,
    }


def read_ids(path: str | Path, what: str) -> np.ndarray:
    """Integer ids, one per line (SCAN's ``*_ids.txt`` layout); blank lines ignored."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what}: {path} not found")
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    try:
        return np.array([int(x) for x in lines], np.int64)
    except ValueError:
        raise ValueError(f"{what}: {path} must hold one integer id per line") from None


def order_of(file_ids: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
    """Positions in a file's rows of the dataset's ``ids``, in the dataset's order: each id exactly once in the
    file, no id missing or extra (a ValueError names the first of each)."""
    pos = {int(x): n for n, x in enumerate(file_ids)}
    if len(pos) != len(file_ids):
        dup = next(int(x) for x in file_ids if list(file_ids).count(x) > 1)
        raise ValueError(f"{what}: id {dup} occurs more than once")
    missing = [int(x) for x in ids if int(x) not in pos]
    extra = sorted(set(pos) - {int(x) for x in ids})
    if missing or extra:
        raise ValueError(
            f"{what}: {len(missing)} of the split's {len(ids)} ids are missing (first {missing[:3]}), "
            f"{len(extra)} are not in the split (first {extra[:3]})"
        )
    return np.array([pos[int(x)] for x in ids], np.int64)


def dataset_order(
    S: np.ndarray,
    index: dict[str, np.ndarray],
    what: str,
    image_ids: np.ndarray | None = None,
    sentence_ids: np.ndarray | None = None,
    rows: str = "images",
) -> np.ndarray:
    """``S`` in the dataset's order. ``rows`` says what it holds: ``images`` (the split's images x its sentences),
    ``annotation bank`` (training images, kept in their order, x the split's sentences) or ``search bank``
    (training sentences x the split's images). The split's rows / columns are re-ordered by their ids when
    ``image_ids`` / ``sentence_ids`` (the file's) are given, else checked to have the split's sizes (a file with each image repeated per caption, as VSE++'s
    evaluation writes it, is refused with the hint)."""
    cols = "images" if rows == "search bank" else "sentences"
    n_rows = len(index["imgid"]) if rows == "images" else S.shape[0]
    n_cols = len(index["imgid"] if cols == "images" else index["sentid"])
    col_ids = image_ids if cols == "images" else sentence_ids
    if rows == "images" and image_ids is not None:
        if len(image_ids) != S.shape[0]:
            raise ValueError(f"{what}: {S.shape[0]} rows but {len(image_ids)} image ids")
        S = S[order_of(image_ids, index["imgid"], f"{what} (image ids)")]
    if col_ids is not None:
        if len(col_ids) != S.shape[1]:
            raise ValueError(f"{what}: {S.shape[1]} columns but {len(col_ids)} {cols[:-1]} ids")
        S = S[:, order_of(col_ids, index["imgid" if cols == "images" else "sentid"], f"{what} ({cols[:-1]} ids)")]
    if S.shape != (n_rows, n_cols):
        hint = ""
        if rows == "images" and S.shape[0] == len(index["sentid"]):
            hint = " (one row per caption, as VSE++ writes image embeddings: keep one row per image, e.g. [::5])"
        raise ValueError(
            f"{what}: a ({n_rows}, {n_cols}) matrix ({rows} x the split's {cols}, in dataset.json's order) is needed, "
            f"got {tuple(S.shape)}{hint}"
        )
    return S


def evaluate_files(
    dataset_dir: str | Path,
    ec: EvalConfig,
    test: np.ndarray,
    val: np.ndarray | None = None,
    banks: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    split: str = "test",
    ids: dict[str, dict[str, np.ndarray]] | None = None,
    what: str = "scores",
    names: dict[str, str] | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_matrix` of another tool's (n_images, n_sentences) score matrix ``test`` on ``split`` of the
    dataset: ``val`` (the val split's matrix) to choose the corrections' parameters on, ``banks`` (arrays
    :data:`BANK_KEYS`, query x candidate: ``*_annotation`` training images x the split's sentences,
    ``*_search`` training sentences x the split's images) for their inductive form. ``ids[split]``: the files'
    ``imgid`` / ``sentid`` order, when not the dataset's (:func:`dataset_order`). Every matrix is checked where it
    enters (:func:`checked_matrix`: NaN, +inf, empty, its shape against the split's) and ranked in its own
    precision (float32, or float64 for wider input). ``what`` names ``test`` in errors, ``names["val"]`` and
    ``names["banks"]`` the others (default ``val scores``, ``banks``)."""
    ids = ids or {}
    names = {"val": "val scores", "banks": "banks", **(names or {})}
    idx = {name: split_index(dataset_dir, name) for name in dict.fromkeys((split, "val"))}

    def order(S: np.ndarray, name: str, rows: str, label: str) -> torch.Tensor:
        got = ids.get(name, {})
        S = checked_matrix(S, label)
        out = dataset_order(S, idx[name], label, got.get("imgid"), got.get("sentid"), rows)
        return torch.from_numpy(np.ascontiguousarray(out, np.float32 if out.dtype.itemsize <= 4 else np.float64))

    S = order(test, split, "images", what)
    V = order(val, "val", "images", names["val"]) if val is not None else None
    B = None
    if banks is not None:
        missing = [k for k in BANK_KEYS if k not in banks]
        if missing:
            raise ValueError(f"{names['banks']}: lacks {', '.join(missing)} (needed: {', '.join(BANK_KEYS)})")
        if V is None:
            raise ValueError(
                f"{names['banks']}: banks without validation scores: the parameters are chosen on validation"
            )
        B = {
            name: {d: order(banks[f"{key}_{d}"], name, f"{d} bank", f"{names['banks']}: {key}_{d}") for d in DIRECTIONS}
            for name, key in (("val", "val"), (split, "test"))
        }
    val_pair = (V, idx["val"]["sentence_image"]) if V is not None else None
    return evaluate_matrix(S, idx[split]["sentence_image"], ec, seed, what, val_pair, B)


def compare(a: dict[str, Any], b: dict[str, Any], n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Paired comparison of two evaluations of the same queries (:func:`evaluate_matrix` results, ranks
    included): per direction and metric, ``a − b`` with its 95 % paired bootstrap CI over queries
    (:func:`fraglib.metrics.retrieval.paired_difference`, the same draws for both)."""
    from fraglib.metrics.retrieval import paired_difference

    names = [f"r{k}" for k in KS] + ["median_rank", "mean_rank"]
    out: dict[str, Any] = {}
    for n, d in enumerate(DIRECTIONS):
        ra, rb = (np.asarray(x["ranks"][d])[None] for x in (a, b))
        if ra.shape != rb.shape:
            raise ValueError(f"--against: {d} has {ra.shape[1]} and {rb.shape[1]} queries: not the same split")
        keep = (ra[0] > 0) & (rb[0] > 0)
        out[d] = {m: paired_difference(ra[:, keep], rb[:, keep], m, n_boot, seed + n) for m in names}
    return out


def save_scores(seed_dir: str | Path, out: str | Path, ec: EvalConfig, paths: DataPaths | None = None) -> list[Path]:
    """Write a trained run's matrices in :func:`evaluate_files`' layout (``test.npy``, ``val.npy``, float32;
    ``banks.npz``: :data:`BANK_KEYS`), the study's own scores: another tool's files in this layout are
    evaluated exactly as the run was. Returns the files written. Matrices that could not be ranked (NaN or +inf:
    a diverged or damaged checkpoint) are refused before anything is written, naming the checkpoint."""
    import io

    from fraglib.core.outputs import write_bytes

    system, _, splits = load_trained(seed_dir, paths, None)
    S = {name: score_matrix(system, splits[name], ec.eval_chunk) for name in ("test", "val")}
    banks = hubness_banks(system, {n: splits[n] for n in ("val", "test")}, splits["train"], ec.hub_bank, ec.eval_chunk)
    where = best_of(seed_dir)
    for name, M in (*S.items(), *((f"{s}_{d} bank", banks[s][d]) for s in ("val", "test") for d in DIRECTIONS)):
        check_scores(M, f"{where}: its {name} scores (--save-scores writes nothing)")
    out = Path(out)
    written = []
    for name, arrays in (*((f"{n}.npy", S[n].numpy()) for n in S), ("banks.npz", None)):
        buf = io.BytesIO()
        if arrays is None:
            np.savez(buf, **{f"{s}_{d}": banks[s][d].numpy() for s in ("val", "test") for d in DIRECTIONS})
        else:
            np.save(buf, arrays)
        write_bytes(out / name, buf.getvalue())
        written.append(out / name)
    return written


def _print(label: str, m: dict[str, Any]) -> None:
    for d in DIRECTIONS:
        t = m[d]
        print(
            f"{label} {d}: "
            + " ".join(f"R@{k} {t[f'r{k}']:.1f}" for k in KS)
            + f" median r {t['median_rank']:.1f} mean r {t['mean_rank']:.1f}"
        )


def _flag(args: Any, name: str) -> str:
    """``--<name> <its file>``: how errors name a file given on the command line."""
    return f"--{name.replace('_', '-')} {getattr(args, name)}"


def _source(args: Any, prefix: str, what: str) -> tuple[np.ndarray | None, str]:
    """(the score matrix named by ``--<prefix>scores`` or the ``--<prefix>image-emb`` / ``--<prefix>sentence-emb``
    pair, the name its errors give: the flag and the file), or (None, "") when neither is given."""
    key = prefix.replace("-", "_")
    scores, img, sent = (getattr(args, f"{key}{n}") for n in ("scores", "image_emb", "sentence_emb"))
    if scores and (img or sent):
        raise ValueError(f"{what}: give --{prefix}scores or --{prefix}image-emb/--{prefix}sentence-emb, not both")
    if scores:
        return read_array(scores, f"--{prefix}scores"), _flag(args, f"{key}scores")
    if bool(img) != bool(sent):
        raise ValueError(f"{what}: --{prefix}image-emb and --{prefix}sentence-emb go together")
    if not img:
        return None, ""
    flags = (_flag(args, f"{key}image_emb"), _flag(args, f"{key}sentence_emb"))
    metric = args.metric or "cosine"
    S = embedding_scores(
        read_array(img, f"--{prefix}image-emb", True),
        read_array(sent, f"--{prefix}sentence-emb", True),
        metric,
        "",
        flags,
    )
    return S, f"the {metric} scores of {' and '.join(flags)}"


def _banks(args: Any) -> tuple[dict[str, np.ndarray] | None, str]:
    """(``--banks`` (a .npz of :data:`BANK_KEYS`), or the banks of ``--bank-image-emb`` / ``--bank-sentence-emb``
    (training items) against the val and test embeddings; the name errors give them), or (None, "")."""
    if args.banks and (args.bank_image_emb or args.bank_sentence_emb):
        raise ValueError("give --banks or --bank-image-emb/--bank-sentence-emb, not both")
    if args.banks:
        z = load_numpy(args.banks, "--banks")
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"--banks: {args.banks} holds one array; a .npz of {', '.join(BANK_KEYS)} is needed")
        with z:
            return {k: z[k] for k in z.files}, _flag(args, "banks")
    if not (args.bank_image_emb or args.bank_sentence_emb):
        return None, ""
    if not (args.bank_image_emb and args.bank_sentence_emb):
        raise ValueError("--bank-image-emb and --bank-sentence-emb go together")

    def read(name: str) -> tuple[np.ndarray, str]:
        return read_array(getattr(args, name), f"--{name.replace('_', '-')}", True), _flag(args, name)

    bank_img, bank_sent = read("bank_image_emb"), read("bank_sentence_emb")
    out = {}
    for split, pre in (("val", "val_"), ("test", "")):
        if not (getattr(args, f"{pre}image_emb") and getattr(args, f"{pre}sentence_emb")):
            raise ValueError(
                f"--bank-*-emb: the {split} embeddings are needed too (--{pre.replace('_', '-')}image-emb, …)"
            )
        img, sent = read(f"{pre}image_emb"), read(f"{pre}sentence_emb")
        for d, (a, b) in (("annotation", (bank_img, sent)), ("search", (img, bank_sent))):
            S = embedding_scores(a[0], b[0], args.metric or "cosine", "", (a[1], b[1]))
            out[f"{split}_{d}"] = S if d == "annotation" else S.T
    return out, "the banks of " + " and ".join((bank_img[1], bank_sent[1]))


# the options that act on another tool's files only (refused with SEED_DIR: :func:`_refused_together`)
TOOL_OPTIONS = tuple(
    f"{pre}{n}" for pre in ("", "val_", "against_") for n in ("scores", "image_emb", "sentence_emb")
) + ("metric", "banks", "bank_image_emb", "bank_sentence_emb", "image_ids", "sentence_ids", "seed")


def _refused_together(args: Any) -> str:
    """The message refusing options that would be silently ignored together ('' when none are): another tool's
    options with SEED_DIR; --save-scores (which writes matrices, not metrics) without SEED_DIR, with --out or
    with another split than test; --features-dir without SEED_DIR; --metric without embeddings."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    given = [flag(n) for n in TOOL_OPTIONS if getattr(args, n) is not None]
    if args.seed_dir is not None and given:
        return (
            f"{', '.join(given)}: options for another tool's scores or embeddings, not for SEED_DIR (a run is scored "
            "by its own system, its bootstrap seeded by its training seed)"
        )
    if args.save_scores:
        if args.seed_dir is None:
            return "--save-scores writes a trained run's matrices: it needs SEED_DIR (not --scores or embeddings)"
        if args.out:
            return "--save-scores writes the matrices only, no metrics: drop --out (or run again without --save-scores)"
        if args.split != "test":
            return f"--save-scores writes the test and val matrices whatever the split: drop --split {args.split}"
    if args.features_dir and args.seed_dir is None:
        return "--features-dir: the features a trained run (SEED_DIR) is scored on; another tool's files need none"
    if args.metric and not any(getattr(args, f"{p}image_emb") for p in ("", "val_", "against_", "bank_")):
        return "--metric: the score of embeddings (--image-emb / --sentence-emb …); score matrices are used as given"
    return ""


@command
def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from fraglib.core.config import parse_overrides, read_settings
    from fraglib.core.outputs import claim_cli, write_text

    ap = argparse.ArgumentParser(
        description="The study's own evaluation, of a trained run's checkpoint (SEED_DIR) or of another tool's "
        "score matrix or embeddings (--scores / --image-emb + --sentence-emb, with --dataset-dir); docs/evaluation.md",
    )
    ap.add_argument("seed_dir", nargs="?", help="a folder holding best.pt (e.g. runs/synthetic/full/seeds/seed0)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"))
    ap.add_argument("--dataset-dir", help="default: the one the run was trained on; with --scores: required")
    ap.add_argument("--features-dir", help="with --dataset-dir (default <dataset-dir>/features)")
    ap.add_argument(
        "--params",
        help="its `evaluation` section applies (default: params.yaml where it is, else the defaults; `none`: the "
        "defaults; a file named here must exist)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an evaluation key, e.g. test_folds=5 (COCO 1K), n_boot=200, hubness=false",
    )
    ap.add_argument("--out", help="write the metrics (with per-query ranks) as JSON here")
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    ap.add_argument("--save-scores", metavar="DIR", help="with SEED_DIR: write its test.npy, val.npy, banks.npz here")
    g = ap.add_argument_group("scores from another tool (instead of SEED_DIR)")
    for pre, what in (
        ("", "the split's"),
        ("val-", "the val split's (to choose corrections' parameters on)"),
        ("against-", "a second system's, compared query by query (paired bootstrap)"),
    ):
        alias = ["--against"] if pre == "against-" else []
        g.add_argument(f"--{pre}scores", *alias, metavar="NPY", help=f"{what} (n_images, n_sentences) score matrix")
        g.add_argument(f"--{pre}image-emb", metavar="NPY", help=f"{what} image embeddings (n_images, D)")
        g.add_argument(f"--{pre}sentence-emb", metavar="NPY", help=f"{what} sentence embeddings (n_sentences, D)")
    g.add_argument("--metric", choices=("cosine", "dot"), help="embeddings' score (default cosine)")
    g.add_argument("--banks", metavar="NPZ", help="inductive hubness banks: arrays " + ", ".join(BANK_KEYS))
    g.add_argument("--bank-image-emb", metavar="NPY", help="training image embeddings (the inductive banks' queries)")
    g.add_argument("--bank-sentence-emb", metavar="NPY", help="training sentence embeddings")
    g.add_argument("--image-ids", metavar="TXT", help="the files' image id per row, '{split}' for the split's name")
    g.add_argument("--sentence-ids", metavar="TXT", help="the files' sentence id per column ('{split}' as above)")
    g.add_argument("--seed", type=int, help="the bootstrap's seed (default 0; a run's own: its training seed)")
    args = ap.parse_args(argv)
    refused = _refused_together(args)
    if refused:
        ap.error(refused)
    outs = [Path(args.out)] if args.out else []
    outs += [Path(args.save_scores) / n for n in ("test.npy", "val.npy", "banks.npz")] if args.save_scores else []
    claim_cli(ap, outs, outs, args.overwrite, "fraglib.run.evaluate")
    try:  # the file's sections checked, as by every command (a misspelt section is an error, not ignored)
        if args.params not in (None, "none") and not Path(args.params).is_file():
            ap.error(f"--params {args.params}: no such parameter file (--params none: the defaults)")
        params_file = {None: "params.yaml" if Path("params.yaml").is_file() else None, "none": None}.get(
            args.params, args.params
        )
        ec = eval_config(read_settings(params_file) if params_file else {}, parse_overrides(args.set))
        (test, test_name), (against, against_name) = _source(args, "", "scores"), _source(args, "against-", "--against")
        if (test is None) == (args.seed_dir is None):
            raise ValueError("give a SEED_DIR, or a score matrix (--scores / --image-emb + --sentence-emb), not both")
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    if args.seed_dir is not None:
        paths = DataPaths(args.dataset_dir, args.features_dir) if args.dataset_dir else None
        try:
            if args.save_scores:
                for f in save_scores(args.seed_dir, args.save_scores, ec, paths):
                    print(f"wrote {f}")
                return
            m = evaluate_run(args.seed_dir, ec, args.split, paths)
        except (ValueError, FileNotFoundError) as exc:  # a damaged checkpoint's NaN scores among them
            ap.error(str(exc))
    else:
        if not args.dataset_dir:
            ap.error("--scores / --image-emb need --dataset-dir (the dataset.json fixing the split's order)")
        seed = 0 if args.seed is None else args.seed
        try:
            (val, val_name), (banks, banks_name) = _source(args, "val-", "--val"), _banks(args)
            ids = {
                name: {
                    key: read_ids(pattern.format(split=name), f"--{flag}")
                    for key, flag, pattern in (
                        ("imgid", "image-ids", args.image_ids),
                        ("sentid", "sentence-ids", args.sentence_ids),
                    )
                    if pattern
                }
                for name in dict.fromkeys((args.split,) + (("val",) if val is not None or banks is not None else ()))
            }
            names = {"val": val_name, "banks": banks_name}
            run = lambda S, val, banks, what: evaluate_files(  # noqa: E731
                args.dataset_dir, ec, S, val, banks, seed, args.split, ids, what, names
            )
            m = run(test, val, banks, test_name)
            if against is not None:
                b = run(against, None, None, against_name)
                m = {"scores": m, "against": b, "paired": compare(m, b, ec.n_boot, seed)}
        except (ValueError, FileNotFoundError) as exc:
            ap.error(str(exc))
    if args.out:
        write_text(args.out, json.dumps(m, indent=1, sort_keys=True))
    if "paired" in m:
        _print("scores", m["scores"])
        _print("against", m["against"])
        for d, t in m["paired"].items():
            print(
                f"scores − against, {d}: "
                + "; ".join(f"{k} {v['diff']:+.1f} [{v['lo']:+.1f}, {v['hi']:+.1f}]" for k, v in t.items())
            )
        return
    _print(args.split, m)
    if "folds" in m:
        _print(f"{args.split} {ec.test_folds}-fold mean", m["folds"])
    h = m.get("hubness", {})
    for key in sorted(k for k in h if isinstance(h[k], dict) and "param" in h[k].get("annotation", {})):
        print(f"{key}: " + "; ".join(f"{d} R@1 {h[key][d]['r1']:.1f}" for d in DIRECTIONS))
