"""Late fusion of two trained runs: one image–sentence score from two systems' scores (docs/systems.md).

    python -m fraglib_study fuse --runs runs/pascal1k/fr_lr01 runs/pascal1k/devise_d2048 \
        --out runs/pascal1k/fuse_fr_lr01_devise_d2048

``S = w · z_A(S_A) + (1 − w) · z_B(S_B)``, where ``z`` standardises a model's score matrix with the mean
and standard deviation of that model's *validation* scores (an affine map fixed before the test split
is seen; it leaves each model's own ranking unchanged) and ``w`` is the one weight of a grid that gives
the best mean validation R-sum over every unit of every split. The test split is scored once, at that
weight. Units pair by name (``seed0`` with ``seed0``, ``seed0r1`` with ``seed0r1``); a run fused with
itself pairs its two training runs per split (``seed{s}`` with ``seed{s}r1``: the ensemble control, what
fusing any two models gains). The output folder has the layout of a trained run (``metrics.json``,
``seeds/seed<unit>/{metrics.json,ranks.json}``), so the reports' paired bootstrap reads it like one.
It is never one of the two runs nor any trained run's folder (checkpoints, ``history.csv``, ``timing.json``,
a trained run's ``metrics.json``), and an existing fused run is replaced only with ``--overwrite``: then
fusion's own files there (``metrics.json``, ``seeds/seed<unit>/{metrics,ranks}.json``) are replaced or removed,
and any other file is left alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.outputs import OVERWRITE_HELP, claim, claim_cli, command, write_text
from fraglib.metrics.retrieval import annotation_ranks, recall_table, rsum, search_ranks
from fraglib.run.evaluate import EvalConfig

WEIGHTS = tuple(round(0.1 * k, 1) for k in range(11))


def standardiser(S: torch.Tensor) -> tuple[float, float]:
    """(mean, sd) of the finite entries of a score matrix (items without rows score -inf)."""
    x = S[torch.isfinite(S)].double()
    sd = float(x.std()) if x.numel() > 1 else 1.0
    return float(x.mean()), sd if sd > 0 else 1.0


def fuse(
    Sa: torch.Tensor, Sb: torch.Tensor, w: float, za: tuple[float, float], zb: tuple[float, float]
) -> torch.Tensor:
    """(n, m) ``w (Sa − μa)/σa + (1 − w)(Sb − μb)/σb``; a term of weight 0 is left out (its -inf entries
    do not turn the sum into NaN)."""
    terms = [(w, Sa, za), (1.0 - w, Sb, zb)]
    return sum(c * (S - mu) / sd for c, S, (mu, sd) in terms if c > 0)


def val_rsum(S: torch.Tensor, sentence_image: np.ndarray, what: str = "fused validation scores") -> float:
    """Validation R-sum (R@1+5+10 of both directions) of one score matrix (``what`` names it in errors)."""
    return rsum(
        {
            "annotation": recall_table(annotation_ranks(S, sentence_image, what=what)),
            "search": recall_table(search_ranks(S, sentence_image, what=what)),
        }
    )


def unit_pairs(run_a: Path, run_b: Path) -> list[tuple[str, str, str]]:
    """(fused unit name, unit of A, unit of B): by name, or a run's two training runs per split when A is B."""
    sa, sb = (json.loads((r / "metrics.json").read_text()) for r in (run_a, run_b))
    ua = sa.get("units") or [str(s) for s in sa["seeds"]]
    ub = sb.get("units") or [str(s) for s in sb["seeds"]]
    if run_a.resolve() == run_b.resolve():
        pairs = [(str(s), str(s), f"{s}r1") for s in sa["seeds"] if f"{s}r1" in ua and str(s) in ua]
        what = "two training runs per split (runs.<run>.replicates: 2)"
    else:
        pairs = [(u, u, u) for u in ua if u in ub]
        what = "a unit in common"
    if not pairs:
        raise ValueError(f"{run_a} and {run_b}: no {what} to fuse")
    return pairs


