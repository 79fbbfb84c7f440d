import pytest

from fraglib.core.config import ConfigError, load_section
from fraglib.data.synthetic import SynthConfig
from fraglib.run.inputs import DataPaths


def test_project_params_load():
    cfg = load_section("params.yaml", "synthetic", SynthConfig)
    assert cfg.n_images == cfg.n_train + cfg.n_val + cfg.n_test


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "synthetic:\n  n_trian: 5\n",
            r"synthetic\.n_trian: unknown parameter \(did you mean 'n_train'\?\), allowed: seed",
        ),
        ("synthetic:\n  seed: -1\n", r"synthetic\.seed=-1"),
        ("synthetic:\n  seed: [1\n", r"malformed YAML"),
        ("text: {}\n", r"section 'synthetic' missing"),
        ("synthetic:\n  twin_fraction: lots\n", r"synthetic\.twin_fraction='lots': expected float"),
    ],
)
def test_bad_params_name_the_parameter(tmp_path, text, message):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_section(p, "synthetic", SynthConfig)


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="parameter file not found"):
        load_section(tmp_path / "nope.yaml", "synthetic", SynthConfig)


@pytest.mark.parametrize(
    "text, message",
    [
        ("synthetic: {seed: 1}\nsynthetic: {seed: 2}\n", r"line 2: key 'synthetic' given twice \(first on line 1\)"),
        ("synthetic:\n  seed: 1\n  n_train: 4\n  seed: 2\n", r"line 4: key 'seed' given twice \(first on line 2\)"),
        ("trian: {lr: 0.1}\n", r"unknown section 'trian' \(did you mean 'train'\?\)"),
    ],
)
def test_params_file_refuses_duplicates_and_unknown_sections(tmp_path, text, message):
    from fraglib_study.params import read_params

    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_params(p)


def test_exponent_floats_are_floats(tmp_path):
    from fraglib.core.config import parse_overrides
    from fraglib_study.params import read_params

    p = tmp_path / "params.yaml"
    p.write_text("train: {lr: 1e-3, grad_clip: 1.0e-05, seed: 3}\n")
    assert read_params(p)["train"] == {"lr": 0.001, "grad_clip": 1e-5, "seed": 3}
    assert parse_overrides(["lr=2e-4"]) == {"lr": 2e-4}


def test_a_missing_vision_section_is_an_error(tmp_path):
    from fraglib.core.config import load_with_overrides
    from fraglib.vision.rcnn import VisionConfig

    p = tmp_path / "params.yaml"
    p.write_text("train: {}\n")
    with pytest.raises(ConfigError, match="section 'vision' missing"):
        load_with_overrides(p, "vision", VisionConfig, [])


BASE = "train: {lr: 0.1}\nsystems: {fragment: {}, devise: {}}\nruns: {full: {system: fragment}, dv: {system: devise}}\n"


