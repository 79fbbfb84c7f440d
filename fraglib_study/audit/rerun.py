"""Does a re-run agree with the committed results? (the cross-machine contract of README "Reproducibility")

    dvc repro                                   # on your machine: rewrites runs/synthetic/*/metrics.json
    python -m fraglib_study rerun runs/synthetic      # compares them with the committed ones (git HEAD)

On the machine that produced them, a re-run is byte-identical. On another CPU the float kernels
differ (see README), training follows another trajectory, and each run's mean over seeds moves like
a fresh draw of training noise. So each metric's difference of means is compared with the seed
spread: z = (new - committed) / (sd * sqrt(2 / n)), n the run's training runs (seeds x replicates) and
sd that metric's standard deviation over training runs pooled over the runs trained more than once
(root mean square; one run's 2-3-run sd is too noisy to use alone).
A run passes when every |z| <= ``z_max`` (3 by default). Measured: the synthetic results committed
from one 2-core AMD EPYC machine (2fb4ad0) against a re-run on another (5630995): largest |z| 2.66
over 60 comparisons (10 runs x R@1/5/10 x both directions), none above 3.

The claims too (``--claims``, on by default where ``params.yaml`` is found): every claim of
``fraglib_study/reference/claims.yaml`` that both result sets test gets its verdict from each
(:func:`fraglib_study.audit.claims.claim_rows`), and a verdict that differs is reported (:func:`verdict_agreement`).
``--units 0`` / ``--units 0r1`` (with ``--reference-units``) keep one training run of each run on either side:
two training seeds of one ``make`` stand in for two machines (a run trained once keeps its one run on both).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_bytes, write_text
from fraglib.metrics.retrieval import DIRECTIONS, KS

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
                f"{where}: not a run summary fraglib_study.experiments.study writes (damaged? {type(exc).__name__}: {str(exc)[:120]})"
            ) from None
        out[p.parent.name] = m
    if not out:
        raise FileNotFoundError(f"{runs_dir}: no */metrics.json" + (f" at git {ref}" if ref else ""))
    return out


def committed_copy(runs_dir: str | Path, ref: str, dest: Path) -> Path:
    """``runs_dir`` as git revision ``ref`` holds it (summaries and per-query ranks), extracted under ``dest``."""
    runs_dir = Path(runs_dir).resolve()
    top = Path(
        subprocess.run(
            ["git", "-C", str(runs_dir), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
    ).resolve()
    rel = runs_dir.relative_to(top).as_posix()
    tar = subprocess.run(["git", "-C", str(top), "archive", ref, rel], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest / rel


def one_unit(runs_dir: str | Path, unit: str, dest: Path) -> Path:
    """A copy of ``runs_dir`` under ``dest`` where each run keeps only training run ``unit`` (a run without it:
    its first): its summary's ``units``, ``groups`` and figures are that run's (the spread ``*_sd`` stays the
    run's over all its training runs, the contract's yardstick). ValueError when no run has ``unit`` (a typo would
    otherwise compare every run's first training run)."""
    out = dest / Path(runs_dir).name
    found = {
        u
        for p in Path(runs_dir).glob("*/metrics.json")
        for u in (json.loads(p.read_text()).get("units") or [str(x) for x in json.loads(p.read_text())["seeds"]])
    }
    if unit not in found:
        raise ValueError(f"training run {unit!r}: no run of {runs_dir} has it (they have {', '.join(sorted(found))})")
    for p in sorted(Path(runs_dir).glob("*/metrics.json")):
        m = json.loads(p.read_text())
        units = m.get("units") or [str(x) for x in m["seeds"]]
        keep = unit if unit in units else units[0]
        groups = m.get("groups") or m["seeds"]
        m.update(units=[keep], groups=[groups[units.index(keep)]])
        m.update({d: (m.get("per_seed") or {}).get(keep, {}).get(d, m[d]) for d in ("annotation", "search")})
        seed = out / p.parent.name / "seeds" / f"seed{keep}"
        seed.mkdir(parents=True)
        write_text(out / p.parent.name / "metrics.json", json.dumps(m))
        for f in (p.parent / "seeds" / f"seed{keep}").glob("*.json"):
            write_bytes(seed / f.name, f.read_bytes())
    return out


def study_dataset(runs_dir: str | Path, root: str | Path = ".") -> str | None:
    """The dataset of the study (:func:`fraglib_study.report.registry.studies`) whose runs folder, or k-fold runs
    folder, is ``runs_dir``; None when no study has it."""
    from fraglib_study.report.registry import studies

    want = Path(runs_dir).resolve()
    for s in studies(root):
        if want in {(Path(root) / f).resolve() for f in (s.runs, s.folds) if f}:
            return s.dataset
    return None


def verdict_agreement(params: dict[str, Any], reference: Path, fresh: Path, dataset: str) -> list[dict[str, Any]]:
    """One row per claim and task that both ``reference`` and ``fresh`` (two folders of one study's runs) test:
    claim id, task, the two verdicts, ``same``, and each side's difference with its 95 % CI (``committed_ours``,
    ``new_ours``: ``diff``, ``lo``, ``hi``)."""
    from fraglib_study.audit.claims import NOT_TESTABLE, claim_rows

    def verdicts(folder: Path) -> dict[tuple[str, str], Any]:
        rows = claim_rows(params, {dataset: [folder]})
        return {(r.claim["id"], r.task): r for r in rows if r.study == dataset and r.verdict != NOT_TESTABLE}

    def ours(r: Any) -> dict[str, float] | None:  # None: undecided (no training-noise estimate)
        return None if r.ours is None else {k: round(float(r.ours[k]), 3) for k in ("diff", "lo", "hi")}

    a, b = verdicts(reference), verdicts(fresh)
    return [
        {
            "claim": c,
            "task": t,
            "committed": a[c, t].verdict,
            "new": b[c, t].verdict,
            "same": a[c, t].verdict == b[c, t].verdict,
            "committed_ours": ours(a[c, t]),
            "new_ours": ours(b[c, t]),
        }
        for c, t in sorted(set(a) & set(b))
    ]


def machines(runs_dir: str | Path) -> list[str]:
    """The machines the training runs under ``runs_dir`` were timed on (their ``timing.json``), sorted."""
    found = set()
    for p in Path(runs_dir).glob("*/seeds/*/timing.json"):
        try:
            found.add(str(json.loads(p.read_text()).get("machine") or "unknown"))
        except (ValueError, AttributeError):
            found.add("unknown")
    return sorted(found)


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs_dir", help="e.g. runs/synthetic (a path from the current folder, or absolute)")
    ap.add_argument("--reference", default="HEAD", help="git revision holding the committed results (default HEAD)")
    ap.add_argument("--reference-dir", help="compare with a folder of runs instead of a git revision")
    ap.add_argument("--z-max", type=float, default=3.0)
    ap.add_argument(
        "--claims",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also compare the claims' verdicts (default: where params.yaml is found)",
    )
    ap.add_argument("--params", default="params.yaml", help="the settings naming the claims' runs")
    ap.add_argument(
        "--dataset", help="the claims' data (default: the dataset of the study whose runs folder is RUNS_DIR)"
    )
    ap.add_argument("--units", help="keep this training run of each run (e.g. 0r1) in the new results")
    ap.add_argument("--reference-units", help="likewise in the reference (e.g. 0)")
    ap.add_argument("--json", help="also write the comparison (every metric's z, every verdict, the machines) here")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    if not 0 < args.z_max < float("inf"):
        ap.error(f"--z-max {args.z_max}: a positive number of standard deviations, e.g. 3")
    if args.json:  # refused before the work, not after
        claim_cli(ap, [Path(args.json)], [Path(args.json)], args.overwrite, "fraglib_study.audit.rerun --json")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            tmp_dir = Path(tmp)
            ref_dir = Path(args.reference_dir) if args.reference_dir else None
            if ref_dir is None and (args.claims is not False or args.reference_units):
                (tmp_dir / "ref").mkdir()
                ref_dir = committed_copy(args.runs_dir, args.reference, tmp_dir / "ref")
            new_dir = Path(args.runs_dir)
            if args.units:
                new_dir = one_unit(new_dir, args.units, tmp_dir / "new")
            if args.reference_units:
                ref_dir = one_unit(ref_dir, args.reference_units, tmp_dir / "reference")
            ref = read_runs(ref_dir) if ref_dir else read_runs(args.runs_dir, args.reference)
            rows = agreement(ref, read_runs(new_dir), args.z_max)
            flips = None
            if args.claims or (args.claims is None and Path(args.params).is_file()):
                from fraglib_study.params import read_params

                dataset = args.dataset or study_dataset(args.runs_dir)
                if dataset is None:
                    ap.error(f"{args.runs_dir}: no study of this project has it as its runs folder: name --dataset")
                flips = verdict_agreement(read_params(args.params), ref_dir, new_dir, dataset)
            record = {
                "reference": args.reference_dir or args.reference,
                "reference_machines": machines(ref_dir) if ref_dir else [],
                "new": str(args.runs_dir),
                "new_machines": machines(new_dir),
                "z_max": args.z_max,
                "metrics_within": sum(r["ok"] for r in rows),
                "metrics": rows,
                "verdicts_same": None if flips is None else sum(f["same"] for f in flips),
                "verdicts": flips,
            }
        except (ValueError, FileNotFoundError, subprocess.CalledProcessError) as exc:
            ap.error(str(exc))
    if args.json:
        write_text(args.json, json.dumps(record, indent=1) + "\n")
    bad = [r for r in rows if not r["ok"]]
    worst = max(rows, key=lambda r: abs(r["z"]))
    for r in bad or [worst]:
        print(
            f"{'OUTSIDE' if not r['ok'] else 'largest'}: {r['run']} {r['direction']} {r['metric']} "
            f"committed {r['committed']:.2f} new {r['new']:.2f} (z {r['z']:+.2f}, pooled seed sd {r['pooled_sd']:.2f})"
        )
    print(f"{len(rows) - len(bad)} of {len(rows)} metrics within |z| <= {args.z_max}")
    if flips is not None:
        for f in flips:
            if not f["same"]:
                print(f"VERDICT CHANGED: {f['claim']} ({f['task']}): committed {f['committed']}, new {f['new']}")
        print(f"{sum(f['same'] for f in flips)} of {len(flips)} claims' verdicts the same")
    raise SystemExit(1 if bad or (flips and not all(f["same"] for f in flips)) else 0)
