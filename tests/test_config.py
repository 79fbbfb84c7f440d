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
    ("other: {}\n", r"section 'synthetic' missing"),
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

