"""One place for configuration: ``params.yaml`` sections -> frozen dataclasses, checked.

Every error names the parameter (``section.key``) and what is allowed, so a typo in
``params.yaml`` stops a stage with a message rather than a silent default.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A parameter is missing, malformed, of the wrong type or out of its allowed range."""


def check_range(name: str, value: Any, lo: float, hi: float, kind: type) -> None:
    """Raise ConfigError unless ``value`` is a ``kind`` in ``[lo, hi]``."""
    ok_type = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok_type = True
    if not ok_type:
        raise ConfigError(f"{name}={value!r}: expected {kind.__name__} in [{lo}, {hi}]")
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r}: out of range, allowed [{lo}, {hi}]")


def check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    """Raise ConfigError unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"{name}={value!r}: unknown value, allowed: {', '.join(map(str, allowed))}")


SECTIONS = ("synthetic", "data_report", "text", "text_report", "pascal1k", "flickr8k", "vision", "vision_report", "train",
            "systems", "study", "runs", "captions", "results_report", "bench")


class _StrictLoader(yaml.SafeLoader):
    """YAML with two fixes for parameter files: a key given twice is an error (not the last one
    silently winning; a key may override one merged in by ``<<: *anchor``), and ``1e-3`` is a float
    (YAML 1.1 reads it as a string)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        dup = sorted({str(k) for k in keys if keys.count(k) > 1})
        if dup:
            raise ConfigError(f"line {node.start_mark.line + 1}: key {dup[0]!r} given twice")
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def read_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The whole params file as a dict (error names the file when missing or malformed, a
    duplicated key, or an unknown top-level section, with a "did you mean")."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: parameter file not found")
    try:
        data = yaml.load(path.read_text(), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        raise ConfigError(f"{path}: unknown section '{unknown[0]}'{did_you_mean(unknown[0], SECTIONS)}; "
                          f"sections: {', '.join(SECTIONS)}")
    return data


def from_dict(section: str, values: dict[str, Any] | None, cls: type[T]) -> T:
    """Build dataclass ``cls`` from ``values``; unknown keys are errors; calls ``validate()``."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{section}.{unknown[0]}: unknown parameter{did_you_mean(unknown[0], fields)}, "
                          f"allowed: {', '.join(fields)}")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate()
    return obj


def did_you_mean(name: str, known) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or ''."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_section(path: str | Path, section: str, cls: type[T]) -> T:
    """``cls`` built from section ``section`` of the params file at ``path``."""
    data = read_params(path)
    if section not in data:
        raise ConfigError(f"{path}: section '{section}' missing (sections present: {', '.join(data)})")
    return from_dict(section, data[section], cls)


def load_with_overrides(path: str | Path, section: str, cls: type[T], overrides: list[str]) -> T:
    """``cls`` from ``section`` of the params file, with command-line ``key=value`` overrides
    (values read as YAML: numbers, true/false, lists), checked like the file's own values."""
    data = read_params(path)
    if not isinstance(data.get(section), dict):
        raise ConfigError(f"{path}: section '{section}' missing or empty (sections present: {', '.join(data)})")
    values = dict(data[section])
    values.update(parse_overrides(overrides))
    return from_dict(section, values, cls)


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> dict, values read as YAML (numbers, true/false, lists)."""
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out[k] = yaml.load(v, Loader=_StrictLoader)
    return out
