"""Shared fixtures. Real data under ../shared/data is optional: tests that need it skip."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory):
    """A 24-image synthetic benchmark (written once per test session)."""
    from fraglib.synthetic import SynthConfig, write_benchmark

    cfg = SynthConfig(n_train=16, n_val=4, n_test=4, seed=3, twin_fraction=0.5)
    out = tmp_path_factory.mktemp("synth")
    write_benchmark(cfg, out, progress=False)
    return out, cfg


@pytest.fixture(scope="session")
def tiny_text(tiny_synth, tmp_path_factory):
    """A copy of the tiny benchmark with its spaCy parse and fragments (once per session)."""
    import shutil

    from fraglib.text import TextConfig, run_fragments, run_parse

    src, _ = tiny_synth
    out = tmp_path_factory.mktemp("text") / "synth"
    shutil.copytree(src, out)
    run_parse(out, TextConfig(), progress=False)
    stats = run_fragments(out, TextConfig())
    return out, stats


def shared_data(sub: str) -> Path:
    """Path under ../shared/data, or skip the test with the reason."""
    p = SHARED_DATA / sub
    if not p.exists():
        pytest.skip(f"real data not present at {p} (only on development machines)")
    return p
