"""Every page kind rendered from hostile data and settings, opened in headless Chromium: captions, category labels,
image file names, the dataset's folder, its label and the runs' labels hold script tags, event handlers, a
``javascript:`` link, Markdown and ``</script>``. No script may run (each payload would set ``window.pwned`` or the
title, or open a dialog) and the hostile text must show as text (fraglib_study.report.pagetext; tests/test_page_text.py scans
the notebooks statically). Chromium and Playwright as in tests/test_browser.py (skips without them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_browser import browser  # noqa: F401  (the module-scoped Chromium fixture)

from test_dvc_deps import ROOT

pytestmark = pytest.mark.slow

# every payload would set window.pwned (or the title) if it ran
SCRIPT = "<script>window.pwned='script'</script>"
CAPTIONS = [
    SCRIPT,
    '"><img src=x onerror="window.pwned=\'img\'">',
    "<svg onload=window.pwned='svg'></svg> **bold** _it_ `tick` # hash | pipe",
    "[click](javascript:window.pwned='link') ![i](x.png) </script><script>document.title='PWNED'</script>",
    "costs $\\frac$ and $\\foo$ \\ \\begin{x}",
]
CATEGORIES = ["<img src=x onerror=window.pwned='category'>", "</script><script>window.pwned='cat'</script> $\\foo$"]
FOLDER = "<img src=x onerror=window.pwned='folder'>"  # a path component: no slash
LABEL = "<script>window.pwned='label'</script> **Label** [x](javascript:window.pwned='label-link')"


def file_name(n: int) -> str:
    return f"<img src=x onerror=window.pwned='file{n}'> {n:03d}.png"


def make_hostile(folder: Path) -> None:
    """Turn the synthetic benchmark in ``folder`` hostile, in place: every caption gets the payloads appended (the
    ground truth's character spans stay right), every image a hostile category and file name."""
    from fraglib.data.dataset import tokenize

    data = json.loads((folder / "dataset.json").read_text())
    truth = json.loads((folder / "ground_truth.json").read_text())
    raw, extra = {}, " ".join(CAPTIONS)
    for n, (im, rec) in enumerate(zip(data["images"], truth["images"])):
        name = file_name(n)
        (folder / "images" / im["filename"]).rename(folder / "images" / name)
        im["filename"] = rec["filename"] = name
        im["category"] = CATEGORIES[n % 2]
        for s in im["sentences"]:
            s["raw"] += " " + extra
            s["tokens"] += tokenize(extra)
            raw[s["sentid"]] = s["raw"]
        for c in rec["captions"]:
            c["raw"] = raw[c["sentid"]]
    (folder / "dataset.json").write_text(json.dumps(data))
    (folder / "ground_truth.json").write_text(json.dumps(truth))


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread while the fixtures build (two threads on a busy two-core machine spin: 10x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hostile_data(tiny_synth, tmp_path_factory, one_thread):
    """The tiny benchmark made hostile (:func:`make_hostile`) in a hostile folder, parsed, with fragments and
    image features."""
    from fraglib.data import read_karpathy_json
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.text.build import TextConfig, run_fragments, run_parse
    from fraglib.vision.features import extract
    from fraglib.vision.rcnn import VisionConfig

    src, _ = tiny_synth
    out = tmp_path_factory.mktemp("hostile") / FOLDER
    shutil.copytree(src, out)
    make_hostile(out)
    run_parse(out, TextConfig(), progress=False)
    run_fragments(out, TextConfig())
    ds = read_karpathy_json(out / "dataset.json")
    vision = VisionConfig(max_proposals=30, num_workers=0)
    extract(ds, vision, out / "features", synthetic_truth(out / "ground_truth.json"), progress=False)
    return out


@pytest.fixture(scope="module")
def hostile_study(hostile_data, tmp_path_factory, one_thread):
    """The tiny study's runs trained on the hostile data, every run labelled with script, Markdown and a
    ``javascript:`` link in its params.yaml (the reports' run order and labels)."""
    from fraglib.run.inputs import DataPaths
    from fraglib_study.experiments.study import run_study

    from conftest import tiny_params

    runs = tmp_path_factory.mktemp("hostile_runs")
    params = tiny_params()
    for r in params["runs"]:
        run_study(DataPaths(hostile_data), r, params, runs / r)
    for r, run in params["runs"].items():
        run["label"] = f"{LABEL} {r}"
    (runs / "params.yaml").write_text(yaml.safe_dump(params))
    return runs


def render(name: str, parameters: dict, out: Path) -> Path:
    from fraglib_study.report.notebook import run_notebook

    return run_notebook(
        ROOT / "notebooks" / f"{name}.ipynb", out / f"{name}.html", parameters, executed=out / f"{name}.ipynb"
    )


def assert_inert(browser, html: Path, shown: list[str]) -> None:  # noqa: F811
    """``html`` opened in Chromium: no payload ran (no ``window.pwned``, the title untouched, no dialog, no
    script error) and each of ``shown`` is in the page's text as written."""
    page = browser.new_page()
    dialogs, errors = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(html.resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(200)  # an onerror of a broken image fires after load
    pwned, title = page.evaluate("window.pwned"), page.title()
    body = page.inner_text("body")
    links = page.evaluate("[...document.querySelectorAll('a[href^=\"javascript:\" i]')].map(a => a.href)")
    handlers = page.evaluate(
        "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].filter(a => /^on/i.test(a.name))"
        ".map(a => e.tagName + ' ' + a.name))"
    )
    page.close()
    assert pwned is None and "PWNED" not in title, f"{html.name}: a payload ran: pwned={pwned!r}, title={title!r}"
    assert not dialogs and not errors, f"{html.name}: dialogs {dialogs}, script errors {errors}"
    assert not links and not handlers, f"{html.name}: javascript: links {links}, event handlers {handlers}"
    missing = [s for s in shown if s not in body]
    assert not missing, f"{html.name}: not shown as text: {missing}"


def test_the_data_pages_of_a_hostile_dataset_run_no_script(browser, hostile_data, tmp_path):  # noqa: F811
    """The text, data and vision reports of a dataset whose captions, categories, file names, folder and label
    are hostile: nothing runs, and the captions (the text report's examples) and the label show as written."""
    d = hostile_data
    pages = {
        "text_report": ({"dataset_dir": str(d), "dataset_label": LABEL, "n_examples": 2}, [LABEL, *CAPTIONS]),
        "data_report": ({"data_dir": str(d), "n_show": 2}, []),
        "vision_report": (
            {
                "dataset_dir": str(d),
                "features_dir": str(d / "features"),
                "truth_file": str(d / "ground_truth.json"),
                "dataset_label": LABEL,
                "n_show": 1,
            },
            [LABEL],
        ),
    }
    for name, (parameters, shown) in pages.items():
        html = render(name, parameters, tmp_path)
        assert_inert(browser, html, shown)


def test_the_study_pages_of_hostile_runs_run_no_script(browser, hostile_study, hostile_data, tmp_path):  # noqa: F811
    """The results and fight reports of runs trained on the hostile data and labelled with script, Markdown and a
    ``javascript:`` link: nothing runs (tables, captions under pictures, categories, legends), and the labels
    show as written."""
    d, runs = hostile_data, hostile_study
    base = {"runs_dir": str(runs), "dataset_dir": str(d), "params_file": str(runs / "params.yaml"), "n_boot": 20}
    pages = {
        "results_report": {
            **base,
            "dataset_label": LABEL,
            "truth_file": str(d / "ground_truth.json"),
            "breakdown_runs": ["devise"],
            "n_examples": 1,
            "parse_file": str(d / "parse.conllu"),
        },
        "fight_report": {**base, "fight": {"ladder": ["random", "full"], "baselines": ["devise", "dtrnn"]}},
    }
    for name, parameters in pages.items():
        html = render(name, parameters, tmp_path)
        assert_inert(browser, html, [f"{LABEL} full", f"{LABEL} devise"])
