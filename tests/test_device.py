import pytest
import torch

from fraglib.core.device import ENV_VAR, describe, select_device


def test_env_override_cpu(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "cpu")
    dev, why = select_device()
    assert dev == torch.device("cpu") and ENV_VAR in why


def test_autodetect_matches_torch(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    dev, _ = select_device()
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert dev.type == expected
    assert describe().startswith(f"fraglib runs on {dev}")


def test_bad_requests_are_clear(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "tpu9")
    with pytest.raises(ValueError, match=ENV_VAR):
        select_device()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA requested but torch sees no CUDA device"):
            select_device("cuda")
