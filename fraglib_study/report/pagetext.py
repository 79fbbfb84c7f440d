"""Text from data or settings on a page, escaped by construction.

A report page is Markdown rendered by nbconvert, which passes raw HTML through and makes links of ``[a](b)``:
a caption, label, category, file name or path formatted into ``Markdown(f"…")`` could run as script in the page
or turn into a link. Every such value goes through this module instead:

    display(md("**{}**: {} images; parser {:code}", dataset_label, len(ds.images), header["parser"]))

The template (the first argument, a string literal we write) keeps its Markdown; every value put into it is
escaped (:func:`text`), so ``<script>``, ``"><img onerror=…>``, ``**bold**``, ``[a](javascript:…)``, backticks,
``|``, ``#``, ``$`` and ``\\`` in a value show literally, as written, and never open a tag, a link, a code span,
a heading, a list, a table or math. ``tests/test_page_text.py`` fails on any notebook that calls ``Markdown(…)``
or ``HTML(…)`` with anything but a string literal, or :func:`md` / :func:`fragment` with a template that is not one.

What :func:`text` guarantees for any value (``str(value)``): the result holds no ``<``, ``>``, ``"``, ``'`` and
no ``&`` but its own character references, so read as HTML (text or quoted attribute) it opens no tag, attribute
or entity; every ASCII punctuation character that Markdown gives a meaning (:data:`MARKDOWN`) is
backslash-escaped, and line breaks and tabs become spaces, so inside a Markdown paragraph (bold, italics and
inline ``<code>`` included) it renders as exactly its characters (runs of white space shown as one, as HTML does
anyway). A value is text only: never put one into a URL, an attribute name or a script.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Iterable
from typing import Any

from fraglib.core.outputs import unit_replicate, unit_seed

MARKDOWN = r"\`*_{}[]()#+-.!|~$:"  # backslash-escaped: the ASCII punctuation Markdown (and its math, tables,
# strikethrough, autolinks and definition lists in nbconvert) reads; & < > " ' are HTML-escaped instead
_SPECIAL = re.compile("([" + re.escape(MARKDOWN) + "])")
_SPACE = re.compile(r"\s+")


class Safe(str):
    """Page text that is already Markdown: a template of ours, or values escaped by this module. Not escaped
    again when put into a template (:func:`fragment`, :func:`join`, ``fraglib_study.report.notebook.note``)."""


def text(value: Any) -> Safe:
    """``str(value)`` escaped for Markdown and HTML (module docstring: what it guarantees); a :class:`Safe`
    value is returned as it is."""
    if isinstance(value, Safe):
        return value
    s = _SPACE.sub(" ", str(value))
    s = html.escape(_SPECIAL.sub(r"\\\1", s), quote=True)
    if s.startswith(" "):  # an edge space would end **bold** or *italics* early: a reference keeps it a space
        s = "&#32;" + s[1:]
    if s.endswith(" "):
        s = s[:-1] + "&#32;"
    return Safe(s)


def code(value: Any) -> Safe:
    """``value`` as inline code (``<code>…</code>``, what a Markdown code span renders), escaped like :func:`text`:
    a backtick in it cannot end the span."""
    return Safe(f"<code>{text(value)}</code>")


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "code":
            return code(value)
        if isinstance(value, Safe) and not format_spec:
            return value
        return text(format(value, format_spec))


class _Plain(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return f"`{value}`" if format_spec == "code" else format(value, format_spec)


_FORMATTER, _PLAIN = _Formatter(), _Plain()


def fragment(template: str, *args: Any, **kwargs: Any) -> Safe:
    """``template.format(*args, **kwargs)`` with every value escaped (:func:`text`); a field's format spec applies
    to the value first (``{:.1f}``, ``{!r}``), and the spec ``code`` shows it as inline code (:func:`code`). The
    template is Markdown written by us (a string literal); a :class:`Safe` value (an earlier fragment) goes in
    as it is."""
    return Safe(_FORMATTER.vformat(template, args, kwargs))


def plain(template: str, *args: Any, **kwargs: Any) -> str:
    """:func:`fragment`'s template filled in without escaping (``{:code}`` as a backtick code span): the same
    sentence for a terminal or an error message, where no page renders it."""
    return _PLAIN.vformat(template, args, kwargs)


def join(separator: str, values: Iterable[Any]) -> Safe:
    """``separator.join(values)`` with each value escaped (:func:`text`) unless :class:`Safe`; the separator is
    ours (a literal)."""
    return Safe(separator.join(text(v) for v in values))


def md(template: str, *args: Any, **kwargs: Any):
    """An ``IPython.display.Markdown`` of :func:`fragment` ``(template, *args, **kwargs)``: every value escaped,
    the template's Markdown kept."""
    from IPython.display import Markdown

    return Markdown(fragment(template, *args, **kwargs))


