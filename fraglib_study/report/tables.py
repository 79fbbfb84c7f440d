"""The tables of the committed results, each built once by one function; docs/results.md and the index render them.

A document is a list of blocks: a paragraph (a string in a little Markdown: `code` and **bold**), a
:class:`Heading` or a :class:`Table` (its cells in the same markup). :func:`markdown` and :func:`html` are the two
renderings of any block list. The builders read what git holds: ``runs/<study>/<run>/metrics.json`` (mean and sd
over training runs, written by ``fraglib_study.experiments.study``), ``captions.json`` / ``transfer_*.json`` (``fraglib_study.experiments.captions``),
fused runs' ``metrics.json`` (``fraglib_study.experiments.fusion``) and the papers' numbers as printed
(``fraglib_study/reference/published_results.yaml``); a builder with nothing to show returns an empty table or no blocks.
R@K in %, mean ranks of the first correct item, caption metrics × 100.
"""

from __future__ import annotations

import html as _html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from fraglib.metrics.retrieval import DIRECTIONS
from fraglib_study.reference import published
from fraglib_study.report.corrections import cell_text
from fraglib_study.report.loading import read_json, read_summary
from fraglib_study.report.pagetext import metric_label
from fraglib_study.report.uncertainty import mean_sd, paired_r1, seed_mean_cis

UNCONFIRMED = "A confirmation of the verdict on partitions the study never used is not yet part of the study."


@dataclass(frozen=True)
class Heading:
    """A heading of ``level`` (1: the page's title)."""

    level: int
    text: str


@dataclass(frozen=True)
class Table:
    """``header`` (columns,) and ``rows`` (rows, columns) of cells; falsy without rows."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def _repr_html_(self) -> str:  # a notebook shows the table the pages show (:func:`html`)
        return html([self])


Block = Union[str, Heading, Table]


@dataclass(frozen=True)
class Blocks:
    """``blocks`` shown in a notebook as the index shows them (:func:`html`: every value escaped)."""

    blocks: tuple[Block, ...]

    def _repr_html_(self) -> str:
        return html(list(self.blocks))


# ----------------------------------------------------------------------------- the two renderings
def markdown(blocks: list[Block]) -> str:
    """Markdown of ``blocks``, one blank line between two."""

    def one(b: Block) -> str:
        if isinstance(b, Heading):
            return f"{'#' * b.level} {b.text}"
        if isinstance(b, Table):
            head, *rows = (f"| {' | '.join(r)} |" for r in (b.header, *b.rows))
            return "\n".join([head, "|" + "---|" * len(b.header), *rows])
        return b

    return "\n\n".join(one(b) for b in blocks)


def inline(text: str) -> str:
    """HTML of one line of the markup: escaped, **bold** and `code`."""
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", _html.escape(text, quote=False))
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", text)


def html(blocks: list[Block]) -> str:
    """HTML of ``blocks``, one line each (a table on one line)."""

    def one(b: Block) -> str:
        if isinstance(b, Heading):
            return f"<h{b.level}>{inline(b.text)}</h{b.level}>"
        if isinstance(b, Table):
            return (
                "<table><tr>"
                + "".join(f"<th>{inline(c)}</th>" for c in b.header)
                + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in b.rows)
                + "</table>"
            )
        return f"<p>{inline(b)}</p>"

    return "\n".join(one(b) for b in blocks)


# ----------------------------------------------------------------------------- loading
def study_runs(folder: Path) -> dict[str, dict[str, Any]]:
    """Run -> its ``<folder>/<run>/metrics.json``, each checked (ValueError naming a damaged one)."""
    return {p.parent.name: read_summary(p) for p in sorted(Path(folder).glob("*/metrics.json"))}


def retrieval_runs(folder: Path, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`study_runs` without the text-only runs (image view ``none``: they retrieve nothing)."""
    text_only = {r for r, e in (params.get("runs") or {}).items() if (e or {}).get("images") == "none"}
    return {r: m for r, m in study_runs(folder).items() if r not in text_only}


def _units(m: dict[str, Any]) -> int:
    """Training runs behind a summary's means (a k-fold run read by :func:`fraglib_study.report.loading.load_run`
    too: its units are then its replicates, its training runs those of ``per_seed``)."""
    return len(m.get("per_seed") or m.get("units") or m["seeds"])