@pytest.mark.parametrize(
    "extra, message",
    [
        ("study: {seeds: [0], jobz: 2}\n", r"study\.jobz: unknown parameter \(did you mean 'jobs'\?\)"),
        ("pascal1k: {root: d, trian: {lr: 1}}\n", r"pascal1k\.trian: unknown parameter \(did you mean 'train'\?\)"),
        (
            "pascal1k: {root: d, systems: {fragmnet: {lr: 1}}}\n",
            r"pascal1k\.systems\.fragmnet: unknown parameter \(did you mean 'fragment'\?\)",
        ),
        ("pascal1k: {root: d, train: {lrr: 1}}\n", r"pascal1k\.train\.lrr: unknown parameter \(did you mean 'lr'\?\)"),
        (
            "pascal1k: {root: d, objectness: {hiden: 3}}\n",
            r"pascal1k\.objectness\.hiden: unknown parameter \(did you mean 'hidden'\?\)",
        ),
        # a dataset is any section holding a root; its reader (reader:, default its name) must be registered
        ("mine: {root: d, reader: karpathyy}\n", r"mine\.reader: unknown dataset reader 'karpathyy' \(did you mean"),
        ("mine: {root: d}\n", r"mine\.reader: unknown dataset reader 'mine'; readers: .*karpathy"),
        ("captions: {runs: [ful]}\n", r"captions\.runs: unknown run 'ful' \(did you mean 'full'\?\)"),
        ("bench: {epoch_run: [full]}\n", r"bench\.epoch_run: unknown parameter \(did you mean 'epoch_runs'\?\)"),
        (
            "results_report: {fight: {ladder: full, baseline: dv}}\n",
            r"results_report\.fight\.baseline: unknown parameter",
        ),
        ("vision: {k: 3, nms_iu: 0.3}\n", r"vision\.nms_iu: unknown parameter \(did you mean 'nms_iou'\?\)"),
        ("fusion: {f: {a: full, b: dvv}}\n", r"fusion\.f\.b: unknown run 'dvv' \(did you mean 'dv'\?\)"),
        ("fusion: {f: {a: full, b: dv, weight: 1}}\n", r"fusion\.f\.weight: unknown parameter"),
    ],
)
def test_misspelt_nested_keys_are_errors(tmp_path, extra, message):
    from fraglib_study.schema import read_checked

    ok = tmp_path / "ok.yaml"
    ok.write_text(BASE)
    assert set(read_checked(ok)["runs"]) == {"full", "dv"}  # the base alone is accepted
    p = tmp_path / "params.yaml"
    p.write_text(BASE + extra)
    with pytest.raises(ConfigError, match=message):
        read_checked(p)


@pytest.mark.parametrize(
    "extra, message",
    [
        ("study: {seeds: [0], jobz: 2}\n", r"study\.jobz: unknown parameter"),
        ("captions: {runs: [ful]}\n", r"captions\.runs: unknown run 'ful'"),
        ("results_report: {fight: {ladder: full, baseline: dv}}\n", r"results_report\.fight\.baseline: unknown"),
        ("fusion: {f: {a: full, b: dvv}}\n", r"fusion\.f\.b: unknown run 'dvv'"),
    ],
)
def test_the_pages_reader_checks_the_study_keys(tmp_path, extra, message):
    """The reader of the pages and the index (no trainer, no system) still refuses a misspelt study key; the
    library's keys are the trainers' check (:func:`fraglib_study.schema.read_checked`), not the pages'."""
    from fraglib_study.params import read_params
    from fraglib_study.schema import read_checked

    p = tmp_path / "params.yaml"
    p.write_text(BASE + extra)
    with pytest.raises(ConfigError, match=message):
        read_params(p)
    p.write_text(BASE.replace("{system: devise}", "{label: no system}"))
    with pytest.raises(ConfigError, match=r"runs\.dv\.system: None: expected the name of a system"):
        read_params(p)
    p.write_text(BASE.replace("fragment: {}", "fragment: {embed_dimm: 3}"))
    assert read_params(p)["systems"]["fragment"] == {"embed_dimm": 3}  # the pages' reader leaves it
    with pytest.raises(ConfigError, match=r"systems\.fragment\.embed_dimm"):
        read_checked(p)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            BASE.replace("fragment: {}, devise", "fragmnet: {}, devise"),
            r"systems\.fragmnet: unknown parameter \(did you mean 'fragment'\?\)",
        ),
        (
            BASE.replace("fragment: {}", "fragment: {embed_dimm: 3}"),
            r"systems\.fragment\.embed_dimm: unknown parameter \(did you mean 'embed_dim'\?\)",
        ),
        (
            BASE.replace("{system: devise}", "{system: devise, simlarity: dot}"),
            r"runs\.dv\.simlarity: unknown parameter \(did you mean 'similarity'\?\)",
        ),
        (BASE.replace("{system: devise}", "{system: devis}"), r"runs\.dv\.system: 'devis' \(did you mean 'devise'\?\)"),
    ],
)
def test_misspelt_systems_and_run_keys_are_errors(tmp_path, text, message):
    from fraglib_study.schema import read_checked

    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_checked(p)


