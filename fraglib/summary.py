"""``docs/results.md``: the study's numbers, generated from the committed run summaries (never typed).

    python -m fraglib.summary                 # rewrites docs/results.md from runs/*/*/metrics.json
    python -m fraglib.summary --check         # exit 1 when docs/results.md is not what the summaries give

Every number on the page is read from a file in git: ``runs/<study>/<run>/metrics.json`` (mean and sd
over training runs, written by ``fraglib.study``) and ``runs/<study>/<run>/captions.json``
(``fraglib.captions``). CIs with training noise and paired differences are in the HTML reports, which
read the per-query ranks. tests/test_results.py keeps the committed page equal to this function's output.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

STUDIES = (("synthetic", "Synthetic benchmark (800 / 100 / 100 images, `dvc repro`)", "seeds"),
           ("synthetic_extended", "Synthetic benchmark, extended study (`make synthetic-all`)", "seeds"),
           ("pascal1k", "Pascal1K, five stratified splits (`make pascal1k`)", "splits"),
           ("flickr8k", "Flickr8K, text only (`make flickr8k`)", "splits"))

def verdict_pair(params: dict[str, Any]) -> tuple[str, str]:
    """The fight's verdict pair from ``params.yaml: results_report.fight``: the last step of the ladder (the
    recipe chosen on validation) and the first baseline (the strongest, chosen the same way)."""
    fight = (params.get("results_report") or {}).get("fight") or {}
    return str(fight.get("ladder", "")).split(",")[-1], str(fight.get("baselines", "")).split(",")[0]

REPLICATED = "annotation R@1 +1.2 [−7.0, +9.7], image search R@1 +0.1"    # the maintainers' check, quoted
REPLICATION = (
    "**Replication on unused splits.** The verdict was also checked by the maintainers on Pascal1K "
    "splits this project never uses (quoted, not computed here). There the best fragment recipe and "
    f"the tuned DeViSE-like model came out level: {REPLICATED}. The study's annotation lead did not "
    "replicate. Read it as a tie in both directions, not as "
    "\"fragments help image annotation\".")


def study_runs(root: Path, study: str) -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted((root / "runs" / study).glob("*/metrics.json")):
        m = json.loads(p.read_text())
        if "annotation" in m:
            out[p.parent.name] = m
    return out


def retrieval_runs(root: Path, study: str, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`study_runs` without the text-only runs (image view ``none``: they retrieve nothing)."""
    text_only = {r for r, e in (params.get("runs") or {}).items() if (e or {}).get("images") == "none"}
    return {r: m for r, m in study_runs(root, study).items() if r not in text_only}


def per_unit_coverage(root: Path, study: str) -> list[str]:
    """A Markdown line: how many of a study's runs have every training unit's ranks here (what the reports'
    bootstrap CIs need), and which do not (their summary alone is in git until the run is re-run)."""
    runs = study_runs(root, study)
    if not runs:
        return []
    missing = [r for r, m in runs.items()
               if not all((root / "runs" / study / r / "seeds" / f"seed{u}" / "ranks.json").exists()
                          for u in m.get("units", m.get("seeds", [])))]
    line = f"Per-query results of every training run are here for {len(runs) - len(missing)} of {len(runs)} runs"
    return [line + ("." if not missing else f"; summaries only: {', '.join(f'`{r}`' for r in missing)}."), ""]


def _params(root: Path) -> dict[str, Any]:
    from fraglib.config import read_params

    return read_params(root / "params.yaml")


def _cell(m: dict[str, Any], d: str, k: str) -> str:
    v, sd = m[d][k], (m.get(f"{d}_sd") or {}).get(k)
    return f"{v:.1f}" + (f" ± {sd:.1f}" if sd is not None and len(m.get("units") or m["seeds"]) > 1 else "")