def _label(run: str, labels: dict[str, str]) -> str:
    return f"`{run}` — {labels.get(run, run)}"


# ----------------------------------------------------------------------------- the study's own tables
def coverage(folder: Path) -> list[Block]:
    """One sentence: how many runs have every training unit's ranks here (what the reports' bootstrap CIs need),
    and which do not (their summary alone is in git until the run is re-run)."""
    runs = study_runs(folder)
    if not runs:
        return []
    missing = [
        r
        for r, m in runs.items()
        if not all(
            (Path(folder) / r / "seeds" / f"seed{u}" / "ranks.json").exists()
            for u in m.get("units", m.get("seeds", []))
        )
    ]
    line = f"Per-query results of every training run are here for {len(runs) - len(missing)} of {len(runs)} runs"
    return [line + ("." if not missing else f"; summaries only: {', '.join(f'`{r}`' for r in missing)}.")]


Interval = tuple[float, float]


def _ci(cis: dict[tuple[str, ...], Interval] | None, *key: str) -> str:
    """`` [lo, hi]`` of ``cis[key]`` (a 95 % CI), or nothing when the table has no CIs (or none for ``key``: a
    task a run did not rank)."""
    return "" if cis is None or key not in cis else " [{:.1f}, {:.1f}]".format(*cis[key])


def retrieval(
    runs: dict[str, dict[str, Any]],
    labels: dict[str, str],
    metrics: tuple[str, ...] = ("r1", "r10", "mean_rank"),
    n_boot: int | None = None,
    sort: bool = True,
) -> Table:
    """One row per run (its summary, or its :func:`~fraglib_study.report.loading.load_run`), ``metrics`` in both
    directions as mean ± sd over training runs (:func:`~fraglib_study.report.uncertainty.mean_sd`), each followed by
    its 95 % CI ``[lo, hi]`` from ``n_boot`` bootstrap draws when given (loaded runs:
    :func:`~fraglib_study.report.uncertainty.seed_mean_cis`); sorted by annotation + search R@1 unless ``sort`` is
    false (then in the order of ``runs``)."""
    cis = seed_mean_cis(runs, metrics, n_boot) if n_boot else None

    def cell(r: str, d: str, k: str) -> str:
        mean, sd = mean_sd(runs[r], d, k)
        return f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None and _units(runs[r]) > 1 else "") + _ci(cis, r, d, k)

    order = sorted(runs, key=lambda r: (-(runs[r]["annotation"]["r1"] + runs[r]["search"]["r1"]), r)) if sort else runs
    return Table(
        ("run", "system", "training runs", *(f"{d} {metric_label(k)}" for d in DIRECTIONS for k in metrics)),
        tuple(
            (
                _label(r, labels),
                runs[r]["system"],
                str(_units(runs[r])),
                *(cell(r, d, k) for d in DIRECTIONS for k in metrics),
            )
            for r in order
        ),
    )


# the test-time hubness corrections as the tables name them (fraglib.metrics.hubness.METHODS, in that order)
CORRECTION_LABELS = {"inverted_softmax": "inv. softmax", "csls": "CSLS", "dis": "DIS", "nnn": "NNN"}
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}


def inductive_corrections(hub: dict[str, dict[str, Any]]) -> list[str]:
    """The corrections (:data:`CORRECTION_LABELS`) that at least one of ``hub`` (runs' metrics.json with
    ``hubness``) measured under the inductive protocol; results from before DIS and NNN have only the first two."""
    return [m for m in CORRECTION_LABELS if any(f"{m}_inductive" in x["hubness"] for x in hub.values())]


# the test k-occurrence's statistics (fraglib.metrics.hubness) as the tables name and round them ({k}: the k of N_k)
HUB_STATS = {
    "skewness": ("skew", ".2f"),
    "never": ("never %", ".1f"),
    "max": ("max N{k}", ".1f"),
    "top5_share": ("top-5% share", ".1f"),
}


