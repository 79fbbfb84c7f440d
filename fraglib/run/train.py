"""One training loop for every system, resumable and deterministic (docs/training.md).

    python -m fraglib.run train --run full --dataset-dir data/synthetic --out runs/try [--dataset pascal1k] [--set key=value ...]

The loop knows no system by name: it builds the system of a run (``runs.<name>.system``) from
sizes read off the data, then per epoch draws batches of ``batch_size`` image–sentence pairs
(by default no image twice; the order depends only on (seed, epoch)), steps the system's ``loss`` with
SGD + momentum or Adam (learning rate × ``lr_drop`` for the last ``lr_drop_epochs`` epochs),
validates (R@K sum, both directions) and checkpoints (:mod:`fraglib.run.checkpoint`): a killed run
resumes from ``last.pt`` and ends exactly as an uninterrupted one. The best validation epoch
(``best.pt``) is evaluated on the test split. Systems without parameters are never stepped; a
closed-form system is fitted once. Outputs in ``--out``: ``metrics.json`` (test metrics with
bootstrap CIs, the run's settings), ``ranks.json`` (per-query test ranks), ``history.csv``.

Settings of a run come from ``params.yaml`` by one rule (:func:`resolve_run`). Under ``torchrun`` the same
loop runs data-parallel (:mod:`fraglib.core.distributed`, docs/training.md "Many processes").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from fraglib.core import distributed
from fraglib.core.config import ConfigError, check_choice, check_range, did_you_mean, from_dict, parse_overrides
from fraglib.core.outputs import command, resumes, write_text
from fraglib.core.progress import Progress, interactive
from fraglib.metrics.retrieval import DIRECTIONS, KS, evaluate_scores, rsum
from fraglib.run import checkpoint
from fraglib.run.evaluate import EvalConfig, check_evaluable, evaluate_split, score_matrix
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.systems import get_system

UNIT_LINE_SECONDS = 10.0  # a study's unit prints an epoch line per this many seconds at most (its first and last)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """``params.yaml: train``: the trainer's keys only, all of them part of a checkpoint's identity (a system's
    keys live in ``systems.<name>``; how a trained system is scored, in ``evaluation``: :class:`EvalConfig`)."""

    seed: int = 0
    epochs: int = 20
    batch_size: int = 100  # image–sentence pairs
    distinct_images: bool = True  # no image twice in a batch (false: plain shuffled slices, as VSE++)
    optimizer: str = "sgd"  # sgd (paper; momentum) | adam | adagrad
    lr: float = 1e-3
    momentum: float = 0.9  # sgd only
    adagrad_reset: int = 0  # adagrad only: reset the squared-gradient sums to 1 every N epochs (0 = never)
    lr_drop: float = 0.1
    lr_drop_epochs: int = 2
    grad_clip: float = 0.0  # max global gradient norm; 0 = off
    amp: bool = False  # bfloat16 autocast of the training step (GPUs with bf16; validation, test fp32)
    select: str = "val_rsum"  # best.pt = the epoch of the highest validation R-sum | "last" epoch

    def validate(self) -> "TrainConfig":
        p = "train"
        check_range(f"{p}.seed", self.seed, 0, 2**31 - 1, int)
        check_choice(f"{p}.optimizer", self.optimizer, ("sgd", "adam", "adagrad"))
        check_range(f"{p}.adagrad_reset", self.adagrad_reset, 0, 10_000, int)
        check_range(f"{p}.epochs", self.epochs, 0, 10_000, int)
        check_range(f"{p}.batch_size", self.batch_size, 2, 100_000, int)
        check_choice(f"{p}.distinct_images", self.distinct_images, (True, False))
        check_range(f"{p}.lr", self.lr, 0.0, 100.0, float)
        check_range(f"{p}.momentum", self.momentum, 0.0, 1.0, float)
        check_range(f"{p}.lr_drop", self.lr_drop, 0.0, 1.0, float)
        check_range(f"{p}.lr_drop_epochs", self.lr_drop_epochs, 0, 10_000, int)
        check_range(f"{p}.grad_clip", self.grad_clip, 0.0, 1e6, float)
        check_choice(f"{p}.amp", self.amp, (True, False))
        check_choice(f"{p}.select", self.select, ("val_rsum", "last"))
        return self


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that defines one run: its name, system and both checked configs, plus the keys
    that differ from the system's plain settings (``train`` ← ``systems.<system>``)."""

    run: str
    system: str
    system_config: Any
    train_config: TrainConfig
    overrides: dict[str, Any]

    def with_seed(self, seed: int) -> "RunSpec":
        return dataclasses.replace(self, train_config=dataclasses.replace(self.train_config, seed=seed))


