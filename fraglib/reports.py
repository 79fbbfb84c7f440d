"""``make reports``: every page re-rendered from what git holds, without training.

    python -m fraglib.reports            # every page, then docs/results.md and reports/index.html
    python -m fraglib.reports --list     # the pages and the stage that builds each

The pages and their parameters are the report stages of every ``dvc.yaml`` (a stage whose command is
``python -m fraglib.notebook …``): the command DVC runs is the command run here, so the two never differ.
The results pages (synthetic, extended synthetic, Pascal1K, the fight, Flickr8K) read the committed per-run
results (``runs/<study>/<run>/``); a section that needs data, features or checkpoints (DVC outputs a clone
lacks) says in place which command builds them. A page whose notebook stops at once with ``MissingResults``
(the data, text and vision pages, which are about data a clone does not hold) keeps its committed version,
and the command that builds its inputs is listed. Any other failure is an error: the failed page is left in
``build/reports/`` and the committed one is untouched.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fraglib.notebook import HEADER, project_root
from fraglib.outputs import write_bytes
from fraglib.studies import Page, page_of, studies

STAGING = Path("build/reports")  # pages are rendered here first, moved into place when they succeed
INDEX = "reports/index.html"  # the entry page every page links back to


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def page_header(page: str | Path, title: str, root: str | Path = ".") -> str:
    """The Markdown header of the page at ``page`` (a path; the registry's title for it, else ``title``): its
    study, the commit and date it is rendered from (and whether the tree differs from it outside ``reports/``),
    when its study's results were last committed, and links back to the index and to ``docs/``."""
    root = Path(root).resolve()
    where = Path(page).resolve() if page else None
    found = [(s, p) for s in studies(root) for p in s.pages if where == (root / p.html).resolve()]
    study, known = found[0] if found else (None, None)
    head = known.title if known else (title, "")
    here = where.parent if where else root / "notebooks"
    rel = lambda path: os.path.relpath(root / path, here).replace(os.sep, "/")  # noqa: E731
    commit = _git("-C", str(root), "log", "-1", "--format=`%h` (%cs)") or "unknown"
    dirty = _git("-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports")
    lines = [f"# {head[0]}", ""]
    if study:
        lines.append(f"**Study: {study.heading}**" + (f" — {head[1]}." if head[1] else ""))
        lines.append("")
    facts = [f"Rendered from commit {commit}" + (" with uncommitted changes" if dirty else "")]
    if study:  # the run folders the page reads (the extended page: two; the data pages: none)
        shown = known.parameters.get("runs_dir") or known.parameters.get("run_dir") or []
        for folder in [shown] if isinstance(shown, str) else shown:
            runs = _git("-C", str(root), "log", "-1", "--format=`%h` (%cs)", "--", folder)
            facts.append(f"results in `{folder}/` last committed at {runs}" if runs else f"no results in `{folder}/`")
    lines += ["; ".join(facts) + ".", ""]
    lines.append(f"[← all reports]({rel(INDEX)}) · [the documentation]({rel('docs/README.md')})")
    return "\n".join(lines)


def start_page(page: str = "", title: str = "Report") -> None:
    """Begin a report page, in its kernel: pandas shows every table cell whole (wrapped, never cut with "…") and
    the page's header (:func:`page_header`) is displayed; the HTML export puts it at the top of the page
    (:func:`fraglib.notebook.lay_out`)."""
    import pandas as pd
    from IPython.display import Markdown, display

    pd.set_option("display.max_colwidth", None)
    display(Markdown(page_header(page, title, project_root())), metadata={HEADER: True})


def report_pages(root: str | Path = ".") -> list[Page]:
    """Every ``python -m fraglib.notebook`` stage of every dvc.yaml under ``root``, commands resolved by DVC
    (``${…}`` from params.yaml), in dvc.yaml order. Raises ValueError for a report stage whose working folder
    is not the project root (its paths would mean something else here)."""
    from dvc.repo import Repo

    root = Path(root).resolve()
    pages = []
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:
            page = page_of(stage.addressing, stage.cmd if isinstance(stage.cmd, str) else " ".join(stage.cmd or []))
            if page is None:
                continue
            if Path(stage.wdir).resolve() != root:
                raise ValueError(f"{stage.addressing}: report stages run in the project root (wdir), not {stage.wdir}")
            pages.append(page)
    return pages


@dataclass
class Outcome:
    page: Page
    status: str  # "rendered" | "kept" (inputs absent: the committed page stays) | "failed"
    seconds: float
    detail: str = ""  # kept: the notebook's MissingResults message; failed: the error and the failed page


def render(page: Page, staging: Path = STAGING) -> Outcome:
    """Render ``page`` into ``staging``; on success move page and executed notebook into place."""
    from fraglib.notebook import run_notebook, skip_iri_grammars

    skip_iri_grammars()
    import papermill as pm

    t0 = time.perf_counter()
    tmp_html = staging / page.html
    tmp_exec = staging / page.executed
    try:
        run_notebook(page.notebook, tmp_html, page.parameters, tmp_exec, at=page.html)
    except pm.PapermillExecutionError as e:
        if e.ename == "MissingResults":  # nothing to show: no stopped page is left behind
            tmp_html.unlink(missing_ok=True)
            tmp_exec.unlink(missing_ok=True)
            return Outcome(page, "kept", time.perf_counter() - t0, e.evalue)
        return Outcome(page, "failed", time.perf_counter() - t0, f"{e.ename}: {e.evalue} (page: {tmp_html})")
    for src, dst in ((tmp_html, Path(page.html)), (tmp_exec, Path(page.executed))):
        write_bytes(dst, src.read_bytes())  # atomic: a full disk never leaves a cut page in place
        src.unlink()
    return Outcome(page, "rendered", time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list the pages and their stages, render nothing")
    ap.add_argument("--only", default="", help="comma-separated substrings of stage addresses or page paths to render")
    ap.add_argument("--jobs", type=int, default=2, help="pages rendered side by side (each in its own kernel)")
    ap.add_argument("--no-index", action="store_true", help="skip docs/results.md and reports/index.html")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: must be at least 1")
    os.chdir(project_root())
    pages = report_pages()
    if args.only:
        keys = [k for k in args.only.split(",") if k]
        pages = [p for p in pages if any(k in p.stage or k in p.html for k in keys)]
        if not pages:
            ap.error(f"--only {args.only!r}: no report stage matches")
    if args.list:
        for p in pages:
            print(f"{p.html:48s} {p.stage}")
        return 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(render, pages))
    for o in outcomes:
        print(f"{o.status:8s} {o.page.html:48s} {o.seconds:6.1f} s  {o.detail}")
    failed = [o for o in outcomes if o.status == "failed"]
    if not args.no_index and not failed:
        from fraglib import index, summary

        summary.main([])
        index.main(["--out", INDEX, "--overwrite"])
    n = {s: sum(o.status == s for o in outcomes) for s in ("rendered", "kept", "failed")}
    print(
        f"{n['rendered']} rendered, {n['kept']} kept (their inputs are DVC outputs this copy lacks), "
        f"{n['failed']} failed, in {time.perf_counter() - t0:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
