"""Does a re-run agree with the committed results? (the cross-machine contract of README "Reproducibility")

    dvc repro                                   # on your machine: rewrites runs/synthetic/*/metrics.json
    python -m fraglib.rerun runs/synthetic      # compares them with the committed ones (git HEAD)

On the machine that produced them, a re-run is byte-identical. On another CPU the float kernels
differ (see README), training follows another trajectory, and each run's mean over seeds moves like
a fresh draw of training noise. So each metric's difference of means is compared with the seed
spread: z = (new - committed) / (sd * sqrt(2 / n)), n the run's training runs (seeds x replicates) and
sd that metric's standard deviation over training runs pooled over the runs trained more than once
(root mean square; one run's 2-3-run sd is too noisy to use alone).
A run passes when every |z| <= ``z_max`` (3 by default). Measured: the synthetic results committed
from one 2-core AMD EPYC machine (2fb4ad0) against a re-run on another (5630995): largest |z| 2.66
over 60 comparisons (10 runs x R@1/5/10 x both directions), none above 3.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path
from typing import Any

from fraglib.metrics import DIRECTIONS, KS

METRICS = [(t, f"r{k}") for t in DIRECTIONS for k in KS]


def agreement(
    reference: dict[str, dict[str, Any]], fresh: dict[str, dict[str, Any]], z_max: float = 3.0
) -> list[dict[str, Any]]:
    """One row per (run, direction, metric) present in both: committed and new mean, the pooled
    seed sd, z, and ``ok``. Inputs: run name -> summary ``metrics.json`` (``<dir>_sd``, ``seeds``, ``units``)."""
    runs = sorted(set(reference) & set(fresh))
    if not runs:
        raise ValueError("no run is in both the reference and the new results")
    units = lambda s: len(s.get("units") or s["seeds"])  # noqa: E731  training runs
    spread = [r for r in runs if units(fresh[r]) > 1] or runs  # a one-run sd is 0, not a spread
    rows = []
    for t, m in METRICS:
        pooled = math.sqrt(sum(fresh[r][f"{t}_sd"][m] ** 2 for r in spread) / len(spread))
        for r in runs:
            n = min(units(fresh[r]), units(reference[r]))
            diff = fresh[r][t][m] - reference[r][t][m]
            scale = pooled * math.sqrt(2 / n)
            z = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
            rows.append(
                {
                    "run": r,
                    "direction": t,
                    "metric": m,
                    "committed": reference[r][t][m],
                    "new": fresh[r][t][m],
                    "pooled_sd": pooled,
                    "z": z,
                    "ok": abs(z) <= z_max,
                }
            )
    return rows


def read_runs(runs_dir: str | Path, ref: str | None = None) -> dict[str, dict[str, Any]]:
    """Summary metrics of every run under ``runs_dir`` (absolute, or relative to the current folder): from
    the working tree, or as committed at git revision ``ref`` (the folder's place in its repository is
    found, so any working folder works). A damaged or foreign ``metrics.json`` is an error naming it."""
    runs_dir = Path(runs_dir).resolve()
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: no such folder of runs")
    top = None
    if ref is not None:
        res = subprocess.run(
            ["git", "-C", str(runs_dir), "rev-parse", "--show-toplevel"], capture_output=True, text=True
        )
        if res.returncode:
            raise ValueError(
                f"{runs_dir}: not inside a git repository, so there is no committed {ref} to compare "
                "with (use --reference-dir)"
            )
        top = Path(res.stdout.strip()).resolve()
    out = {}
    for p in sorted(runs_dir.glob("*/metrics.json")):
        where = str(p)
        if ref is None:
            text = p.read_text()
        else:
            rel = p.relative_to(top).as_posix()
            res = subprocess.run(["git", "-C", str(top), "show", f"{ref}:{rel}"], capture_output=True, text=True)
            if res.returncode:
                continue  # a run added since ``ref``
            text, where = res.stdout, f"{ref}:{rel}"
        try:
            m = json.loads(text)
            for t, k in METRICS:
                float(m[t][k]), float(m[f"{t}_sd"][k])
            len(m["seeds"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{where}: not a run summary fraglib.study writes (damaged? {type(exc).__name__}: {str(exc)[:120]})"
            ) from None
        out[p.parent.name] = m
    if not out:
        raise FileNotFoundError(f"{runs_dir}: no */metrics.json" + (f" at git {ref}" if ref else ""))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs_dir", help="e.g. runs/synthetic (a path from the current folder, or absolute)")
    ap.add_argument("--reference", default="HEAD", help="git revision holding the committed results (default HEAD)")
    ap.add_argument("--reference-dir", help="compare with a folder of runs instead of a git revision")
    ap.add_argument("--z-max", type=float, default=3.0)
    args = ap.parse_args(argv)
    try:
        ref = read_runs(args.reference_dir) if args.reference_dir else read_runs(args.runs_dir, args.reference)
        rows = agreement(ref, read_runs(args.runs_dir), args.z_max)
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    bad = [r for r in rows if not r["ok"]]
    worst = max(rows, key=lambda r: abs(r["z"]))
    for r in bad or [worst]:
        print(
            f"{'OUTSIDE' if not r['ok'] else 'largest'}: {r['run']} {r['direction']} {r['metric']} "
            f"committed {r['committed']:.2f} new {r['new']:.2f} (z {r['z']:+.2f}, pooled seed sd {r['pooled_sd']:.2f})"
        )
    print(f"{len(rows) - len(bad)} of {len(rows)} metrics within |z| <= {args.z_max}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
