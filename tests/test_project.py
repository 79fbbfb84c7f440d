"""The project's shape: pins in step, no stray device code, DVC stages that resolve."""

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from fraglib_study.bench import merge

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = set(project["dependencies"]).union(*project["optional-dependencies"].values())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    extras = ",".join(project["optional-dependencies"])
    assert f"-e .[{extras}]" in pip, "environment.yml installs the project with every extra"
    assert {p for p in pip if not p.startswith("-e ")} == pinned
    assert "python=3.11" in env["dependencies"]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][A-Za-z0-9.+]*", p) for p in pinned), "every dependency pinned"


def test_no_hard_coded_cuda_outside_device_module():
    offenders = [
        str(p)
        for p in list([*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")])
        + list((ROOT / "notebooks").glob("*.ipynb"))
        if p.name != "device.py" and re.search(r"\.cuda\(|device\(['\"]cuda", p.read_text())
    ]
    assert offenders == []


def test_dvc_stage_parameters_exist_and_notebooks_have_parameters_cell():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)  # foreach stages
        for ref in re.findall(r"\$\{([^}]+)\}", stage["cmd"]):
            if ref in ("key", "item") or ref.startswith(("item.", "key.")):
                continue
            node = params
            for key in ref.split("."):
                assert key in node, f"stage {name}: ${{{ref}}} not in params.yaml"
                node = node[key]
        for nb in re.findall(r"notebooks/\S+\.ipynb", stage["cmd"]):
            cells = json.loads((ROOT / nb).read_text())["cells"]
            tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
            assert len(tagged) == 1, f"{nb}: needs exactly one cell tagged 'parameters'"
            # every -p NAME passed by the stage is declared in that cell
            declared = set(re.findall(r"^(\w+)\s*=", "".join(tagged[0]["source"]), re.M))
            passed = set(re.findall(r"-p (\w+) ", stage["cmd"]))
            assert passed <= declared, f"{nb}: stage passes undeclared {passed - declared}"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci and "make test" in readme


def test_bench_merge_keeps_other_entries(tmp_path):
    out = tmp_path / "results.json"
    merge([{"name": "a", "value": 1}, {"name": "b", "value": 2}], out)
    merged = merge([{"name": "a", "value": 3}], out)
    assert merged == [{"name": "a", "value": 3}, {"name": "b", "value": 2}]


def test_runs_name_registered_systems_and_configs_are_disjoint():
    import dataclasses

    from fraglib.run.train import TrainConfig, resolve_run
    from fraglib.systems import SYSTEMS

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for run, entry in params["runs"].items():
        assert entry["system"] in SYSTEMS, f"runs.{run}.system"
        resolve_run(params, run)
        resolve_run(params, run, "pascal1k")
    trainer = {f.name for f in dataclasses.fields(TrainConfig)}
    for name, cls in SYSTEMS.items():
        assert name in params["systems"] and name in params["pascal1k"]["systems"], (
            f"systems.{name} / pascal1k.systems.{name}"
        )
        assert not trainer & {f.name for f in dataclasses.fields(cls.Config)}, f"{name}: keys shared with the trainer"
        assert (ROOT / "fraglib" / "systems" / f"{name}.py").exists(), "a system's module is named after it (DVC deps)"


def test_no_run_names_written_outside_params():
    """Reports and code take run names from params.yaml `runs` (the one list)."""
    from fraglib.core.batches import IMAGE_VIEWS, SENTENCE_VIEWS
    from fraglib.systems import SYSTEMS
    from fraglib.systems.socher import ENCODERS

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # run names that are also system, view or encoder names, and the report's default base run, are fine
    names = set(params["runs"]) - set(SYSTEMS) - set(IMAGE_VIEWS) - set(SENTENCE_VIEWS) - set(ENCODERS) - {"full"}
    for p in list([*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]) + list(
        (ROOT / "notebooks").glob("*.ipynb")
    ):
        text = p.read_text()
        hits = [n for n in names if re.search(rf"[\"']{n}[\"']", text)]
        assert not hits, f"{p.name} names runs {hits}"


def test_notebooks_have_no_functions_and_short_cells():
    for p in (ROOT / "notebooks").glob("*.ipynb"):
        for c in json.loads(p.read_text())["cells"]:
            if c["cell_type"] != "code":
                continue
            src = "".join(c["source"])
            assert not re.search(r"^\s*def |lambda", src, re.M), f"{p.name}: define functions in fraglib"


def test_readme_layout_names_every_module_and_docs_exist():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") : readme.index("## Device")]
    for p in [*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]:
        if p.parent.name == "readers":  # one module per dataset reader: the folder is named, `python -m fraglib.data`
            p = p.parent  # lists them, and a new reader needs no README edit
        if p.name != "__init__.py" or p.parent.name != "fraglib":
            name = p.stem if p.name not in ("__init__.py", "__main__.py") else p.parent.name
            assert name in layout, f"README layout does not name {p.relative_to(ROOT)}"
    cited = set(
        re.findall(
            r"docs/(\w+\.md)",
            " ".join(
                p.read_text() for p in [*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]
            ),
        )
    )
    cited |= set(re.findall(r"docs/(\w+\.md)", readme + (ROOT / "params.yaml").read_text()))
    missing = [c for c in cited if not (ROOT / "docs" / c).exists()]
    assert not missing, f"cited but missing: {missing}"
    assert "DESIGN.md" not in " ".join(
        p.read_text() for p in [*(ROOT / "fraglib").rglob("*.py"), *(ROOT / "fraglib_study").rglob("*.py")]
    )


def test_the_epoch_table_sets_gpu_figures_beside_the_cpu_ones():
    from fraglib_study.pages.index import costs_html

    def ep(name, value, ratio, **kw):
        return {
            "name": name,
            "value": value,
            "ratio": ratio,
            "machine": "m",
            "threads": 1,
            "repeats": 3,
            "views": "rcnn/dependency",
            "gflop": 234.9,
            **kw,
        }

    entries = [
        ep("epoch_full", 6.8, 0.49),
        ep("epoch_full_cuda", 0.69, 0.009, device="H200", before={"value": 0.91}),
        ep("epoch_dtrnn", 4.5, 0.17, critical_path_s=1.9, seconds_over_critical_path=2.4),
        ep(
            "epoch_sdtrnn",
            1.36,
            0.24,
            critical_path_s=0.56,
            seconds_over_critical_path=2.44,
            before={"value": 1.5, "seconds_over_critical_path": 2.58},
        ),
        {
            "name": "profile_full_cuda",
            "value": 1.1,
            "ms_per_step": 27.4,
            "device_busy_share": 0.082,
            "launches_per_step": 875.8,
            "syncs_per_step": 31.1,
            "device": "H200",
            "machine": "m",
            "before": {"ms_per_step": 40.2, "launches_per_step": 1200.4},
        },
        {
            "name": "amp_vse0_cuda",
            "value": 2.67,
            "ratio": 1.004,
            "seeds": [0, 1, 2],
            "machine": "m",
            "fp32": {"annotation_r1": 28.0, "annotation_r1_sd": 4.0, "search_r1": 18.33},
            "bf16": {"annotation_r1": 30.67, "annotation_r1_sd": 4.16, "search_r1": 19.47},
        },
    ]
    page = costs_html(entries)
    assert (
        "<tr><td>full</td><td>rcnn/dependency</td><td>234.9</td><td>6.8</td><td>0.49</td><td>—</td>"
        "<td>0.69 (was 0.91)</td><td>0.009</td><td>—</td></tr>" in page
    )  # the same GPU before a change
    assert "<td>4.5</td><td>0.17</td><td>1.9 s (2.4×)</td><td>—</td><td>—</td><td>—</td></tr>" in page  # no GPU row
    assert "<td>1.36 (was 1.5)</td><td>0.24</td><td>0.56 s (2.44×, was 2.58×)</td>" in page  # the CPU before a change
    assert "epoch_full_cuda" not in page and "GPU busy 8% of it, 876 kernel launches and 31 host" in page
    assert "27.4 ms per step (was 40.2 ms, 1200 launches)" in page
    assert "28.0 ± 4.0 (fp32) vs 30.67 ± 4.16 (bf16)" in page


def test_growth_slope_is_the_log_log_least_squares_exponent():
    from fraglib_study.pages.index import growth_slope

    assert growth_slope([(1, 2.0), (4, 8.0)]) == pytest.approx(1.0)  # linear
    assert growth_slope([(1, 1.0), (4, 16.0), (16, 256.0)]) == pytest.approx(2.0)  # quadratic, three scales
    assert growth_slope([(1, 3.0)]) is None and growth_slope([(1, 0.0), (4, 1.0)]) is None


def test_least_squares_slope_is_the_fitted_line_s_slope():
    from fraglib_study.pages.index import least_squares_slope

    assert least_squares_slope([(50, 880.0), (100, 890.0), (200, 910.0)]) == pytest.approx(0.2)
    assert least_squares_slope([(0, 1.0), (1, 0.0), (2, 1.0)]) == pytest.approx(0.0)
    assert least_squares_slope([(5, 1.0), (5, 2.0)]) is None


def test_every_run_is_in_exactly_one_synthetic_study():
    """The default study (dvc.yaml) and the extended one (studies/synthetic/dvc.yaml) split params.yaml `runs`:
    a run in both would be two stages writing one folder, a run in neither would never train on the benchmark."""
    study = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    runs = set(yaml.safe_load((ROOT / "params.yaml").read_text())["runs"])
    default, extended = study["runs"], study["extended_runs"]
    assert not set(default) & set(extended) and set(default) | set(extended) == runs
    assert len(set(default)) == len(default) and len(set(extended)) == len(extended)
    assert set(study["captions"]) <= set(default) and set(study["extended_captions"]) <= set(extended)


def test_no_committed_file_reaches_one_megabyte():
    """Results live in git, so each file stays small (models and caches are DVC outputs)."""
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    big = [
        (f, (ROOT / f).stat().st_size) for f in files if (ROOT / f).is_file() and (ROOT / f).stat().st_size >= 1 << 20
    ]
    assert not big, f"files of 1 MB or more in git: {big}"


def test_lock_files_hold_only_stages_that_exist():
    """DVC keeps a removed stage's lock entry (a run moved out of the default study) and re-reads and rewrites
    the whole file after every stage it runs: 19 dead entries were 28 % of dvc.lock's lines."""
    from dvc.repo import Repo

    repo = Repo(str(ROOT))
    names: dict[Path, set[str]] = {}
    for stage in repo.index.stages:
        names.setdefault(Path(stage.dvcfile.path).with_name("dvc.lock"), set()).add(stage.name)
    assert names, "no DVC stage found"
    for lock, stages in names.items():
        if lock.exists():
            entries = set(yaml.load(lock.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["stages"])
            assert entries <= stages, f"{lock.relative_to(ROOT)}: entries of no stage {sorted(entries - stages)}"


def test_every_stage_with_results_in_git_has_a_lock_entry():
    """A stage whose git-kept outputs (``cache: false``) are committed was run, so its lock records it: a `dvc commit`
    killed while writing once left studies/pascal1k/dvc.lock cut to a third, and `dvc repro` would have retrained
    every stage it lost."""
    import subprocess

    from dvc.repo import Repo

    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.splitlines())
    repo = Repo(str(ROOT))
    entries: dict[Path, set[str]] = {}
    missing, checked = [], 0
    for stage in repo.index.stages:
        kept = [o for o in stage.outs if not o.use_cache]
        rel = [Path(o.fs_path).relative_to(ROOT).as_posix() for o in kept]
        if not rel or not all(r in tracked or any(t.startswith(r + "/") for t in tracked) for r in rel):
            continue
        lock = Path(stage.dvcfile.path).with_name("dvc.lock")
        if lock not in entries:
            text = lock.read_text() if lock.exists() else "stages: {}"
            entries[lock] = set(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["stages"])
        checked += 1
        if stage.name not in entries[lock]:
            missing.append(f"{lock.relative_to(ROOT)}: {stage.name}")
    assert checked > 50, f"only {checked} stages have results in git: the scan is broken"
    assert not missing, f"{len(missing)} stages with committed results and no lock entry: {missing[:10]}"


def test_ruff_lint_and_format_are_clean():
    """The linter and the formatter (pyproject.toml [tool.ruff]) pass over the package and the tests: fix with
    `ruff check --fix . && ruff format .`."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a dev dependency (pyproject.toml): `make env` installs it"
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        r = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"ruff {' '.join(args)}:\n{r.stdout}{r.stderr}"


def test_the_cost_sections_escape_what_a_register_holds():
    """benchmarks/results.json is data: a machine name, a note or a device holding markup reaches the index as text."""
    from fraglib_study.pages.index import costs_html

    bad = "<script>window.pwned=1</script>"
    entries = [
        {"name": "epoch_full", "value": 6.8, "ratio": 0.49, "machine": bad, "threads": 1, "repeats": 3, "views": bad},
        {"name": "epoch_gpu", "value": None, "note": bad},
        {"name": "coco5k_full", "value": None, "note": bad, "machine": bad},
        {"name": "rehearsal_import_n100_s", "stage": "import", "images": 100, "value": 1.0, "peak_rss_mb": 1,
         "machine": bad, "threads": bad},
    ]  # fmt: skip
    page = costs_html(entries)
    assert "<script" not in page and page.count("&lt;script&gt;window.pwned=1&lt;/script&gt;") >= 6
