"""The report figures (fraglib_study.report.plots): every row of a difference names both sides, no legend over the data, a
training-curve panel holds few lines."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from fraglib_study.report import plots  # noqa: E402

RUN = "Our model: + Adam (lr 1e-2) + cosine + tuned words"
BASES = ("DeViSE-like, D = 2048 (five-split choice)", "Peri: VSE0, settings searched on validation")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _diffs(groups=None) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for b in BASES:
        for d in ("annotation", "search"):
            for g in groups or [None]:
                x = float(rng.normal(0, 5))
                row = dict(run=RUN, base=b, direction=d, metric="R@1", diff=x, lo=x - 3, hi=x + 3)
                rows.append({**row, "excludes_zero": abs(x) > 3, **({"group": g} if g else {})})
    return pd.DataFrame(rows)


def _labels(ax) -> list[str]:
    return [t.get_text().replace("\n", " ") for t in ax.get_yticklabels()]


def test_every_difference_row_names_its_run_and_its_baseline():
    fig = plots.differences_figure(_diffs())
    labels = _labels(fig.axes[0])  # both panels hold the same rows: one set of labels, on the left
    assert len(labels) == len(BASES) and fig.axes[1].get_shared_y_axes().joined(*fig.axes)
    for label, base in zip(labels, BASES):  # the first row on top: the table's order
        assert RUN.split(" + ")[0] in label and f"− {base}" in label and "R@1" in label
    assert all(ax.get_ylim()[0] > ax.get_ylim()[1] for ax in fig.axes)


def test_a_group_difference_row_names_its_group_and_both_runs_in_its_own_panel():
    diffs = _diffs(groups=["bicycle", "bus", "cat"])
    diffs = diffs[diffs.base == BASES[0]].reset_index(drop=True)
    diffs["diff"] = [1.0, 2.0, 3.0, 3.0, 2.0, 1.0]  # annotation: bicycle, bus, cat; search: the other way round
    diffs = diffs.assign(lo=diffs["diff"] - 1, hi=diffs["diff"] + 1).sort_values("diff", kind="stable")
    fig = plots.differences_figure(diffs.assign(metric="R@5"))
    assert len(fig.axes) == 2
    for ax, d in zip(fig.axes, ("annotation", "search")):
        want = diffs[diffs.direction == d]
        labels = _labels(ax)
        assert [x.split(":")[0] for x in labels] == list(want.group)  # each panel its own rows, in its order
        assert all(f"− {BASES[0]}" in x and "R@5" in x for x in labels)


def test_a_difference_table_without_a_base_column_keeps_the_old_labels():
    fig = plots.differences_figure(_diffs().drop(columns="base").iloc[:2])
    assert _labels(fig.axes[0]) == [f"{RUN}  R@1"]


def _legends(fig) -> list:
    return list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def _assert_legends_off_the_data(fig, n: int | None = None) -> None:
    fig.canvas.draw()
    legends = _legends(fig)
    assert legends and (n is None or len(legends) == n)
    box = fig.bbox
    for leg in legends:
        where = leg.get_window_extent()
        for ax in fig.axes:
            if ax.axison:
                assert not where.overlaps(ax.get_window_extent()), (leg, ax.get_title())
        assert box.x0 - 1 <= where.x0 and where.x1 <= box.x1 + 1 and box.y0 - 1 <= where.y0  # not cut off
        assert where.y1 <= box.y1 + 1


def _runs(n: int) -> list[str]:
    return [f"Peri: run {i}" if i % 2 else f"Our model: run {i}" for i in range(n)]


def test_the_hubness_figure_s_legend_is_below_the_plots():
    rng = np.random.default_rng(1)
    study = {r: {"occurrence": {d: [rng.poisson(10, 50)] for d in ("annotation", "search")}} for r in _runs(6)}
    _assert_legends_off_the_data(plots.occurrence_figure(study, list(study), {}), 1)


def test_the_collapse_figure_s_legend_is_below_the_plots():
    rows = [
        dict(
            run=r,
            seed=s,
            epoch=e,
            train_violating=1 / e,
            train_hardest_same_group=0.1 * e,
            train_same_group_negatives=0.05,
        )
        for r in _runs(5)
        for s in (0, 1)
        for e in range(1, 6)
    ]
    fig = plots.collapse_figure(pd.DataFrame(rows))
    _assert_legends_off_the_data(fig, 1)
    assert "dashed: share among all negatives (chance)" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_the_growth_figure_s_legend_is_below_the_plots():
    entries = [
        dict(
            name=f"growth_{c}_x{s}_s", images=1000 * s, value=float(s * (i + 1)), peak_rss_mb=100.0 * s, machine="AMD x"
        )
        for i, c in enumerate(f"step{k}" for k in range(24))
        for s in (1, 2, 4)
    ]
    fig = plots.growth_figure(entries)
    _assert_legends_off_the_data(fig, 1)
    styles = {(ln.get_color(), ln.get_linestyle()) for ln in fig.axes[0].get_lines()}
    assert len(styles) == 24  # every line its own colour and style


def test_the_fusion_and_breakdown_legends_are_off_the_data():
    _assert_legends_off_the_data(
        plots.fusion_figure({f"fusion {i}": {"0.0": 1.0, "0.5": 2.0 + i} for i in range(4)}), 1
    )
    groups = [f"cat{i}" for i in range(6)]
    sub = pd.DataFrame(
        [{"run": r, "group": g, "value": 10.0 * i + k} for i, r in enumerate(_runs(3)) for k, g in enumerate(groups)]
    )
    _assert_legends_off_the_data(plots.breakdown_figure(sub, _runs(3)[0], groups, "annotation", "category"), 2)


def _history(runs: list[str], epochs: int = 4) -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(run=r, seed=s, epoch=e, val_rsum=100.0 + i + e + s, train_cost=10.0 / e)
            for i, r in enumerate(runs)
            for s in (0, 1)
            for e in range(1, epochs + 1)
        ]
    )


def test_training_curves_are_faceted_a_few_runs_a_panel_with_the_legend_beside():
    runs = _runs(51)
    fig = plots.curves_figure(_history(runs), per_panel=8)
    rows = [ax for ax in fig.axes if ax.get_title().endswith("validation R@1+5+10, both directions")]
    drawn = [{ln.get_label() for ln in ax.get_lines()} for ax in rows]
    assert len(rows) == 8  # 26 "Our model" runs over 4 panels, 25 "Peri" runs over 4
    assert all(len(ax.get_legend().get_texts()) <= 8 for ax in fig.axes if ax.get_legend())
    assert sum(len(ax.get_legend().get_texts()) for ax in fig.axes if ax.get_legend()) == 51
    assert all(len(ax.get_lines()) <= 8 for ax in rows) and drawn
    _assert_legends_off_the_data(fig, 8)


def test_training_curves_follow_the_given_groups_and_show_one_fit_runs_as_points():
    runs = _runs(5)
    hist = pd.concat([_history(runs), _history(["kCCA fit"], epochs=1)], ignore_index=True)
    groups = {r: "fragment" if i < 2 else "vse" for i, r in enumerate(runs)}
    fig = plots.curves_figure(hist, groups=groups)
    titles = [ax.get_title().split(":")[0] for ax in fig.axes if "validation" in ax.get_title()]
    assert titles == ["fragment", "vse", "one fit each (no epochs)"]
    assert [p[1] for p in plots.curve_panels(runs, groups)] == [runs[:2], runs[2:]]
    assert [len(p[1]) for p in plots.curve_panels(_runs(15), {r: "vse" for r in _runs(15)})] == [8, 7]


def test_the_split_strips_jitter_the_same_at_every_render_and_leave_numpy_alone():
    """The fight page's per-split strip plot: the same points at every render (seaborn's jitter is drawn from a fixed
    seed), and numpy's global generator left where it was."""
    rows = [
        {"run": r, "split": s, "direction": d, "R@1": 10.0 * s + k}
        for r in ("a", "b")
        for s in range(3)
        for k in range(2)
        for d in ("annotation", "search")
    ]

    def points():
        g = plots.split_strips(rows)
        out = [c.get_offsets().copy() for ax in g.axes.flat for c in ax.collections]
        plt.close(g.figure)
        return np.concatenate(out)

    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first, second = points(), points()
    assert np.array_equal(first, second) and len(first) == len(rows)
    assert np.array_equal(np.random.get_state()[1], before)
    assert not np.allclose(first[:, 0], np.round(first[:, 0]))  # jittered: not all on the category centres
