"""The numbers README.md and docs/*.md quote, checked against the committed results they name.

    python -m fraglib_study facts              # every fact of README.md and docs/*.md: its quoted and committed value
    python -m fraglib_study facts --stale      # only those that differ (exit 1 when any does)

A number in prose names its source with an HTML comment right after it (invisible where Markdown is rendered):

    kCCA's annotation R@1 is 13.6<!-- fact: pascal1k/kcca_euclidean annotation.r1 -->
    ahead by +8.4 [+2.4, +14.3]<!-- fact: diff pascal1k fr_best kcca_tuned annotation r1 -->

* ``fact: FILE KEY``: the value at dotted ``KEY`` of the JSON ``FILE`` (a path from the project root; ``STUDY/RUN``
  for ``runs/STUDY/RUN/metrics.json``);
* ``fact: claims PAPER STUDY VERDICT``: how many of the paper's claim rows tested on ``STUDY`` (a dataset) got
  ``VERDICT`` (reproduced, same, not, reversed, undecided; :data:`fraglib_study.audit.claims.VERDICT_WORDS`; ``all``: every row), as
  docs/results.md counts them
  (:func:`fraglib_study.audit.claims.paper_counts`; PAPER: Karpathy, Socher or Peri; STUDY ``none``: not testable here);
* ``fact: claim A B STUDY TASK``: our difference (and CI) in the claims table's row comparing runs A − B on STUDY
  and TASK (its measure: the claim's, e.g. the R@K sum; :func:`fraglib_study.audit.claims.project_rows`);
* ``fact: aa STUDY before|after``: the percentage of the A/A check's comparisons on ``STUDY`` (a dataset) that call a
  run different from itself, with the test queries' error alone (before) or with the training noise (after), as
  docs/results.md prints it (:func:`fraglib_study.audit.claims.study_aa_rows`);
* ``fact: cost TARGET [on MACHINE]``: the minutes of ``make TARGET``'s record in ``benchmarks/costs.json``, the last
  one, or the last of a machine whose name contains MACHINE (``cost make test``, ``cost make on AMD EPYC (AVX2)``:
  name the instruction set too, so that another CPU of the model never stands for it;
  :mod:`fraglib_study.audit.costs`);
* ``fact: diff STUDY A B DIRECTION METRIC [CORRECTION]``: the paired difference A − B of ``runs/STUDY`` and its 95 %
  CI (:func:`fraglib_study.report.uncertainty.paired_differences`, 1,000 resamples, as the pages compute it), under a hubness
  correction (:data:`fraglib_study.report.corrections.CORRECTIONS`) when one is named. The quoted text is ``+8.4`` alone or with its
  CI, ``+8.4 [+2.4, +14.3]``.

A verdict in prose names its row the same way, the verdict word in asterisks right before the marker:

    MIL is *reversed*<!-- verdict: karpathy_t2_mil search pascal1k --> in image search

* ``verdict: CLAIM TASK STUDY``: the verdict of claim ``CLAIM``'s row on ``TASK`` in ``STUDY`` (the claims table's,
  after Holm; not a row shown beside). The quoted word is the verdict as the table prints it, or its short name
  (:data:`fraglib_study.audit.claims.VERDICT_WORDS`: reproduced, same, not, reversed, undecided, uninformative, ordering, …).

A quoted number matches when the committed value, rounded to the decimals it is printed with, is that number. A
marker in the prose keeps the number where a person reads it (a generated sentence would move it into code), and a
re-run study that moves a number makes ``tests/test_facts.py`` fail naming the file, line and both values.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fraglib.core.outputs import command
from fraglib_study.report.notebook import project_root

NUMBER = r"[−+-]?\d[\d,]*(?:\.\d+)?"
FACT = re.compile(
    rf"(?P<value>{NUMBER})(?:\s*%)?(?:\s*\[(?P<lo>{NUMBER}),\s*(?P<hi>{NUMBER})\])?\s*<!-- fact: (?P<key>[^>]*?) -->"
)
VERDICT = re.compile(r"\*{1,2}(?P<word>[^*]+?)\*{1,2}\s*<!-- verdict: (?P<key>[^>]*?) -->")


@dataclass(frozen=True)
class Fact:
    """One quoted number: where (``file``, ``line``), the text as quoted, the key and the committed text."""

    file: str
    line: int
    quoted: str
    key: str
    committed: str

    @property
    def ok(self) -> bool:
        return self.quoted == self.committed


def _number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _show(x: float, like: str) -> str:
    """``x`` printed as ``like`` is: its decimals, thousands commas, a sign when ``like`` has one (− when it uses −)."""
    body = f"{abs(x):,.{_decimals(like)}f}" if "," in like else f"{abs(x):.{_decimals(like)}f}"
    negative = x < 0  # −0.0: below zero by less than the last digit (a CI bound just under zero keeps its side)
    minus = "−" if "−" in like else "-"
    return (minus if negative else "+" if like[0] in "+−-" else "") + body


@lru_cache(maxsize=None)
def _run(folder: str):
    from fraglib_study.report.loading import load_run

    return load_run(folder)


def _json_value(root: Path, path: str, key: str) -> float:
    f = root / path
    if not f.is_file():
        raise ValueError(f"fact {path} {key}: no file {path}")
    value = json.loads(f.read_text(encoding="utf-8"))
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(f"fact {path} {key}: {path} has no {key!r} (stops at {part!r})")
        value = value[part]
    if not isinstance(value, int | float):
        raise ValueError(f"fact {path} {key}: {value!r} is not a number")
    return float(value)


def _difference(root: Path, words: list[str]) -> tuple[float, float, float]:
    from fraglib_study.report.corrections import CORRECTIONS, corrected_study
    from fraglib_study.report.pagetext import metric_label
    from fraglib_study.report.uncertainty import paired_differences

    if len(words) not in (5, 6):
        raise ValueError(f"fact diff {' '.join(words)}: expected STUDY A B DIRECTION METRIC [CORRECTION]")
    study, a, b, direction, metric, *correction = words
    runs = {r: _run(str(root / "runs" / study / r)) for r in (a, b)}
    if correction:
        if correction[0] not in CORRECTIONS:
            raise ValueError(
                f"fact diff {' '.join(words)}: correction {correction[0]!r} is none of {list(CORRECTIONS)}"
            )
        runs = corrected_study(runs, correction[0])
    from fraglib_study.params import read_params

    n_boot = read_params(root / "params.yaml")["evaluation"]["n_boot"]  # the CIs the reports print
    d = paired_differences(runs, [(a, b)], (direction,), (metric,), n_boot=n_boot)
    row = d[(d.direction == direction) & (d.metric == metric_label(metric))]
    if len(row) != 1:
        raise ValueError(f"fact diff {' '.join(words)}: no {direction} {metric} difference of {a} and {b}")
    return float(row["diff"].iloc[0]), float(row["lo"].iloc[0]), float(row["hi"].iloc[0])


@lru_cache(maxsize=4)
def _rows(root: Path) -> list:
    from fraglib_study.audit import claims
    from fraglib_study.params import read_params

    return claims.project_rows(root, read_params(root / "params.yaml"))


def _paper_counts(root: Path) -> dict[str, dict[str, dict[str, int]]]:
    from fraglib_study.audit import claims

    return claims.paper_counts(_rows(root))


def _claim_row(root: Path, words: list[str]) -> tuple[float, float, float]:
    """``claim A B STUDY TASK``: our difference and CI in the claims table's row of runs A − B on STUDY and TASK."""
    if len(words) != 4:
        raise ValueError(f"fact claim {' '.join(words)}: expected A B STUDY TASK")
    a, b, study, task = words
    found = [
        r.ours
        for r in _rows(root)
        if r.ours and (r.claim["runs"]["a"], r.claim["runs"]["b"], r.study, r.task) == (a, b, study, task)
    ]
    if len(found) != 1:
        raise ValueError(f"fact claim {' '.join(words)}: {len(found)} tested rows of the claims table match")
    return found[0]["diff"], found[0]["lo"], found[0]["hi"]


