"""The keys of ``params.yaml`` that the library's dataclasses own, checked before a command trains or scores.

:func:`fraglib_study.params.read_params` checks the sections and the study's own keys without loading the
library above ``core``; :func:`read_checked` adds every key a dataclass owns (``synthetic``, ``text``, ``vision``,
``train``, ``evaluation``, ``systems.<s>``, ``<dataset>.train`` / ``.systems``, each run's trainer and system
keys), so a misspelt key anywhere (``systems.fragmnet``, ``runs.full.epohcs``) is an error with "did you mean"
before any work. It imports the trainer and every system: the pages and the index do not call it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fraglib.core.config import ConfigError, dataset_sections, did_you_mean
from fraglib.data import readers
from fraglib.data.synthetic import SynthConfig
from fraglib.run.evaluate import EvalConfig
from fraglib.run.train import TrainConfig
from fraglib.systems import SYSTEMS
from fraglib.text.build import TextConfig
from fraglib.vision.rcnn import VisionConfig
from fraglib_study.params import RUN_KEYS, check_study_keys, checked_keys, read_params


def _names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def check_params(data: dict[str, Any]) -> None:
    """Every nested mapping of a params dict: the study's keys (:func:`fraglib_study.params.check_study_keys`), then
    the library's sections against their dataclasses and each run against its system's ``Config`` and the trainer's.
    Values are checked where they are used."""
    check_study_keys(data)
    trainer = _names(TrainConfig)
    for sec, cls in (
        ("synthetic", SynthConfig),
        ("text", TextConfig),
        ("vision", VisionConfig),
        ("train", TrainConfig),
        ("evaluation", EvalConfig),
    ):
        checked_keys(sec, data.get(sec), _names(cls))

    def systems(where: str, value: Any) -> None:
        for name, settings in checked_keys(where, value, tuple(SYSTEMS)).items():
            checked_keys(f"{where}.{name}", settings, trainer + _names(SYSTEMS[name].Config))

    systems("systems", data.get("systems"))
    for run, entry in (data.get("runs") or {}).items():
        if entry["system"] not in SYSTEMS:
            raise ConfigError(
                f"runs.{run}.system: {entry['system']!r}{did_you_mean(entry['system'], SYSTEMS)}; "
                f"registered systems: {', '.join(SYSTEMS)}"
            )
        checked_keys(f"runs.{run}", entry, RUN_KEYS + trainer + _names(SYSTEMS[entry["system"]].Config))
    for ds in dataset_sections(data):
        try:
            readers.reader(data[ds].get("reader", ds))
        except ConfigError as exc:
            raise ConfigError(f"{ds}.reader: {exc}") from None
    for ds in ("study", *dataset_sections(data)):
        if isinstance(data.get(ds), dict):
            checked_keys(f"{ds}.train", data[ds].get("train"), trainer)
            systems(f"{ds}.systems", data[ds].get("systems"))


def read_checked(path: str | Path = "params.yaml") -> dict[str, Any]:
    """:func:`fraglib_study.params.read_params` with every library key checked too (an error names the file)."""
    data = read_params(path)
    try:
        check_params(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return data
