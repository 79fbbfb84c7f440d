"""The one registry of studies, derived from the ``dvc.yaml`` files, their human titles included.

A study is a pipeline: the root ``dvc.yaml`` (the default synthetic study, built by ``dvc repro``) and each
``studies/<folder>/dvc.yaml``. A pipeline without a ``python -m fraglib_study study`` stage trains nothing and is no
study. From the stages of its file come

* its name and runs folder: that stage's ``--out runs/<name>/<run>``;
* its dataset (that stage's ``--dataset``, else ``synthetic``) and unit: ``splits`` when its ``--dataset-dir``
  holds ``{seed}`` (one split per seed), else ``seeds``;
* its k-fold runs folder: the ``--out runs/<folds>/<run>`` of a ``python -m fraglib_study study --folds`` stage (the
  k-fold protocol beside the splits; None without one);
* its data folder: the ``--dataset-dir`` of its ``python -m fraglib.text fragments`` stage (None without one);
* its pages: its ``python -m fraglib_study notebook`` and ``fraglib_study.pages.explorer_page`` stages in file order, parameters as
  written (``${…}`` unresolved);
* its commands: ``dvc repro [<its dvc.yaml>]``, and the Makefile target that runs exactly that;
* its title, its data in a few words and its place among the studies: its study stage's ``meta: {title, detail,
  order}`` (``detail`` filled from its dataset's ``params.yaml`` section); a page's title and what it shows: its
  stage's ``meta: {title, shows}``. Without them the folder and file names show.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fraglib.core.config import read_yaml
from fraglib_study.report.notebook import HEADER, executed_path, parameters, parser, project_root

ROOT_PIPELINE = "dvc.yaml"


@dataclass(frozen=True)
class Page:
    """One report stage: ``stage`` its DVC address, ``notebook`` / ``html`` / ``executed`` paths relative to the
    project root, ``parameters`` the notebook's (as its command passes them)."""

    stage: str
    notebook: str
    html: str
    executed: str
    parameters: dict
    label: tuple[str, str] = ("", "")  # its stage's meta: (title, what it shows)

    @property
    def kind(self) -> str:
        """The notebook's name: ``results_report``, ``fight_report``, …; ``explorer`` for the explorer page."""
        return Path(self.notebook).stem if self.notebook else "explorer"

    @property
    def title(self) -> tuple[str, str]:
        """(title, what it shows): its stage's ``meta`` (the file name and "" without)."""
        return (self.label[0] or Path(self.html).stem, self.label[1])


@dataclass(frozen=True)
class Study:
    """One pipeline that trains runs; paths relative to the project root."""

    name: str  # runs/<name>/
    pipeline: str  # its dvc.yaml
    runs: str  # runs/<name>
    dataset: str  # the --dataset of its runs: synthetic | pascal1k | flickr8k
    unit: str  # seeds | splits: what one training run per row stands for
    data: str | None  # the folder its sentence fragments are built in
    pages: tuple[Page, ...]
    repro: str  # the dvc command that builds it
    make: str | None  # the Makefile target that runs ``repro``
    detail: str = ""  # its data in a few words (its study stage's meta.detail, filled in)
    folds: str | None = None  # runs/<name>_folds: its runs under the k-fold protocol
    heading_title: str = ""  # its study stage's meta.title
    order: float = float("inf")  # its study stage's meta.order: its place among the studies

    @property
    def title(self) -> str:
        return self.heading_title or self.name

    @property
    def heading(self) -> str:
        """Title, its data and the command that builds it: "Pascal1K, five stratified splits (`make pascal1k`)"."""
        return f"{self.title} ({self.detail + ', ' if self.detail else ''}`{self.make or self.repro}`)"

    def page(self, kind: str) -> Page | None:
        """Its first page of notebook ``kind``, or None."""
        return next((p for p in self.pages if p.kind == kind), None)


def stage_address(pipeline: str, stage: str) -> str:
    """DVC's name of a stage: ``name`` in the root dvc.yaml, ``studies/x/dvc.yaml:name`` elsewhere."""
    return stage if pipeline == ROOT_PIPELINE else f"{pipeline}:{stage}"


