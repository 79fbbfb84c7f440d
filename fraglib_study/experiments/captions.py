"""Captions and paraphrases of a trained generating system (``GENERATES``, e.g. STT), scored with the
coco-caption toolkit (``pycocoevalcap``: PTB tokenizer, BLEU-1..4, METEOR 1.5, ROUGE-L, CIDEr-D).

    python -m fraglib_study captions --run-dir runs/synthetic/stt [--beam 3] [--split test]
    python -m fraglib_study captions --run-dir runs/pascal1k/stt_text --dataset-dir data/flickr8k --images none \
        --parse-file data/flickr8k/parse.conllu --name transfer_flickr8k     # text-only transfer

For every seed of the run (``seeds/seed<N>/best.pt``, the system rebuilt from the checkpoint alone):

* **captioning**: one caption per image of the split, decoded from the image's joint-space vector;
  references = all of the image's captions;
* **paraphrasing**: one paraphrase per caption (the input), decoded from the caption's vector;
  references = the image's *other* captions (the input excluded: copying it would otherwise score
  highly). Inputs without words, and images with a single caption, are skipped and counted;
* **input dependence** (:func:`input_dependence`): the captions' NLL from their own input vs another's
  — a decoder that ignores its input (a language model) scores the same on both.

Text only (the image view ``none``: the run's own, or ``--images none`` on data without images):
paraphrasing only; captioning is absent from the outputs, not scored as zero. **Transfer** to other
data (``--dataset-dir`` with ``--parse-file``, its CoNLL-U parse): its captions are re-encoded word by
word in each model's own vocabulary (:func:`fraglib.text.build.run_tokens`; a word outside it becomes
``<unk>``, counted in the record as ``reencoded``).

Writes ``<name>/seed<N>.json`` (every generated sentence beside its references) and
``<name>.json`` in the run's folder (``name``: ``captions``, or e.g. ``transfer_flickr8k``): per task and metric the mean over seeds, the per-seed values and a 95% bootstrap CI
over images (captioning) or input captions (paraphrasing), the same resample for every seed. BLEU is
recomputed by the toolkit on each resample (its cooked n-gram statistics reused); METEOR, ROUGE-L and
CIDEr-D resample the toolkit's per-sentence scores (CIDEr-D's document frequencies stay those of the
whole split; METEOR's corpus value is not the mean of its sentence scores, so its CI is that of the
mean sentence score, shifted to the corpus value). METEOR and the tokenizer run Java: without a
``java`` on PATH this step stops with :class:`JavaMissing` (docs/runs.md, "Caption metrics").
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from fraglib.core.outputs import OVERWRITE_HELP, claim, claim_cli, command, unit_seed, write_text
from fraglib.run.checkpoint import CheckpointError
from fraglib.run.inputs import DataPaths
from fraglib_study.experiments.caption_record import METRICS, TASKS, read_record


class JavaMissing(RuntimeError):
    """No Java runtime: METEOR and the PTB tokenizer of pycocoevalcap cannot run."""


@functools.lru_cache(maxsize=None)
def _java_fails(java: str) -> str:
    """Why ``java -version`` fails ('' when it runs), once per Java path and process."""
    import subprocess

    try:
        r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return f"exit status {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}" if r.returncode else ""


def java_missing() -> str | None:
    """Why the caption metrics cannot run here, or None: no ``java``, a ``java`` that does not run
    (``java -version`` fails), or no pycocoevalcap."""
    java = shutil.which("java")
    if java is None:
        return (
            "no 'java' on PATH: pycocoevalcap's METEOR and PTB tokenizer need a Java runtime "
            "(docs/runs.md, 'Caption metrics': e.g. apt-get install openjdk-17-jre-headless)"
        )
    broken = _java_fails(java)
    if broken:
        return (
            f"'{java} -version' fails ({broken}): pycocoevalcap's METEOR and PTB tokenizer need a working Java runtime"
        )
    try:
        import pycocoevalcap  # noqa: F401
    except ImportError:
        return "pycocoevalcap is not installed (pip install pycocoevalcap==1.2)"
    return None


def tokenize(texts: dict[Any, list[str]]) -> dict[Any, list[str]]:
    """The toolkit's PTB tokenization (lower case, punctuation removed) of every sentence list."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    why = java_missing()
    if why:
        raise JavaMissing(why)
    keys = list(texts)
    flat = {i: [{"caption": c} for c in texts[k]] for i, k in enumerate(keys)}
    out = PTBTokenizer().tokenize(flat) if flat else {}
    lost = [k for i, k in enumerate(keys) if i not in out]
    if lost:
        raise JavaMissing(
            f"pycocoevalcap's PTB tokenizer (Java) returned nothing for {len(lost)} of {len(keys)} "
            "sentence lists; check that Java runs (java -version)"
        )
    return {k: out[i] for i, k in enumerate(keys)}


