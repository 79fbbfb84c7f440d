"""Run a parameterised notebook with papermill and render it to HTML (code folded away).

    python -m fraglib_study notebook notebooks/data_report.ipynb reports/data_report.html \
        -p data_dir data/synthetic -p n_show 12

The executed notebook is written beside the HTML (``reports/executed/<name>.ipynb``), the page's figures as
files in ``<page>_files/`` (``fig01.jpg``, ``fig02.png``, …: :func:`figures_of`), so no page carries its images
inside it; all are terminal outputs: no stage may depend on them (papermill stamps timings into them).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

import yaml

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, remove, updates, write_bytes, write_text

KERNEL = os.environ.get("FRAGLIB_KERNEL", "fraglib")
IOPUB_TIMEOUT = 120  # s a finished cell may wait for its last output (papermill: 4 s, too short on a busy machine)
TEMPLATES = Path(__file__).parents[1] / "templates"


def check_kernel(name: str = KERNEL) -> str:
    """Raise a clear error when the Jupyter kernel ``name`` is not registered."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if name not in specs:
        raise RuntimeError(
            f"Jupyter kernel {name!r} is not registered (found: {', '.join(sorted(specs)) or 'none'}). "
            f"Run `make env` or `python -m ipykernel install --sys-prefix --name {name}`, "
            f"or set FRAGLIB_KERNEL to one of the found kernels."
        )
    return name


def skip_iri_grammars() -> None:
    """Read ``rfc3987_syntax`` as not installed in this process, before nbformat imports jsonschema. When that
    optional package is present (jupyterlab's jupyter-events pulls it in), importing jsonschema compiles its
    38 Lark grammars for the "iri" format check, which notebook validation never uses: 2.2 s of the 2.9 s
    ``import papermill`` took here (0.8 s without it), once per rendered page. jsonschema imports the package
    under ``suppress(ImportError)``, so this is exactly the state of an environment without it."""
    import sys

    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: ``import`` raises ImportError


FIGURE_QUALITY = 75  # JPEG quality of a figure that is a photograph (or holds photographs) on a page
PHOTO_GAIN = 2  # a figure goes out as JPEG when that is at least this many times smaller than its PNG
PALETTE_ERROR = 1.0  # a plot goes out in 256 colours when that moves its pixels by at most this (0-255) on average
IMG_SRC = re.compile(r'src="data:image/(png|jpeg);base64,([A-Za-z0-9+/=\s]+)"')
FIGURE_FILE = re.compile(r"fig\d+\.(?:png|jpg)")  # the names figures_of writes (nothing else in the folder is touched)


def figures_folder(html: str | Path) -> Path:
    """Where a page's figures go: ``reports/x.html`` -> ``reports/x_files/`` (the explorer keeps its scripts there)."""
    html = Path(html)
    return html.with_name(f"{html.stem}_files")


def page_image(raw: bytes, mime: str, quality: int = FIGURE_QUALITY) -> tuple[str, bytes]:
    """A figure's file for the page: (extension, bytes). A JPEG stays as it is; a PNG is re-encoded both ways,
    optimised PNG (line art: exact) and JPEG at ``quality`` (alpha on white), and goes out as JPEG only when that
    is :data:`PHOTO_GAIN` times smaller than the smallest PNG (photographs), else as that PNG: its own, the optimised one
    or a 256-colour palette PNG on white (plots: 2.6-3.2× smaller), the palette used only where it moves the pixels
    by :data:`PALETTE_ERROR` on average at most."""
    import io

    import numpy as np
    from PIL import Image

    if mime == "jpeg":
        return "jpg", raw
    img = Image.open(io.BytesIO(raw))
    png = io.BytesIO()
    img.save(png, format="PNG", optimize=True)
    png_bytes = min(raw, png.getvalue(), key=len)
    rgb = img.convert("RGBA")
    flat = Image.new("RGB", rgb.size, "white")
    flat.paste(rgb, mask=rgb.getchannel("A"))
    pal = flat.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    error = np.abs(np.asarray(pal.convert("RGB"), float) - np.asarray(flat, float)).mean()
    if error <= PALETTE_ERROR:
        out = io.BytesIO()
        pal.save(out, format="PNG", optimize=True)
        png_bytes = min(png_bytes, out.getvalue(), key=len)
    jpg = io.BytesIO()
    flat.save(jpg, format="JPEG", quality=quality, optimize=True)
    if PHOTO_GAIN * len(jpg.getvalue()) <= len(png_bytes):
        return "jpg", jpg.getvalue()
    return "png", png_bytes