def _measured(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs of ``runs`` that measured hubness (``hubness`` in their summary)."""
    return {r: m for r, m in runs.items() if m.get("hubness")}


def hubness_table(
    runs: dict[str, dict[str, Any]],
    labels: dict[str, str],
    stats: tuple[str, ...] = ("skewness", "never"),
    corrections: bool = True,
    sort: bool = True,
) -> Table:
    """The runs that measured hubness (``hubness`` in their summary, mean over training runs): per direction the
    test k-occurrence's ``stats`` (:data:`HUB_STATS`: skewness of N_k, % of candidates never in a top k, the
    largest N_k, % of the top-k slots held by the 5 % most-retrieved candidates), then, when ``corrections``, R@1
    plain / under each inductive correction any of them measured (:func:`inductive_corrections`); "—"
    where a run lacks a value; most skewed first unless not ``sort`` (then in the order of ``runs``). Annotation's
    candidates are sentences, search's are images; empty when no run measured hubness."""
    hub = _measured(runs)
    if not hub:
        return Table(("run",), ())
    k = int(next(iter(hub.values()))["hubness"]["k"])
    shown = inductive_corrections(hub) if corrections else []
    order = sorted(hub, key=lambda r: -max(hub[r]["hubness"][d]["skewness"] for d in DIRECTIONS)) if sort else hub

    def stat(r: str, d: str, key: str) -> str:
        return cell_text(hub[r]["hubness"].get(d, {}).get(key), HUB_STATS[key][1])

    def r1(r: str, d: str) -> str:
        h = hub[r]["hubness"]
        cells = [h[f"{m}_inductive"][d]["r1"] if f"{m}_inductive" in h else None for m in shown]
        return " / ".join(cell_text(v, ".1f") for v in [hub[r][d]["r1"], *cells])

    names = " / ".join(["plain", *(CORRECTION_LABELS[m] for m in shown)])
    return Table(
        (
            "run",
            *(f"{d} {HUB_STATS[key][0].format(k=k)}" for d in DIRECTIONS for key in stats),
            *((f"{d} R@1: {names}" for d in DIRECTIONS) if corrections else ()),
        ),
        tuple(
            (
                _label(r, labels),
                *(stat(r, d, key) for d in DIRECTIONS for key in stats),
                *((r1(r, d) for d in DIRECTIONS) if corrections else ()),
            )
            for r in order
        ),
    )