def trained_on(seed_dir: Path) -> tuple[str | None, str]:
    """(SHA-256 of the ``dataset.json`` a trained unit was trained on, its dataset folder), from the
    checkpoint's ``fingerprint`` and ``info``. Only the ``dataset`` role identifies what fusion compares:
    ``dataset.json`` lists the images, the sentences and each one's split, so it fixes the rows and columns
    of the validation and test score matrices and their ground truth; the other roles (``sentences``: a
    view's fragment file, ``images``: a detector's features) are each system's own inputs, which the two
    fused systems may well read differently."""
    from fraglib.run.checkpoint import best_of, load

    ck = load(best_of(seed_dir))
    return (ck.get("fingerprint") or {}).get("dataset"), str(ck["info"]["dataset_dir"])


def fusion_pairs(run_a: Path, run_b: Path, out: Path) -> list[tuple[str, str, str]]:
    """:func:`unit_pairs`, after the checks that need no scoring: ``out`` is neither run nor any trained run's
    folder (:func:`trained_run_files`), and each pair of units was trained on the same dataset
    (:func:`trained_on`). ValueError names what to change."""
    for r in (run_a, run_b):
        if out.resolve() == r.resolve():
            raise ValueError(
                f"the fused run's folder {out} is the input run {r}: fusion never writes into a run it "
                f"reads; give another folder (e.g. {r.parent / f'fuse_{run_a.name}_{run_b.name}'})"
            )
    why = trained_run_files(out)
    if why:
        raise ValueError(
            f"--out {out} is a trained run's folder ({why}): fusion writes only a fused run's folder and never "
            f"replaces or deletes another run's results, with or without --overwrite; give another folder "
            f"(e.g. {out.parent / f'fuse_{run_a.name}_{run_b.name}'})"
        )
    pairs = unit_pairs(run_a, run_b)
    for name, ua, ub in pairs:
        (ha, da), (hb, db) = trained_on(run_a / "seeds" / f"seed{ua}"), trained_on(run_b / "seeds" / f"seed{ub}")
        if ha != hb:
            raise ValueError(
                f"unit {name}: {run_a} (seed{ua}, trained on {da}) and {run_b} (seed{ub}, trained on "
                f"{db}) were trained on different datasets (dataset.json sha256 {str(ha)[:12]} vs "
                f"{str(hb)[:12]}): fusion compares two systems on the same validation and test splits"
            )
    return pairs


def check_scored(name: str, run_a: Path, run_b: Path, a: dict[str, Any], b: dict[str, Any]) -> None:
    """ValueError unless the two units' validation and test score matrices (images x sentences) have one
    shape and one ground truth (``sentence_image``)."""
    for split in ("val", "test"):
        (Sa, sia), (Sb, sib) = a[split], b[split]
        if Sa.shape != Sb.shape:
            what = f"{tuple(Sa.shape)} vs {tuple(Sb.shape)} images x sentences"
        elif not np.array_equal(sia, sib):
            what = "the same shape, other sentence-image pairs"
        else:
            continue
        raise ValueError(f"unit {name}: {run_a} and {run_b} were scored on different {split} splits ({what})")


FUSED_UNIT_FILES = ("metrics.json", "ranks.json")  # what fusion writes in each seeds/seed<unit>/


def fused_files(out: Path, pairs: list[tuple[str, str, str]] | None = None) -> list[Path]:
    """The files of a fused run folder that fusion writes: those there now (``metrics.json`` and each
    ``seeds/seed<unit>/{metrics,ranks}.json``; nothing else in the folder is fusion's), or (``pairs``)
    those a fusion of ``pairs`` writes."""
    if pairs is None:
        return [out / "metrics.json"] + sorted(
            p for f in FUSED_UNIT_FILES for p in (out / "seeds").glob(f"seed*/{f}") if p.is_file() or p.is_symlink()
        )
    return [out / "metrics.json"] + [out / "seeds" / f"seed{n}" / f for n, _, _ in pairs for f in FUSED_UNIT_FILES]


TRAINING_FILES = ("*.pt", "history.csv", "timing.json")  # a trained run's files, never a fused run's


