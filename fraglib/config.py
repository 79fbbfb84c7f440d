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
            "systems", "study", "runs", "fusion", "captions", "results_report", "bench")


class _StrictLoader(yaml.SafeLoader):
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
    try:
        check_params(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return data


# The keys of every nested mapping of params.yaml that is not read into a dataclass where it is used
# (those are: synthetic, text, vision, train, systems.<s>, runs.<r>, checked against their fields).
# Mappings whose keys the user names (results_report.socher_tables.margin, ….peri.generation) are free.
DATASET_KEYS = ("root", "split_seed", "splits", "score", "image_size", "proposal_size", "num_workers", "objectness",
                "nms_iou", "train", "systems", "runs")
PLAIN_KEYS = {
    "data_report": ("n_show", "sample_seed"), "text_report": ("n_examples", "example_seed"),
    "vision_report": ("n_show", "sample_seed"),
    "study": ("seeds", "jobs", "replicates", "runs", "extended_runs", "captions", "extended_captions", "train", "systems"),
    "captions": ("runs", "n_boot"),
    "bench": ("growth_runs", "epoch_runs", "profile_runs", "amp_runs"), "pascal1k": DATASET_KEYS, "flickr8k": DATASET_KEYS,
    "pascal1k.objectness": ("model", "hidden", "epochs"), "flickr8k.objectness": ("model", "hidden", "epochs"),
    "results_report": ("n_examples", "example_seed", "query_triplets", "socher_tables", "peri", "fight"),
    "results_report.socher_tables": ("margin", "squared", "length_weighting"),
    "results_report.peri": ("runs", "baselines", "masking", "generation", "thesis_rows", "working_forms"),
    "results_report.fight": ("ladder", "baselines", "searches", "collapse", "fusions", "attempts"),
}
RUN_KEYS = ("system", "label", "seeds", "replicates")      # a run's own keys besides trainer and system settings
RUN_LISTS = ("captions.runs", "bench.growth_runs", "bench.epoch_runs", "bench.profile_runs", "bench.amp_runs",
             "pascal1k.runs", "flickr8k.runs", "study.runs", "study.extended_runs", "study.captions", "study.extended_captions")


def _keys(where: str, value: Any, allowed) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all in ``allowed`` (None/empty: {})."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    for k in value:
        if k not in allowed:
            raise ConfigError(f"{where}.{k}: unknown parameter{did_you_mean(k, allowed)}, allowed: {', '.join(map(str, allowed))}")
    return value


def check_params(data: dict[str, Any]) -> None:
    """Every nested mapping of a params dict against its schema: a misspelt key anywhere (``study.jobz``,
    ``pascal1k.trian``, ``systems.fragmnet``, ``runs.full.epohcs``) is a ConfigError with "did you mean";
    so is a run list naming an unknown run. Values are checked where they are used."""
    from fraglib.data.synthetic import SynthConfig
    from fraglib.systems import SYSTEMS
    from fraglib.text.build import TextConfig
    from fraglib.train import TrainConfig
    from fraglib.vision.rcnn import VisionConfig

    names = lambda cls: tuple(f.name for f in dataclasses.fields(cls))  # noqa: E731
    trainer = names(TrainConfig)
    for sec, cls in (("synthetic", SynthConfig), ("text", TextConfig), ("vision", VisionConfig), ("train", TrainConfig)):
        _keys(sec, data.get(sec), names(cls))
    for where, allowed in PLAIN_KEYS.items():
        head, _, sub = where.partition(".")
        value = data.get(head)
        if sub:
            value = value.get(sub) if isinstance(value, dict) else None
        _keys(where, value, allowed)

    def systems(where: str, value: Any) -> None:
        for name, settings in _keys(where, value, tuple(SYSTEMS)).items():
            _keys(f"{where}.{name}", settings, trainer + names(SYSTEMS[name].Config))
    systems("systems", data.get("systems"))
    runs = data.get("runs") or {}
    for run, entry in _keys("runs", runs, tuple(runs)).items():
        entry = entry or {}
        if not isinstance(entry, dict) or entry.get("system") not in SYSTEMS:
            got = entry.get("system") if isinstance(entry, dict) else entry
            raise ConfigError(f"runs.{run}.system: {got!r}{did_you_mean(got, SYSTEMS)}; registered systems: "
                              f"{', '.join(SYSTEMS)}")
        _keys(f"runs.{run}", entry, RUN_KEYS + trainer + names(SYSTEMS[entry["system"]].Config))
    for ds in ("study", "pascal1k", "flickr8k"):
        if isinstance(data.get(ds), dict):
            _keys(f"{ds}.train", data[ds].get("train"), trainer)
            systems(f"{ds}.systems", data[ds].get("systems"))
    for name, entry in _keys("fusion", data.get("fusion"), tuple(data.get("fusion") or {})).items():
        for side in ("a", "b"):                     # late fusion of two trained runs (fraglib/fusion.py)
            r = _keys(f"fusion.{name}", entry, ("a", "b", "label")).get(side)
            if r not in runs:
                raise ConfigError(f"fusion.{name}.{side}: unknown run {r!r}{did_you_mean(r, runs)}")
    for where in RUN_LISTS:
        head, _, sub = where.partition(".")
        listed = (data.get(head) or {}).get(sub) or []
        if not isinstance(listed, list):
            raise ConfigError(f"{where}: expected a list of run names, got {listed!r}")
        for r in listed:
            if r not in runs:
                raise ConfigError(f"{where}: unknown run {r!r}{did_you_mean(r, runs)}")


def from_dict(section: str, values: dict[str, Any] | None, cls: type[T], names: dict[str, str] | None = None) -> T:
    """Build dataclass ``cls`` from ``values``; unknown keys are errors; calls ``validate()``. ``names``:
    key -> the name its value was given under (``study.systems.vse.epochs`` for a value merged from there),
    used in place of ``<section>.<key>`` in a validation error."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{section}.{unknown[0]}: unknown parameter{did_you_mean(unknown[0], fields)}, "
                          f"allowed: {', '.join(fields)}")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ConfigError as exc:
            if not names:
                raise
            raise ConfigError(re.sub(rf"(?<![\w.-]){re.escape(section)}\.(\w+)", lambda m: names.get(m[1], m[0]),
                                     str(exc))) from None
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