def caption_scores(refs: dict[Any, list[str]], hyps: dict[Any, str], tokenized: bool = False) -> dict[str, Any]:
    """Corpus scores of ``hyps`` (one sentence per key) against ``refs`` (≥ 1 per key): ``{metric: value}``
    plus ``"per_item"`` (metric → (n,) sentence scores, keys in ``refs`` order; BLEU: the toolkit's
    sentence BLEU) and ``"bleu_stats"`` (the cooked statistics, for :func:`bleu_on`)."""
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    keys = list(refs)
    if set(keys) != set(hyps) or not keys:
        raise ValueError(
            f"caption_scores: references for {len(refs)} items, hypotheses for {len(hyps)}; need the same non-empty set"
        )
    if any(not r for r in refs.values()):
        raise ValueError("caption_scores: an item without references")
    if not tokenized:
        joined = tokenize({**{("r", k): refs[k] for k in keys}, **{("h", k): [hyps[k]] for k in keys}})
        refs = {k: joined[("r", k)] for k in keys}
        hyps = {k: joined[("h", k)][0] for k in keys}
    gts = {i: refs[k] for i, k in enumerate(keys)}
    res = {i: [hyps[k]] for i, k in enumerate(keys)}
    bleu = BleuScorer(n=4)
    for i in range(len(keys)):
        bleu += (res[i][0], gts[i])
    b, b_per = bleu.copy().compute_score(option="closest", verbose=0)
    out: dict[str, Any] = {f"bleu{n + 1}": float(b[n]) for n in range(4)}
    per = {f"bleu{n + 1}": np.asarray(b_per[n], float) for n in range(4)}
    for name, scorer in (("meteor", _meteor), ("rouge_l", Rouge), ("cider", Cider)):
        s, items = scorer().compute_score(gts, res)
        out[name], per[name] = float(s), np.asarray(items, float).reshape(-1)
    out["per_item"], out["bleu_stats"] = per, bleu
    return out


_METEOR: list[Any] = []


def _meteor() -> Any:
    """The process's one METEOR scorer (its JVM loads the paraphrase table once: ~20 s)."""
    if not _METEOR:
        from pycocoevalcap.meteor.meteor import Meteor

        _METEOR.append(Meteor())
    return _METEOR[0]


def bleu_on(stats: Any, idx: np.ndarray) -> list[float]:
    """BLEU-1..4 of the items ``idx`` (with repeats) by the toolkit, from cooked statistics."""
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    s = BleuScorer(n=4)
    s.crefs = [stats.crefs[i] for i in idx]
    s.ctest = [stats.ctest[i] for i in idx]
    return [float(x) for x in s.compute_score(option="closest", verbose=0)[0]]


def bootstrap(per_seed: list[dict[str, Any]], n_boot: int = 200, seed: int = 0) -> dict[str, list[float]]:
    """95% CI of each seed-averaged metric over resampled items (the same draw for every seed;
    ``per_seed``: outputs of :func:`caption_scores` on the same items)."""
    n = len(per_seed[0]["per_item"]["cider"])
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    boot = {m: np.zeros(n_boot) for m in METRICS}
    for s in per_seed:
        for b in range(n_boot):
            for k, v in enumerate(bleu_on(s["bleu_stats"], idx[b])):
                boot[f"bleu{k + 1}"][b] += v / len(per_seed)
        for m in ("meteor", "rouge_l", "cider"):
            x = s["per_item"][m]
            shift = s[m] - x.mean() if m == "meteor" else 0.0  # corpus METEOR ≠ mean sentence METEOR
            boot[m] += (x[idx].mean(1) + shift) / len(per_seed)
    return {m: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for m, v in boot.items()}