def figures_of(body: str, html: str | Path) -> tuple[str, dict[str, bytes]]:
    """``body`` with every embedded image (``src="data:image/…;base64,…"``) replaced by a file in
    :func:`figures_folder` (``fig01.jpg``, ``fig02.png``, … in page order; :func:`page_image`), and those files
    (name -> bytes): a page stays small however many photographs it shows, and the same body gives the same files."""
    import base64

    folder = figures_folder(html).name
    files: dict[str, bytes] = {}

    def swap(m: re.Match) -> str:
        ext, data = page_image(base64.b64decode(m[2]), m[1])
        name = f"fig{len(files) + 1:02d}.{ext}"
        files[name] = data
        return f'src="{folder}/{name}"'

    return IMG_SRC.sub(swap, body), files


def figure_files(html: str | Path) -> list[Path]:
    """The figure files of the page ``html`` now on disk (:func:`figures_of`'s names), sorted."""
    folder = figures_folder(html)
    return sorted(p for p in folder.glob("fig*") if FIGURE_FILE.fullmatch(p.name)) if folder.is_dir() else []


def write_figures(html: str | Path, files: dict[str, bytes]) -> None:
    """Put ``files`` (:func:`figures_of`) in the figures folder of ``html``, each written atomically; the page's
    earlier figures that are not among them are removed, and the folder too when it is left empty."""

    folder = figures_folder(html)
    for old in figure_files(html):
        if old.name not in files:
            remove(old)
    for name, data in files.items():
        write_bytes(folder / name, data)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def render_html(executed: str | Path, html: str | Path, at: str | Path | None = None) -> Path:
    """Render an executed notebook to an HTML page with code folded, its figures as files beside it
    (:func:`figures_of`, :func:`write_figures`), laid out (:func:`lay_out`) for where the page will live, ``at``
    (default ``html``; the figures' paths are relative, so they move with the page's folder); the same executed
    notebook gives the same bytes."""
    skip_iri_grammars()
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:  # papermill draws this cell's id at random: fixed, a re-run renders the same bytes
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell["id"] = "injected-parameters"
    lay_out(nb, at or html)
    exporter = HTMLExporter(template_name="fraglib_html", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(nb)
    body, files = figures_of(body, html)
    write_figures(html, files)
    write_text(html, contents(body))
    return Path(html)


HEADER = "fraglib-page-header"  # output metadata key: the display output that is the page's header
CONTENTS = "<!-- contents -->"  # where the table of contents goes (the end of the header), else before the first <h2>
DOCS_MENTION = re.compile(r"(?<![\w/`\[.-])(?<!\]\()docs/([\w-]+\.md)(?![\w`\]])")


def lay_out(nb: Any, html: str | Path) -> None:
    """What every page gets around its notebook's cells, in place: the output displayed with metadata
    ``{HEADER: true}`` (``fraglib_study.report.registry.start_page``) moved into a first Markdown cell; the page's
    ``<title>`` = its first ``# `` heading; each ``docs/<name>.md`` named in Markdown (cells and outputs)
    a link relative to ``html``; stderr streams (warnings naming build paths) left out of the page (the
    executed notebook keeps them)."""
    import nbformat

    header = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        header += [o for o in cell.outputs if o.get("metadata", {}).get(HEADER)]
        cell.outputs = [
            o
            for o in cell.outputs
            if not o.get("metadata", {}).get(HEADER) and not (o.output_type == "stream" and o.name == "stderr")
        ]
    if header:
        text = header[0].data["text/markdown"] + "\n\n" + CONTENTS
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(text, id="page-header"))
    docs = os.path.relpath(project_root() / "docs", Path(html).resolve().parent).replace(os.sep, "/")

    def link(text: str) -> str:
        return DOCS_MENTION.sub(lambda m: f"[docs/{m[1]}]({docs}/{m[1]})", text)

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = link(cell.source)
        for o in cell.get("outputs", []):
            if "text/markdown" in o.get("data", {}):
                o.data["text/markdown"] = link(o.data["text/markdown"])
    for line in (line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()):
        if line.startswith("# ") and line[2:].strip():
            nb.metadata["title"] = re.sub(r"[*_`]", "", line[2:].strip())
            break