def resolve_run(
    params: dict[str, Any], run: str, dataset: str | None = None, extra: dict[str, Any] | None = None
) -> RunSpec:
    """The settings of run ``run`` by the one override rule (later layers win):

    ``train`` ← ``<dataset>.train`` ← ``systems.<s>`` ← ``<dataset>.systems.<s>`` ← ``runs.<run>`` ← ``extra``

    where ``s = runs.<run>.system``; without ``dataset`` (the synthetic benchmark) the ``study`` section
    plays the dataset section's part (``study.train``, ``study.systems.<s>``). Each key goes to the trainer or to the system by its name
    (the two field sets are disjoint); a key known to neither is an error naming its layer, and so is a
    wrong value (``study.systems.vse.epochs=-1``; one from ``extra`` is named by its section, ``train.epochs``)."""
    for sec in ("train", "systems", "runs"):
        if not isinstance(params.get(sec), dict):
            raise ConfigError(f"params: section '{sec}' missing (sections present: {', '.join(params)})")
    runs = params["runs"]
    if run not in runs:
        raise ConfigError(f"runs.{run}: unknown run{did_you_mean(run, runs)}, known: {', '.join(runs)}")
    entry = dict(runs[run] or {})
    if "system" not in entry:
        raise ConfigError(f"runs.{run}.system: missing (one of the registered systems)")
    name = entry.pop("system")
    entry.pop("label", None)  # for the reports only
    entry.pop("seeds", None)  # which seeds run: fraglib_study.experiments.study
    entry.pop("replicates", None)  # training runs per seed: fraglib_study.experiments.study
    entry.pop(
        "after_papers", None
    )  # a run after the three papers: outside the claims' noise pool (fraglib_study.audit.claims)
    cls = get_system(name, f"runs.{run}.system")
    ds = params.get("study") if isinstance(params.get("study"), dict) else {}
    if dataset is not None:
        if not isinstance(params.get(dataset), dict):
            raise ConfigError(f"params: dataset section '{dataset}' missing")
        ds = params[dataset]
    section = dataset or "study"
    if name not in params["systems"]:
        raise ConfigError(f"systems.{name}: missing (every system used by a run needs an entry, may be {{}})")
    t_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    s_fields = {f.name for f in dataclasses.fields(cls.Config)}
    layers = [
        ("train", params["train"], True),
        (f"{section}.train", ds.get("train"), True),
        (f"systems.{name}", params["systems"][name], False),
        (f"{section}.systems.{name}", (ds.get("systems") or {}).get(name), False),
        (f"runs.{run}", entry, False),
        ("--set", extra, False),
    ]
    tvals: dict[str, Any] = {}
    svals: dict[str, Any] = {}
    base: dict[str, Any] = {}
    names: dict[str, str] = {}  # key -> where params.yaml set the value in force: value errors name it there
    base_names: dict[str, str] = {}
    for where, layer, trainer_only in layers:
        if layer is None:
            continue
        if not isinstance(layer, dict):
            raise ConfigError(f"{where}: expected a mapping of parameters, got {layer!r}")
        for k, v in layer.items():
            if k in t_fields:
                tvals[k] = v
            elif k in s_fields and not trainer_only:
                svals[k] = v
            else:
                known = t_fields if trainer_only else t_fields | s_fields
                raise ConfigError(
                    f"{where}.{k}: unknown parameter{did_you_mean(k, known)} "
                    f"(trainer keys: {', '.join(sorted(t_fields))}"
                    + ("" if trainer_only else f"; system {name}: {', '.join(sorted(s_fields))}")
                    + ")"
                )
            if layer is extra:  # --set, a search's trial: named by the section the key belongs to
                names.pop(k, None)
            else:
                names[k] = f"{where}.{k}"
            if where in ("train", f"systems.{name}"):
                base[k] = v
                base_names[k] = f"{where}.{k}"
    tc = from_dict("train", tvals, TrainConfig, names)
    sc = from_dict(f"systems.{name}", svals, cls.Config, names)
    plain_t = from_dict("train", {k: v for k, v in base.items() if k in t_fields}, TrainConfig, base_names)
    plain_s = from_dict(f"systems.{name}", {k: v for k, v in base.items() if k in s_fields}, cls.Config, base_names)
    now = {**dataclasses.asdict(tc), **dataclasses.asdict(sc)}
    was = {**dataclasses.asdict(plain_t), **dataclasses.asdict(plain_s)}
    return RunSpec(run, name, sc, tc, {k: v for k, v in now.items() if v != was[k] and k != "seed"})


