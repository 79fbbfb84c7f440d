"""Where a model wins or loses: the test queries' groups (image category, caption length, a verb or none), read
from the data or from committed figure data, and the runs' per-group metrics and paired differences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.core.outputs import unit_seed
from fraglib.metrics.retrieval import N_BOOT, paired_difference
from fraglib.metrics.retrieval import rank_metric as _metric

LENGTH_BINS = (0, 8, 10, 12, 15, 1000)  # caption length in tokens: <=8, 9-10, 11-12, 13-15, >15


LENGTH_NAMES = (
    [f"<= {LENGTH_BINS[1]} words"]
    + [f"{a + 1}-{b} words" for a, b in zip(LENGTH_BINS[1:-2], LENGTH_BINS[2:-1])]
    + [f"> {LENGTH_BINS[-2]} words"]
)


def has_verb(tokens) -> bool:
    """Whether a parsed caption has a verb: a token tagged VERB / AUX (universal tags, stanza) or
    VB* (Penn tags, spaCy's cache leaves the universal column empty), auxiliaries included."""
    return any(t.upos in ("VERB", "AUX") or t.xpos.startswith("VB") for t in tokens)


def verb_groups(has_verb: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Socher et al. §6.6's split of sentence queries: whether each has a verb, and whether that
    agrees with most of the other sentences of its image ("like the others" / "unlike the
    others"; a tie counts as unlike). ``has_verb`` (m,) bool, ``image`` (m,) image ids."""
    out = []
    for j in range(len(has_verb)):
        others = has_verb[(image == image[j]) & (np.arange(len(image)) != j)]
        like = len(others) > 0 and (others == has_verb[j]).mean() > 0.5
        out.append(f"{'verb' if has_verb[j] else 'no verb'}, {'like' if like else 'unlike'} the others")
    return np.array(out)


def query_record(dataset_dir: str | Path, parse_file: str | Path | None = None) -> dict[str, list]:
    """One split's test queries, in the order of ``ranks.json``: ``category`` per test image (its dataset
    ``category`` or "-"), and per test sentence ``image`` (its image's position among the test images),
    ``length`` (tokens) and, with ``parse_file`` (CoNLL-U), ``verb`` (:func:`has_verb`, 0/1): what the
    breakdowns need, small enough for git (``python -m fraglib_study figures``). Raises ValueError when a test
    sentence is not in the parse."""
    from fraglib.data import read_karpathy_json

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    test = [im for im in ds.images if im["split"] == "test"]
    position = {im["imgid"]: k for k, im in enumerate(test)}
    sents = [s for s in ds.sentences if s["imgid"] in position]
    out: dict[str, list] = {
        "category": [im.get("category", "-") for im in test],
        "image": [position[s["imgid"]] for s in sents],
        "length": [len(s["tokens"]) for s in sents],
    }
    if parse_file:
        from fraglib.text.parse import read_conllu

        verb = {p.sentid: has_verb(p.tokens) for p in read_conllu(parse_file)[1]}
        missing = [s["sentid"] for s in sents if s["sentid"] not in verb]
        if missing:
            raise ValueError(
                f"{parse_file}: {len(missing)} test sentences of {dataset_dir} are not in the parse "
                f"(e.g. sentid {missing[0]}); re-run the parse stage"
            )
        out["verb"] = [int(verb[s["sentid"]]) for s in sents]
    return out


def groups_of(record: dict[str, list]) -> dict[str, np.ndarray]:
    """Per-query group labels of one split's test queries (a :func:`query_record`), in the order of
    ``ranks.json``: ``annotation_category`` (one per test image), ``search_category`` (one per test sentence:
    its image's category), ``search_length`` (one per test sentence: token-count bin, e.g. "9-10 words") and,
    when the record has the verbs, ``similarity_verb`` (:func:`verb_groups`)."""
    category, image = np.array(record["category"]), np.array(record["image"], dtype=int)
    lengths = np.array(record["length"])
    bins = np.clip(np.searchsorted(np.array(LENGTH_BINS), lengths, side="left") - 1, 0, len(LENGTH_NAMES) - 1)
    out = {
        "annotation_category": category,
        "search_category": category[image],
        "search_length": np.array([LENGTH_NAMES[b] for b in bins]),
    }
    if "verb" in record:
        out["similarity_verb"] = verb_groups(np.array(record["verb"], dtype=bool), image)
    return out


def test_groups(
    dataset_dir: str | Path, parse_file: str | Path | None = None, queries_file: str | Path | None = None, seed=None
) -> dict[str, np.ndarray]:
    """:func:`groups_of` one split's test queries: from its data (``dataset_dir``, with ``parse_file`` the verb
    split) when they are here, else from the committed record of split ``seed`` in ``queries_file`` (written by
    ``python -m fraglib_study figures``; its verbs only with ``parse_file`` named). Raises FileNotFoundError when
    neither is."""
    live = (Path(dataset_dir) / "dataset.json").is_file()
    if live and (not parse_file or Path(parse_file).is_file()):
        return groups_of(query_record(dataset_dir, parse_file))
    record = _query_records(queries_file).get(str(seed))
    if record is None:
        raise FileNotFoundError(
            f"{Path(dataset_dir) / 'dataset.json'}{' or ' + str(parse_file) if live else ''}: absent, and split "
            f"{seed} is not in {queries_file or 'a queries file'} (python -m fraglib_study figures writes it)"
        )
    return groups_of(record if parse_file else {k: v for k, v in record.items() if k != "verb"})


def _query_records(queries_file: str | Path | None) -> dict[str, dict[str, list]]:
    """Split seed -> :func:`query_record` of a committed ``queries.json`` ({} without one)."""
    if not queries_file or not Path(queries_file).is_file():
        return {}
    return json.loads(Path(queries_file).read_text(encoding="utf-8"))


def have_groups(
    dataset_dir: str, seeds, queries_file: str | Path | None = None, parse_file: str | Path | None = None
) -> bool:
    """Whether :func:`test_groups` can label every split of ``seeds``, with ``parse_file`` named the verb split
    too: the data (and the parse) here, or the split's committed record (with its verbs)."""
    records = _query_records(queries_file)

    def ok(s) -> bool:
        live = (Path(str(dataset_dir).format(seed=s)) / "dataset.json").is_file()
        if live and (not parse_file or Path(parse_file).is_file()):
            return True
        return str(s) in records and (not parse_file or "verb" in records[str(s)])

    return all(ok(s) for s in seeds)


def breakdown(
    study: dict[str, dict[str, Any]],
    dataset_dir: str,
    runs: list[str],
    metric: str = "r5",
    labels: dict[str, str] | None = None,
    parse_file: str | Path | None = None,
    queries_file: str | Path | None = None,
) -> pd.DataFrame:
    """``metric`` of each run per group of test queries (:func:`test_groups`: image category,
    caption length, with ``parse_file`` the verb split of sentence similarity), averaged over seeds
    (= splits; ``dataset_dir`` may hold ``{seed}``; a split whose data are absent is read from
    ``queries_file``). Long format: run, direction, by, group, value, queries (per split, mean)."""
    rows = []
    for v in runs:
        s = study[v]
        for k, seed in enumerate(unit_seed(u) for u in s["units"]):
            groups = test_groups(str(dataset_dir).format(seed=seed), parse_file, queries_file, seed)
            for key, group_of in groups.items():
                d, by = key.split("_")
                if d not in s["ranks"]:
                    continue
                r = s["ranks"][d][k]
                if len(r) != len(group_of):
                    raise ValueError(
                        f"{v} seed {seed}: {len(r)} {d} ranks but {len(group_of)} test queries in {dataset_dir}"
                    )
                for g in np.unique(group_of):
                    m = group_of == g
                    rows.append(
                        {
                            "run": (labels or {}).get(v, v),
                            "direction": d,
                            "by": by,
                            "group": g,
                            "seed": seed,
                            "value": float(_metric(r[m], metric)),
                            "queries": int(m.sum()),
                        }
                    )
    df = pd.DataFrame(rows)
    return df.groupby(["run", "direction", "by", "group"], as_index=False).agg(
        value=("value", "mean"), queries=("queries", "mean")
    )


def group_differences(
    study: dict[str, dict[str, Any]],
    dataset_dir: str,
    pairs: list[tuple[str, str]],
    key: str = "annotation_category",
    metric: str = "r5",
    labels: dict[str, str] | None = None,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """Paired difference a − b of ``metric`` within each group of test queries (``key`` of
    :func:`test_groups`, e.g. ``annotation_category``), with the three-level bootstrap CI of
    :func:`paired_difference` over the units both runs have. Every unit (split) must hold the same
    number of queries in a group (stratified splits: Pascal1K's 5 test images per category).
    Long format: run, base, direction, by, group, queries (per split), diff, lo, hi, excludes_zero."""
    d, by = key.split("_")
    rows = []
    for a, b in pairs:
        common = [u for u in study[a]["units"] if u in study[b]["units"]]
        ia = [study[a]["units"].index(u) for u in common]
        ib = [study[b]["units"].index(u) for u in common]
        group_of = [test_groups(str(dataset_dir).format(seed=unit_seed(u)))[key] for u in common]
        ra, rb = study[a]["ranks"][d][ia], study[b]["ranks"][d][ib]
        if ra.shape[1] != len(group_of[0]):
            raise ValueError(f"{a}: {ra.shape[1]} {d} ranks but {len(group_of[0])} test queries in {dataset_dir}")
        for g in np.unique(np.concatenate(group_of)):
            masks = [gs == g for gs in group_of]
            counts = {int(m.sum()) for m in masks}
            if len(counts) != 1:
                raise ValueError(
                    f"group {g!r} of {key} has {sorted(counts)} queries in different splits: "
                    "group differences need stratified splits"
                )
            A = np.stack([ra[k][m] for k, m in enumerate(masks)])
            B = np.stack([rb[k][m] for k, m in enumerate(masks)])
            r = paired_difference(A, B, metric, n_boot, groups=[study[a]["groups"][i] for i in ia])
            rows.append(
                {
                    "run": (labels or {}).get(a, a),
                    "base": (labels or {}).get(b, b),
                    "direction": d,
                    "by": by,
                    "group": g,
                    "queries": counts.pop(),
                    **r,
                }
            )
    return pd.DataFrame(rows)
