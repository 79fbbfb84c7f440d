"""Text from data or settings is escaped by construction (fraglib_study.report.pagetext): the helper's guarantees on hostile
values, rendered by nbconvert's own Markdown renderer, and a static scan of every notebook's code cells that fails
on any ``Markdown(…)`` / ``HTML(…)`` built from anything but a string literal, on a template that is not one, on a
hand-made ``Safe``, and on a pandas ``Styler`` (which writes index labels into the page unescaped)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from fraglib_study.report.pagetext import Safe, code, figure_text, fragment, join, md, percent, plain, text

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "**bold**",
    "[a](javascript:alert(1))",
    "</script>",
    "a `b` c",
    "``",
    "# heading",
    "1. item",
    "- item",
    "> quote",
    "| a | b |",
    "~~struck~~",
    "$x$ and $$y$$",
    "\\begin{equation}x\\end{equation}",
    "back\\slash\\*",
    "&lt;already&gt; &amp;",
    "![i](http://example.com/x.png)",
    "<http://example.com>",
    "www.example.com",
    "line\n\n# new block\n    code",
    "  spaced  ",
    "tab\tbed",
    "<svg onload=alert(3)>",
    "{braces} {0} {x}",
]

# what a page is rendered with: nbconvert's Markdown filter (raw HTML passes through, links of any protocol)
markdown2html = pytest.importorskip("nbconvert.filters.markdown_mistune").markdown2html_mistune


def shown(html: str) -> str:
    """The text a browser shows of ``html`` (tags dropped, character references decoded, white space collapsed)."""
    import html as _html

    return re.sub(r"\s+", " ", _html.unescape(re.sub(r"<[^>]+>", "", html))).strip()


def tags(html: str) -> list[str]:
    """The tag names in ``html``."""
    return re.findall(r"<\s*/?\s*([a-zA-Z][\w-]*)", html)


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    "template, allowed",
    [
        ("{}", {"p"}),
        ("**{}**: x", {"p", "strong"}),
        ("*{}*", {"p", "em"}),
        ("a {:code} b", {"p", "code"}),
        ("**{}**  \ntext", {"p", "strong", "br"}),
        ("* item {}\n* other", {"ul", "li"}),
    ],
)
def test_a_value_shows_as_written_and_opens_no_tag(value, template, allowed):
    """Whatever a value holds, the rendered page shows exactly its characters (white space collapsed, as HTML
    shows it) and the only tags are the template's own."""
    html = markdown2html(fragment(template, value))
    assert set(tags(html)) <= allowed and not re.search(r"<[a-z]+\s+\w", html), html  # no tag or attribute of a value
    written = shown(markdown2html(fragment(template, "VALUE"))).replace("VALUE", value)
    assert shown(html) == re.sub(r"\s+", " ", written).strip(), html


def test_text_escapes_html_and_markdown_and_keeps_safe_values():
    assert text("<script>") == "&lt;script&gt;"
    assert text("\"x'") == "&quot;x&#x27;"
    assert text("**a**") == "\\*\\*a\\*\\*"
    assert text("a\n\nb\tc") == "a b c"
    assert text(" edge ") == "&#32;edge&#32;"
    assert text(3.5) == "3\\.5" and text(None) == "None"
    assert "<" not in text("<>" * 5) and ">" not in text("<>" * 5)
    done = text("<b>")
    assert isinstance(done, Safe) and text(done) == done  # escaped once, never twice
    assert code("a`b") == "<code>a\\`b</code>"


def test_fragment_fills_a_literal_template_with_escaped_values():
    assert fragment("**{}**: {} images", "<b>x</b>", 24) == "**&lt;b&gt;x&lt;/b&gt;**: 24 images"
    assert fragment("{:.1f} and {!r}", 0.25, "a_b") == "0\\.2 and &#x27;a\\_b&#x27;"
    assert fragment("{x:code}", x="run_dir") == "<code>run\\_dir</code>"
    inner = fragment("*{}*", "a*b")
    assert fragment("see {}", inner) == "see *a\\*b*"  # a fragment goes in once escaped, its Markdown kept
    assert join(", ", ["<a>", inner]) == "&lt;a&gt;, *a\\*b*"
    assert plain("run {:code} of {}", "full", "<x>") == "run `full` of <x>"
    assert md("**{}**", "<script>").data == "**&lt;script&gt;**"


def test_percent_writes_numbers_into_a_frame_pandas_escapes():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"recall": [0.5, float("nan")], "n": [1, 2]}, index=pd.Index(["<b>a</b>", "b"], name="<i>"))
    out = percent(frame, ["recall"])
    assert list(out["recall"]) == ["50.0%", "nan%"] and list(out["n"]) == [1, 2]
    page = out._repr_html_()
    assert "<b>" not in page and "<i>" not in page and "&lt;b&gt;a&lt;/b&gt;" in page