# ----------------------------------------------------------------------------- the loop
def lr_at(tc: TrainConfig, epoch: int) -> float:
    return tc.lr * (tc.lr_drop if epoch >= tc.epochs - tc.lr_drop_epochs else 1.0)


def make_optimizer(tc: TrainConfig, params, fused: bool | None = None) -> torch.optim.Optimizer:
    """``params``: parameters, or (lr multiplier, parameters) groups (:meth:`System.lr_groups`); each group
    keeps its multiplier as ``lr_scale`` (:func:`set_lr`). ``fused``: every parameter's update in one kernel
    (torch's fused SGD / AdaGrad / Adam: the same update to float rounding, one launch instead of several per
    parameter); None = on a GPU only, so CPU runs keep their floats bit for bit (docs/scale.md), and not for SGD
    with momentum, whose fused form fails on a parameter that gets its first gradient after the first step."""
    params = list(params)
    if params and isinstance(params[0], tuple):
        params = [{"params": ps, "lr": tc.lr * k, "lr_scale": k} for k, ps in params if ps]
    tensors = [t for g in params for t in (g["params"] if isinstance(g, dict) else [g])]
    if fused is None:
        fused = bool(tensors) and all(t.is_cuda for t in tensors) and tc.optimizer != "sgd"
    kw = {"fused": True} if fused else {}
    if tc.optimizer == "sgd":
        return torch.optim.SGD(params, lr=tc.lr, momentum=tc.momentum, **kw)
    if tc.optimizer == "adagrad":  # Socher et al. 2014: sums start at 1 (reset_adagrad)
        return torch.optim.Adagrad(params, lr=tc.lr, initial_accumulator_value=1.0, **kw)
    return torch.optim.Adam(params, lr=tc.lr, **kw)


def set_lr(tc: TrainConfig, opt: torch.optim.Optimizer, epoch: int) -> None:
    """The epoch's learning rate (:func:`lr_at`) times each group's ``lr_scale``."""
    for g in opt.param_groups:
        g["lr"] = lr_at(tc, epoch) * g.get("lr_scale", 1.0)


def reset_adagrad(tc: TrainConfig, opt: torch.optim.Optimizer, epoch: int) -> None:
    """Socher et al.'s modified AdaGrad: every ``adagrad_reset`` epochs the squared-gradient sums
    go back to 1 (at the start of epochs N, 2N, ...)."""
    if tc.optimizer == "adagrad" and tc.adagrad_reset and epoch and epoch % tc.adagrad_reset == 0:
        for st in opt.state.values():
            st["sum"].fill_(1.0)


class Step(torch.nn.Module):
    """The cost of one global batch: encode this process's share, exchange and join the encodings
    (several processes, :mod:`fraglib.core.distributed`), the system's loss over all of them."""

    def __init__(self, system: torch.nn.Module, ctx: distributed.Context) -> None:
        super().__init__()
        self.system, self.ctx = system, ctx

    def forward(self, images, sentences, epoch: int):
        s, ctx = self.system, self.ctx
        img, sent = s.encode_images(images), s.encode_sentences(sentences)
        if ctx.world > 1:
            img, sent = s.join(ctx.gather(img)), s.join(ctx.gather(sent))
        return s.loss(img, sent, epoch)


