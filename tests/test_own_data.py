"""docs/own_data.md, run: every ``python -m fraglib`` line of the walkthrough, in the page's order, on a made dataset
in the VSE++/SCAN precomputed layout, with the page's ``params.yaml`` section and its ``studies/flickr30k/dvc.yaml``
(whose stage commands must be the page's commands, and whose deps must cover the code they run)."""

from __future__ import annotations

import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fraglib.core.config import ConfigError, read_yaml
from fraglib_study.audit import costs

from conftest import ROOT, TINY_EVALUATION

DOC = ROOT / "docs" / "own_data.md"
NAME = "flickr30k"
COLOURS, ANIMALS, PLACES = ["red", "black", "white"], ["dog", "cat", "horse", "bird"], ["grass", "sofa", "road"]
TINY = dict(epochs=1, lr_drop_epochs=1, batch_size=20, embed_dim=16, dense_epochs=1)  # fragment: trainer + system keys


def fenced(lang: str) -> list[str]:
    """The bodies of the page's top-level ```lang blocks, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


def commands() -> list[list[str]]:
    """The page's ``python -m fraglib…`` lines, split into words."""
    return [shlex.split(ln) for b in fenced("bash") for ln in b.splitlines() if ln.startswith("python -m fraglib")]


def section() -> dict:
    """The page's ``params.yaml`` section (the yaml block without stages)."""
    (block,) = [b for b in fenced("yaml") if "stages:" not in b]
    (sec,) = yaml.safe_load(block).items()
    assert sec[0] == NAME, sec[0]
    return sec[1]


def pipeline() -> dict:
    """The page's ``studies/flickr30k/dvc.yaml``."""
    (block,) = [b for b in fenced("yaml") if "stages:" in b]
    return yaml.safe_load(block)


def resolve(cmd: str, params: dict, item: str | None = None) -> list[str]:
    """A stage command with DVC's ``${a.b}`` / ``${item}`` filled from ``params``, split into words."""

    def value(m: re.Match) -> str:
        if m.group(1) == "item":
            return item
        v = params
        for k in m.group(1).split("."):
            v = v[k]
        return str(v)

    return shlex.split(re.sub(r"\$\{([^}]+)\}", value, cmd))


def write_precomp(root: Path, rng: np.random.Generator) -> None:
    """VSE++'s layout, one descriptor per image (and SCAN's ``*_ids.txt``, which the converter does not read):
    5 captions per image naming a colour, an animal and a place; the descriptor is their one-hot code + noise."""
    root.mkdir(parents=True)
    words = COLOURS + ANIMALS + PLACES
    for split, n in (("train", 16), ("dev", 4), ("test", 4)):
        ims, caps = [], []
        for _ in range(n):
            c, a, p = rng.choice(COLOURS), rng.choice(ANIMALS), rng.choice(PLACES)
            ims.append(np.isin(words, [c, a, p]) + 0.3 * rng.standard_normal(len(words)))
            caps += [
                f"a {c} {a} sits on the {p} .",
                f"the {a} is {c} .",
                f"a {c} {a} on {p} .",
                f"there is a {a} near the {p} .",
                f"one {c} {a} resting on some {p} .",
            ]
        np.save(root / f"{split}_ims.npy", np.asarray(ims, np.float16))
        (root / f"{split}_caps.txt").write_text("\n".join(caps) + "\n")
        (root / f"{split}_ids.txt").write_text("\n".join(str(1000 + k) for k in range(n)) + "\n")