# ----------------------------------------------------------------------------- from a trained seed
def references(dataset_dir: str | Path, split: Any) -> tuple[list[list[str]], list[str], list[int]]:
    """(raw captions of each image of ``split``, in split order; raw text of each caption; the images' imgids)."""
    from fraglib.data import read_karpathy_json

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    raw = {s["sentid"]: s["raw"] for s in ds.sentences}
    text = [raw[int(j)] for j in split.sentids]
    per_image: list[list[str]] = [[] for _ in range(split.n_images)]
    imgids = [-1] * split.n_images
    for j, i in enumerate(split.sentence_image):
        per_image[i].append(text[j])
    by_sent = {s["sentid"]: s["imgid"] for s in ds.sentences}
    for j, i in enumerate(split.sentence_image):
        imgids[i] = by_sent[int(split.sentids[j])]
    return per_image, text, imgids


def grounding(
    captions: list[str], objects: list[list[dict[str, str]]], colours: list[str], shapes: list[str]
) -> dict[str, float]:
    """How often a generated caption's colour words, shape words and "<colour> <shape>" pairs name
    something in its own image (``objects``: each image's objects with ``colour`` and ``shape``), as
    a precision in %, against the same captions scored on other images (``_chance``: the mean over up
    to 25 cyclic shifts of the images, each giving every caption another image: chance for these very
    words). Plural shapes count (``circles``)."""

    def mentions(c: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
        w = [t[:-1] if t[:-1] in shapes and t not in shapes else t for t in c.lower().split()]
        return (
            [t for t in w if t in colours],
            [t for t in w if t in shapes],
            [(a, b) for a, b in zip(w, w[1:]) if a in colours and b in shapes],
        )

    def precision(image_of: np.ndarray) -> dict[str, float]:
        hit = {"colour": [0, 0], "shape": [0, 0], "pair": [0, 0]}
        for c, i in zip(captions, image_of):
            cols, shps, pairs = mentions(c)
            objs = objects[i]
            for key, found, ok in (
                ("colour", cols, lambda t: any(o["colour"] == t for o in objs)),
                ("shape", shps, lambda t: any(o["shape"] == t for o in objs)),
                ("pair", pairs, lambda p: any((o["colour"], o["shape"]) == p for o in objs)),
            ):
                hit[key][0] += sum(bool(ok(t)) for t in found)
                hit[key][1] += len(found)
        return {k: 100.0 * a / b if b else float("nan") for k, (a, b) in hit.items()}

    n = len(captions)
    own = precision(np.arange(n))
    shifts = np.unique(np.linspace(1, n - 1, min(n - 1, 25)).astype(int)) if n > 1 else []
    shifted = [precision((np.arange(n) + d) % n) for d in shifts]
    other = {k: float(np.mean([p[k] for p in shifted])) if shifted and own[k] == own[k] else float("nan") for k in own}
    counts = [mentions(c) for c in captions]
    return {
        **{f"{k}_precision": v for k, v in own.items()},
        **{f"{k}_chance": v for k, v in other.items()},
        "captions_naming_a_colour": 100.0 * np.mean([bool(m[0]) for m in counts]) if n else float("nan"),
        "captions_naming_a_shape": 100.0 * np.mean([bool(m[1]) for m in counts]) if n else float("nan"),
    }


@torch.no_grad()
def input_dependence(system: Any, split: Any, chunk: int = 256, captioning: bool = True) -> dict[str, float]:
    """Does the decoder read its input? Mean teacher-forced NLL (nats per caption, ``</s>`` included) of
    the split's captions decoded from their own input and from another's: **captioning** — each caption
    from its image's vector vs from the image n/2 positions on; **paraphrasing** — caption B (another
    caption of the image, :func:`fraglib.systems.stt.draw_targets` with seed 0) from caption A's vector vs
    from the vector of a caption of another image (the usable captions rolled by half their number;
    pairs that still share an image are dropped). Equal values: the decoder is a language model.
    ``captioning=False`` (text only): the paraphrasing pair alone."""
    from fraglib.systems.stt import draw_targets

    system.eval()
    n = split.n_images
    usable = split.usable_sentences() & (split.images.counts() > 0)[split.sentence_image]
    j = np.flatnonzero(usable)
    img = split.sentence_image[j]
    C = torch.cat(
        [
            system.sentence_vectors(system.encode_sentences(split.sentences.take(j[a : a + chunk])))
            for a in range(0, len(j), chunk)
        ]
    )
    other = np.roll(np.arange(len(j)), len(j) // 2)
    keep = img[other] != img
    b = draw_targets(split.sentence_image, usable, 0, 0)[j]

    def nll(u: torch.Tensor, targets: np.ndarray) -> float:
        return (
            float(
                torch.cat(
                    [
                        system.caption_nll(u[a : a + chunk], split.sentences.take(targets[a : a + chunk]))
                        for a in range(0, len(targets), chunk)
                    ]
                ).mean()
            )
            if len(targets)
            else float("nan")
        )

    out = {"paraphrasing_own": nll(C[keep], b[keep]), "paraphrasing_other": nll(C[other][keep], b[keep])}
    if captioning:
        U = torch.cat(
            [
                system.image_vectors(system.encode_images(split.images.take(np.arange(a, min(a + chunk, n)))))
                for a in range(0, n, chunk)
            ]
        )
        out = {"captioning_own": nll(U[img], j), "captioning_other": nll(U[(img + n // 2) % n], j), **out}
    return out


@torch.no_grad()
def generate(
    system: Any, split: Any, vocab: list[str], beam: int | None = None, chunk: int = 256, captioning: bool = True
) -> dict[str, list[str]]:
    """Decoded sentences: ``images`` (one per image of ``split``; none when not ``captioning``) and
    ``paraphrases`` (one per caption), words joined by spaces (``vocab``: the tokens view's vocabulary; ``<unk>`` kept)."""
    system.eval()
    words = lambda ids: " ".join(vocab[t] for t in ids)  # noqa: E731
    out: dict[str, list[str]] = {"images": [], "paraphrases": []}
    for key, n, take, encode, vec in (
        ("images", split.n_images if captioning else 0, split.images.take, system.encode_images, system.image_vectors),
        ("paraphrases", split.n_sentences, split.sentences.take, system.encode_sentences, system.sentence_vectors),
    ):
        for a in range(0, n, chunk):
            u = vec(encode(take(np.arange(a, min(a + chunk, n)))))
            out[key] += [words(s) for s in system.decode(u, beam=beam)]
    return out


def seed_captions(
    seed_dir: str | Path,
    split_name: str = "test",
    beam: int | None = None,
    paths: DataPaths | None = None,
    sentences_file: str | Path | None = None,
    images: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Generate and score one trained seed: (scores with their per-item parts, for :func:`bootstrap`;
    the record of every generated sentence beside its references and the scores). ``paths``, ``sentences_file``
    and ``images`` as in :func:`fraglib.run.evaluate.load_trained`; image view ``none``: paraphrasing only."""
    from fraglib.run.evaluate import load_trained

    system, ck, split = load_trained(seed_dir, paths, split_name, sentences_file, images)
    captioning = (images or system.cfg.images) != "none"
    if not system.GENERATES:
        raise ValueError(f"{seed_dir}: system {ck['system']!r} does not generate sentences")
    ddir = Path(paths.dataset if paths else ck["info"]["dataset_dir"])
    per_image, text, imgids = references(ddir, split)
    gen = generate(system, split, ck["info"]["relations"], beam, captioning=captioning)
    has_image = split.images.counts() > 0
    cap_keys = [i for i in range(split.n_images) if has_image[i] and per_image[i]] if captioning else []
    usable = (split.sentences.counts() > 0) & has_image[split.sentence_image]
    para_refs = {}
    for j in np.flatnonzero(usable):
        others = [text[k] for k in np.flatnonzero(split.sentence_image == split.sentence_image[j]) if k != j]
        if others:
            para_refs[int(j)] = others
    skipped = {
        "images_without_features": int((~has_image).sum()),
        "inputs_without_words_or_image": int((~usable).sum()),
        "inputs_without_another_caption": int(usable.sum()) - len(para_refs),
    }
    scores = {"paraphrasing": caption_scores(para_refs, {j: gen["paraphrases"][j] for j in para_refs})}
    if captioning:
        scores["captioning"] = caption_scores(
            {i: per_image[i] for i in cap_keys}, {i: gen["images"][i] for i in cap_keys}
        )
    if captioning and (ddir / "ground_truth.json").exists():  # the synthetic benchmark: is it the right objects?
        truth = json.loads((ddir / "ground_truth.json").read_text())
        objs = {im["imgid"]: im["objects"] for im in truth["images"]}
        shapes = sorted({o["shape"] for im in truth["images"] for o in im["objects"]})
        scores["grounding"] = grounding(
            [gen["images"][i] for i in cap_keys], [objs[imgids[i]] for i in cap_keys], list(truth["colours"]), shapes
        )
    scores["input_dependence"] = input_dependence(system, split, captioning=captioning)
    cider = {i: float(c) for i, c in zip(cap_keys, scores["captioning"]["per_item"]["cider"])} if captioning else {}
    record = {
        "beam": beam or system.cfg.beam,
        "split": split_name,
        "skipped": skipped,
        "dataset_dir": str(ddir),
        "unk_share": float((split.sentences.data["rel"] == 0).float().mean()) if split.sentences.n else None,
        "grounding": scores.get("grounding"),
        "input_dependence": scores["input_dependence"],
        "scores": {t: {m: scores[t][m] for m in METRICS} for t in TASKS if t in scores},
        "captioning": [
            {"image": int(i), "caption": gen["images"][i], "references": per_image[i], "cider": cider.get(i)}
            for i in range(split.n_images)
            if captioning
        ],
        "paraphrasing": [
            {
                "sentence": int(j),
                "input": text[j],
                "paraphrase": gen["paraphrases"][j],
                "references": para_refs.get(j, []),
            }
            for j in range(split.n_sentences)
        ],
    }
    return scores, compact_record(record)


def compact_record(record: dict[str, Any]) -> dict[str, Any]:
    """A seed's record as written: every caption of the split once (``texts``), inputs and references as
    positions into it (a 5,000-caption split: 0.6 MB instead of 2.2 MB). :func:`read_record` expands it."""
    if "texts" in record:
        return record
    texts: list[str] = []
    pos: dict[str, int] = {}

    def at(t: str) -> int:
        if t not in pos:
            pos[t] = len(texts)
            texts.append(t)
        return pos[t]

    out = {k: v for k, v in record.items() if k not in ("captioning", "paraphrasing")}
    out["paraphrasing"] = [
        {
            "sentence": p["sentence"],
            "input": at(p["input"]),
            "paraphrase": p["paraphrase"],
            "references": [at(r) for r in p["references"]],
        }
        for p in record["paraphrasing"]
    ]
    out["captioning"] = [{**c, "references": [at(r) for r in c["references"]]} for c in record["captioning"]]
    out["texts"] = texts
    return out


def run_units(summary: dict[str, Any]) -> list[str]:
    """The training runs of a study run's ``metrics.json`` (``units``: ``"3"``, ``"3r1"``, …; a summary written
    before replicates existed: its seeds), each captioned into ``<name>/seed<unit>.json``."""
    return [str(u) for u in summary.get("units") or summary["seeds"]]


def caption_family(run_dir: Path, name: str, seeds: list[str] | None = None) -> list[Path]:
    """``<name>.json`` and the per-seed files under ``<name>/``: those there now, or (``seeds``) those a run writes."""
    per = (
        [run_dir / name / f"seed{s}.json" for s in seeds]
        if seeds is not None
        else sorted((run_dir / name).glob("*.json"))
    )
    return [run_dir / f"{name}.json"] + per


# the run folder's own files and folders (training, fraglib_study.experiments.explore): a caption name never collides with them
RESERVED_NAMES = ("metrics", "history", "seeds", "timing", "ranks", "explorer", "thumbs", "crops", "triplets")
NAME_CHARS = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def check_name(name: str) -> str:
    """``name`` when it is a plain file-name stem for ``<run-dir>/<name>.json`` and ``<run-dir>/<name>/``:
    letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` (no path: ``.``, ``..``, ``a/b``), and
    not one of the run's own files (:data:`RESERVED_NAMES`, ``alignments_*``); ValueError saying why otherwise."""
    if not NAME_CHARS.fullmatch(name or ""):
        raise ValueError(
            f"--name {name!r}: not a plain file name; use letters, digits, '_', '-' and '.', not starting with "
            "'.' and without '/' or '\\' (it names <run-dir>/<name>.json and <run-dir>/<name>/, e.g. transfer_flickr8k)"
        )
    low = name.lower()
    if low in RESERVED_NAMES or low.startswith("alignments_"):
        raise ValueError(
            f"--name {name!r}: the run folder's own files are named so ({', '.join(RESERVED_NAMES)}, "
            "alignments_*); choose another name (e.g. captions_beam5)"
        )
    return name


def missing_checkpoints(run_dir: Path, seeds: Sequence[str | int]) -> list[str]:
    """For each seed of the run whose checkpoint :func:`fraglib.run.checkpoint.best_of` does not find: why (the path)."""
    from fraglib.run.checkpoint import best_of

    why = []
    for s in seeds:
        try:
            best_of(run_dir / "seeds" / f"seed{s}")
        except CheckpointError as exc:
            why.append(str(exc))
    return why


def kept_seeds(run_dir: Path, name: str, seeds: list[str], split: str, beam: int | None) -> list[str]:
    """The seeds whose sentences ``--keep-results`` keeps instead of decoding again: their checkpoint is not here
    (:func:`missing_checkpoints`) and their record ``<name>/seed<N>.json`` is, made on ``split`` with ``beam``
    (None: the system's own, whatever the record says). They are re-scored from their sentences
    (:func:`rescore`); a record made otherwise is refused (ValueError, naming it)."""
    kept = []
    for s in seeds:
        path = run_dir / name / f"seed{s}.json"
        if not path.is_file() or not missing_checkpoints(run_dir, [s]):
            continue
        rec = json.loads(path.read_text())
        if rec.get("split") != split or (beam is not None and rec.get("beam") != beam):
            raise ValueError(
                f"{path}: made on split {rec.get('split')!r} with beam {rec.get('beam')!r}, not {split!r} / "
                f"{beam!r}, and its checkpoint is not here to decode again: nothing kept or written"
            )
        kept.append(s)
    return kept


def rescore(path: Path) -> dict[str, Any]:
    """The scores of a kept seed record (as :func:`seed_captions` returns them), computed again from its
    sentences and references; its input dependence and grounding are read from it (they need the model).
    ValueError naming the file if the sentences do not give the scores it records (|Δ| > 1e-9)."""
    rec = read_record(path)
    para = [p for p in rec["paraphrasing"] if p["references"]]
    scores: dict[str, Any] = {
        "paraphrasing": caption_scores(
            {p["sentence"]: p["references"] for p in para}, {p["sentence"]: p["paraphrase"] for p in para}
        )
    }
    caps = [c for c in rec["captioning"] if c["cider"] is not None]
    if caps:
        scores["captioning"] = caption_scores(
            {c["image"]: c["references"] for c in caps}, {c["image"]: c["caption"] for c in caps}
        )
    if rec.get("grounding") is not None:
        scores["grounding"] = rec["grounding"]
    scores["input_dependence"] = rec["input_dependence"]
    off = [
        f"{t} {m} {scores[t][m]:.6g} vs {v:.6g}"
        for t, ms in rec["scores"].items()
        for m, v in ms.items()
        if t not in scores or abs(scores[t][m] - v) > 1e-9
    ]
    if off or set(rec["scores"]) != {t for t in TASKS if t in scores}:
        raise ValueError(f"{path}: its sentences do not give the scores it records ({'; '.join(off) or 'tasks'})")
    return scores


def _claim_outputs(
    run_dir: Path,
    name: str,
    seeds: list[str],
    overwrite: bool,
    claimer: Any,
    check: bool = False,
    kept: Sequence[str] = (),
) -> None:
    """Claim ``name``'s outputs (``claimer(family, writes, overwrite, what)``), never deleting one before every
    seed's checkpoint is found: an existing output without ``overwrite`` is refused first, then (with
    ``overwrite``, or ``check``) a missing checkpoint stops the command (:class:`fraglib.run.checkpoint.CheckpointError`,
    naming it), and only then are ``overwrite``'s stale files removed. ``kept`` seeds' records
    (:func:`kept_seeds`) are neither claimed nor checked for a checkpoint: they stay as they are."""
    keep = {run_dir / name / f"seed{s}.json" for s in kept}
    family = [p for p in caption_family(run_dir, name) if p not in keep]
    writes = [p for p in caption_family(run_dir, name, seeds) if p not in keep]
    what = f"fraglib_study.experiments.captions --run-dir {run_dir} --name {name}"
    if not overwrite:
        claimer(family, writes, False, what)
    missing = missing_checkpoints(run_dir, [s for s in seeds if s not in kept]) if overwrite or check else []
    if missing:
        raise CheckpointError(
            f"{run_dir}: {len(missing)} of {len(seeds)} seed(s) without a checkpoint (nothing was written or "
            "deleted): " + "; ".join(missing)
        )
    if overwrite:
        claimer(family, writes, True, what)


def run_captions(
    run_dir: str | Path,
    split: str = "test",
    beam: int | None = None,
    n_boot: int = 200,
    paths: DataPaths | None = None,
    parse_file: str | None = None,
    images: str | None = None,
    name: str = "captions",
    overwrite: bool = False,
    keep_results: bool = False,
) -> dict[str, Any]:
    """Every seed of a study run (``metrics.json: seeds``; ``{seed}`` in ``paths`` and
    ``parse_file``): writes ``<run_dir>/<name>/seed<N>.json`` (the sentences) and returns the run's
    summary, also written to ``<run_dir>/<name>.json`` (beside, never inside, the training stage's
    outputs). ``parse_file``: the data's captions re-encoded in each model's vocabulary (module docstring).
    Existing outputs of ``name`` are refused before any decoding unless ``overwrite`` (:mod:`fraglib.core.outputs`).
    ``keep_results``: a seed whose checkpoint is not here keeps its record and is re-scored from it (:func:`kept_seeds`)."""
    import tempfile

    from fraglib.run.checkpoint import best_of, load
    from fraglib.text.build import run_tokens

    run_dir = Path(run_dir)
    check_name(name)
    summary = json.loads((run_dir / "metrics.json").read_text())
    seeds = run_units(summary)
    if parse_file and paths is None:
        raise ValueError("run_captions: parse_file re-encodes another dataset's captions: give its paths")
    kept = kept_seeds(run_dir, name, seeds, split, beam) if keep_results and not parse_file else []
    _claim_outputs(run_dir, name, seeds, overwrite, claim, kept=kept)
    (run_dir / name).mkdir(exist_ok=True)
    per_seed, unk = [], []
    for s in seeds:
        seed_dir = run_dir / "seeds" / f"seed{s}"
        if s in kept:
            per_seed.append(rescore(run_dir / name / f"seed{s}.json"))
            unk.append(json.loads((run_dir / name / f"seed{s}.json").read_text())["unk_share"])
            print(f"[{summary['run']} seed {s}] kept: its sentences are here, its checkpoint is not (re-scored)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tokens = reencoded = None
            if parse_file:
                tokens = Path(tmp) / "tokens.npz"
                vocab = load(best_of(seed_dir), torch.device("cpu"))["info"]["relations"]
                reencoded = run_tokens(
                    paths.for_seed(unit_seed(s)).dataset, vocab, tokens, str(parse_file).format(seed=unit_seed(s))
                )
            data = paths.for_seed(unit_seed(s)) if paths else None
            scores, record = seed_captions(seed_dir, split, beam, data, tokens, images)
        record["reencoded"] = reencoded  # counts over all the data's captions
        unk.append(record["unk_share"])
        write_text(run_dir / name / f"seed{s}.json", json.dumps(record, separators=(",", ":")) + "\n")
        per_seed.append(scores)
    out: dict[str, Any] = {
        "run": summary["run"],
        "seeds": summary["seeds"],
        "units": seeds,
        "split": split,
        "beam": beam,
        "n_boot": n_boot,
        "dataset_dir": str(paths.dataset) if paths else None,
        "images": images,
        "unk_share": float(np.mean(unk)) if None not in unk else None,
    }  # of the split's tokens
    for t in (t for t in TASKS if t in per_seed[0]):
        runs = [p[t] for p in per_seed]
        out[t] = {m: float(np.mean([r[m] for r in runs])) for m in METRICS}
        out[t + "_per_seed"] = {str(s): {m: r[m] for m in METRICS} for s, r in zip(seeds, runs)}
        out[t + "_ci"] = bootstrap(runs, n_boot) if len({len(r["per_item"]["cider"]) for r in runs}) == 1 else None
    out["input_dependence"] = {
        k: float(np.mean([p["input_dependence"][k] for p in per_seed])) for k in per_seed[0]["input_dependence"]
    }
    if all("grounding" in p for p in per_seed):
        vals = {
            k: [p["grounding"][k] for p in per_seed if p["grounding"][k] == p["grounding"][k]]
            for k in per_seed[0]["grounding"]
        }
        out["grounding"] = {k: float(np.mean(v)) if v else float("nan") for k, v in vals.items()}  # nan: nothing named
    write_text(run_dir / f"{name}.json", json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True, help="a study run of a generating system (runs/<data>/<run>)")
    ap.add_argument("--split", default="test", choices=["train", "val", "test"])
    ap.add_argument("--beam", type=int, help="beam width (default: the system's `beam`)")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--dataset-dir", help="default: each checkpoint's own; may hold {seed}")
    ap.add_argument("--features-dir")
    ap.add_argument(
        "--parse-file",
        help="other data: its CoNLL-U parse (may hold {seed}); its captions are "
        "re-encoded in each model's vocabulary (transfer)",
    )
    ap.add_argument("--images", choices=["none"], help="none: text only (paraphrasing alone), e.g. data without images")
    ap.add_argument(
        "--name",
        default="captions",
        help="output name, a plain file-name stem: <run-dir>/<name>.json and <run-dir>/<name>/",
    )
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    ap.add_argument(
        "--keep-results",
        action="store_true",
        help="a seed whose checkpoint is not here (e.g. trained on another machine) keeps its committed sentences, "
        "re-scored from them; only the others are decoded (not with --parse-file)",
    )
    args = ap.parse_args(argv)
    if args.beam is not None and args.beam < 1:
        ap.error(f"--beam {args.beam}: the beam width is at least 1 (1 = greedy)")
    if args.n_boot < 1:
        ap.error(f"--n-boot {args.n_boot}: at least 1 bootstrap resample")
    try:
        check_name(args.name)
    except ValueError as exc:
        ap.error(str(exc))
    why = java_missing()
    if why:
        raise SystemExit(f"fraglib_study.experiments.captions: {why}")
    run_dir = Path(args.run_dir)
    if not (run_dir / "metrics.json").is_file():
        ap.error(f"--run-dir {run_dir}: no metrics.json (a study run's folder, runs/<data>/<run>; train it first)")
    try:
        seeds = run_units(json.loads((run_dir / "metrics.json").read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        ap.error(f"--run-dir {run_dir}: its metrics.json lists no seeds ({exc!r}): not a finished study run")
    try:
        kept = (
            kept_seeds(run_dir, args.name, seeds, args.split, args.beam)
            if args.keep_results and not args.parse_file
            else []
        )
        _claim_outputs(run_dir, args.name, seeds, args.overwrite, lambda *a: claim_cli(ap, *a), True, kept)
    except (CheckpointError, ValueError) as exc:
        raise SystemExit(f"fraglib_study.experiments.captions: {exc}") from None
    s = run_captions(
        args.run_dir,
        args.split,
        args.beam,
        args.n_boot,
        DataPaths(args.dataset_dir, args.features_dir) if args.dataset_dir else None,
        args.parse_file,
        args.images,
        args.name,
        overwrite=True,
        keep_results=args.keep_results and not args.parse_file,
    )
    for t in (t for t in TASKS if t in s):
        print(f"{t}: " + ", ".join(f"{m} {100 * s[t][m]:.1f}" for m in METRICS))