def hubness(runs: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[Block]:
    """:func:`hubness_table` (skewness, never %, R@1 under the inductive corrections; parameters chosen on
    validation; docs/evaluation.md "Hubness") with the sentence that reads it; no blocks when no run measured
    hubness."""
    hub = _measured(runs)
    if not hub:
        return []
    k, shown, table = (
        int(next(iter(hub.values()))["hubness"]["k"]),
        inductive_corrections(hub),
        hubness_table(hub, labels),
    )
    return [
        f"Hubness of the test scores (k = {k}; annotation's candidates are sentences, search's are images) and "
        f"R@1 under the {NUMBERS.get(len(shown), len(shown))} *inductive* corrections (banks from the training "
        "split, parameters chosen on "
        "validation). Paired CIs and the transductive protocol are in the results report.",
        table,
    ]


def caption_files(folder: Path) -> dict[str, Path]:
    """Row name ("`run` output") -> every ``captions.json`` / ``transfer_*.json`` under ``folder``
    (``fraglib_study.experiments.captions``)."""
    return {
        f"`{p.parent.name}` {p.stem}": p
        for p in sorted(Path(folder).glob("*/*.json"))
        if p.name != "metrics.json" and p.name.startswith(("captions", "transfer_"))
    }


CAPTION_METRICS = {
    **{f"bleu{n}": f"BLEU-{n}" for n in (1, 2, 3, 4)},
    **{"meteor": "METEOR", "rouge_l": "ROUGE-L", "cider": "CIDEr-D"},
}  # a caption record's metrics (fraglib_study.experiments.caption_record.METRICS) as the tables name them


def captions(
    files: dict[str, Path], cis: bool = False, metrics: tuple[str, ...] = ("bleu4", "meteor", "rouge_l", "cider")
) -> Table:
    """A row per task (captioning, paraphrasing) of each caption record of ``files`` (row name -> its JSON:
    :func:`caption_files`; a text-only run paraphrases only), ``metrics`` × 100, mean over seeds, each followed by
    its 95 % bootstrap CI over images / input captions (``<task>_ci``) when ``cis``."""
    rows = []
    for name, path in files.items():
        c = read_json(path)
        for task in (t for t in ("captioning", "paraphrasing") if t in c):
            ci = {(k,): [100 * x for x in v] for k, v in (c.get(f"{task}_ci") or {}).items()} if cis else None
            rows.append(
                (
                    name,
                    task,
                    str(len(c["seeds"])),
                    *(f"{100 * c[task][k]:.1f}" + _ci(ci, k) for k in metrics),
                )
            )
    return Table(("run, output", "task", "seeds", *(CAPTION_METRICS[k] for k in metrics)), tuple(rows))


def paraphrases(results: dict[tuple[str, str], dict[str, Any]]) -> Table:
    """A row per (trained on, scored on) of text-only paraphrasing summaries
    (:func:`~fraglib_study.report.loading.paraphrase_results`): each metric ×100, mean over seeds [95 % bootstrap CI
    over input captions], the scored tokens' ``<unk>`` share in the model's vocabulary (%), the input dependence
    (NLL with its own / another's input, nats per caption) and the seeds."""
    rows = []
    for (a, b), c in results.items():
        ci = {(k,): [100 * x for x in v] for k, v in (c.get("paraphrasing_ci") or {}).items()}
        d = c.get("input_dependence", {})
        rows.append(
            (
                a,
                b,
                *(f"{100 * c['paraphrasing'][k]:.1f}" + _ci(ci, k) for k in CAPTION_METRICS),
                f"{100 * c['unk_share']:.1f}" if c.get("unk_share") is not None else "",
                f"{d['paraphrasing_own']:.1f} / {d['paraphrasing_other']:.1f}" if "paraphrasing_own" in d else "",
                str(len(c["seeds"])),
            )
        )
    return Table(
        ("trained on", "scored on", *CAPTION_METRICS.values(), "<unk> %", "NLL own / other", "seeds"), tuple(rows)
    )


# ----------------------------------------------------------------------------- the fight (results_report.fight)
def verdict_pair(params: dict[str, Any]) -> tuple[str, str]:
    """The fight's verdict pair from ``params.yaml: results_report.fight``: the last step of the ladder (the
    recipe chosen on validation) and the first baseline (the strongest, chosen the same way)."""
    fight = (params.get("results_report") or {}).get("fight") or {}
    return (fight.get("ladder") or [""])[-1], (fight.get("baselines") or [""])[0]


def verdict_difference(folder: Path | None, pair: tuple[str, str]) -> dict[str, float] | None:
    """R@1 of the verdict pair's best recipe minus its baseline in ``folder`` per direction, paired as every page
    pairs (:func:`fraglib_study.report.uncertainty.paired_r1`); None without the folder or one of the two runs."""
    return paired_r1(folder, *pair) if folder else None


def verdict(folder: Path, pair: tuple[str, str], page: str, folds_folder: Path | None = None) -> list[Block]:
    """The verdict's point difference (:func:`verdict_difference`) over the five splits of ``folder``, and on the
    k-fold protocol where ``folds_folder`` (the study's k-fold runs) holds the pair, and the page with its
    uncertainty (``page``: the fight report); no blocks without the pair."""
    (best, base), d = pair, verdict_difference(folder, pair)
    if d is None:
        return []
    folds = verdict_difference(folds_folder, pair)
    if folds:
        fold_runs = {r: read_summary(Path(folds_folder) / r / "metrics.json") for r in pair}
        k = {fold_runs[r].get("folds", len(fold_runs[r].get("seeds") or [])) for r in pair}
        times = sorted({int(fold_runs[r].get("replicates", 1)) for r in pair})
        trained = " or ".join({1: "once", 2: "twice"}.get(t, f"{t} times") for t in times)
    on_folds = (
        f"On the {' or '.join(str(x) for x in sorted(k))} folds (every image tested once, each run trained {trained} "
        f"per fold; paired by training run): annotation {folds['annotation']:+.1f}, image search "
        f"{folds['search']:+.1f} points. "
        if folds
        else ""
    )
    return [
        f"Best fragment recipe (`{best}`) − DeViSE-like baseline (`{base}`), R@1 over the five splits, paired by "
        f'training run (docs/claims.md, "How differences are paired"): annotation {d["annotation"]:+.1f}, image '
        f"search {d['search']:+.1f} points. {on_folds}The fight report ({page}) gives the CIs "
        "(splits or folds, training runs, queries).",
        UNCONFIRMED,
    ]


def fight_baselines(
    folder: Path, params: dict[str, Any], labels: dict[str, str], protocol: str = "five splits"
) -> list[Block]:
    """The best fragment recipe minus each fight baseline present in ``folder`` (``results_report.fight.baselines``,
    then the runs after the papers, ``fight.after``), R@1 per direction paired by training run (:func:`fraglib_study.report.uncertainty.paired_r1`), plain and with both sides under
    the inductive inverted softmax (— where either measured no hubness), on ``protocol`` (the runs' test sets: "five
    splits", "ten folds"). Point differences only: the fight report has the CIs."""
    folder = Path(folder)
    best = verdict_pair(params)[0]
    fight = (params.get("results_report") or {}).get("fight") or {}
    bases = [
        b
        for b in [*(fight.get("baselines") or []), *(fight.get("after") or [])]
        if (folder / b / "metrics.json").is_file()
    ]
    if not (folder / best / "metrics.json").is_file() or not bases:
        return []

    def cells(b: str) -> tuple[str, ...]:
        out = []
        for correction in (None, "inverted_softmax_inductive"):
            d = paired_r1(folder, best, b, correction)
            out += ["—" if d is None else f"{d[x]:+.1f}" for x in DIRECTIONS]
        return tuple(out)

    return [
        f"Best fragment recipe (`{best}`) − each baseline of the fight on the {protocol}, R@1 in points, paired by "
        'training run; "corrected": both runs\' scores under the inverted softmax with training-split statistics '
        '(docs/evaluation.md, "Hubness").',
        Table(
            ("baseline", "annotation", "search", "annotation, corrected", "search, corrected"),
            tuple((_label(b, labels), *cells(b)) for b in bases),
        ),
    ]


def fusions(folder: Path, params: dict[str, Any]) -> list[Block]:
    """Each late fusion of ``params.yaml: fusion`` built in ``folder`` (fraglib_study/experiments/fusion.py): its weight and
    validation R-sum, its test R@1 and the fusion minus each of its two runs (mean over units)."""
    rows = []
    for name in params.get("fusion") or {}:
        f = Path(folder) / name / "metrics.json"
        if not f.exists():
            continue
        m = read_json(f)
        parts = [read_json(Path(folder) / r / "metrics.json") for r in dict.fromkeys(m["runs"])]
        diff = " / ".join(
            f"{m['annotation']['r1'] - q['annotation']['r1']:+.1f}, {m['search']['r1'] - q['search']['r1']:+.1f}"
            for q in parts
        )
        rows.append(
            (
                f"`{name}`",
                " + ".join(f"`{r}`" for r in m["runs"]),
                str(m["weight"]),
                f"{m['val_rsum_by_weight'][str(m['weight'])]:.1f}",
                f"{m['annotation']['r1']:.1f}",
                f"{m['search']['r1']:.1f}",
                diff,
            )
        )
    if not rows:
        return []
    return [
        "Two trained runs' standardised scores summed with the weight `w` of the first chosen on validation "
        '(docs/systems.md, "Late fusion"); a run with itself is the ensemble control. The fight report has the '
        "paired CIs; not replicated on unused splits.",
        Table(
            (
                "fusion",
                "runs",
                "w",
                "validation R-sum",
                "annotation R@1",
                "search R@1",
                "minus each run (annotation, search)",
            ),
            tuple(rows),
        ),
    ]


# ----------------------------------------------------------------------------- the papers' tables
SOCHER_TASKS = (
    ("similarity", "sentence_similarity", "sentence similarity"),
    ("search", "image_search", "image search"),
    ("annotation", "describing_images", "describing images"),
)
SOCHER_TABLES = (  # (the params.yaml socher_tables map, the paper's table, its title, its metrics)
    ("margin", "pascal1k_mean_rank", "Table 1 (margin loss, inner product): mean rank", ("mean_rank",)),
    (
        "squared",
        "pascal1k_mean_rank_squared_loss_euclidean",
        "Table 2 (squared loss, Euclidean distance): mean rank",
        ("mean_rank",),
    ),
    ("margin", "pascal1k_recall", "Table 3 (margin loss): R@K and mean rank", ("r1", "r5", "r10", "mean_rank")),
)


def socher(
    runs: dict[str, dict[str, Any]],
    params: dict[str, Any],
    n_boot: int | None = None,
    paper: bool = True,
) -> list[Block]:
    """Socher et al. 2014's Tables 1–3 (:data:`SOCHER_TABLES`): ours (mean over training runs; each followed by its
    95 % CI from ``n_boot`` bootstrap draws when given: loaded runs) beside the paper's as printed, in brackets, unless not
    ``paper`` (another dataset: ours alone); the paper row -> run maps of ``params.yaml:
    results_report.socher_tables``, the rows whose run is in ``runs`` (the others named below). Mean ranks of 100 test items (lower is
    better), R@K in %. No blocks when none of the runs is here."""
    printed = published()["socher2014_dtrnn"]
    maps = (params.get("results_report") or {}).get("socher_tables") or {}
    out: list[Block] = []
    for key, name, title, metrics in SOCHER_TABLES:
        table = printed[name]
        mapped = [
            (row, run)
            for row, run in (maps.get(key) or {}).items()
            if any(row in table[t] for _, t, _ in SOCHER_TASKS if t in table)
        ]
        rows = [(row, run) for row, run in mapped if run in runs]
        if not rows:
            continue
        absent = ", ".join(f"{row} (`{run}`)" for row, run in mapped if run not in runs)
        tasks = [t for t in SOCHER_TASKS if t[1] in table]
        shown = {run: runs[run] for _, run in rows}
        cis = seed_mean_cis(shown, metrics, n_boot, tuple(t[0] for t in tasks)) if n_boot else None

        def cell(run: str, ours: str, theirs: str, row: str, k: str) -> str:
            ranked = k in (runs[run].get(ours) or {}) or ours in (runs[run].get("ranks") or {})
            v = mean_sd(runs[run], ours, k)[0] if ranked else None
            ref = table[theirs].get(row)
            ref = ref.get(k) if isinstance(ref, dict) else ref
            text = "—" if v is None else f"{v:.1f}" + _ci(cis, run, ours, k)
            return text + (f" ({'—' if ref is None else f'{ref:g}'})" if paper else "")

        out += [
            f"Socher et al. 2014, {title}, ours" + (" (paper)" if paper else "") + ":",
            Table(
                (
                    "paper row",
                    "run",
                    *(f"{t[2]} {metric_label(k)}" if len(metrics) > 1 else t[2] for t in tasks for k in metrics),
                ),
                tuple(
                    (row, f"`{run}`", *(cell(run, o, t, row, k) for o, t, _ in tasks for k in metrics))
                    for row, run in rows
                ),
            ),
        ] + ([f"Not run here: {absent}."] if absent else [])
    return out


def peri(runs: dict[str, dict[str, Any]], params: dict[str, Any]) -> list[Block]:
    """Peri 2018's retrieval systems: our runs (R@1 / R@5 / R@10, both directions) beside the thesis's Flickr30K
    1K-test row of the same system (the run -> row map of ``params.yaml: results_report.peri.thesis_rows``).
    Another dataset, ten times as many test images: the paper's column shows scale, it is not a target."""
    paper = published()["peri2018_thesis"]["flickr30k_1k_test"]
    thesis = ((params.get("results_report") or {}).get("peri") or {}).get("thesis_rows") or {}
    rows = [r for r in thesis if r in runs]
    if not rows:
        return []
    fmt = lambda m: " / ".join(f"{m[k]:.1f}" for k in ("r1", "r5", "r10"))  # noqa: E731

    def cells(r: str) -> list[str]:
        ref = paper.get(thesis[r])
        return [
            fmt(runs[r][d]) + (f" ({fmt(ref[k])})" if ref else "")
            for d, k in (("annotation", "i2t"), ("search", "t2i"))
        ]

    return [
        "Peri 2018: R@1 / R@5 / R@10, ours (the thesis on Flickr30K, 1,000 test images):",
        Table(
            ("run", "Peri's row", "image annotation", "image search"),
            tuple((f"`{r}`", thesis[r], *cells(r)) for r in rows),
        ),
    ]


def peri_captions(folder: Path, params: dict[str, Any]) -> list[Block]:
    """Each generating run's captioning and paraphrasing (BLEU-4 / METEOR / CIDEr-D × 100, mean over seeds/splits,
    from its ``captions.json``) beside the thesis's Flickr30K row of the same decoder (STT-ATT for attention runs,
    STT otherwise). Other data, 145k training captions against our 4,000: the paper's number shows scale, it is
    not a target. Text-only runs caption nothing and are left out."""
    paper = published()["peri2018_thesis"]
    rows = []
    for p in sorted(Path(folder).glob("*/captions.json")):
        entry = (params.get("runs") or {}).get(p.parent.name) or {}
        if entry.get("images") == "none":
            continue
        c = read_json(p)
        ref = "stt_att_1024" if entry.get("similarity") == "attention" else "stt_1024"
        rows += [
            (
                f"`{p.parent.name}`",
                task,
                ref,
                *(
                    f"{100 * c[task][k]:.1f} ({100 * paper[f'{task}_flickr30k'][ref][key]:.1f})"
                    for k, key in (("bleu4", "b4"), ("meteor", "meteor"), ("cider", "cider"))
                ),
            )
            for task in ("captioning", "paraphrasing")
            if task in c and ref in paper.get(f"{task}_flickr30k", {})
        ]
    if not rows:
        return []
    return [
        "Peri 2018, captions: ours (the thesis on Flickr30K); BLEU-4 / METEOR / CIDEr-D × 100:",
        Table(("run", "task", "Peri's row", "BLEU-4", "METEOR", "CIDEr-D"), tuple(rows)),
    ]


def papers_printed_on(dataset: str) -> bool:
    """Whether Socher et al. printed their tables on ``dataset`` (a table of theirs in published_results.yaml is named
    ``<dataset>_…``): the data on which the papers' tables stand beside ours, Peri's systems' included."""
    return any("_" in str(k) and str(k).split("_")[0] == dataset for k in published()["socher2014_dtrnn"])


def papers(folder: Path, dataset: str, params: dict[str, Any]) -> list[tuple[str, list[Block]]]:
    """(title, blocks) of each paper's tables beside ours (:func:`socher`; :func:`peri` and :func:`peri_captions`)
    for the runs in ``folder``, when their ``dataset`` is the one the papers printed theirs on
    (:func:`papers_printed_on`); those with blocks."""
    if not papers_printed_on(dataset):
        return []
    parts = (
        ("Socher et al. 2014 beside the paper", socher(study_runs(folder), params)),
        ("Peri 2018 beside the thesis", peri(retrieval_runs(folder, params), params) + peri_captions(folder, params)),
    )
    return [(title, blocks) for title, blocks in parts if blocks]


def working_forms(folders: list[Path], params: dict[str, Any]) -> list[Block]:
    """Each of Peri's systems in the form that collapses here and in its working form (the run pairs of
    ``params.yaml: results_report.peri.working_forms``), test R@1 per direction (mean over training runs) and
    CIDEr-D of generating runs; a run is looked up in each of ``folders`` in turn (the first holding it wins).
    No blocks when no pair has both runs."""
    found: dict[str, tuple[dict[str, Any], Path]] = {}
    for folder in folders:
        for run, m in study_runs(folder).items():
            found.setdefault(run, (m, Path(folder) / run))
    pairs = ((params.get("results_report") or {}).get("peri") or {}).get("working_forms") or {}

    def cider(d: Path) -> str:
        f = d / "captions.json"
        return f"{100 * read_json(f)['captioning']['cider']:.1f}" if f.exists() else "—"

    rows = []
    for before, after in pairs.items():
        if before in found and after in found:
            (mb, db), (ma, da) = found[before], found[after]
            rows.append(
                (
                    f"`{before}` → `{after}`",
                    f"{len(mb.get('best_epoch', {}))} → {len(ma.get('best_epoch', {}))}",
                    *(f"{mb[d]['r1']:.1f} → {ma[d]['r1']:.1f}" for d in DIRECTIONS),
                    f"{cider(db)} → {cider(da)}",
                )
            )
    if not rows:
        return []
    return [
        "Peri's systems, the form that collapses here → the working form (docs/systems.md, "
        "system `vse`; chosen on Pascal1K validation), test R@1 in % (mean over training runs):",
        Table(("runs", "training runs", "annotation R@1", "search R@1", "captions CIDEr-D"), tuple(rows)),
    ]


# ----------------------------------------------------------------------------- the best per direction (the index)
Score = tuple[float, float, float]  # a run's mean, and the low and high ends of its 95 % CI


def tied_with_best(scores: dict[str, Score]) -> tuple[str, list[str]] | None:
    """(the best run, the runs tied with it) of ``scores`` (run -> (mean, CI low, CI high), higher is better): the
    best has the highest mean (equal means: the first run name in sort order); tied with it is every other run whose
    CI overlaps the best's (its low end ≤ the best's high end and its high end ≥ the best's low end), highest mean
    first. None without runs."""
    if not scores:
        return None
    order = sorted(scores, key=lambda r: (-scores[r][0], r))
    best, (_, lo, hi) = order[0], scores[order[0]]
    return best, [r for r in order[1:] if scores[r][1] <= hi and scores[r][2] >= lo]


def _score(s: Score) -> str:
    return f"{s[0]:.1f} [{s[1]:.1f}, {s[2]:.1f}]"


def best_per_direction(
    protocols: list[tuple[str, dict[str, dict[str, Score]]]], labels: dict[str, str], metric: str = "R@1"
) -> tuple[Table, Table]:
    """Two tables of each protocol's (title, direction -> run -> :data:`Score`) best run per direction
    (:func:`tied_with_best`): a compact one (protocol, direction, the best by its label and name, its score and CI,
    the runs tied with it by name, highest mean first, and the protocol's number of runs) and every best and tied
    run in full (label and name, score and CI), one row each."""
    short, full = [], []
    for title, by in protocols:
        for d in DIRECTIONS:
            found = tied_with_best(by.get(d) or {})
            if found is None:
                continue
            (best, tied), scores = found, by[d]
            short.append(
                (
                    title,
                    d,
                    f"**{labels.get(best, best)}** (`{best}`)",
                    _score(scores[best]),
                    f"{len(tied)}: " + ", ".join(f"`{r}`" for r in tied) if tied else "none",
                    str(len(scores)),
                )
            )
            full += [
                (title, d, "best" if r == best else "tied", _label(r, labels), _score(scores[r])) for r in (best, *tied)
            ]
    return (
        Table(
            ("protocol", "direction", "best run", f"{metric} [95% CI]", "tied with it (CIs overlap)", "runs"),
            tuple(short),
        ),
        Table(("protocol", "direction", "", "run", f"{metric} [95% CI]"), tuple(full)),
    )


def flagged(table: Table, runs: set[str] | dict[str, Any], mark: str = "†") -> Table:
    """``table`` with the rows of ``runs`` (a row's run: the first `code` name in its first cell, as :func:`retrieval`
    and :func:`captions` write it) marked ``mark`` and moved after the others, each part in its order."""

    def run(row: tuple[str, ...]) -> str:
        found = re.search(r"`([^`]*)`", row[0]) if row else None
        return found.group(1) if found else ""

    keep = tuple(r for r in table.rows if run(r) not in runs)
    moved = tuple((f"{mark} {r[0]}", *r[1:]) for r in table.rows if run(r) in runs)
    return Table(table.header, keep + moved)


def retrieval_by_test_set(
    runs: dict[str, dict[str, Any]],
    labels: dict[str, str],
    other: dict[str, int],
    current: int | None,
    rerun: str = "",
) -> list[Block]:
    """:func:`retrieval` with the runs of ``other`` (run -> the image queries of the test split it was scored on,
    not the ``current`` one) marked † and sorted after every current run (:func:`flagged`), and a footnote saying so
    (``rerun``: the command that re-scores them); the plain table when there are none."""
    stale = {r: n for r, n in other.items() if r in runs}
    if not stale:
        return [retrieval(runs, labels)]
    sizes = " or ".join(f"{n:,}" for n in sorted(set(stale.values())))
    return [
        flagged(retrieval(runs, labels), stale),
        f"† A run scored on an older test split of {sizes} images, not the current one"
        + (f" of {current:,}" if current else "")
        + f" ({len(stale)} here): not comparable with the unmarked rows, so listed after them; "
        + (f"`{rerun}` re-scores them." if rerun else "re-running the study re-scores them."),
    ]
