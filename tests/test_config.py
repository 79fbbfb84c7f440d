import pytest

from fraglib.config import ConfigError, load_section
from fraglib.data.synthetic import SynthConfig


def test_project_params_load():
    cfg = load_section("params.yaml", "synthetic", SynthConfig)
    assert cfg.n_images == cfg.n_train + cfg.n_val + cfg.n_test


@pytest.mark.parametrize("text, message", [
    ("synthetic:\n  n_trian: 5\n", r"synthetic\.n_trian: unknown parameter \(did you mean 'n_train'\?\), allowed: seed"),
    ("synthetic:\n  seed: -1\n", r"synthetic\.seed=-1"),
    ("synthetic:\n  seed: [1\n", r"malformed YAML"),
    ("text: {}\n", r"section 'synthetic' missing"),
    ("synthetic:\n  twin_fraction: lots\n", r"synthetic\.twin_fraction='lots': expected float"),
])
def test_bad_params_name_the_parameter(tmp_path, text, message):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_section(p, "synthetic", SynthConfig)


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="parameter file not found"):
        load_section(tmp_path / "nope.yaml", "synthetic", SynthConfig)



@pytest.mark.parametrize("text, message", [
    ("synthetic: {seed: 1}\nsynthetic: {seed: 2}\n", r"key 'synthetic' given twice"),
    ("synthetic: {seed: 1, seed: 2}\n", r"key 'seed' given twice"),
    ("trian: {lr: 0.1}\n", r"unknown section 'trian' \(did you mean 'train'\?\)"),
])
def test_params_file_refuses_duplicates_and_unknown_sections(tmp_path, text, message):
    from fraglib.config import read_params

    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_params(p)


def test_exponent_floats_are_floats(tmp_path):
    from fraglib.config import parse_overrides, read_params

    p = tmp_path / "params.yaml"
    p.write_text("train: {lr: 1e-3, alpha: 1.0e-05, seed: 3}\n")
    assert read_params(p)["train"] == {"lr": 0.001, "alpha": 1e-5, "seed": 3}
    assert parse_overrides(["lr=2e-4"]) == {"lr": 2e-4}


def test_a_missing_vision_section_is_an_error(tmp_path):
    from fraglib.config import load_with_overrides
    from fraglib.vision.rcnn import VisionConfig

    p = tmp_path / "params.yaml"
    p.write_text("train: {}\n")
    with pytest.raises(ConfigError, match="section 'vision' missing"):
        load_with_overrides(p, "vision", VisionConfig, [])