def _claims(root: Path, words: list[str]) -> float:
    from fraglib_study.audit.claims import PAPERS, VERDICT_WORDS

    if len(words) != 3 or words[0] not in PAPERS or words[2] not in (*VERDICT_WORDS, "all"):
        raise ValueError(
            f"fact claims {' '.join(words)}: expected PAPER ({', '.join(PAPERS)}) STUDY VERDICT "
            f"({', '.join(VERDICT_WORDS)}, or all)"
        )
    paper, study, verdict = words
    study = "" if study == "none" else study  # the claims no study here tests
    per = _paper_counts(root).get(paper, {})
    if study not in per:
        raise ValueError(f"fact claims {' '.join(words)}: no claim of {paper} is tested on {study!r}")
    return float(sum(per[study].values()) if verdict == "all" else per[study][VERDICT_WORDS[verdict]])


def verdict_of(root: Path, key: str, word: str) -> str:
    """``verdict: CLAIM TASK STUDY``: the verdict of that row of the claims table, printed as ``word`` is (the
    table's label, or its short name when ``word`` is one)."""
    from fraglib_study.audit.claims import VERDICT_WORDS

    words = key.split()
    if len(words) != 3:
        raise ValueError(f"verdict {key}: expected CLAIM TASK STUDY")
    claim, task, study = words
    found = [r for r in _rows(root) if not r.beside and (r.claim["id"], r.task, r.study) == (claim, task, study)]
    if len(found) != 1:
        raise ValueError(f"verdict {key}: {len(found)} rows of the claims table match")
    short = {v: k for k, v in VERDICT_WORDS.items()}
    return short[found[0].verdict] if word in VERDICT_WORDS else found[0].verdict