def page_of(stage: str, cmd: str, meta: dict | None = None) -> Page | None:
    """The page a stage command renders (``python -m fraglib_study notebook NOTEBOOK HTML -p …``, or the explorer's
    ``python -m fraglib_study explorer-page DATA HTML [--title T]``: no notebook, its data folder and title the parameters), else
    None. ``meta``: its stage's (``title``, ``shows``: the page's title and what it shows)."""
    meta = meta or {}
    label = (str(meta.get("title", "")), str(meta.get("shows", "")))
    words = shlex.split(cmd)
    if words[:4] == ["python", "-m", "fraglib_study", "explorer-page"]:
        ap = argparse.ArgumentParser(add_help=False)  # fraglib_study.pages.explorer_page's DATA HTML --title, read here
        for arg in ("data", "html", "--title"):
            ap.add_argument(arg, default="")
        args = ap.parse_known_args(words[4:])[0]
        parameters_ = {"data": args.data, **({"title": args.title} if args.title else {})}
        return Page(stage, "", args.html, "", parameters_, label)
    if words[:4] != ["python", "-m", "fraglib_study", "notebook"]:
        return None
    args = parser().parse_args(words[4:])
    return Page(
        stage,
        args.notebook,
        args.html,
        str(executed_path(args.notebook, args.html, args.executed)),
        parameters(args.parameter),
        label,
    )


def _commands(pipeline: Path) -> dict[str, tuple[str, dict]]:
    """Stage name -> (its command as written, its ``meta``) of a dvc.yaml (a ``foreach`` stage: its ``do``
    template's)."""
    stages = read_yaml(pipeline).get("stages") or {}
    out = {}
    for name, s in stages.items():
        body = s.get("do") or s
        cmd, meta = body.get("cmd", ""), body.get("meta") or {}
        out[name] = (cmd if isinstance(cmd, str) else " && ".join(cmd), meta if isinstance(meta, dict) else {})
    return out


def _options(cmd: str, *program: str) -> argparse.Namespace | None:
    """``--out`` / ``--dataset`` / ``--dataset-dir`` / ``--folds`` of a ``python -m <program…>`` command, else None."""
    words, head = shlex.split(cmd), ["python", "-m", *program]
    if words[: len(head)] != head:
        return None
    ap = argparse.ArgumentParser(add_help=False)
    for opt in ("--out", "--dataset", "--dataset-dir"):
        ap.add_argument(opt)
    ap.add_argument("--folds", action="store_true")
    return ap.parse_known_args(words[len(head) :])[0]


def make_target(makefile: Path, command: str) -> str | None:
    """``make <target>`` for the Makefile target whose recipe runs ``command`` as one of its ``&&`` steps (``$(BIN)/``
    aside: a study target runs the pool, then ``dvc repro`` of the same pipeline)."""
    if not makefile.is_file():
        return None
    target = None
    for line in makefile.read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and ":" in line and "=" not in line.split(":")[0]:
            target = line.split(":")[0].strip()
        elif (
            line.startswith("\t")
            and target
            and command in [c.strip().removeprefix("$(BIN)/") for c in line.split("&&")]
        ):
            return f"make {target}"
    return None


def read_study(root: Path, pipeline: str) -> Study | None:
    """The study of ``root / pipeline``, or None for a pipeline that trains no run."""
    stages = _commands(root / pipeline)
    cmds = {n: c for n, (c, _) in stages.items()}
    trains = [(n, o) for n, o in ((n, _options(c, "fraglib_study", "study")) for n, c in cmds.items()) if o and o.out]
    train_stage, train = next(((n, o) for n, o in trains if not o.folds), (None, None))
    folds = next((Path(o.out).parent.as_posix() for _, o in trains if o.folds), None)
    if train is None:
        return None
    data = next((o.dataset_dir for o in (_options(c, "fraglib.text", "fragments") for c in cmds.values()) if o), None)
    pages = tuple(p for p in (page_of(stage_address(pipeline, n), c, m) for n, (c, m) in stages.items()) if p)
    repro = "dvc repro" if pipeline == ROOT_PIPELINE else f"dvc repro {pipeline}"
    meta, name = stages[train_stage][1], Path(train.out).parent.name
    folder = Path(train.dataset_dir or "").parts
    dataset = train.dataset or (folder[1] if len(folder) > 1 else name)  # the default study's: its folder data/<name>
    return Study(
        name,
        pipeline,
        Path(train.out).parent.as_posix(),
        dataset,
        "splits" if "{seed}" in (train.dataset_dir or "") else "seeds",
        data,
        pages,
        repro,
        None if pipeline == ROOT_PIPELINE else make_target(root / "Makefile", repro),
        detail=_detail(root, str(meta.get("detail", "")), dataset),
        folds=folds,
        heading_title=str(meta.get("title", "")),
        order=float(meta.get("order", float("inf"))),
    )


def _detail(root: Path, detail: str, dataset: str) -> str:
    """A study's few words on its data (its meta.detail), its dataset's ``params.yaml`` section filled in ("" when
    that section leaves a key to its default: the heading then names no size rather than a wrong one)."""
    params = root / "params.yaml"
    section = (read_yaml(params).get(dataset) or {}) if params.is_file() else {}
    try:
        return detail.format(**section)
    except KeyError:
        return ""