def run_command(words: list[str], monkeypatch) -> None:
    """``python -m MODULE ARGS`` in this process, as ``python -m`` runs it."""
    assert words[:2] == ["python", "-m"], words
    monkeypatch.setattr(sys, "argv", [words[2], *words[3:]])
    monkeypatch.delitem(sys.modules, f"{words[2]}.__main__", raising=False)  # run by an earlier step: run it afresh
    try:
        runpy.run_module(words[2], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        assert exc.code in (0, None), f"{' '.join(words)}: exit {exc.code}"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder: the made data, params.yaml (the project's, plus the page's section with tiny training
    settings) and the page's dvc.yaml; the working directory."""
    sec = section()
    write_precomp(tmp_path / sec["root"], np.random.default_rng(0))
    params = read_yaml(ROOT / "params.yaml")
    sec["systems"]["fragment"] = dict(TINY)
    params[NAME] = sec
    params["evaluation"].update(TINY_EVALUATION)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    study = tmp_path / "studies" / NAME
    study.mkdir(parents=True)
    (study / "dvc.yaml").write_text(yaml.safe_dump(pipeline(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path, params


@pytest.mark.slow
def test_the_walkthrough_runs_end_to_end(project, monkeypatch, capsys):
    """Convert, parse, fragments, one tiny training run, its re-scoring and docs/results.md, by the page's
    commands; each step leaves what the page says it writes."""
    root, params = project
    cmds = commands()
    programs = [" ".join(w[2:4]) for w in cmds]  # the entry point and its command
    assert programs == [
        "fraglib.data precomp",
        "fraglib.text parse",
        "fraglib.text fragments",
        "fraglib_study study",
        "fraglib.run evaluate",
        "fraglib_study summary",
    ]
    for words in cmds:
        run_command(words, monkeypatch)
    data = root / "data" / NAME
    ds = json.loads((data / "dataset.json").read_text())
    assert len(ds["images"]) == 24 and sum(len(im["sentences"]) for im in ds["images"]) == 120
    assert (data / "features" / "rcnn.npz").is_file() and not (data / "features" / "top36.npz").exists()
    assert (data / "parse.conllu").is_file() and (data / "fragments" / "dependency.npz").is_file()
    summary = json.loads((root / "runs" / NAME / "fullframe" / "metrics.json").read_text())
    assert summary["seeds"] == section()["splits"] and 0 <= summary["search"]["r1"] <= 100
    assert (root / "models" / NAME / "fullframe" / "seed0" / "best.pt").is_file()
    assert "test search: R@1" in capsys.readouterr().out  # fraglib.run.evaluate's report
    (row,) = [r for r in costs.cost_table(root).rows if r[0] == f"one training: {NAME}, `fragment`"]
    assert row[1] in ("CPU", "GPU") and row[4] == "1 unit of 1 run"  # the trainer's timing.json, read back
    results = (root / "docs" / "results.md").read_text()
    assert f"## {NAME} " in results and "Our model: images full frame only" in results


def test_the_pipeline_is_the_walkthrough(project):
    """Each stage of the page's dvc.yaml (``${…}`` filled, ``${item}`` = the page's run) is one of its commands,
    its deps cover the code it runs, and the study registry reads it as the study of the page's section."""
    from fraglib_study.report.registry import read_study

    from test_dvc_deps import uncovered

    root, params = project
    stages = pipeline()["stages"]
    resolved = {}
    for name, stage in stages.items():
        s = stage.get("do", stage)
        assert s["wdir"] == "../..", name
        assert uncovered(s["cmd"], s["deps"]) == [], name
        resolved[name] = resolve(s["cmd"], params, "fullframe")
    page = [w for w in commands() if w[2:4] not in (["fraglib.run", "evaluate"], ["fraglib_study", "summary"])]
    assert [resolved[n] for n in ("prepare", "parse", "fragments", "train")] == page
    assert stages["train"]["foreach"] == "${" + NAME + ".runs}"
    study = read_study(root, f"studies/{NAME}/dvc.yaml")
    assert (study.name, study.dataset, study.data, study.unit) == (NAME, NAME, f"data/{NAME}", "seeds")
    (report,) = study.pages
    nb = json.loads((ROOT / report.notebook).read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    names = set(re.findall(r"^(\w+)\s*=", "".join(cell["source"]), re.M))
    assert set(report.parameters) <= names, set(report.parameters) - names


def test_the_section_is_checked_and_chosen_by_dataset(project):
    """The page's claims on the section: a section holding a root is a dataset whatever its name (a typo in its keys
    is refused with a hint; a section without a root and with no known name is refused), and ``--dataset`` picks its layers while without it the synthetic ``study`` layers apply."""
    from fraglib.run.train import resolve_run
    from fraglib_study.params import read_params

    root, params = project
    assert NAME in read_params(root / "params.yaml")
    assert resolve_run(params, "fullframe", NAME).train_config.epochs == TINY["epochs"]
    assert resolve_run(params, "fullframe").train_config.epochs == params["study"]["train"]["epochs"] != 1
    bad = dict(params, **{NAME: dict(params[NAME], runz=["fullframe"])})
    (root / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=rf"{NAME}\.runz: unknown parameter \(did you mean 'runs'\?\)"):
        read_params(root / "bad.yaml")
    (root / "other.yaml").write_text(yaml.safe_dump({**params, "mydata": params[NAME]}))
    assert "mydata" in read_params(root / "other.yaml")  # a section holding a root is a dataset: no code edit
    rootless = {k: v for k, v in params[NAME].items() if k != "root"}
    (root / "other.yaml").write_text(yaml.safe_dump({**params, "mydata": rootless}))
    with pytest.raises(ConfigError, match="unknown section 'mydata'.*a dataset's, which holds root"):
        read_params(root / "other.yaml")