def _aa(root: Path, words: list[str]) -> float:
    from fraglib_study.audit import claims
    from fraglib_study.params import read_params

    if len(words) != 2 or words[1] not in ("before", "after"):
        raise ValueError(f"fact aa {' '.join(words)}: expected STUDY before|after")
    study, when = words
    rows = claims.study_aa_rows(
        read_params(root / "params.yaml"), study, root, [r for r in _rows(root) if r.study == study]
    )
    used = [r for r in rows if r[when] is not None]
    if not used:
        raise ValueError(f"fact aa {' '.join(words)}: no A/A pair on {study!r}")
    return 100.0 * sum(bool(r[when]) for r in used) / len(used)


def _cost(root: Path, words: list[str]) -> float:
    on = words.index("on") if "on" in words else len(words)
    target, machine = " ".join(words[:on]), " ".join(words[on + 1 :])
    f = root / "benchmarks" / "costs.json"
    records = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else []
    found = [r["seconds"] for r in records if r.get("target") == target and machine in str(r.get("machine", ""))]
    if not found:
        where = f" on a machine named {machine!r}" if machine else ""
        raise ValueError(f"fact cost {' '.join(words)}: {f.name} has no record of target {target!r}{where}")
    return found[-1] / 60.0


def check(match: re.Match, root: Path) -> str:
    """The committed value of one marker, printed as its quoted number is (and its CI, when one is quoted)."""
    words = match["key"].split()
    if not words:
        raise ValueError("an empty fact marker")
    if words[0] == "diff":
        diff, lo, hi = _difference(root, words[1:])
    elif words[0] == "cost":
        diff, lo, hi = _cost(root, words[1:]), None, None
    elif words[0] == "claim":
        diff, lo, hi = _claim_row(root, words[1:])
    elif words[0] == "claims":
        diff, lo, hi = _claims(root, words[1:]), None, None
    elif words[0] == "aa":
        diff, lo, hi = _aa(root, words[1:]), None, None
    else:
        if len(words) != 2:
            raise ValueError(f"fact {match['key']}: expected FILE KEY or diff …")
        path = words[0] if words[0].endswith(".json") else f"runs/{words[0]}/metrics.json"
        diff, lo, hi = _json_value(root, path, words[1]), None, None
    text = _show(diff, match["value"])
    if match["lo"] is not None:
        if lo is None:
            raise ValueError(f"fact {match['key']}: a CI is quoted, but the file holds one number")
        text += f" [{_show(lo, match['lo'])}, {_show(hi, match['hi'])}]"
    return text


def facts(root: str | Path | None = None, files: list[Path] | None = None) -> list[Fact]:
    """Every marked number of ``files`` (default README.md and docs/*.md under ``root``, the project root)."""
    root = Path(root) if root else project_root()
    files = files if files is not None else [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    root = root.resolve()
    files = [Path(f).resolve() for f in files]
    out = []
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            name = f.relative_to(root) if f.is_relative_to(root) else f
            for m in FACT.finditer(line):
                quoted = m["value"] + (f" [{m['lo']}, {m['hi']}]" if m["lo"] is not None else "")
                out.append(Fact(str(name), n, quoted, m["key"], check(m, root)))
            for m in VERDICT.finditer(line):
                word = " ".join(m["word"].split())
                out.append(Fact(str(name), n, word, f"verdict: {m['key']}", verdict_of(root, m["key"], word)))
    return out


@command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stale", action="store_true", help="list only the facts whose quoted number is not committed")
    args = ap.parse_args(argv)
    try:
        found = facts()
    except ValueError as exc:
        ap.error(str(exc))
    for f in found:
        if f.ok and args.stale:
            continue
        print(
            f"{'ok   ' if f.ok else 'STALE'} {f.file}:{f.line}  quoted {f.quoted}  committed {f.committed}  ({f.key})"
        )
    return 1 if any(not f.ok for f in found) else 0