H2 = re.compile(r'<h2 id="([^"]+)">(.*?)<a class="anchor-link"', re.S)


def contents(body: str) -> str:
    """``body`` with a table of contents (every ``<h2>``, linked) at :data:`CONTENTS`, else before its first
    ``<h2>``; without the mark with fewer than two."""
    heads = H2.findall(body)
    if len(heads) < 2:
        return body.replace(CONTENTS, "")
    items = "".join(f'<li><a href="#{i}">{re.sub(r"<[^>]+>", "", t)}</a></li>' for i, t in heads)
    nav = f'<nav class="fraglib-toc"><b>Contents</b><ol>{items}</ol></nav>\n'
    if CONTENTS in body:
        return body.replace(CONTENTS, nav, 1)
    at = body.index("<h2 id=")
    return body[:at] + nav + body[at:]


def run_notebook(
    notebook: str | Path,
    html: str | Path,
    parameters: dict[str, Any] | None = None,
    executed: str | Path | None = None,
    kernel: str | None = None,
    progress: bool = False,
    at: str | Path | None = None,
) -> Path:
    """Execute ``notebook`` with ``parameters`` (cwd = current directory) and write ``html``. ``at``: where the page
    will live when ``html`` is a staging path (default ``html``); it is passed to the notebook as parameter ``page``
    (its header: ``fraglib_study.report.registry.start_page``) and its links are made relative to it.

    An earlier page at ``html`` is removed first; when a cell fails, the page written is the failed
    run (papermill's red "An Exception was encountered" banner on top, the traceback in place) and
    the error is raised, so no page ever looks current after a failed run.
    """
    skip_iri_grammars()
    import tempfile

    import nbformat
    import papermill as pm

    html = Path(html)
    executed = executed_path(notebook, html, executed)
    remove(html)
    remove(executed)
    failed = None
    with tempfile.TemporaryDirectory() as scratch:  # papermill saves as it goes: the notebook appears once complete
        written = Path(scratch) / executed.name
        try:
            pm.execute_notebook(
                str(notebook),
                str(written),
                parameters={"page": str(at or html), **(parameters or {})},
                kernel_name=check_kernel(kernel or KERNEL),
                cwd=os.getcwd(),
                progress_bar=progress,
                iopub_timeout=IOPUB_TIMEOUT,
            )
        except pm.PapermillExecutionError as exc:  # the failed run is kept (and rendered), then raised
            failed = exc
        nb = nbformat.read(str(written), as_version=4)
    nb.metadata.papermill["output_path"] = str(executed)  # where papermill would have written it
    write_text(executed, nbformat.writes(nb))  # in papermill's own serialisation
    render_html(executed, html, at)
    if failed is not None:
        raise failed
    return html


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m fraglib_study notebook`` (``fraglib_study.pages.render`` reads dvc.yaml's commands with it)."""
    ap = argparse.ArgumentParser(prog="python -m fraglib_study notebook", description=__doc__.split("\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("html")
    ap.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="a notebook parameter; VALUE is read as YAML (numbers, true/false, lists)",
    )
    ap.add_argument("--executed", help="where to write the executed notebook")
    ap.add_argument("-k", "--kernel", default=None, help=f"Jupyter kernel (default {KERNEL!r})")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    return ap


def executed_path(notebook: str | Path, html: str | Path, executed: str | Path | None = None) -> Path:
    """Where the executed notebook of a page goes: ``executed`` or ``<html folder>/executed/<notebook>.ipynb``."""
    return Path(executed) if executed else Path(html).parent / "executed" / (Path(notebook).stem + ".ipynb")


def notebook_parameters(notebook: str | Path) -> list[str]:
    """The names the parameters cell of ``notebook`` assigns (papermill's inspection, ``page`` included: every
    page gets it), in the cell's order."""
    skip_iri_grammars()
    import papermill as pm

    return ["page", *(n for n in pm.inspect_notebook(str(notebook)) if n != "page")]


def parameters(pairs: list[list[str]]) -> dict[str, Any]:
    """``-p NAME VALUE`` pairs as notebook parameters, each VALUE read as YAML."""
    return {k: yaml.safe_load(v) for k, v in pairs}


@command
def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if not Path(args.notebook).is_file():
        ap.error(f"{args.notebook}: no such notebook")
    try:
        given = parameters(args.parameter)
    except yaml.YAMLError as exc:
        ap.error(f"-p: a VALUE is read as YAML and one is not valid YAML ({exc})".replace("\n", " "))
    unknown = sorted(set(given) - set(notebook_parameters(args.notebook)))
    if unknown:  # papermill only warns, and the page is rendered from the defaults: a typo must not pass
        ap.error(
            f"{args.notebook} has no parameter {', '.join(unknown)}; its parameters: "
            + ", ".join(notebook_parameters(args.notebook))
        )
    pages = [Path(args.html), executed_path(args.notebook, args.html, args.executed)]
    # the page's figures (figNN files of <page>_files/, committed beside it, not DVC outputs) are the page's own:
    # a page this command may write may have its figures replaced (write_figures touches no other file there)
    claim_cli(ap, pages, pages, args.overwrite, f"fraglib_study.report.notebook {args.notebook}")
    updates(figures_folder(args.html))
    out = run_notebook(args.notebook, args.html, given, args.executed, args.kernel, progress=True)
    print(f"wrote {out}")


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the working folder) holding ``params.yaml``
    and ``dvc.yaml``; the working folder itself when there is none."""
    here = Path(start or os.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "params.yaml").is_file() and (p / "dvc.yaml").is_file():
            return p
    return here


class MissingResults(RuntimeError):
    """A report's inputs are not built yet: the message names the command that builds them."""


def needs(ok: bool, what: str, command: str) -> None:
    """Stop a notebook at once, before any table, when ``ok`` is false: "<what> — build them with <command>"."""
    if not ok:
        raise MissingResults(f"{what}: build them with `{command}` (or pass other parameters)")


def at_project_root() -> Path:
    """Make the project root the working folder, so a notebook's default parameters (paths relative
    to the root) work when JupyterLab starts its kernel in ``notebooks/``."""
    root = project_root()
    os.chdir(root)
    return root


def note(*parts: Any) -> None:
    """A remark on the page (what ``print`` would write, joined by spaces) as italic Markdown, so no raw text output
    sits among the tables; every part is shown as written (``fraglib_study.report.pagetext.text``: no tag, link or Markdown
    of a path, label or caption acts), but a ``fraglib_study.report.pagetext.Safe`` one (``fragment("… `code` …", x)``)."""
    from IPython.display import Markdown, display

    from fraglib_study.report.pagetext import join

    display(Markdown(f"*{join(' ', parts).strip()}*"))


def shown_on(page: str, what: str) -> bool:
    """For pictures another page draws from the same figure data: when ``page`` (that page's path) is given, say in
    place that ``what`` is there and return True, so this page does not repeat them (images in git cost every clone);
    False when ``page`` is empty."""
    if page:
        from IPython.display import display

        from fraglib_study.report.pagetext import md

        display(md("*{}: not repeated here; the same figure data draw it on {:code}.*", what, page))
    return bool(page)


def section(ok: bool, what: str, command: str) -> bool:
    """For a section that needs inputs a clone of the repository lacks (data, features, checkpoints: DVC
    outputs): when ``ok`` is false, say in place what is missing and the command that builds it, and return
    False so the section is skipped; the rest of the page still renders from the committed results."""
    if not ok:
        from IPython.display import display

        from fraglib_study.report.pagetext import md

        display(
            md(
                "*This section needs {}, which this copy of the project does not hold: {:code} builds them.*",
                what,
                command,
            )
        )
    return ok
