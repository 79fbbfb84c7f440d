"""The study's reader of ``params.yaml`` as a whole: its sections and every key the study owns.

The modules that own a section define its dataclass (``SynthConfig``, ``TextConfig``, ``VisionConfig``,
``TrainConfig``, ``EvalConfig``, each system's ``Config``) and read only their own section
(:func:`fraglib.core.config.load_section`): generating images never reads ``runs``. :func:`read_params` checks
the file's sections and the study's own mappings (reports, run lists, fusion, folds, each run's own keys), with
"did you mean", and loads no library module above ``core``: the pages and the index read parameters without the
trainer, a system or torch, so a system's edit leaves them up to date (issue #78). The keys those dataclasses own
are checked by :func:`fraglib_study.schema.read_checked`, which every command that trains or scores calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fraglib.core.config import (
    SECTIONS,  # noqa: F401  (re-exported: the file's sections, checked by check_sections)
    ConfigError,
    check_sections,
    dataset_sections,
    did_you_mean,
    read_yaml,
)

# SECTIONS and the rule that finds the datasets' sections (fraglib.core.config.dataset_sections: any other section
# holding a root) live in fraglib.core.config, the bottom layer, so that every command checks the file's sections


def read_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The whole params file as a dict, its sections and the study's own keys checked (an error names the file:
    missing or malformed, a duplicated key, an unknown section or key, with a "did you mean"); the library's keys:
    :func:`fraglib_study.schema.read_checked`."""
    data = check_sections(read_yaml(path), path)
    try:
        check_study_keys(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return data


# The keys of every nested mapping of params.yaml that is not read into a dataclass where it is used
# (those are: synthetic, text, vision, train, systems.<s>, runs.<r>, checked against their fields).
# Mappings whose keys the user names (results_report.socher_tables.margin, ….peri.generation) are free.
DATASET_KEYS = (
    "root",
    "reader",  # its reader's name (fraglib.data.readers; default: the section's name), checked by fraglib_study.schema
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
    "study.runs",
    "study.extended_runs",
    "study.captions",
    "study.extended_captions",
    "explorer.align_runs",
    "explorer.map_runs",
)
DATASET_RUN_LISTS = ("runs", "fold_runs", "fold_captions")  # each dataset section's lists of run names


def dataset_keys(data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """:data:`PLAIN_KEYS`' entries of the dataset sections of ``data`` (fraglib.core.config.dataset_sections)."""
    out: dict[str, tuple[str, ...]] = {}
    for ds in dataset_sections(data):
        out[ds], out[f"{ds}.objectness"] = DATASET_KEYS, ("model", "hidden", "epochs")
    return out


def checked_keys(where: str, value: Any, allowed) -> dict[str, Any]:
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


def check_study_keys(data: dict[str, Any]) -> None:
    """The study's own mappings of a params dict: a misspelt key (``study.jobz``, ``pascal1k.trian``,
    ``results_report.fihgt``) or a run list naming an unknown run is a ConfigError with "did you mean"; each run
    names its system by a string. The keys of the library's dataclasses: :func:`fraglib_study.schema.check_params`."""
    for where, allowed in {**PLAIN_KEYS, **dataset_keys(data)}.items():
        head, _, sub = where.partition(".")
        value = data.get(head)
        if sub:
            value = value.get(sub) if isinstance(value, dict) else None
        checked_keys(where, value, allowed)
    runs = data.get("runs") or {}
    for run, entry in checked_keys("runs", runs, tuple(runs)).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("system"), str):
            got = entry.get("system") if isinstance(entry, dict) else entry
            raise ConfigError(f"runs.{run}.system: {got!r}: expected the name of a system (fraglib.systems)")
        if entry.get("after_papers", False) not in (True, False):
            raise ConfigError(f"runs.{run}.after_papers={entry['after_papers']!r}: expected true or false")
    for ds in dataset_sections(data):
        if "folds" in data[ds]:
            dataset_folds(data, ds)
    for name, entry in checked_keys("fusion", data.get("fusion"), tuple(data.get("fusion") or {})).items():
        for side in ("a", "b"):  # late fusion of two trained runs (fraglib_study/experiments/fusion.py)
            r = checked_keys(f"fusion.{name}", entry, ("a", "b", "label")).get(side)
            if r not in runs:
                raise ConfigError(f"fusion.{name}.{side}: unknown run {r!r}{did_you_mean(r, runs)}")
    for where in RUN_LISTS + tuple(f"{ds}.{k}" for ds in dataset_sections(data) for k in DATASET_RUN_LISTS):
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