def studies(root: str | Path = ".") -> list[Study]:
    """Every study of the project at ``root``: the root pipeline's and ``studies/*/dvc.yaml``'s, by their
    ``meta.order`` (those without last), then name."""
    root = Path(root)
    files = [ROOT_PIPELINE] * (root / ROOT_PIPELINE).is_file()
    files += sorted(p.relative_to(root).as_posix() for p in root.glob("studies/*/dvc.yaml"))
    found = [s for s in (read_study(root, f) for f in files) if s]
    return sorted(found, key=lambda s: (s.order, s.name))


def study_command(path: str | Path, root: str | Path | None = None) -> str:
    """The command that builds what a path of a study holds (``data/pascal1k/split{seed}``,
    ``runs/synthetic_extended``, …): its study's ``dvc repro``, the root pipeline's for a path of none."""
    root = Path(root) if root else project_root()
    path = Path(path)
    parts = (
        path.relative_to(root.resolve()) if path.is_absolute() and path.is_relative_to(root.resolve()) else path
    ).parts
    for s in studies(root):
        for folder in filter(None, (s.runs, s.data)):
            if parts[: len(Path(folder).parts)] == Path(folder).parts:
                return s.repro
    return "dvc repro"


# ----------------------------------------------------------------------------- every page's header
INDEX = "reports/index.html"  # the entry page every page links back to


def git(*args: str) -> str:
    """The output of ``git *args`` (stripped), or "" when git fails or is absent."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def page_header(page: str | Path, title: str, root: str | Path = ".") -> str:
    """The Markdown header of the page at ``page`` (a path; the registry's title for it, else ``title``): its
    study, the commit and date it is rendered from (and whether the tree differs from it outside ``reports/``),
    when its study's results were last committed, and links back to the index and to ``docs/``. A ``title``
    given by the caller (a notebook parameter) and the folder names are escaped (:mod:`fraglib_study.report.pagetext`); the
    registry's titles and headings are the project's own Markdown."""
    from fraglib_study.report.pagetext import code, text

    root = Path(root).resolve()
    where = Path(page).resolve() if page else None
    found = [(s, p) for s in studies(root) for p in s.pages if where == (root / p.html).resolve()]
    study, known = found[0] if found else (None, None)
    head = known.title if known else (text(title), "")
    here = where.parent if where else root / "notebooks"
    rel = lambda path: os.path.relpath(root / path, here).replace(os.sep, "/")  # noqa: E731
    commit = git("-C", str(root), "log", "-1", "--format=`%h` (%cs)") or "unknown"
    dirty = git("-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports")
    lines = [f"# {head[0]}", ""]
    if study:
        lines.append(f"**Study: {study.heading}**" + (f" — {head[1]}." if head[1] else ""))
        lines.append("")
    facts = [f"Rendered from commit {commit}" + (" with uncommitted changes" if dirty else "")]
    if study:  # the run folders the page reads (the extended page: two; the data pages: none)
        shown = known.parameters.get("runs_dir") or known.parameters.get("run_dir") or []
        for folder in [shown] if isinstance(shown, str) else shown:
            runs = git("-C", str(root), "log", "-1", "--format=`%h` (%cs)", "--", folder)
            where_ = code(f"{folder}/")
            facts.append(f"results in {where_} last committed at {runs}" if runs else f"no results in {where_}")
    lines += ["; ".join(facts) + ".", ""]
    lines.append(f"[← all reports]({rel(INDEX)}) · [the documentation]({rel('docs/README.md')})")
    return "\n".join(lines)


PAGE_DPI = 72  # a page's column is about 1,000 px wide: a 15-in figure drawn at 72 dpi fills it (at 100 dpi the browser
# scaled it down, and every clone stored twice the pixels shown)


def start_page(page: str = "", title: str = "Report") -> None:
    """Begin a report page, in its kernel: pandas shows every table cell whole (wrapped, never cut with "…"),
    figures are drawn at :data:`PAGE_DPI`, and the page's header (:func:`page_header`) is displayed; the HTML export puts it at the top of the page
    (:func:`fraglib_study.report.notebook.lay_out`)."""
    import matplotlib as mpl
    import pandas as pd
    from IPython.display import Markdown, display

    pd.set_option("display.max_colwidth", None)
    mpl.rcParams["figure.dpi"] = PAGE_DPI
    display(Markdown(page_header(page, title, project_root())), metadata={HEADER: True})