def retrieval_table(runs: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """Markdown rows: one per run, R@1 and mean rank in both directions (mean ± sd over training runs)."""
    rows = ["| run | system | training runs | annotation R@1 | annotation R@10 | annotation mean rank "
            "| search R@1 | search R@10 | search mean rank |", "|---|---|---|---|---|---|---|---|---|"]
    order = sorted(runs, key=lambda r: (-(runs[r]["annotation"]["r1"] + runs[r]["search"]["r1"]), r))
    for r in order:
        m = runs[r]
        n = len(m.get("units") or m["seeds"])
        rows.append(f"| `{r}` — {labels.get(r, r)} | {m['system']} | {n} | "
                    + " | ".join(_cell(m, d, k) for d in ("annotation", "search") for k in ("r1", "r10", "mean_rank"))
                    + " |")
    return rows


def hubness_table(runs: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """Markdown rows for the runs that measured hubness (``metrics.json: hubness``, mean over training runs):
    skewness of the test k-occurrence and % of candidates never in a top k, per direction, and R@1 without
    and with the inductive corrections (parameters chosen on validation; docs/evaluation.md "Hubness")."""
    hub = {r: m for r, m in runs.items() if m.get("hubness")}
    if not hub:
        return []
    k = int(next(iter(hub.values()))["hubness"]["k"])
    rows = ["| run | annotation skew | annotation never % | search skew | search never % | annotation R@1: plain "
            "/ inv. softmax / CSLS | search R@1: plain / inv. softmax / CSLS |", "|---|---|---|---|---|---|---|"]
    for r in sorted(hub, key=lambda r: -max(hub[r]["hubness"][d]["skewness"] for d in ("annotation", "search"))):
        h = hub[r]["hubness"]
        r1 = [" / ".join(f"{v:.1f}" for v in (hub[r][d]["r1"], h["inverted_softmax_inductive"][d]["r1"],
                                                h["csls_inductive"][d]["r1"])) for d in ("annotation", "search")]
        rows.append(f"| `{r}` — {labels.get(r, r)} | " + " | ".join(
            f"{h[d]['skewness']:.2f} | {h[d]['never']:.0f}" for d in ("annotation", "search")) + f" | {r1[0]} | {r1[1]} |")
    return [f"Hubness of the test scores (k = {k}; annotation's candidates are sentences, search's are images) and "
            "R@1 under the two *inductive* corrections (banks from the training split, parameters chosen on "
            "validation). Paired CIs and the transductive protocol are in the results report.", "", *rows, ""]


def caption_table(root: Path, study: str) -> list[str]:
    """Markdown rows for every ``captions.json`` / ``transfer_*.json`` of a study (metrics × 100)."""
    rows = []
    for p in sorted((root / "runs" / study).glob("*/*.json")):
        if p.name == "metrics.json" or not p.name.startswith(("captions", "transfer_")):
            continue
        c = json.loads(p.read_text())
        for task in ("captioning", "paraphrasing"):
            if task in c:
                s = c[task]
                rows.append(f"| `{c['run']}` {p.stem} | {task} | {len(c['seeds'])} | "
                            + " | ".join(f"{100 * s[k]:.1f}" for k in ("bleu4", "meteor", "rouge_l", "cider")) + " |")
    if not rows:
        return []
    return ["| run, output | task | seeds | BLEU-4 | METEOR | ROUGE-L | CIDEr-D |", "|---|---|---|---|---|---|---|", *rows]


def verdict_difference(runs: dict[str, dict[str, Any]], pair: tuple[str, str]) -> dict[str, float] | None:
    """Mean R@1 of the verdict pair's best recipe minus its baseline, per direction; None when one is missing."""
    best, base = pair
    if best not in runs or base not in runs:
        return None
    return {k: runs[best][k]["r1"] - runs[base][k]["r1"] for k in ("annotation", "search")}


def verdict(runs: dict[str, dict[str, Any]], pair: tuple[str, str]) -> list[str]:
    (best, base), d = pair, verdict_difference(runs, pair)
    if d is None:
        return []
    return [f"Best fragment recipe (`{best}`) − DeViSE-like baseline (`{base}`), mean R@1 over the five "
            f"splits and both training runs: annotation {d['annotation']:+.1f}, image search {d['search']:+.1f} "
            "points. The fight report (reports/pascal1k/fight_report.html) gives the three-level bootstrap CIs "
            "(splits, training runs, queries). On these splits the annotation lead's interval excludes zero, and "
            "search is tied.", "", REPLICATION]


def fight_baselines(runs: dict[str, dict[str, Any]], params: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Markdown rows: the best fragment recipe minus each fight baseline (``results_report.fight.baselines``),
    mean R@1 per direction, plain and with both sides under the inductive inverted softmax (where both
    measured hubness). Point differences only: the fight report has the CIs."""
    fight = (params.get("results_report") or {}).get("fight") or {}
    best = verdict_pair(params)[0]
    bases = [b for b in str(fight.get("baselines", "")).split(",") if b in runs]
    if best not in runs or not bases:
        return []

    def r1(run: str, d: str, corrected: bool) -> float | None:
        h = runs[run].get("hubness")
        return (h["inverted_softmax_inductive"][d]["r1"] if h else None) if corrected else runs[run][d]["r1"]

    rows = [f"Best fragment recipe (`{best}`) − each baseline of the fight, mean R@1 in points; \"corrected\": both "
            "runs' scores under the inverted softmax with training-split statistics (docs/evaluation.md, \"Hubness\").",
            "", "| baseline | annotation | search | annotation, corrected | search, corrected |", "|---|---|---|---|---|"]
    for b in bases:
        cells = []
        for corrected in (False, True):
            for d in ("annotation", "search"):
                x, y = r1(best, d, corrected), r1(b, d, corrected)
                cells.append("—" if x is None or y is None else f"{x - y:+.1f}")
        rows.append(f"| `{b}` — {labels.get(b, b)} | " + " | ".join(cells) + " |")
    return rows + [""]


def fusion_rows(root: Path, study: str, params: dict[str, Any]) -> list[str]:
    """Markdown rows: each late fusion of ``params.yaml: fusion`` built in ``runs/<study>/`` (fraglib/fusion.py):
    its weight and validation R-sum, its test R@1 and the fusion minus each of its two runs (mean over units)."""
    rows = []
    for name in (params.get("fusion") or {}):
        f = root / "runs" / study / name / "metrics.json"
        if not f.exists():
            continue
        m = json.loads(f.read_text())
        parts = [json.loads((root / "runs" / study / r / "metrics.json").read_text()) for r in dict.fromkeys(m["runs"])]
        diff = " / ".join(f"{m['annotation']['r1'] - q['annotation']['r1']:+.1f}, {m['search']['r1'] - q['search']['r1']:+.1f}"
                          for q in parts)
        rows.append(f"| `{name}` | {' + '.join(f'`{r}`' for r in m['runs'])} | {m['weight']} | "
                    f"{m['val_rsum_by_weight'][str(m['weight'])]:.1f} | {m['annotation']['r1']:.1f} | "
                    f"{m['search']['r1']:.1f} | {diff} |")
    if not rows:
        return []
    return ["### Image search attempt: late fusion", "",
            "Two trained runs' standardised scores summed with the weight `w` of the first chosen on validation "
            "(docs/systems.md, \"Late fusion\"); a run with itself is the ensemble control. The fight report has the "
            "paired CIs; not replicated on unused splits.", "",
            "| fusion | runs | w | validation R-sum | annotation R@1 | search R@1 | minus each run (annotation, search) |",
            "|---|---|---|---|---|---|---|", *rows, ""]


SOCHER_TASKS = (("similarity", "sentence_similarity", "sentence similarity"), ("search", "image_search", "image search"),
                ("annotation", "describing_images", "describing images"))


def socher_tables(runs: dict[str, dict[str, Any]], params: dict[str, Any]) -> list[str]:
    """Markdown of Socher et al. 2014's Tables 1–3 on Pascal1K, ours (mean over the splits' training runs,
    from ``metrics.json``) beside the paper's as printed (``fraglib/reference/published_results.yaml``);
    the paper row -> run maps of ``params.yaml: results_report.socher_tables``. Mean ranks of 100 test
    items (lower is better), R@K in %. Empty when none of the runs is here."""
    from fraglib.reference import published

    paper = published()["socher2014_dtrnn"]
    maps = ((params.get("results_report") or {}).get("socher_tables") or {})
    out: list[str] = []
    for key, table, title in (("margin", "pascal1k_mean_rank", "Table 1 (margin loss, inner product): mean rank, ours (paper)"),
                              ("squared", "pascal1k_mean_rank_squared_loss_euclidean",
                               "Table 2 (squared loss, Euclidean distance): mean rank, ours (paper)")):
        rows = [(row, run) for row, run in (maps.get(key) or {}).items() if run in runs]
        if not rows:
            continue
        tasks = [t for t in SOCHER_TASKS if t[1] in paper[table]]
        out += [f"Socher et al. 2014, {title}:", "",
                "| paper row | run | " + " | ".join(t[2] for t in tasks) + " |", "|---|---|" + "---|" * len(tasks)]
        for row, run in rows:
            cells = []
            for ours, theirs, _ in tasks:
                v = (runs[run].get(ours) or {}).get("mean_rank")
                ref = paper[table][theirs].get(row)
                cells.append(("—" if v is None else f"{v:.1f}") + f" ({'—' if ref is None else f'{ref:g}'})")
            out.append(f"| {row} | `{run}` | " + " | ".join(cells) + " |")
        out.append("")
    rec = paper["pascal1k_recall"]
    rows = [(row, run) for row, run in (maps.get("margin") or {}).items() if run in runs and row in rec["image_search"]]
    if rows:
        out += ["Socher et al. 2014, Table 3 (margin loss): R@1 / R@5 / R@10 / mean rank, ours (paper):", "",
                "| paper row | run | image search | describing images |", "|---|---|---|---|"]
        for row, run in rows:
            cells = []
            for ours, theirs in (("search", "image_search"), ("annotation", "describing_images")):
                m, ref = runs[run][ours], rec[theirs][row]
                cells.append(" / ".join(f"{m[k]:.1f}" for k in ("r1", "r5", "r10", "mean_rank"))
                             + " (" + " / ".join(f"{ref[k]:g}" for k in ("r1", "r5", "r10", "mean_rank")) + ")")
            out.append(f"| {row} | `{run}` | " + " | ".join(cells) + " |")
        out.append("")
    return out


def peri_table(runs: dict[str, dict[str, Any]], params: dict[str, Any]) -> list[str]:
    """Markdown of Peri 2018's retrieval systems: our runs (R@1 / R@5 / R@10, both directions) beside the
    thesis's Flickr30K 1K-test row of the same system (``published_results.yaml``; the run -> row map of
    ``params.yaml: results_report.peri.thesis_rows``). Another dataset, ten times as many test images: the
    paper's column shows scale, it is not a target."""
    from fraglib.reference import published

    paper = published()["peri2018_thesis"]["flickr30k_1k_test"]
    thesis = ((params.get("results_report") or {}).get("peri") or {}).get("thesis_rows") or {}
    rows = [r for r in thesis if r in runs]
    if not rows:
        return []
    fmt = lambda m: " / ".join(f"{m[k]:.1f}" for k in ("r1", "r5", "r10"))     # noqa: E731
    out = ["Peri 2018: R@1 / R@5 / R@10, ours (the thesis on Flickr30K, 1,000 test images):", "",
           "| run | Peri's row | image annotation | image search |", "|---|---|---|---|"]
    for r in rows:
        ref = paper.get(thesis[r])
        cells = [fmt(runs[r][d]) + (f" ({fmt(ref[k])})" if ref else "") for d, k in (("annotation", "i2t"), ("search", "t2i"))]
        out.append(f"| `{r}` | {thesis[r]} | " + " | ".join(cells) + " |")
    return out + [""]


def peri_caption_table(root: Path, study: str, params: dict[str, Any]) -> list[str]:
    """Markdown: each generating run's captioning and paraphrasing (BLEU-4 / METEOR / CIDEr-D × 100, mean over
    seeds/splits, from its ``captions.json``) beside the thesis's Flickr30K row of the same decoder (STT-ATT for
    attention runs, STT otherwise; ``published_results.yaml``). Other data, 145k training captions against our
    4,000: the paper's number shows scale, it is not a target. Text-only runs caption nothing and are left out."""
    from fraglib.reference import published

    paper = published()["peri2018_thesis"]
    rows = []
    for p in sorted((root / "runs" / study).glob("*/captions.json")):
        entry = (params.get("runs") or {}).get(p.parent.name) or {}
        if entry.get("images") == "none":
            continue
        c = json.loads(p.read_text())
        ref = "stt_att_1024" if entry.get("similarity") == "attention" else "stt_1024"
        for task in ("captioning", "paraphrasing"):
            if task in c and ref in paper.get(f"{task}_flickr30k", {}):
                pub = paper[f"{task}_flickr30k"][ref]
                rows.append(f"| `{p.parent.name}` | {task} | {ref} | " + " | ".join(
                    f"{100 * c[task][k]:.1f} ({100 * pub[key]:.1f})" for k, key in
                    (("bleu4", "b4"), ("meteor", "meteor"), ("cider", "cider"))) + " |")
    if not rows:
        return []
    return ["Peri 2018, captions: ours (the thesis on Flickr30K); BLEU-4 / METEOR / CIDEr-D × 100:", "",
            "| run | task | Peri's row | BLEU-4 | METEOR | CIDEr-D |", "|---|---|---|---|---|---|", *rows, ""]


def working_forms(root: Path, studies: tuple[str, ...], params: dict[str, Any]) -> list[str]:
    """Markdown: each of Peri's systems in the form that collapses here and in its working form (the run
    pairs of ``params.yaml: results_report.peri.working_forms``), test R@1 per direction (mean over
    training runs) and CIDEr-D of generating runs; runs are looked up in ``runs/<study>/`` for each of
    ``studies`` in turn. Empty when no pair has both runs."""
    found: dict[str, tuple[dict[str, Any], Path]] = {}
    for study in studies:
        for run, m in study_runs(root, study).items():
            found.setdefault(run, (m, root / "runs" / study / run))
    pairs = ((params.get("results_report") or {}).get("peri") or {}).get("working_forms") or {}
    rows = []

    def cider(d: Path) -> str:
        f = d / "captions.json"
        return f"{100 * json.loads(f.read_text())['captioning']['cider']:.1f}" if f.exists() else "—"

    for before, after in pairs.items():
        if before not in found or after not in found:
            continue
        (mb, db), (ma, da) = found[before], found[after]
        cells = [f"{mb[d]['r1']:.1f} → {ma[d]['r1']:.1f}" for d in ("annotation", "search")]
        n = f"{len(mb.get('best_epoch', {}))} → {len(ma.get('best_epoch', {}))}"
        rows.append(f"| `{before}` → `{after}` | {n} | {' | '.join(cells)} | {cider(db)} → {cider(da)} |")
    if not rows:
        return []
    return ["Peri's systems, the form that collapses here → the working form (docs/systems.md, "
            "system `vse`; chosen on Pascal1K validation), test R@1 in % (mean over training runs):", "",
            "| runs | training runs | annotation R@1 | search R@1 | captions CIDEr-D |", "|---|---|---|---|---|", *rows, ""]


def results_markdown(root: str | Path = ".") -> str:
    from fraglib.results import run_labels

    root = Path(root)
    params = _params(root)
    labels = run_labels(params)
    out = ["# Results", "",
           "<!-- generated by `python -m fraglib.summary` from the committed run summaries; do not edit -->", "",
           "Every number below is read from `runs/<study>/<run>/metrics.json` (mean ± sd over training runs) and "
           "`runs/<study>/<run>/captions.json`. R@K in %; mean rank of the first correct item (lower is better). "
           "Rows are sorted by annotation + search R@1. For CIs with training noise, paired differences and the "
           "papers' numbers side by side, read the HTML reports (README, \"Reading the results\").", ""]
    for study, title, unit in STUDIES:
        runs = retrieval_runs(root, study, params)
        caps = caption_table(root, study)
        if not runs and not caps:
            continue
        out += [f"## {title}", "", *per_unit_coverage(root, study)]
        if study == "pascal1k":
            out += ["### The verdict", "", *verdict(runs, verdict_pair(params)), "", *fight_baselines(runs, params, labels),
                    *fusion_rows(root, study, params)]
            socher = socher_tables(study_runs(root, study), params)
            if socher:
                out += ["### Socher et al. 2014 beside the paper", "", *socher]
            peri = peri_table(runs, params) + peri_caption_table(root, study, params)
            if peri:
                out += ["### Peri 2018 beside the thesis", "", *peri]
        if study != "synthetic":
            lookup = ("synthetic_extended", "synthetic") if study == "synthetic_extended" else (study,)
            out += working_forms(root, lookup, params)
        if runs:
            out += [f"Retrieval ({unit} × replicates = training runs per row):", "", *retrieval_table(runs, labels), ""]
        out += hubness_table(runs, labels)
        if caps:
            out += ["Generated sentences (test split; pycocoevalcap, × 100):", "", *caps, ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs/results.md")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when the page is stale")
    args = ap.parse_args(argv)
    text = results_markdown(".")
    out = Path(args.out)
    if args.check:
        ok = out.exists() and out.read_text() == text
        print(f"{out}: {'current' if ok else 'stale: run python -m fraglib.summary'}")
        raise SystemExit(0 if ok else 1)
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
