"""``make reports``: every page re-rendered from what git holds, without training.

    python -m fraglib_study reports            # every page, then docs/results.md and reports/index.html
    python -m fraglib_study reports --list     # the pages and the stage that builds each

The pages and their parameters are the report stages of every ``dvc.yaml`` (a stage whose command is
``python -m fraglib_study notebook …``): the command DVC runs is the command run here, so the two never differ.
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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fraglib.core.outputs import command, updates, write_bytes
from fraglib_study.report.notebook import figure_files, figures_folder, project_root, write_figures
from fraglib_study.report.registry import INDEX, Page, page_of

STAGING = Path("build/reports")  # pages are rendered here first, moved into place when they succeed


def report_pages(root: str | Path = ".") -> list[Page]:
    """Every ``python -m fraglib_study notebook`` (and explorer) stage of every dvc.yaml under ``root``, commands resolved by DVC
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
    """Render ``page`` into ``staging``; on success move page and executed notebook into place. The explorer
    (no notebook) is built in place from its committed data, or kept when a clone lacks them."""
    if page.kind == "explorer":
        from fraglib_study.pages.explorer_page import build

        t0 = time.perf_counter()
        try:
            build(page.parameters["data"], page.html, page.parameters.get("title", ""))
        except FileNotFoundError as exc:  # the data stage has not run in this copy
            return Outcome(page, "kept", time.perf_counter() - t0, str(exc))
        return Outcome(page, "rendered", time.perf_counter() - t0)
    from fraglib_study.report.notebook import run_notebook, skip_iri_grammars

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
            write_figures(tmp_html, {})
            return Outcome(page, "kept", time.perf_counter() - t0, e.evalue)
        return Outcome(page, "failed", time.perf_counter() - t0, f"{e.ename}: {e.evalue} (page: {tmp_html})")
    figures = figure_files(tmp_html)
    write_figures(page.html, {f.name: f.read_bytes() for f in figures})  # the earlier render's others removed
    for src, dst in ((tmp_html, Path(page.html)), (tmp_exec, Path(page.executed))):
        write_bytes(dst, src.read_bytes())  # atomic: a full disk never leaves a cut page in place
        src.unlink()
    write_figures(tmp_html, {})  # the staged figures, now in place
    return Outcome(page, "rendered", time.perf_counter() - t0)


@command
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
    # its pages are the report stages' outputs (dvc.yaml): replacing them is what this command is for; STAGING its own
    updates(STAGING, *(x for p in pages for x in (p.html, p.executed, figures_folder(p.html))))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(render, pages))
    for o in outcomes:
        print(f"{o.status:8s} {o.page.html:48s} {o.seconds:6.1f} s  {o.detail}")
    failed = [o for o in outcomes if o.status == "failed"]
    if not args.no_index and not failed:
        from fraglib_study.pages import index, summary

        summary.main([])
        index.main(["--out", INDEX, "--overwrite"])
    n = {s: sum(o.status == s for o in outcomes) for s in ("rendered", "kept", "failed")}
    print(
        f"{n['rendered']} rendered, {n['kept']} kept (their inputs are DVC outputs this copy lacks), "
        f"{n['failed']} failed, in {time.perf_counter() - t0:.0f} s"
    )
    return 1 if failed else 0