def train_epoch(
    step: torch.nn.Module,
    system: torch.nn.Module,
    opt: torch.optim.Optimizer,
    tr: Any,
    tc: TrainConfig,
    epoch: int,
    device: torch.device,
    ctx: distributed.Context | None = None,
    desc: str | None = None,
    run: str = "",
) -> tuple[dict[str, float], int, int]:
    """One epoch of optimisation steps on the training split ``tr`` (the trainer's loop, also timed by
    ``python -m fraglib_study bench epoch``): the learning rate and AdaGrad reset of ``epoch``, batches of
    :func:`fraglib.run.inputs.make_batches` (after the system's ``begin_epoch``), autocast when ``tc.amp``,
    gradient clipping. Returns (sums of the cost and the loss parts over the batches, number of batches,
    pairs skipped in batches smaller than the number of processes); ``desc``: a progress bar with that title, drawn
    only on a terminal (:func:`fraglib.core.progress.interactive`: a log keeps every redraw of a bar).

    The sums stay on the device (float64, added in batch order: the floats a Python sum of the parts would
    give) and are read once, at the end: on a GPU every read makes the host wait for the device, and a step's
    host and device work then take turns instead of overlapping. So a cost that is not finite is reported
    at the end of its epoch, before anything of that epoch is validated or saved."""
    from tqdm.auto import tqdm

    ctx = ctx or distributed.Context()
    system.train()
    set_lr(tc, opt, epoch)
    reset_adagrad(tc, opt, epoch)
    with torch.no_grad():
        system.begin_epoch(epoch)
    sums: dict[str, Any] = {}
    batches = make_batches(tr, tc.batch_size, tc.seed, epoch, tc.distinct_images)
    skipped = sum(len(b) for b in batches if len(b) < ctx.world)  # every process needs one pair of a batch
    batches = [b for b in batches if len(b) >= ctx.world]
    bar = tqdm(batches, desc=desc, disable=desc is None or not interactive(), leave=False, mininterval=2)
    shown = time.monotonic()
    for b in bar:
        b = distributed.shard(b, ctx)
        with torch.autocast(device.type, torch.bfloat16, enabled=tc.amp):
            cost, parts = step(tr.images.take(tr.sentence_image[b]), tr.sentences.take(b), epoch)
        cost = cost.float()
        opt.zero_grad(set_to_none=True)
        cost.backward()
        if tc.grad_clip:
            torch.nn.utils.clip_grad_norm_(system.parameters(), tc.grad_clip)
        opt.step()
        for k, v in {**parts, "cost": cost}.items():
            sums[k] = sums.get(k, 0.0) + (v.detach().double() if isinstance(v, torch.Tensor) else v)
        if not bar.disable and time.monotonic() - shown > 2:  # the bar's numbers: one read per 2 s
            bar.set_postfix({k: f"{float(v):.3g}" for k, v in parts.items()})
            shown = time.monotonic()
    sums = {k: float(v) for k, v in sums.items()}
    if not math.isfinite(sums.get("cost", 0.0)):
        raise FloatingPointError(
            f"run {run}, epoch {epoch + 1}: the cost summed over the epoch's batches is "
            f"{sums['cost']} (lower train.lr, now {tc.lr})"
        )
    return sums, len(batches), skipped


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """The states of the generators a training step draws from (dropout: torch's CPU generator, and the
    device's on CUDA); batches and caption draws are seeded from (seed, epoch) and need none."""
    out = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, torch.Tensor] | None, device: torch.device) -> None:
    """Restore :func:`rng_state` (checkpoints written before it was saved carry none: left as seeded)."""
    if state:
        torch.set_rng_state(state["cpu"])
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)


def read_timing(out: Path) -> dict[str, Any]:
    """``timing.json`` of a run folder ({} when absent or unreadable): training seconds so far and epochs."""
    try:
        return json.loads((Path(out) / "timing.json").read_text())
    except (OSError, ValueError):
        return {}