def test_figure_text_draws_a_dollar_as_written_not_as_tex():
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def draw(title: str) -> None:
        fig = Figure()
        FigureCanvasAgg(fig)
        fig.add_subplot().set_title(title)
        fig.canvas.draw()

    caption = "costs $\\foo$ and $5$"
    with pytest.raises(ValueError):  # what a caption like it did to a page's figure
        draw(caption)
    draw(figure_text(caption))
    assert figure_text("a $ b") == "a \\$ b"


# ---- the static scan of the notebooks ---------------------------------------------------------------------

RAW = {"Markdown", "HTML", "Javascript", "SVG", "Latex", "display_html", "display_markdown", "publish_display_data"}
TEMPLATED = {"md", "fragment", "plain"}  # fraglib_study.report.pagetext: the template, the first argument, is ours


def literal(node: ast.AST) -> bool:
    """A string written in the code: a constant, an f-string without fields, or a sum of those."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(v, ast.Constant) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal(node.left) and literal(node.right)
    return False


def called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def escape_off(node: ast.Call) -> bool:
    """The call passes ``escape=`` anything but a true constant (``to_html(escape=False)``, ``format(escape=None)``)."""
    return any(k.arg == "escape" and not (isinstance(k.value, ast.Constant) and k.value.value) for k in node.keywords)


def unescaped(source: str) -> list[str]:
    """The places in ``source`` (Python) where text could reach a page unescaped, each as "line: why"."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name, args = called(node), [*node.args, *(k.value for k in node.keywords)]
            if name in RAW and not all(literal(a) for a in args):
                bad.append(
                    f"{node.lineno}: {name}(…) of a value: use fraglib_study.report.pagetext.md(template, *values)"
                )
            if name in TEMPLATED and not (node.args and literal(node.args[0])):
                bad.append(f"{node.lineno}: {name}(…) with a template that is not a string literal")
            if name == "Safe":
                bad.append(f"{node.lineno}: Safe(…) by hand: only fraglib_study.report.pagetext makes page text")
            if escape_off(node):
                bad.append(f"{node.lineno}: escape=False")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "style"
            and not (isinstance(node.value, ast.Name) and node.value.id in ("plt", "matplotlib"))
        ):
            bad.append(f"{node.lineno}: a pandas Styler writes labels unescaped: display the frame (pagetext.percent)")
    return bad


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(cell index, source) of every code cell of the notebook ``path``, IPython magics blanked out."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [
        (i, re.sub(r"(?m)^\s*[%!].*$", "", "".join(c["source"])))
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
    ]


def test_the_scan_finds_the_old_text_report_cell():
    """The cell that ran a caption as script, and its like, are caught; their rewrites pass."""
    old = """
for n in shown:
    p = parsed[n]
    display(Markdown(f"**{p.text}**  \\n" + (", ".join(items) or "*(no triplet)*")))
display(Markdown(f"**{dataset_label}**: {len(ds.images)} images"))
display(HTML("<b>" + caption + "</b>"))
display(Markdown(title))
display(md(f"**{label}**"))
display(frame.style.format("{:.1%}"))
display(md("{}", Safe(caption)))
"""
    assert sorted(int(b.split(":")[0]) for b in unescaped(old)) == [4, 5, 6, 7, 8, 9, 10], unescaped(old)
    new = """
display(md("**{}**  \\n{}", p.text, join(", ", items) or fragment("*(no triplet)*")))
display(Markdown("**What each row is**: " "literal text"))
display(Markdown(f"literal" + "text"))
plt.style.use("default")
display(percent(frame))
"""
    assert unescaped(new) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_puts_unescaped_text_on_its_page(path):
    bad = [f"{path.name} cell {i} line {b}" for i, src in code_cells(path) for b in unescaped(src)]
    assert not bad, "text from data or settings must go through fraglib_study.report.pagetext:\n" + "\n".join(bad)


# the package's own Markdown / HTML displays of values: each reviewed, each escaping what it shows
REVIEWED = {
    ("fraglib_study/report/pagetext.py", "md"),  # the helper itself
    ("fraglib_study/report/notebook.py", "note"),  # every part through pagetext.join
    ("fraglib_study/report/registry.py", "start_page"),  # the header: the page registry's titles and the commit
}


def test_the_package_displays_values_only_where_reviewed():
    found = set()
    for path in sorted([*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and called(n) in RAW]
            if any(not all(literal(a) for a in n.args) for n in calls):
                found.add((path.relative_to(ROOT).as_posix(), fn.name))
        off = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and escape_off(n)]
        assert not off, f"{path}: escape turned off at lines {off}"
    assert found <= REVIEWED, (
        f"new displays of values (escape them with fraglib_study.report.pagetext, then list them): {found - REVIEWED}"
    )