def _json_dict(path: Path) -> dict[str, Any] | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def trained_run_files(out: Path) -> str | None:
    """Why ``out`` is (or holds) a trained run's folder rather than a fused run's, or None: checkpoints,
    ``history.csv`` or ``timing.json`` in it or in ``seeds/<unit>/``, a ``metrics.json`` of another system
    (a fused run's says ``"system": "fusion"``), or a unit's ``metrics.json`` written by training."""
    found = sorted(p for f in TRAINING_FILES for p in [*out.glob(f), *(out / "seeds").glob(f"*/{f}")] if p.is_file())
    if found:
        return f"it holds {found[0]}" + (f" and {len(found) - 1} more training file(s)" if len(found) > 1 else "")
    top = _json_dict(out / "metrics.json")
    if top is not None and "system" in top and top["system"] != "fusion":
        return f"its metrics.json is a trained run's (system {top['system']!r}), not one fusion wrote"
    for m in sorted((out / "seeds").glob("seed*/metrics.json")):
        d = _json_dict(m)
        if d is not None and ({"system", "checkpoint_dir", "train_config"} & set(d)):
            return f"{m} is a trained unit's metrics.json, not one fusion wrote"
    return None


def unit_scores(seed_dir: Path, ec: EvalConfig = EvalConfig()) -> dict[str, Any]:
    """Validation and test score matrices of one trained unit (from its checkpoint alone), each with its sentence ->
    image index, and with ``ec.hubness`` the inductive banks of both splits (``banks``:
    :func:`fraglib.run.evaluate.hubness_banks`, score matrices too, so they fuse as the splits' do) and the
    training items that are their rows (``bank_rows``: positions, per direction, :func:`fraglib.run.evaluate.bank_items`)."""
    from fraglib.run.evaluate import bank_items, hubness_banks, load_trained, score_matrix

    system, _, splits = load_trained(seed_dir, split=None)
    out = {s: (score_matrix(system, splits[s], ec.eval_chunk), splits[s].sentence_image) for s in ("val", "test")}
    if ec.hubness:
        pair = {s: splits[s] for s in ("val", "test")}
        out["banks"] = hubness_banks(system, pair, splits["train"], ec.hub_bank, ec.eval_chunk)
        out["bank_rows"] = dict(zip(("annotation", "search"), bank_items(splits["train"], ec.hub_bank)))
    return out


