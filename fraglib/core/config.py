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


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser: 5x faster, same documents
    """YAML with two fixes for parameter files: a key given twice is an error (not the last one
    silently winning; a key may override one merged in by ``<<: *anchor``), and ``1e-3`` is a float
    (YAML 1.1 reads it as a string)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for k, _ in node.value:
            if k.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(k, deep=deep)
            if key in seen:
                raise ConfigError(f"line {k.start_mark.line + 1}: key {key!r} given twice (first on line {seen[key]})")
            seen[key] = k.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def read_yaml(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The params file as a dict of sections, parsed strictly (a key given twice is an error) but not checked
    against the schema: that is :func:`fraglib_study.schema.read_checked`, for code that reads the file as a whole.
    A stage reads its own section (:func:`load_section`), so a typo elsewhere does not stop it."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: parameter file not found")
    if not path.is_file():
        raise ConfigError(f"{path}: a folder, not a parameter file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    return data


# The sections of params.yaml (the schema of their keys: fraglib_study.params). Here, in the bottom layer, so that every
# command checks the file's sections on reading it (:func:`read_settings`), those below fraglib_study.params included.
# Besides these, every section holding a `root` is a dataset (:func:`dataset_sections`): a real-data study's data, read
# by the reader its `reader` key names (default: the section's name; fraglib.data.readers). Datasets come from the
# file: no name of one is typed here (docs/adding_a_dataset.md).
SECTIONS = (
    "synthetic",
    "data_report",
    "text",
    "text_report",
    "vision",
    "vision_report",
    "train",
    "evaluation",
    "systems",
    "study",
    "runs",
    "fusion",
    "captions",
    "results_report",
    "explorer",
    "bench",
)


def dataset_sections(data: dict[str, Any]) -> tuple[str, ...]:
    """The dataset sections of a params file's sections ``data``, in file order: each section that is not one of
    :data:`SECTIONS` and holds a ``root`` (its data's folder)."""
    return tuple(k for k, v in data.items() if k not in SECTIONS and isinstance(v, dict) and "root" in v)


def check_sections(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """``data`` (a params file's sections) when every section is a mapping (or empty) and either one of
    :data:`SECTIONS` or a dataset's (:func:`dataset_sections`), else a ConfigError naming the file and the section (a
    misspelt one with "did you mean")."""
    unknown = [k for k in data if k not in SECTIONS and k not in dataset_sections(data)]
    if unknown:
        raise ConfigError(
            f"{path}: unknown section '{unknown[0]}'{did_you_mean(unknown[0], SECTIONS)}; "
            f"sections: {', '.join(SECTIONS)}, and a dataset's, which holds root (its data's folder)"
        )
    for k, v in data.items():
        if v is not None and not isinstance(v, dict):
            raise ConfigError(f"{path}: {k}: expected a mapping, got {v!r}")
    return data


def read_settings(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The params file parsed strictly (:func:`read_yaml`) with its sections checked (:func:`check_sections`): the
    reader of every command below :mod:`fraglib_study.params` (evaluate, train), which then checks the keys of each
    section it reads (:func:`from_dict`); :func:`fraglib_study.schema.read_checked` adds every other section's keys."""
    return check_sections(read_yaml(path), path)


def from_dict(section: str, values: dict[str, Any] | None, cls: type[T], names: dict[str, str] | None = None) -> T:
    """Build dataclass ``cls`` from ``values``; unknown keys are errors; calls ``validate()``. ``names``:
    key -> the name its value was given under (``study.systems.vse.epochs`` for a value merged from there),
    used in place of ``<section>.<key>`` in a validation error."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{section}.{unknown[0]}: unknown parameter{did_you_mean(unknown[0], fields)}, allowed: {', '.join(fields)}"
        )
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ConfigError as exc:
            if not names:
                raise
            raise ConfigError(
                re.sub(rf"(?<![\w.-]){re.escape(section)}\.(\w+)", lambda m: names.get(m[1], m[0]), str(exc))
            ) from None
    return obj


def did_you_mean(name: str, known) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or ''."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_section(path: str | Path, section: str, cls: type[T]) -> T:
    """``cls`` built from section ``section`` of the params file at ``path``."""
    data = read_yaml(path)
    if section not in data:
        raise ConfigError(f"{path}: section '{section}' missing (sections present: {', '.join(data)})")
    return from_dict(section, data[section], cls)


def load_with_overrides(path: str | Path, section: str, cls: type[T], overrides: list[str]) -> T:
    """``cls`` from ``section`` of the params file, with command-line ``key=value`` overrides
    (values read as YAML: numbers, true/false, lists), checked like the file's own values."""
    data = read_yaml(path)
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