def write_timing(out: Path, seconds: float, epochs: int) -> None:
    """The clock lives beside the checkpoints, not in them (same run, same checkpoint bytes)."""
    write_text(Path(out) / "timing.json", json.dumps({"train_seconds": round(seconds, 3), "epochs": epochs}) + "\n")


def write_run_timing(out: Path, clock: dict[str, Any], eval_seconds: float, device: torch.device) -> None:
    """The run's wall times, kept in git beside its metrics (``timing.json``; never in ``metrics.json``, whose
    bytes a re-run reproduces): ``train_seconds`` and ``epochs`` from the checkpoints' clock (``clock``: every
    process that trained it, summed), ``eval_seconds`` of the test evaluation, what they were measured on
    (:func:`fraglib.core.device.hardware`), the code's revision and the UTC date (docs/formats.md)."""
    from datetime import datetime, timezone

    from fraglib.core.device import hardware
    from fraglib.core.outputs import git_revision

    record = {
        "train_seconds": clock.get("train_seconds"),
        "epochs": clock.get("epochs"),
        "eval_seconds": round(eval_seconds, 3),
        **hardware(device),
        "commit": git_revision(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    write_text(Path(out) / "timing.json", json.dumps(record, indent=1) + "\n")


def check_usable(splits: dict[str, Any], where: str, views: Any = None) -> None:
    """Refuse data on which training or evaluation would be meaningless, naming the cause: a split without
    images or sentences, fewer than half the sentences usable, or (``views`` reading word vectors, i.e.
    every sentence view but ``tokens``) fewer than half the training sentences with a word that has one."""
    for name, sp in splits.items():
        if sp.n_images == 0 or sp.n_sentences == 0:
            raise ValueError(f"{where}: the {name} split has {sp.n_images} images and {sp.n_sentences} sentences")
        ok = sp.usable_sentences()
        if ok.mean() < 0.5:
            n_img = int((sp.images.counts() > 0).sum())
            raise ValueError(
                f"{where}: only {int(ok.sum())} of {len(ok)} {name} sentences are usable "
                f"({n_img} of {sp.n_images} images have features; sentences need fragments) — "
                "check the image folder, the features stage and the fragments stage"
            )
    if views is not None and views.sentences != "tokens":
        tr = splits["train"]
        known = tr.known_word_sentences()
        if known.mean() < 0.5:
            raise ValueError(
                f"{where}: only {int(known.sum())} of {len(known)} train sentences have a word with a GloVe "
                f"vector (the view {views.sentences!r} reads word vectors; the rest are out of the "
                "dictionary) — are the captions English, tokenised and lower-cased?"
            )


def train(
    paths: DataPaths,
    out_dir: str | Path,
    spec: RunSpec,
    evaluation: EvalConfig | None = None,
    device: torch.device | None = None,
    progress: bool = True,
    stop_after: int | None = None,
    restart: bool = False,
    checkpoint_dir: str | Path | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Fit (or resume) ``spec`` on the data at ``paths`` (:func:`fit`), then, with ``evaluation``, score its ``best.pt`` on the test split
    by the one test evaluation (:func:`fraglib.run.evaluate.evaluate_split`) and write the run's results:
    ``metrics.json``, ``ranks.json``, ``history.csv`` (small, kept in git) in ``out_dir``; returns the metrics.
    Without ``evaluation`` (a search's trial) the test split is never built nor scored: returns the fit's
    ``best_epoch``, ``val_rsum_best`` and ``history``. Checkpoints and ``timing.json`` go to ``checkpoint_dir``
    (default ``out_dir``; a DVC output), which ``metrics.json`` then names. ``stop_after`` ends the process's
    work after that many epochs (used to test resumption); ``restart``: a checkpoint of other settings or inputs
    is replaced instead of refused. One process trains a folder at a time: while another holds it,
    :class:`fraglib.run.checkpoint.RunLocked` at once. ``progress``: a line per epoch on stderr with an ETA (and a bar
    over the batches on a terminal); ``label``: those lines' name (default the run's), given by a study whose units
    train side by side: then no bar, and a line per :data:`UNIT_LINE_SECONDS` at most."""
    from fraglib.core.device import make_deterministic, select_device

    spec.train_config.validate()
    ec = evaluation.validate() if evaluation is not None else None
    device = device or select_device()[0]
    make_deterministic(device)
    ctx = distributed.setup(device)
    out = Path(out_dir)
    ck_dir = Path(checkpoint_dir) if checkpoint_dir is not None else out
    with checkpoint.run_lock(out, ck_dir) if ctx.main else contextlib.nullcontext():  # rank 0 writes for all
        views = get_system(spec.system).views(spec.system_config)
        splits, dims, info = load_splits(
            paths, views, device, names=("train", "val", "test") if ec else ("train", "val")
        )
        check_usable(splits, str(paths.dataset), views)
        if ec is not None:
            check_evaluable(ec, splits["test"], str(paths.dataset))  # before any training, not after it
        info = {
            **info,
            "dataset_dir": str(paths.dataset),
            "features_dir": str(paths.features) if paths.features else None,
        }
        fitted = fit(
            splits,
            dims,
            info,
            paths.files(views),
            ck_dir,
            spec,
            device,
            ctx,
            progress and ctx.main,
            stop_after,
            restart,
            ec.eval_chunk if ec else EvalConfig().eval_chunk,
            label,
        )
        distributed.teardown(ctx)
        if "system" not in fitted:  # stopped early, or not rank 0
            return fitted
        if ec is None:
            return {k: fitted[k] for k in ("best_epoch", "val_rsum_best", "history")}
        t0 = time.perf_counter()
        test = evaluate_split(
            fitted["system"],
            splits,
            ec,
            spec.train_config.seed,
            "test",
            f"run {spec.run}: test scores of best.pt (epoch {fitted['best_epoch']})",
        )
        metrics = write_outputs(out, spec, ec, info, test, fitted["best_epoch"], fitted["history"], checkpoint_dir)
        write_run_timing(out, read_timing(ck_dir), time.perf_counter() - t0, device)
        return metrics


def fit(
    splits: dict[str, Any],
    dims: dict[str, int],
    info: dict[str, Any],
    inputs: dict[str, Path],
    ck_dir: Path,
    spec: RunSpec,
    device: torch.device,
    ctx: distributed.Context,
    progress: bool,
    stop_after: int | None,
    restart: bool,
    eval_chunk: int,
    label: str | None = None,
) -> dict[str, Any]:
    """The loop: build the system from ``dims``, resume from ``ck_dir`` or prepare (a closed-form system is
    fitted once), train ``epochs`` epochs on ``splits["train"]``, validate each on ``splits["val"]`` (R-sum, both
    directions; ``eval_chunk`` images per score tile) and keep ``best.pt`` (the highest validation R-sum, or the
    last epoch) and ``last.pt``. Reads no other split. Returns ``system`` (``best.pt``'s weights loaded),
    ``best_epoch``, ``val_rsum_best`` and ``history`` on rank 0; ``{"stopped_at_epoch": e}`` after ``stop_after``
    epochs; ``{"rank": r}`` elsewhere. The checkpoint's identity is the system, both configs, the sizes and
    the SHA-256 of ``inputs``; nothing of the evaluation. ``progress`` and ``label``: as :func:`train`'s."""
    tc, cls = spec.train_config, get_system(spec.system)
    torch.manual_seed(tc.seed)
    system = cls(spec.system_config, dims, tc.seed).to(device)
    identity = {
        "system": spec.system,
        "system_config": dataclasses.asdict(spec.system_config),
        "train_config": dataclasses.asdict(tc),
        "model_args": dims,
        "fingerprint": checkpoint.fingerprint(inputs),
    }
    defaults = {"train_config": dataclasses.asdict(TrainConfig()), "system_config": dataclasses.asdict(cls.Config())}
    ck = checkpoint.resume(ck_dir, identity, restart, defaults=defaults) if ctx.main else None
    ctx.barrier()  # rank 0 may have removed a foreign checkpoint
    if not ctx.main:
        ck = checkpoint.resume(ck_dir, identity, False, defaults=defaults)
    trainable = cls.TRAINABLE and any(p.requires_grad for p in system.parameters())
    opt = make_optimizer(tc, system.lr_groups()) if trainable else None
    history: list[dict[str, Any]] = []
    start, best_rsum, best_epoch, t_train = 0, -1.0, None, 0.0
    if ck is not None:
        system.load_state_dict(ck["model"])
        if opt is not None:
            opt.load_state_dict(ck["optimizer"])
        start, history, best_rsum, best_epoch = ck["epoch"], ck["history"], ck["best_rsum"], ck["best_epoch"]
        set_rng_state(ck.get("rng"), device)
        t_train = read_timing(ck_dir).get("train_seconds", 0.0)
    else:
        system.prepare(splits["train"])
        if not trainable:
            system.fit(splits["train"])

    def state(epoch: int) -> dict[str, Any]:
        return {
            **identity,
            "run": spec.run,
            "model": system.state_dict(),
            "optimizer": opt.state_dict() if opt else None,
            "epoch": epoch,
            "history": history,
            "best_rsum": best_rsum,
            "best_epoch": best_epoch,
            "rng": rng_state(device),
            "info": info,
        }

    def validate(epoch: int, phase: str, sums: dict[str, float], n_batches: int, skipped: int) -> dict[str, Any]:
        val = evaluate_scores(
            score_matrix(system, splits["val"], eval_chunk),
            splits["val"].sentence_image,
            10,
            tc.seed,
            f"run {spec.run}: validation scores after epoch {epoch}",
        )
        return {
            "epoch": epoch,
            "lr": lr_at(tc, max(epoch - 1, 0)) if trainable else 0.0,
            "phase": phase,
            **{f"train_{k}": v / max(n_batches, 1) for k, v in sums.items()},
            **({"skipped_pairs": skipped} if skipped else {}),
            "val_rsum": rsum(val),
            **{f"val_{d}_r{k}": val[d][f"r{k}"] for d in DIRECTIONS for k in KS},
        }

    tr = splits["train"]
    system.use_training_split(tr)
    epochs = tc.epochs if trainable else 0
    if not trainable and not history and ctx.main:  # a closed-form fit: one validation row, "epoch 0" (also
        history.append(validate(0, "fit", {}, 0, 0))  # added to a checkpoint written before the row existed)
        best_rsum, best_epoch = history[0]["val_rsum"], 0
        checkpoint.save(ck_dir / "best.pt", state(0))
    step = Step(system, ctx)
    if ctx.world > 1 and trainable:
        step = torch.nn.parallel.DistributedDataParallel(step, find_unused_parameters=True, broadcast_buffers=False)
    done = 0
    lines = Progress(label or spec.run, epochs, "epoch", done=start, every=UNIT_LINE_SECONDS if label else 0.0)
    for epoch in range(start, epochs):
        if stop_after is not None and done >= stop_after:
            return {"stopped_at_epoch": epoch}
        t0 = time.perf_counter()
        phase = system.phase(epoch)
        sums, n_batches, skipped = train_epoch(
            step,
            system,
            opt,
            tr,
            tc,
            epoch,
            device,
            ctx,
            desc=f"epoch {epoch + 1}/{epochs} ({phase})" if progress and label is None else None,
            run=spec.run,
        )
        t_train += time.perf_counter() - t0
        done += 1
        if not ctx.main:  # rank 0 validates and writes
            ctx.barrier()
            continue
        row = validate(epoch + 1, phase, sums, n_batches, skipped)
        history.append(row)
        if progress:  # the epoch's time counts its validation and checkpoints too
            lines.step(f"cost {row['train_cost']:.4g}, val R-sum {row['val_rsum']:.1f}")
        if row["val_rsum"] > best_rsum or tc.select == "last":
            best_rsum, best_epoch = row["val_rsum"], epoch + 1
            checkpoint.save(ck_dir / "best.pt", state(epoch + 1))
        checkpoint.save(ck_dir / "last.pt", state(epoch + 1))
        write_timing(ck_dir, t_train, epoch + 1)
        ctx.barrier()
    if not ctx.main:
        return {"rank": ctx.rank}
    if (ck_dir / "best.pt").exists():
        system.load_state_dict(checkpoint.load(ck_dir / "best.pt", device)["model"])
    return {
        "system": system,
        "best_epoch": best_epoch,
        "history": history,
        "val_rsum_best": max((h["val_rsum"] for h in history), default=None),
    }


def write_outputs(
    out: Path,
    spec: RunSpec,
    ec: EvalConfig,
    info: dict[str, Any],
    test: dict[str, Any],
    best_epoch: int | None,
    history: list[dict[str, Any]],
    checkpoint_dir: str | Path | None = None,
) -> dict[str, Any]:
    """``metrics.json`` (no timings: identical runs give identical bytes), ``ranks.json``, ``history.csv``."""
    ranks = test.pop("ranks")
    metrics = {
        "test": test,
        "best_epoch": best_epoch,
        "run": spec.run,
        "system": spec.system,
        "system_config": dataclasses.asdict(spec.system_config),
        "train_config": dataclasses.asdict(spec.train_config),
        "eval_config": dataclasses.asdict(ec),
        "info": info,
        "val_rsum_best": max((h["val_rsum"] for h in history), default=None),
        **({"checkpoint_dir": Path(checkpoint_dir).as_posix()} if checkpoint_dir is not None else {}),
    }
    write_text(out / "metrics.json", json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    write_text(out / "ranks.json", json.dumps(ranks) + "\n")
    keys = sorted({k for h in history for k in h}, key=lambda k: (k != "epoch", k))
    lines = [",".join(keys)] + [",".join(str(h.get(k, "")) for k in keys) for h in history]
    write_text(out / "history.csv", "\n".join(lines) + "\n")
    return metrics


@command
def main(argv: list[str] | None = None) -> None:
    from fraglib.core.config import read_settings
    from fraglib.run.evaluate import eval_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--run",
        "--run-name",
        dest="run",
        required=True,
        help="a name under params.yaml `runs` (under torchrun spell it --run-name: torchrun takes --run as its --run-path)",
    )
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", help="dataset section whose train/systems layers apply, e.g. pascal1k")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument("--seed", type=int, help="training seed (default train.seed)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a trainer, system or evaluation key"
    )
    ap.add_argument("--restart", action="store_true", help="replace a checkpoint of other settings or inputs")
    ap.add_argument("--stop-after", type=int, metavar="N", help="end after N epochs as if killed (resume later)")
    ap.add_argument("--checkpoint-dir", help="checkpoints and timing.json here instead of --out")
    args = ap.parse_args(argv)
    try:  # the file's sections checked, as by every command: a misspelt `evaluaton:` is an error, not ignored
        params, extra = read_settings(args.params), parse_overrides(args.set)
        ev = {k: extra.pop(k) for k in [f.name for f in dataclasses.fields(EvalConfig)] if k in extra}
        spec, ec = resolve_run(params, args.run, args.dataset, extra), eval_config(params, ev)
    except ConfigError as exc:
        ap.error(str(exc))
    if args.seed is not None:
        spec = spec.with_seed(args.seed)
    resumes(args.out, *([args.checkpoint_dir] if args.checkpoint_dir else []))  # a killed run resumes
    try:
        m = train(
            DataPaths(args.dataset_dir, args.features_dir),
            args.out,
            spec,
            ec,
            restart=args.restart,
            stop_after=args.stop_after,
            checkpoint_dir=args.checkpoint_dir,
        )
    except checkpoint.RunLocked as exc:  # raised before any work
        ap.error(str(exc))
    if "test" not in m:  # stopped early, or not rank 0
        return
    t = m["test"]
    print(
        "test: "
        + " | ".join(
            f"{d} " + " ".join(f"R@{k} {t[d][f'r{k}']:.1f}" for k in KS) + f" med {t[d]['median_rank']:.0f}"
            for d in DIRECTIONS
        )
    )