def percent(frame: Any, columns: Iterable[Any] | None = None, spec: str = "{:.1%}") -> Any:
    """A copy of the DataFrame ``frame`` with the numbers of ``columns`` (default: every column) written as
    ``spec`` (percentages), to display as it is: pandas' own HTML escapes every label and cell, where a ``Styler``
    (``frame.style.format(…)``) writes index labels and names into the page unescaped."""
    import numbers

    out = frame.copy()
    for c in list(out.columns) if columns is None else columns:
        out[c] = out[c].map(lambda x: spec.format(x) if isinstance(x, numbers.Number) else x)
    return out


def figure_text(value: Any) -> str:
    """``str(value)`` for a matplotlib text (title, label, tick, legend, caption under a picture): every ``$``
    escaped, so a caption, label or file name is drawn as written, never read as TeX (matplotlib's mathtext would
    garble ``$5 and $10`` and stop the whole figure at ``$\\foo$``)."""
    return str(value).replace("$", r"\$")


def ci_text(diff: float, lo: float, hi: float) -> str:
    """A difference and its 95 % CI as every page prints them: signed, one decimal (``+7.6 [+1.6, +14.0]``)."""
    return f"{diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def number_word(n: int) -> str:
    """``n`` as a heading writes it: a word to ten, digits above."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def _plural(n: int, word: str) -> str:
    return f"{number_word(n)} {word}{'s' * (n != 1)}"


def _test_sets(run: dict[str, Any]) -> tuple[str, int, tuple[int, int]]:
    """(test set word, how many, (fewest, most) trainings per test set) of a run, loaded (:func:`fraglib_study.report.loading.load_run`) or its
    summary (``metrics.json``): a k-fold run's folds (trained once per replicate each), else its splits (the
    groups of its units)."""
    units = list(run.get("units") or [str(s) for s in run["seeds"]])
    if run.get("protocol") == "folds":
        folds = int(run.get("folds") or len(run["seeds"]))
        per = len(units) if "strata" in run else len({unit_replicate(u) for u in units})  # loaded: one unit a replicate
        return "fold", folds, (per, per)
    groups = list(run.get("groups") or [unit_seed(u) for u in units])
    per = [groups.count(g) for g in dict.fromkeys(groups)]
    return "split", len(per), (min(per), max(per))


def protocol_text(study: dict[str, dict[str, Any]], runs: list[str] | None = None):
    """What a heading or caption over results of ``runs`` (default: all) of ``study`` (runs loaded, or their
    summaries) says about how they were tested and trained: the protocol ("ten folds", "five splits", "one split":
    the most runs' number of test sets, runs on fewer named) and the trainings per test set ("two trainings per
    fold", runs trained otherwise named; more than three: counted), e.g. "five splits, two trainings per split
    (`kcca_euclidean`: one)". Page text (:mod:`fraglib_study.report.pagetext`: run names as code, nothing else unescaped)."""
    names = [r for r in (study if runs is None else runs) if r in study]
    if not names:
        return fragment("no run")
    shape = {r: _test_sets(study[r]) for r in names}
    kinds = [shape[r][0] for r in names]
    kind = max(kinds, key=kinds.count)

    def per(r: str) -> str:
        lo, hi = shape[r][2]
        return number_word(lo) if lo == hi else f"{number_word(lo)} or {number_word(hi)}"

    def who(rs: list[str]):  # the runs of an exception: by name when three or fewer, else counted
        return join(", ", [code(r) for r in rs]) if len(rs) <= 3 else fragment("{} of the {} runs", len(rs), len(names))

    sets = [shape[r][1] for r in names]
    main_sets = max(sets, key=sets.count)
    fewer = [r for r in names if shape[r][1] != main_sets]
    counts = [per(r) for r in names]
    main = max(counts, key=counts.count)
    other = [r for r in names if per(r) != main]
    return fragment(
        "{}{}, {} training{} per {}{}",
        _plural(main_sets, kind),
        fragment(" ({} on {})", who(fewer), " or ".join(number_word(n) for n in sorted({shape[r][1] for r in fewer})))
        if fewer
        else "",
        main,
        "" if main == "one" else "s",
        kind,
        fragment(
            " ({})",
            join(
                "; ",
                [
                    fragment("{}: {}", who([r for r in other if per(r) == c]), c)
                    for c in dict.fromkeys(per(r) for r in other)
                ],
            ),
        )
        if other
        else "",
    )


def metric_label(name: str) -> str:
    """Column label of a metric: r1 -> R@1, mean_rank -> mean rank, median_rank -> median rank,
    median_rank_vsepp -> median rank (VSE++) (:func:`fraglib.run.evaluate.median_rank_vsepp`)."""
    return name.replace("_vsepp", " (VSE++)").replace("_", " ") if "rank" in name else name.replace("r", "R@", 1)
