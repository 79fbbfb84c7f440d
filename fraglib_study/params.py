"""The schema of ``params.yaml``: every section in one place, and the one reader of the file as a whole.

The modules that own a section define its dataclass (``SynthConfig``, ``TextConfig``, ``VisionConfig``,
``TrainConfig``, ``EvalConfig``, each system's ``Config``) and read only their own section
(:func:`fraglib.core.config.load_section`): generating images never reads ``runs``. The code that reads the whole
file (a study, a search, fusion, the reports) calls :func:`read_params`, which checks every nested mapping
against this schema, so a misspelt key anywhere is an error with "did you mean" before any work. It sits
above every module whose dataclass it names (the layers: docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fraglib.core.config import (
    DATASETS,
    SECTIONS,  # noqa: F401  (re-exported: the file's sections, checked by check_sections)
    ConfigError,
    check_sections,
    did_you_mean,
    read_yaml,
)

# DATASETS (the real-data studies' sections: a new study adds its name there) and SECTIONS live in fraglib.core.config,
# the bottom layer, so that every command checks the file's sections (fraglib.core.config.read_settings)


def read_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The whole params file as a dict, checked against the schema (an error names the file: missing or
    malformed, a duplicated key, an unknown section or key anywhere, with a "did you mean")."""
    data = check_sections(read_yaml(path), path)
    try:
        check_params(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return data


# The keys of every nested mapping of params.yaml that is not read into a dataclass where it is used
# (those are: synthetic, text, vision, train, systems.<s>, runs.<r>, checked against their fields).
# Mappings whose keys the user names (results_report.socher_tables.margin, ….peri.generation) are free.
DATASET_KEYS = (
    "root",
    "split_seed",
    "splits",
    "score",
    "image_size",
    "proposal_size",
    "num_workers",
    "objectness",
    "nms_iou",
    "train",
    "systems",
    "runs",
    "folds",
    "partition",
    "fold_replicates",
    "fold_runs",
    "fold_captions",
)
PLAIN_KEYS = {
    "data_report": ("n_show", "sample_seed"),
    "text_report": ("n_examples", "example_seed"),
    "vision_report": ("n_show", "sample_seed"),
    "study": (
        "seeds",
        "jobs",
        "replicates",
        "runs",
        "extended_runs",
        "captions",
        "extended_captions",
        "train",
        "systems",
    ),
    "captions": ("runs", "n_boot"),
    "explorer": (
        "k",
        "thumb_px",
        "quality",
        "align_runs",
        "map_runs",
    ),  # fraglib_study.experiments.explore.ExplorerConfig
    "bench": ("growth_runs", "epoch_runs", "profile_runs", "amp_runs", "rehearsal_runs"),
    **{ds: DATASET_KEYS for ds in DATASETS},
    **{f"{ds}.objectness": ("model", "hidden", "epochs") for ds in DATASETS},
    "results_report": ("n_examples", "example_seed", "query_triplets", "socher_tables", "peri", "fight"),
    "results_report.socher_tables": ("margin", "squared", "length_weighting"),
    "results_report.peri": ("runs", "baselines", "masking", "generation", "thesis_rows", "working_forms"),
    "results_report.fight": ("ladder", "baselines", "searches", "collapse", "fusions", "attempts", "after"),
}
RUN_KEYS = (
    "system",
    "label",
    "seeds",
    "replicates",
    "after_papers",
)  # a run's own keys besides trainer and system settings
RUN_LISTS = (
    "captions.runs",
    "bench.growth_runs",
    "bench.epoch_runs",
    "bench.profile_runs",
    "bench.amp_runs",
    "bench.rehearsal_runs",
    *(f"{ds}.runs" for ds in DATASETS),
    *(f"{ds}.fold_runs" for ds in DATASETS),
    *(f"{ds}.fold_captions" for ds in DATASETS),
    "study.runs",
    "study.extended_runs",
    "study.captions",
    "study.extended_captions",
    "explorer.align_runs",
    "explorer.map_runs",
)


def _keys(where: str, value: Any, allowed) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all in ``allowed`` (None/empty: {})."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    for k in value:
        if k not in allowed:
            raise ConfigError(
                f"{where}.{k}: unknown parameter{did_you_mean(k, allowed)}, allowed: {', '.join(map(str, allowed))}"
            )
    return value


def check_params(data: dict[str, Any]) -> None:
    """Every nested mapping of a params dict against its schema: a misspelt key anywhere (``study.jobz``,
    ``pascal1k.trian``, ``systems.fragmnet``, ``runs.full.epohcs``) is a ConfigError with "did you mean";
    so is a run list naming an unknown run. Values are checked where they are used. (The sections' dataclasses
    are imported here, not with the module: reading parameters loads no trainer, no system and no torch.)"""
    from fraglib.data.synthetic import SynthConfig
    from fraglib.run.evaluate import EvalConfig
    from fraglib.run.train import TrainConfig
    from fraglib.systems import SYSTEMS
    from fraglib.text.build import TextConfig
    from fraglib.vision.rcnn import VisionConfig

    names = lambda cls: tuple(f.name for f in dataclasses.fields(cls))  # noqa: E731
    trainer = names(TrainConfig)
    for sec, cls in (
        ("synthetic", SynthConfig),
        ("text", TextConfig),
        ("vision", VisionConfig),
        ("train", TrainConfig),
        ("evaluation", EvalConfig),
    ):
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
            raise ConfigError(
                f"runs.{run}.system: {got!r}{did_you_mean(got, SYSTEMS)}; registered systems: {', '.join(SYSTEMS)}"
            )
        _keys(f"runs.{run}", entry, RUN_KEYS + trainer + names(SYSTEMS[entry["system"]].Config))
        if entry.get("after_papers", False) not in (True, False):
            raise ConfigError(f"runs.{run}.after_papers={entry['after_papers']!r}: expected true or false")
    for ds in DATASETS:
        if isinstance(data.get(ds), dict) and "folds" in data[ds]:
            dataset_folds(data, ds)
    for ds in ("study", *DATASETS):
        if isinstance(data.get(ds), dict):
            _keys(f"{ds}.train", data[ds].get("train"), trainer)
            systems(f"{ds}.systems", data[ds].get("systems"))
    for name, entry in _keys("fusion", data.get("fusion"), tuple(data.get("fusion") or {})).items():
        for side in ("a", "b"):  # late fusion of two trained runs (fraglib_study/experiments/fusion.py)
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


def dataset_folds(data: dict[str, Any], dataset: str) -> tuple[int, int]:
    """(k, partition) of ``<dataset>.folds`` and ``<dataset>.partition`` (default 0), the k-fold protocol
    (``python -m fraglib_study study --folds``): ConfigError naming the key unless k is an integer ≥ 3 and the partition
    seed an integer ≥ 0."""
    section = data.get(dataset) or {}
    k, partition = section.get("folds"), section.get("partition", 0)
    if not isinstance(k, int) or isinstance(k, bool) or k < 3:
        raise ConfigError(f"{dataset}.folds={k!r}: expected an integer of at least 3 (a test, a val and a train fold)")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ConfigError(f"{dataset}.partition={partition!r}: expected a non-negative integer (the partition seed)")
    return k, partition
