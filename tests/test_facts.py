"""Numbers quoted in README.md and docs/*.md (fraglib_study.audit.facts): each marked one is the committed value it names."""

from pathlib import Path

import pytest

from fraglib_study.audit.facts import facts

ROOT = Path(__file__).resolve().parents[1]
# what the docs quote: the docs, the results in git, the cost register and the settings naming the runs
QUOTED = ("README.md", "docs", "runs", "benchmarks", "params.yaml", "dvc.yaml", "studies")


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The project as committed (HEAD) where the docs' sources are concerned: the working tree itself when those
    paths hold no change, else HEAD's copy of them. The README's first command, run on a CPU the results were not
    made on, rewrites runs/ with that CPU's floats and adds its cost record; the docs quote what is committed (a
    re-run is compared with it by fraglib_study.audit.rerun), so the second command still checks the committed numbers."""
    import io
    import subprocess
    import tarfile

    git = ["git", "-C", str(ROOT)]
    status = subprocess.run([*git, "status", "--porcelain", "--", *QUOTED], capture_output=True, text=True)
    if status.returncode != 0 or not status.stdout.strip():  # not a git checkout, or nothing changed
        return ROOT
    out = tmp_path_factory.mktemp("head")
    archive = subprocess.run([*git, "archive", "HEAD", "--", *QUOTED], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def test_every_marked_number_in_the_docs_is_the_committed_value(committed):
    found = facts(committed)
    assert len(found) >= 20 and {f.file for f in found} >= {"README.md", "docs/systems.md"}
    stale = [
        f"{f.file}:{f.line} quotes {f.quoted}, the results hold {f.committed} ({f.key})" for f in found if not f.ok
    ]
    assert not stale, "numbers that are not the committed ones (python -m fraglib_study facts --stale):\n" + "\n".join(
        stale
    )


def test_a_number_that_drifts_from_its_source_is_caught(tmp_path):
    """Same source, three quotations: the right one, a wrong one, the right number at the wrong precision."""
    doc = tmp_path / "d.md"
    key = "pascal1k/kcca_euclidean annotation.r1"  # 13.6 in runs/pascal1k/kcca_euclidean/metrics.json
    doc.write_text(f"right 13.6<!-- fact: {key} -->, wrong 13.9<!-- fact: {key} -->, rounded 14<!-- fact: {key} -->\n")
    got = [(f.quoted, f.committed, f.ok) for f in facts(ROOT, [doc])]
    assert got == [("13.6", "13.6", True), ("13.9", "13.6", False), ("14", "14", True)]
    doc.write_text("a CI +9.9 [+1.0, +2.0]<!-- fact: diff pascal1k fr_lr01 kcca_tuned annotation r1 -->\n")
    (f,) = facts(ROOT, [doc])
    assert not f.ok and f.committed == "+8.4 [+2.4, +14.3]"


@pytest.mark.parametrize(
    "marker, error",
    [
        ("pascal1k/kcca_euclidean annotation.r99", "has no 'annotation.r99'"),
        ("pascal1k/no_such_run search.r1", "no file runs/pascal1k/no_such_run/metrics.json"),
        ("pascal1k/kcca_euclidean system", "is not a number"),
        ("diff pascal1k fr_lr01 kcca_tuned search r1 csls", "correction 'csls' is none of"),
        ("claims Nobody synthetic reproduced", "expected PAPER"),
        ("claims Peri synthetic won", "expected PAPER"),
        ("cost no-such-target", "has no record of target 'no-such-target'"),
    ],
)
def test_a_marker_that_names_nothing_is_an_error_naming_it(tmp_path, marker, error):
    doc = tmp_path / "d.md"
    doc.write_text(f"1.0<!-- fact: {marker} -->\n")
    with pytest.raises(ValueError, match=error):
        facts(ROOT, [doc])


def test_every_relative_link_in_the_docs_reaches_a_file():
    """A Markdown link in README.md or docs/*.md is relative to the file it is in (docs/runs.md once linked
    docs/x.md from inside docs/)."""
    import re

    broken = [
        f"{f.relative_to(ROOT)}:{n} -> {target}"
        for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        for target in re.findall(r"\]\(([^)\s]+)\)", line)
        if not re.match(r"[a-z]+:|#", target) and not (f.parent / target.split("#")[0]).exists()
    ]
    assert not broken, broken


def test_claim_counts_and_costs_are_read_from_their_sources(tmp_path, monkeypatch):
    """``claims PAPER STUDY VERDICT`` counts the paper's rows of that verdict (``all``: every row; study ``none``:
    not testable here); ``cost TARGET`` is make TARGET's minutes in benchmarks/costs.json."""
    import json

    import fraglib_study.audit.facts as F
    from fraglib_study.audit.claims import VERDICTS

    counts = {
        "Peri": {
            "synthetic": dict(zip(VERDICTS, (2, 2, 1, 2, 0, 0, 0, 0, 0))),
            "": dict(zip(VERDICTS, (0, 0, 0, 0, 0, 0, 0, 0, 1))),
        }
    }
    monkeypatch.setattr(F, "_paper_counts", lambda root: counts)
    (tmp_path / "benchmarks").mkdir()
    records = [{"target": "make test", "seconds": 1058.1, "machine": "AMD EPYC"}, {"target": "make test", "seconds": 600.0,
               "machine": "Intel Xeon"}, {"target": "make", "seconds": 60.0}]  # fmt: skip
    (tmp_path / "benchmarks" / "costs.json").write_text(json.dumps(records))
    doc = tmp_path / "d.md"
    doc.write_text(
        "2<!-- fact: claims Peri synthetic reversed --> of 7<!-- fact: claims Peri synthetic all -->, "
        "3<!-- fact: claims Peri synthetic not --> 1<!-- fact: claims Peri none untestable --> "
        "17.6<!-- fact: cost make test on AMD --> 10.0<!-- fact: cost make test --> 1.0<!-- fact: cost make -->\n"
    )
    got = [(f.quoted, f.committed) for f in F.facts(tmp_path, [doc])]
    assert got == [("2", "2"), ("7", "7"), ("3", "1"), ("1", "1"), ("17.6", "17.6"), ("10.0", "10.0"), ("1.0", "1.0")]
    doc.write_text("1.0<!-- fact: cost make on AMD -->\n")  # no record of that target from that machine
    with pytest.raises(ValueError, match="no record of target 'make' on a machine named 'AMD'"):
        F.facts(tmp_path, [doc])
    doc.write_text("1<!-- fact: claims Peri pascal1k reproduced -->\n")
    with pytest.raises(ValueError, match="no claim of Peri is tested on 'pascal1k'"):
        F.facts(tmp_path, [doc])


def test_a_bound_just_below_zero_keeps_its_sign():
    """A CI bound of −0.02 printed to one decimal is −0.0, not +0.0: the reader sees on which side of zero it is."""
    from fraglib_study.audit.facts import _show

    assert _show(-0.0215, "-0.0") == "-0.0"
    assert _show(-0.0215, "−0.0") == "−0.0" and _show(0.0215, "+0.0") == "+0.0" and _show(-1.26, "−1.3") == "−1.3"


def test_a_claim_marker_reads_its_row_of_the_claims_table(tmp_path, monkeypatch):
    """``claim A B STUDY TASK`` quotes our difference and CI of the one tested row of runs A − B on STUDY and TASK;
    an untested row or none is an error naming the marker."""
    import fraglib_study.audit.facts as F
    from fraglib_study.audit.claims import Row

    def row(a, b, study, task, ours):
        return Row({"runs": {"a": a, "b": b}}, task, study, 3.8, ours, "", "")

    rows = [
        row("full", "no_mil", "pascal1k", "search", {"diff": -3.04, "lo": -4.91, "hi": -1.12}),
        row("full", "no_mil", "pascal1k", "annotation", {"diff": -4.2, "lo": -8.5, "hi": 0.4}),
        row("full", "no_mil", "synthetic", "search", {"diff": 0.7, "lo": -0.4, "hi": 1.7}),
        row("full", "bow", "pascal1k", "search", None),
    ]
    monkeypatch.setattr(F, "_rows", lambda root: rows)
    doc = tmp_path / "d.md"
    doc.write_text(
        "−3.0 [−4.9, −1.1]<!-- fact: claim full no_mil pascal1k search --> +0.4<!-- fact: claim full no_mil synthetic search -->\n"
    )
    assert [(f.quoted, f.committed) for f in F.facts(tmp_path, [doc])] == [
        ("−3.0 [−4.9, −1.1]", "−3.0 [−4.9, −1.1]"),
        ("+0.4", "+0.7"),
    ]
    for marker in ("claim full bow pascal1k search", "claim full no_mil pascal1k"):
        doc.write_text(f"1.0<!-- fact: {marker} -->\n")
        with pytest.raises(ValueError, match="expected A B STUDY TASK|0 tested rows"):
            F.facts(tmp_path, [doc])


def test_a_verdict_marker_reads_its_row_of_the_claims_table(tmp_path, monkeypatch):
    """``verdict: CLAIM TASK STUDY`` checks the asterisked word before it against that row's verdict (its label or
    its short name); a row shown beside never answers; no row is an error naming the marker."""
    from dataclasses import replace

    import fraglib_study.audit.facts as F
    from fraglib_study.audit.claims import NOT_REPRODUCED, REVERSED, SAME_DIRECTION, Row

    base = Row({"id": "karpathy_t2_mil", "runs": {"a": "full", "b": "no_mil"}}, "search", "pascal1k", 7.8, None, "")
    rows = [
        replace(base, verdict=REVERSED),
        replace(base, verdict=SAME_DIRECTION, beside=True),
        replace(base, task="annotation", verdict=NOT_REPRODUCED),
    ]
    monkeypatch.setattr(F, "_rows", lambda root: rows)
    doc = tmp_path / "d.md"
    doc.write_text(
        "MIL is *reversed*<!-- verdict: karpathy_t2_mil search pascal1k --> and "
        "**reproduced**<!-- verdict: karpathy_t2_mil annotation pascal1k -->, "
        "*same direction, not significant* <!-- verdict: karpathy_t2_mil search pascal1k -->\n"
    )
    assert [(f.quoted, f.committed, f.ok) for f in F.facts(tmp_path, [doc])] == [
        ("reversed", "reversed", True),
        ("reproduced", "not", False),
        ("same direction, not significant", REVERSED, False),
    ]
    doc.write_text("*reversed*<!-- verdict: karpathy_t2_mil similarity pascal1k -->\n")
    with pytest.raises(ValueError, match="verdict karpathy_t2_mil similarity pascal1k: 0 rows"):
        F.facts(tmp_path, [doc])


def test_an_aa_marker_reads_the_rule_against_itself(tmp_path, monkeypatch):
    """``aa STUDY before|after``: the percentage of A/A comparisons called different, as docs/results.md prints it."""
    import fraglib_study.audit.claims as C
    import fraglib_study.audit.facts as F

    pairs = [{"before": True, "after": False}, {"before": True, "after": None}, {"before": False, "after": True}]
    monkeypatch.setattr(F, "_rows", lambda root: [])
    monkeypatch.setattr(C, "study_aa_rows", lambda params, data, root, part: pairs if data == "pascal1k" else [])
    (tmp_path / "params.yaml").write_text("{}\n")
    doc = tmp_path / "d.md"
    doc.write_text("67<!-- fact: aa pascal1k before --> % and 50<!-- fact: aa pascal1k after --> %\n")
    assert [(f.quoted, f.committed) for f in F.facts(tmp_path, [doc])] == [("67", "67"), ("50", "50")]
    doc.write_text("1<!-- fact: aa synthetic after -->\n")
    with pytest.raises(ValueError, match="no A/A pair on 'synthetic'"):
        F.facts(tmp_path, [doc])