@pytest.mark.parametrize(
    "system, settings, message",
    [
        ("fragment", {"images": "none"}, r"systems\.fragment\.images='none'"),
        ("devise", {"images": "none"}, r"systems\.devise\.images='none'"),
        ("vse", {"images": "none"}, r"systems\.vse\.images='none': a retrieval system needs"),
        (
            "fragment",
            {"sentences": "tokens"},
            r"systems\.fragment\.sentences='tokens'.*allowed: dependency, bow, bigram",
        ),
        ("fragment", {"sentences": "tree_basic"}, r"systems\.fragment\.sentences='tree_basic'"),
        ("stt", {"images": "none"}, r"systems\.stt: images 'none' \(text only\)"),
    ],
)
def test_views_a_system_cannot_use_are_refused(system, settings, message):
    from fraglib.core.config import from_dict
    from fraglib.systems import get_system

    with pytest.raises(ConfigError, match=message):
        from_dict(f"systems.{system}", settings, get_system(system).Config)
    if system == "stt":  # the paraphrasing branch alone is allowed
        from_dict("systems.stt", {**settings, "lambda_ic": 0.0, "lambda_sim": 0.0}, get_system(system).Config)


@pytest.mark.parametrize("jobs", ["two", 1.5, 0, -2, True, None])
def test_study_jobs_must_be_a_positive_integer(jobs, tmp_path):
    """``study.jobs: two`` is refused naming the key and value, before any work (1.5, 0, -2 were read as 1)."""
    from fraglib_study.experiments.study import run_study, study_jobs

    from conftest import tiny_params

    params = tiny_params()
    assert study_jobs(params) == 1 and study_jobs({}) == 2
    params["study"]["jobs"] = jobs
    with pytest.raises(ConfigError, match=rf"^study\.jobs={jobs!r}: expected a positive integer"):
        run_study(DataPaths(tmp_path / "nowhere"), "full", params, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "dataset, layers, says",
    [
        (None, {"study": {"systems": {"vse": {"epochs": -3}}}}, r"study\.systems\.vse\.epochs=-3: out of range"),
        (None, {"study": {"train": {"epochs": "8"}}}, r"study\.train\.epochs='8': expected int"),
        (None, {"systems": {"vse": {"epochs": 1.5}}}, r"systems\.vse\.epochs=1\.5: expected int"),
        (None, {"runs": {"v": {"embed_dim": 0}}}, r"runs\.v\.embed_dim=0: out of range"),
        ("pascal1k", {"pascal1k": {"train": {"lr": -1}}}, r"pascal1k\.train\.lr=-1: out of range"),
        (
            "pascal1k",
            {"pascal1k": {"systems": {"vse": {"epochs": -1}}}, "runs": {"v": {"lr": -1}}},
            r"pascal1k\.systems\.vse\.epochs=-1: out of range",
        ),
        (
            None,
            {"train": {"epochs": -1}, "runs": {"v": {"epochs": 2}}},
            r"train\.epochs=-1: out of range",
        ),  # the plain layers
    ],
)
def test_value_errors_name_the_layer_that_set_the_key(dataset, layers, says):
    """A wrong value is named where params.yaml set it (``study.systems.vse.epochs``), not under the merged
    trainer or system section (``train.epochs``)."""
    from fraglib.run.train import resolve_run

    from conftest import tiny_params

    def merged(a, b):
        return {**a, **{k: merged(a[k], v) if isinstance(a.get(k), dict) else v for k, v in b.items()}}

    params = merged(tiny_params(v={"system": "vse"}), {"pascal1k": {}, **layers})
    with pytest.raises(ConfigError, match="^" + says):
        resolve_run(params, "v", dataset)