def fused_banks(a: dict[str, Any], b: dict[str, Any], w: float, za, zb) -> dict[str, dict[str, torch.Tensor]]:
    """Two units' inductive banks (:func:`unit_scores`) fused as their splits' matrices are (:func:`fuse`), per split
    and direction on the training items both have as rows: a fragment run has no row for a training sentence
    without fragments, which a full-frame run scores."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for split, directions in a["banks"].items():
        out[split] = {}
        for d, bank in directions.items():
            _, ia, ib = np.intersect1d(a["bank_rows"][d], b["bank_rows"][d], return_indices=True)
            out[split][d] = fuse(bank[ia], b["banks"][split][d][ib], w, za, zb)
    return out


def fuse_runs(
    run_a: str | Path,
    run_b: str | Path,
    out: str | Path,
    weights: tuple[float, ...] = WEIGHTS,
    ec: EvalConfig = EvalConfig(),
    label: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fuse two trained runs (module docstring; checkpoints in ``<run>/seeds/seed<unit>/``) into the run
    folder ``out``; returns its summary. The fused test matrix is scored by the one evaluation of every score
    matrix (:func:`fraglib.run.evaluate.evaluate_matrix` with ``ec``, ``params.yaml: evaluation``: bootstrap CIs,
    the fold protocol, hubness and its corrections on the fused validation matrix and fused banks), as a trained
    unit's is. Before any scoring: :func:`fusion_pairs`' checks, and an existing fused run in ``out`` is refused
    unless ``overwrite`` (then replaced whole: :func:`fraglib.core.outputs.claim`)."""
    from tqdm.auto import tqdm

    from fraglib.core.outputs import unit_seed
    from fraglib.run.evaluate import evaluate_matrix
    from fraglib_study.experiments.study import summarise

    run_a, run_b, out = Path(run_a), Path(run_b), Path(out)
    pairs = fusion_pairs(run_a, run_b, out)
    claim(fused_files(out), fused_files(out, pairs), overwrite, f"fraglib_study.experiments.fusion --out {out}")
    scores = []
    for name, ua, ub in tqdm(pairs, desc=f"scoring {run_a.name} + {run_b.name}"):
        a, b = unit_scores(run_a / "seeds" / f"seed{ua}", ec), unit_scores(run_b / "seeds" / f"seed{ub}", ec)
        check_scored(name, run_a, run_b, a, b)
        scores.append((name, a, b, standardiser(a["val"][0]), standardiser(b["val"][0])))
    pair = f"{run_a} + {run_b}"
    by_w = {
        w: float(
            np.mean(
                [
                    val_rsum(
                        fuse(a["val"][0], b["val"][0], w, za, zb),
                        a["val"][1],
                        f"{pair}, unit {name}: fused validation scores (w = {w})",
                    )
                    for name, a, b, za, zb in scores
                ]
            )
        )
        for w in weights
    }
    w_best = max(weights, key=lambda w: (by_w[w], -abs(w - 0.5)))  # ties: the more even mix
    tests = []
    for name, a, b, za, zb in scores:
        banks = fused_banks(a, b, w_best, za, zb) if ec.hubness else None
        m = evaluate_matrix(
            fuse(a["test"][0], b["test"][0], w_best, za, zb),
            a["test"][1],
            ec,
            unit_seed(name),
            f"{pair}, unit {name}: fused test scores (w = {w_best})",
            (fuse(a["val"][0], b["val"][0], w_best, za, zb), a["val"][1]) if ec.hubness else None,
            banks,
        )
        d = out / "seeds" / f"seed{name}"
        write_text(d / "ranks.json", json.dumps(m.pop("ranks")) + "\n")
        write_text(d / "metrics.json", json.dumps({"test": m, "weight": w_best}, indent=1, sort_keys=True) + "\n")
        tests.append(m)
    keys = [p[0] for p in pairs]
    seeds = sorted({unit_seed(k) for k in keys})
    head = {
        "run": out.name,
        "system": "fusion",
        "seeds": seeds,
        "runs": [run_a.name, run_b.name],
        "units_fused": {n: [ua, ub] for n, ua, ub in pairs},
        "weight": w_best,
        "val_rsum_by_weight": {str(w): round(v, 2) for w, v in by_w.items()},
        "label": label or f"late fusion: {run_a.name} + {run_b.name} (weight chosen on validation)",
    }
    summary = summarise(head, keys, [unit_seed(k) for k in keys], tests)
    write_text(out / "metrics.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--runs",
        nargs=2,
        required=True,
        metavar=("RUN_A", "RUN_B"),
        help="two trained run folders (metrics.json + seeds/); the weight w multiplies RUN_A",
    )
    ap.add_argument("--out", required=True, help="the fused run's folder")
    ap.add_argument("--weights", default=",".join(map(str, WEIGHTS)), help="the grid of w (comma-separated, in [0, 1])")
    ap.add_argument("--params", default="params.yaml", help="its `evaluation` section: how the fused test is scored")
    ap.add_argument("--label")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    try:
        weights = tuple(float(w) for w in args.weights.split(","))
    except ValueError:
        ap.error(f"--weights {args.weights!r}: comma-separated numbers in [0, 1]")
    if not weights or not all(0.0 <= w <= 1.0 for w in weights):
        ap.error(f"--weights {args.weights!r}: every weight must lie in [0, 1]")
    from fraglib.core.config import ConfigError
    from fraglib.run.evaluate import eval_config
    from fraglib_study.schema import read_checked

    try:  # a bad section is refused by name before any scoring
        ec = eval_config(read_checked(args.params))
    except ConfigError as exc:
        ap.error(f"--params {args.params}: {exc}")
    for r in args.runs:
        if not (Path(r) / "metrics.json").exists():
            ap.error(f"--runs: {r} has no metrics.json (train it first, e.g. `dvc repro ...:train@{Path(r).name}`)")
    run_a, run_b, out = Path(args.runs[0]), Path(args.runs[1]), Path(args.out)
    try:
        pairs = fusion_pairs(run_a, run_b, out)
    except ValueError as exc:
        ap.error(str(exc))
    claim_cli(
        ap, fused_files(out), fused_files(out, pairs), args.overwrite, f"fraglib_study.experiments.fusion --out {out}"
    )
    s = fuse_runs(run_a, run_b, out, weights, ec, args.label, overwrite=True)
    print(
        f"{args.out}: weight {s['weight']} (validation R-sum by weight: {s['val_rsum_by_weight']}); test R@1 "
        f"annotation {s['annotation']['r1']:.1f}, search {s['search']['r1']:.1f}"
    )
