"""Benchmarks of the systems: training steps and epochs, evaluation, Socher's and Peri's systems, and
every system on the selected device."""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fraglib_study.bench.common import (
    REGIONS,
    entry,
    gpu_absent,
    in_fresh_processes,
    matmul_gflops,
    random_split,
    result_of,
    token_split,
)


def bench_train_step(repeats: int = 7) -> list[dict[str, Any]]:
    """One SGD step (forward, backward, update) at the paper's sizes: 100 pairs, 20 image fragments
    of 4096-d, 10 sentence fragments of 2 x 200-d words, embedding 1000, 16 relation types."""
    import numpy as np
    import torch

    from fraglib.core.batches import Rows
    from fraglib.core.device import select_device
    from fraglib.systems.fragment import Config, FragmentSystem

    dev, dev_name = select_device()
    g = torch.Generator().manual_seed(0)
    B, Fi, Fs, D, wd, h, R = 100, 20, 10, 4096, 200, 1000, 16
    model = FragmentSystem(
        Config(embed_dim=h, dense_epochs=1, beta=1.0, alpha=1e-5),
        {"n_words": 5000, "word_dim": wd, "n_relations": R, "img_dim": D},
    )
    model.words.copy_(torch.randn(5000, wd, generator=g))
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(B * Fi, D, generator=g).to(dev)
    rel = torch.randint(0, R, (B * Fs,), generator=g).to(dev)
    w1, w2 = torch.randint(0, 5000, (2, B * Fs), generator=g).to(dev)
    vo, so = torch.arange(B).repeat_interleave(Fi), torch.arange(B).repeat_interleave(Fs)
    imgs = Rows({"x": x}, vo.to(dev), B, np.arange(B), host={"owner": vo})  # with the loader's CPU copies
    sents = Rows({"rel": rel, "w1": w1, "w2": w2}, so.to(dev), B, np.arange(B), host={"owner": so, "rel": rel.cpu()})

    def step(mil: bool):  # the trainer's step: the system's loss (C_0 or C_F, + C_G + α||θ||²), SGD
        c, _ = model.loss(model.encode_images(imgs), model.encode_sentences(sents), epoch=1 if mil else 0)
        opt.zero_grad(set_to_none=True)
        c.backward()
        opt.step()
        _sync(dev)

    out = []
    # useful FLOPs: image map fwd + weight grad, sentence maps fwd + weight grad, M fwd + 2 grads
    flops = 2 * (2 * B * Fi * D * h) + 2 * (2 * B * Fs * 2 * wd * h) + 3 * (2 * B * Fi * h * B * Fs)
    ref = matmul_gflops(B * Fi, D, h, device=dev)
    for mil in (False, True):
        step(mil)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step(mil)
            ts.append(time.perf_counter() - t0)
        ms = statistics.median(ts) * 1000
        rate = flops / (ms / 1000) / 1e9
        suffix = ("_mil" if mil else "") + ("" if dev.type == "cpu" else f"_{dev.type}")
        out.append(
            entry(
                "train_step_ms" + suffix,
                round(ms, 2),
                "ms",
                device=dev_name,
                reference=round(ref, 1),
                ratio=round(rate / ref, 3),
                achieved_gflops=round(rate, 1),
                gflop_per_step=round(flops / 1e9, 1),
                reference_is="GFLOP/s of torch.matmul (2000x4096)@(4096x1000), same run",
                objective="C_0 + C_G" if not mil else "C_F (MIL) + C_G",
                repeats=repeats,
                paper_seconds_per_batch=1.0,
            )
        )
    return out


def _eval_child(q) -> None:  # runs in a fresh process so its peak memory is its own
    import resource

    import numpy as np
    import torch

    from fraglib.metrics.retrieval import annotation_ranks, search_ranks
    from fraglib.systems.objectives import pair_scores

    torch.manual_seed(0)
    n_img, n_sent, Fi, Fs, h, chunk = 1000, 5000, 20, 10, 1000, 64
    V = torch.randn(n_img * Fi, h)
    S = torch.randn(n_sent * Fs, h)
    so = torch.arange(n_sent).repeat_interleave(Fs)
    si = np.repeat(np.arange(n_img), 5)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # reference: the fragment-score matmul it contains, chunked the same way
    t0 = time.perf_counter()
    for a in range(0, n_img, chunk):
        V[a * Fi : (a + chunk) * Fi] @ S.T
    t_mm = time.perf_counter() - t0
    t0 = time.perf_counter()
    blocks = []
    for a in range(0, n_img, chunk):
        b = min(a + chunk, n_img)
        M = V[a * Fi : b * Fi] @ S.T
        vo = torch.arange(b - a).repeat_interleave(Fi)
        blocks.append(pair_scores(M, vo, so, b - a, n_sent, 5.0, "sum", inplace=True))
        del M
    scores = torch.cat(blocks)
    annotation_ranks(scores, si)
    search_ranks(scores, si)
    t_eval = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q.put((t_eval, t_mm, peak / 1024, (peak - base) / 1024))


def bench_eval(repeats: int = 3) -> list[dict[str, Any]]:
    """Score matrix + ranks for 1,000 images x 5,000 sentences (20 and 10 fragments, embedding
    1000), chunked; against the fragment-score matmul it contains, same process."""
    runs = in_fresh_processes(_eval_child, repeats)
    t_eval = statistics.median(r[0] for r in runs)
    t_mm = statistics.median(r[1] for r in runs)
    peak = max(r[2] for r in runs)
    return [
        entry(
            "eval_1000x5000_s",
            round(t_eval, 2),
            "s",
            reference=round(t_mm, 2),
            ratio=round(t_eval / t_mm, 3),
            reference_is="seconds of the chunked fragment-score matmul (20000x1000)@(1000x50000), same process",
            all_runs=[[round(x, 2) for x in r[:2]] for r in runs],
        ),
        entry(
            "eval_peak_mem_mb",
            round(peak, 0),
            "MB",
            note="peak RSS of the evaluating process (inputs included)",
            growth_during_eval_mb=round(max(r[3] for r in runs), 0),
        ),
    ]


def bench_systems_device() -> list[dict[str, Any]]:
    """Every registered system on the selected device (a GPU when there is one) with random inputs:
    loss, backward and a step; the score matrix; a checkpoint round trip that must reproduce it
    exactly. One entry per system: milliseconds of a training step and of scoring 1000 x 5000."""
    import numpy as np
    import torch

    from fraglib.core.device import make_deterministic, select_device
    from fraglib.run import checkpoint
    from fraglib.run.evaluate import score_matrix
    from fraglib.systems import SYSTEMS

    dev, dev_name = select_device()
    make_deterministic(dev)
    # 1,000 images of 20 rows, 5,000 random trees (every sentence view reads them: tokens are ids < 40)
    split, dims = random_split(1000, 5, regions=20, n_rel=40, seed=0, device=dev)
    split = dataclasses.replace(split, name="test")
    img, sent = split.images, split.sentences
    out = []
    for name, cls in SYSTEMS.items():
        cfg = cls.Config(**({"embed_dim": 1000} if "embed_dim" in cls.Config.__dataclass_fields__ else {}))
        system = cls(cfg, dims, 0).to(dev)
        system.prepare(split)
        step_ms = None
        if cls.TRAINABLE:
            system.use_training_split(split)
            opt = torch.optim.SGD(system.parameters(), lr=1e-4, momentum=0.9)
            b = np.arange(100)
            ts = []
            for _ in range(6):
                _sync(dev)
                t0 = time.perf_counter()
                cost, _ = system.loss(
                    system.encode_images(img.take(split.sentence_image[b * 5])),
                    system.encode_sentences(sent.take(b * 5)),
                    epoch=0,
                )
                opt.zero_grad(set_to_none=True)
                cost.backward()
                opt.step()
                _sync(dev)
                ts.append(time.perf_counter() - t0)
            step_ms = round(statistics.median(ts[1:]) * 1000, 2)
        _sync(dev)
        t0 = time.perf_counter()
        S = score_matrix(system, split, chunk=256)
        _sync(dev)
        eval_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint.save(
                Path(tmp) / "best.pt",
                {
                    "system": name,
                    "system_config": dataclasses.asdict(cfg),
                    "train_config": {"seed": 0},
                    "model_args": dims,
                    "model": system.state_dict(),
                },
            )
            again, _ = checkpoint.load_system(Path(tmp) / "best.pt", dev)
        S2 = score_matrix(again, split, chunk=256)
        same, diff = bool(torch.equal(S, S2)), float((S - S2).abs().max())
        out.append(
            entry(
                f"system_{name}_{dev.type}",
                step_ms if step_ms is not None else round(eval_s, 3),
                "ms per training step (100 pairs, h=1000)" if step_ms is not None else "s",
                device=dev_name,
                eval_seconds_1000x5000=round(eval_s, 3),
                finite=bool(torch.isfinite(S).all()),
                reload_reproduces_scores=same,
                reload_max_abs_diff=diff,
            )
        )
    return out


def bench_socher(epochs: int = 3, n_images: int = 800, trees: int = 200) -> list[dict[str, Any]]:
    """Socher et al.'s systems at Pascal1K's training size (``n_images`` 800 images, 4,000 trees, all
    negatives, batches of 100 pairs, AdaGrad): seconds per training epoch (median of ``epochs``), and the
    level-batched tree encoder's speed-up over the plain recursion (forward + backward, ``trees`` trees)."""
    import numpy as np
    import torch

    from fraglib.run.inputs import make_batches
    from fraglib.systems.recursive import compose, compose_reference
    from fraglib.systems.socher import Config, SocherSystem

    split, dims = random_split(n_images)
    out = []
    for enc in ("dtrnn", "sdtrnn", "ctrnn", "chain"):
        system = SocherSystem(Config(encoder=enc), dims, 0)
        system.prepare(split)
        system.use_training_split(split)
        opt = torch.optim.Adagrad(system.parameters(), lr=0.01, initial_accumulator_value=1.0)
        ts = []
        for epoch in range(epochs):
            t0 = time.perf_counter()
            for b in make_batches(split, 100, 0, epoch):
                c, _ = system.loss(
                    system.encode_images(split.images.take(split.sentence_image[b])),
                    system.encode_sentences(split.sentences.take(b)),
                    epoch,
                )
                opt.zero_grad(set_to_none=True)
                c.backward()
                opt.step()
            ts.append(time.perf_counter() - t0)
        out.append(
            entry(
                f"socher_epoch_s_{enc}",
                round(statistics.median(ts), 2),
                "s",
                reference=3.0,
                ratio=round(statistics.median(ts) / 3.0, 2),
                reference_is="the issue's aim: <= 3 s per epoch",
                steps=len(make_batches(split, 100, 0, 0)),
                trees=split.n_sentences,
                repeats=epochs,
            )
        )
    system = SocherSystem(Config(encoder="dtrnn"), dims, 0)
    system.prepare(split)
    rows = split.sentences.take(np.arange(trees))
    st = system.structure(rows)
    x = system.words[rows.data["w1"]] / system.word_scale  # (nodes, 50) each node's word

    def run(fn, **kw):
        t0 = time.perf_counter()
        h = fn(x @ system.W_v.T, st.parent, st.slot, system.W, st.ell.float(), 1.0 / st.ell.float(), **kw)
        h.sum().backward()
        return time.perf_counter() - t0

    batched = statistics.median(run(compose) for _ in range(5))
    plain = statistics.median(run(compose_reference) for _ in range(3))
    out.append(
        entry(
            "socher_tree_encoder_speedup",
            round(plain / batched, 1),
            "x",
            reference=20.0,
            ratio=round(plain / batched / 20.0, 2),
            reference_is="the issue's aim: >= 20x",
            batched_ms=round(batched * 1000, 1),
            recursive_ms=round(plain * 1000, 1),
            trees=trees,
            nodes=int(len(st.parent)),
        )
    )
    return out


def _attention_child(q) -> None:  # a fresh process, so that its peak memory is its own
    import resource

    import torch

    from fraglib.systems.vse import attention_scores

    torch.manual_seed(0)
    n_img, n_sent, R, L, D = 1000, 5000, 20, 13, 1024  # the synthetic test-set sizes of the issue
    V = torch.nn.functional.normalize(torch.randn(n_img, R, D), dim=2)
    E = torch.nn.functional.normalize(torch.randn(n_sent, L, D), dim=2)
    vm = torch.ones(n_img, R, dtype=torch.bool)
    em = torch.arange(L)[None] < torch.randint(6, L + 1, (n_sent,))[:, None]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    flat_v, flat_e = V.reshape(-1, D), E.reshape(-1, D)
    step = max(1, (1 << 24) // (n_img * R * L))
    t0 = time.perf_counter()  # the matmul it contains, in the same tiles
    for a in range(0, n_sent, step):
        flat_v @ flat_e[a * L : (a + step) * L].T
    t_mm = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        attention_scores(V, vm, E, em, 4.0)
    t_att = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q.put((t_att, t_mm, peak / 1024, (peak - base) / 1024, 2 * n_img * R * n_sent * L * D))


def _epoch_seconds(system: Any, split: Any, epochs: int, lr: float) -> list[float]:
    """Seconds of each training epoch of ``system`` on ``split`` as the trainer runs it for Peri's
    systems: shuffled batches of 128 (images may repeat), Adam at ``lr``, gradient clip 2."""
    import torch

    from fraglib.run.inputs import make_batches

    opt = torch.optim.Adam(system.parameters(), lr=lr)
    ts = []
    for epoch in range(epochs):
        system.train()
        t0 = time.perf_counter()
        for b in make_batches(split, 128, 0, epoch, distinct=False):
            c, _ = system.loss(
                system.encode_images(split.images.take(split.sentence_image[b])),
                system.encode_sentences(split.sentences.take(b)),
                epoch,
            )
            opt.zero_grad(set_to_none=True)
            c.backward()
            torch.nn.utils.clip_grad_norm_(system.parameters(), 2.0)
            opt.step()
        ts.append(time.perf_counter() - t0)
    return ts


def bench_peri(epochs: int = 2, repeats: int = 2) -> list[dict[str, Any]]:
    """Peri's systems: seconds per VSE++ training epoch at a Pascal1K split's size (Adam, batches of
    128, hardest negative), Peri's sizes and the smaller ones chosen on validation; and the attention
    score matrix for 1,000 images x 5,000 captions (20 regions, <= 13 words, D = 1024): time, its ratio
    to the matmul it contains (same tiles, same process) and the process's peak memory."""
    from fraglib.systems.vse import Config, VseSystem

    split, dims = token_split()
    out = []
    for label, sizes in (
        ("peri", dict(word_dim=300, hidden=1024, embed_dim=1024)),
        ("small", dict(word_dim=100, hidden=256, embed_dim=256)),
    ):
        system = VseSystem(Config(**sizes), dims, 0)
        system.prepare(split)
        ts = _epoch_seconds(system, split, epochs, lr=2e-4)
        out.append(
            entry(
                f"vsepp_epoch_s_{label}",
                round(statistics.median(ts), 2),
                "s",
                captions=split.n_sentences,
                sizes=sizes,
                batch=128,
                repeats=epochs,
                all_runs=[round(t, 2) for t in ts],
            )
        )
    runs = in_fresh_processes(_attention_child, repeats)
    t_att, t_mm = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    out.append(
        entry(
            "attention_1000x5000_s",
            round(t_att, 2),
            "s",
            reference=round(t_mm, 2),
            ratio=round(t_att / t_mm, 2),
            reference_is="seconds of the (20000 x 1024) @ (1024 x 65000) region-word matmul it contains, "
            "same tiles; the issue's aim: ratio <= 3",
            tflop=round(runs[0][4] / 1e12, 2),
            all_runs=[[round(x, 2) for x in r[:2]] for r in runs],
        )
    )
    out.append(
        entry(
            "attention_peak_mem_mb",
            round(max(r[2] for r in runs), 0),
            "MB",
            reference=4096,
            ratio=round(max(r[2] for r in runs) / 4096, 2),
            reference_is="the issue's aim: <= 4 GB; peak RSS of the scoring process, inputs (350 MB) included",
            growth_during_scoring_mb=round(max(r[3] for r in runs), 0),
        )
    )
    return out


def bench_stt(epochs: int = 2) -> list[dict[str, Any]]:
    """Show, Translate and Tell: seconds per training epoch at a Pascal1K split's size (the chosen sizes,
    Adam, batches of 128); greedy and beam-3 decoding in captions per second (500 captions decoded at
    once, at most 20 words); and pycocoevalcap's metrics on 100 captions x 5 references and 500
    paraphrases x 4 (Pascal1K's test split; the PTB tokenizer and METEOR start a JVM: included)."""
    import numpy as np
    import torch

    from fraglib.systems.stt import Config, SttSystem
    from fraglib_study.experiments.captions import caption_scores, java_missing

    split, dims = token_split()
    system = SttSystem(Config(word_dim=100, hidden=256, embed_dim=256, dec_hidden=256, dropout=0.4), dims, 0)
    system.prepare(split)
    system.use_training_split(split)
    ts = _epoch_seconds(system, split, epochs, lr=5e-4)
    out = [
        entry(
            "stt_epoch_s",
            round(statistics.median(ts), 2),
            "s",
            captions=split.n_sentences,
            batch=128,
            sizes="word 100, GRU 256, D 256, decoder 256, vocabulary 1,000",
            repeats=epochs,
            all_runs=[round(t, 2) for t in ts],
        )
    ]
    u = torch.nn.functional.normalize(torch.randn(500, 256, generator=torch.Generator().manual_seed(0)), dim=1)
    for beam in (1, 3):
        rates = []
        for _ in range(3):
            t0 = time.perf_counter()
            caps = system.decode(u, beam=beam, max_len=20)
            rates.append(len(caps) / (time.perf_counter() - t0))
        out.append(
            entry(
                f"decode_beam{beam}_captions_per_s",
                round(statistics.median(rates), 1),
                "captions/s",
                batch=500,
                max_len=20,
                mean_words=round(float(np.mean([len(c) for c in caps])), 1),
                note="an untrained decoder: captions run to max_len, the slowest case",
                all_runs=[round(r, 1) for r in rates],
            )
        )
    why = java_missing()
    if why:
        out.append(entry("caption_metrics_pascal1k_test_s", None, "s", skipped=why))
        return out
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(300)]
    sent = lambda: " ".join(rng.choice(vocab, int(rng.integers(6, 14))))  # noqa: E731
    t0 = time.perf_counter()
    caption_scores({i: [sent() for _ in range(5)] for i in range(100)}, {i: sent() for i in range(100)})
    caption_scores({i: [sent() for _ in range(4)] for i in range(500)}, {i: sent() for i in range(500)})
    out.append(
        entry(
            "caption_metrics_pascal1k_test_s",
            round(time.perf_counter() - t0, 1),
            "s",
            items="100 images x 5 references + 500 captions x 4 references",
            note="one process: the JVMs of the tokenizer and METEOR included",
        )
    )
    return out


# ----------------------------------------------------------------------------- one training epoch per run
REFERENCE_MATMUL = (2048, 1024, 2048)  # the rate every epoch's ratio is taken against, same process


def _rows_per_image(views: Any) -> int:
    return views.detections + 1 if views.detections else REGIONS[views.images]


def _sync(dev: Any) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(dev: Any, f: Any) -> float:
    """Wall seconds of ``f()`` with ``dev``'s queue drained before and after."""
    _sync(dev)
    t0 = time.perf_counter()
    f()
    _sync(dev)
    return time.perf_counter() - t0


def _gru_latency(gru: Any, batch: int, repeats: int = 20) -> float:
    """Seconds of one time step of ``gru`` (an ``nn.GRU``) at ``batch`` rows, forward + backward, as the
    systems run it (:func:`fraglib.systems.gru.packed_gru`), on the GRU's device: the latency that a
    recurrence over L tokens pays L times whatever else runs."""
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence

    from fraglib.systems.gru import packed_gru

    dev, mode = next(gru.parameters()).device, gru.training
    x = torch.randn(batch, 1, gru.input_size, requires_grad=True, device=dev)
    gru.train()  # cuDNN's backward runs in training mode only
    ts = []
    for _ in range(repeats + 3):
        _sync(dev)
        t0 = time.perf_counter()
        y, _ = packed_gru(gru, pack_padded_sequence(x, torch.ones(batch, dtype=torch.int64), batch_first=True))
        y.data.sum().backward()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    gru.train(mode)
    return statistics.median(ts[3:])


def _level_latency(nodes: int, n: int, dev: Any, repeats: int = 20) -> float:
    """Seconds of the least one tree level costs on ``dev``, forward + backward: its ``nodes`` children's
    messages in one (nodes × n) @ (n × n) matmul, the tanh, and the scatter into their parents."""
    import torch

    W = torch.randn(n, n, requires_grad=True, device=dev)
    h = torch.randn(nodes, n, requires_grad=True, device=dev)
    parent = torch.randint(0, max(nodes // 2, 1), (nodes,), device=dev)
    ts = []
    for _ in range(repeats + 3):
        _sync(dev)
        t0 = time.perf_counter()
        out = torch.zeros(max(nodes // 2, 1), n, device=dev).index_add_(0, parent, torch.tanh(h @ W))
        out.sum().backward()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[3:])


def _critical_path(system: Any, train: Any, tc: Any, epoch: int) -> dict[str, Any] | None:
    """The sequential part of one training epoch, measured: (sequential steps) × (latency of one step at
    that batch size), summed over the epoch's batches. GRU systems: the longest caption of each batch
    (encoder), + 1 for STT's decoder; Socher's tree encoders: the levels of the forests encoded per step
    (the batch's and, for Eq. 5, the whole training split's). None for systems without a recurrence."""
    import numpy as np

    from fraglib.run.inputs import make_batches
    from fraglib.systems.recursive import levels

    batches = make_batches(train, tc.batch_size, tc.seed, epoch, tc.distinct_images)
    counts = train.sentences.counts()
    text = getattr(system, "text", None)
    if text is not None:  # TokenGRU (VSE, attention, STT)
        lat = _gru_latency(text.gru, tc.batch_size)
        steps = sum(int(counts[b].max()) for b in batches)
        parts = {"encoder_gru_steps": steps, "encoder_step_ms": round(lat * 1000, 3)}
        total = steps * lat
        dec = getattr(system, "dec", None)
        if dec is not None:
            lat_d = _gru_latency(dec, 2 * tc.batch_size)  # both heads decode in one batch
            steps_d = sum(int(counts[b].max()) + 1 for b in batches)
            parts.update(decoder_gru_steps=steps_d, decoder_step_ms=round(lat_d * 1000, 3))
            total += steps_d * lat_d
        return {
            "critical_path_s": round(total, 3),
            "sequential": parts,
            "critical_path_is": "GRU time steps (longest caption per batch) x one step's latency at the batch size, fwd+bwd",
        }
    structure = getattr(system, "structure", None)
    if structure is None or system.cfg.encoder == "bow":
        return None
    every = train.sentences.take(np.nonzero(train.usable_sentences())[0])
    st_all = structure(every) if system.cfg.loss == "margin" else None
    n_lv_all = len(levels(st_all.parent)) if st_all is not None else 0
    n_nodes = len(st_all.parent) if st_all is not None else 0
    per_step, nodes_b = [], 0
    if st_all is None:  # the squared loss encodes the batch; Eq. 5 reads it by position only
        for b in batches:
            st = structure(train.sentences.take(b))
            per_step.append(len(levels(st.parent)))
            nodes_b += len(st.parent)
    dev = system.words.device
    lat_all = _level_latency(max(n_nodes // max(n_lv_all, 1), 1), system.words.shape[1], dev) if n_lv_all else 0.0
    lat_b = _level_latency(max(nodes_b // max(sum(per_step), 1), 1), system.words.shape[1], dev) if nodes_b else 0.0
    total = len(batches) * n_lv_all * lat_all + sum(per_step) * lat_b
    return {
        "critical_path_s": round(total, 3),
        "sequential": {
            "levels_all_negatives": n_lv_all,
            "level_all_ms": round(lat_all * 1000, 3),
            "levels_batch_mean": round(float(np.mean(per_step)), 1) if per_step else 0.0,
            "level_batch_ms": round(lat_b * 1000, 3),
        },
        "critical_path_is": "tree levels per step (Eq. 5: the whole training split's forest; the squared loss: the "
        "batch's) x one level's least cost (one matmul, tanh, scatter; fwd+bwd) at its mean size",
    }


SOLVER_OPS = ("eigh", "cholesky", "solve_triangular", "aten::mm", "aten::addmm", "aten::bmm")


def _solver_bound(fit: Any) -> dict[str, Any]:
    """A closed-form fit's least cost under its own algorithm: the self time, in one profiled ``fit()``, of
    its matrix decompositions (eigh, Cholesky, triangular solves: LAPACK, which ``FlopCounterMode`` does
    not count, so they pull the FLOP ratio down) and of its matrix products. What is left of the fit's
    seconds is everything else (feature maps, copies, float64 conversions)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fit()
    parts: dict[str, float] = {}
    for e in prof.key_averages():
        hit = next((op for op in SOLVER_OPS if op in e.key), None)
        if hit:
            name = hit.removeprefix("aten::")
            parts[name] = parts.get(name, 0.0) + e.self_cpu_time_total / 1e6
    total = sum(parts.values())
    return {
        "critical_path_s": round(total, 3),
        "sequential": {f"{k}_s": round(v, 3) for k, v in sorted(parts.items())},
        "critical_path_is": "the closed form's decompositions (eigh, Cholesky, triangular solves) and matrix "
        "products, their self time in one profiled fit",
    }


def _pascal1k_sized(run: str, dev: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``run``'s system (params.yaml, seed 0) on ``dev`` with random training (800 images, 4,000 captions) and
    validation (100 / 500) splits of Pascal1K's size in its views: (class, system, train config, train, val)."""
    import torch

    from fraglib.core.device import make_deterministic
    from fraglib.run.inputs import pool_images
    from fraglib.run.train import resolve_run
    from fraglib.systems import get_system
    from fraglib_study.schema import read_checked

    torch.manual_seed(0)
    make_deterministic(dev)
    spec = resolve_run(read_checked("params.yaml"), run)
    cls, cfg, tc = get_system(spec.system), spec.system_config, spec.train_config
    views = cls.views(cfg)
    rows, n_rel = _rows_per_image(views), 1000 if views.sentences == "tokens" else 40
    train, dims = random_split(800, 5, regions=rows, n_rel=n_rel, seed=0, device=dev)
    val, _ = random_split(100, 5, regions=rows, n_rel=n_rel, seed=1, device=dev)
    if views.pooled:  # as the loader gives them
        train, val = pool_images(train), pool_images(val)
    system = cls(cfg, dims, tc.seed).to(dev)
    system.prepare(train)
    return cls, system, tc, train, dataclasses.replace(val, name="val")


def _epoch_child(q, run: str, repeats: int, threads: int) -> None:
    """A fresh process: ``run``'s settings (params.yaml) at Pascal1K size on random inputs, on the selected
    device (:func:`fraglib.core.device.select_device`); one epoch under ``FlopCounterMode`` (its FLOPs), then
    ``repeats`` timed epochs (training loop, validation)."""
    import resource

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fraglib.core.device import select_device
    from fraglib.core.distributed import Context
    from fraglib.run.evaluate import score_matrix
    from fraglib.run.train import Step, make_optimizer, train_epoch

    torch.set_num_threads(threads)
    dev, dev_name = select_device()
    cls, system, tc, train, val = _pascal1k_sized(run, dev)
    views = cls.views(system.cfg)
    out: dict[str, Any] = {
        "rows_per_image": _rows_per_image(views),
        "views": f"{views.images}/{views.sentences}",
        "device": dev_name,
        "device_type": dev.type,
    }

    if not cls.TRAINABLE:  # closed form: the fit is the epoch
        with FlopCounterMode(display=False) as fc:
            system.fit(train)
        flops = fc.get_total_flops()
        ts = [_timed(dev, lambda: system.fit(train)) for _ in range(repeats)]
        out.update(train_s=ts, val_s=[0.0] * repeats, flops_train=flops, flops_val=0, steps=0, fit=True)
        out["critical"] = _solver_bound(lambda: system.fit(train))
    else:
        system.use_training_split(train)
        opt = make_optimizer(tc, system.lr_groups())
        step = Step(system, Context())
        steps = []

        def validate() -> None:
            with torch.no_grad():
                system.eval()
                score_matrix(system, val)

        def epoch(e: int) -> tuple[float, float]:
            t_train = _timed(dev, lambda: steps.append(train_epoch(step, system, opt, train, tc, e, dev)[1]))
            return t_train, _timed(dev, validate)

        with FlopCounterMode(display=False) as fc:
            epoch(0)
        flops_total = fc.get_total_flops()
        with FlopCounterMode(display=False) as fv:  # validation alone
            validate()
        times = [epoch(e) for e in range(1, repeats + 1)]
        out.update(
            train_s=[t[0] for t in times],
            val_s=[t[1] for t in times],
            flops_train=flops_total - fv.get_total_flops(),
            flops_val=fv.get_total_flops(),
            steps=steps[0],
            fit=False,
        )
        out["critical"] = _critical_path(system, train, tc, 1)
    out["matmul_gflops"] = matmul_gflops(*REFERENCE_MATMUL, device=dev)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if dev.type == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated(dev) / 2**20
    q.put(out)


def bench_epoch(runs: list[str] | None = None, repeats: int = 3) -> list[dict[str, Any]]:
    """One training epoch of every run in ``params.yaml: bench.epoch_runs`` (one per system and view), as the
    trainer runs it, at Pascal1K's size (800 images / 4,000 captions training, 100 / 500 validation) on random
    inputs of the run's views, each run in a fresh process on ``FRAGLIB_BENCH_THREADS`` threads (default 1,
    as the study's parallel jobs): seconds (median of ``repeats`` epochs after a counted one), the epoch's
    FLOPs (``torch.utils.flop_counter.FlopCounterMode``: matmuls, convolutions and attention kernels as
    executed, padding included; element-wise work is not counted), the same process's matmul rate, and
    ``ratio`` = achieved FLOP/s ÷ matmul FLOP/s; for recurrent systems also the measured critical path.
    On a GPU (detected, or ``FRAGLIB_DEVICE``) the entries are ``epoch_<run>_cuda``, against the GPU's rate."""
    import multiprocessing as mp

    from fraglib_study.schema import read_checked

    runs = runs or (read_checked("params.yaml").get("bench") or {}).get("epoch_runs") or []
    threads = int(os.environ.get("FRAGLIB_BENCH_THREADS", "1"))
    ctx, out = mp.get_context("spawn"), []
    for run in runs:
        q = ctx.Queue()
        p = ctx.Process(target=_epoch_child, args=(q, run, repeats, threads))
        p.start()
        r = result_of(p, q, f"epoch {run}")
        seconds = [a + b for a, b in zip(r["train_s"], r["val_s"])]
        sec = statistics.median(seconds)
        flops = r["flops_train"] + r["flops_val"]
        ratio = flops / sec / 1e9 / r["matmul_gflops"] if sec > 0 else None
        extra = {}
        if r.get("critical"):
            cp = r["critical"]["critical_path_s"]
            extra = {**r["critical"], "seconds_over_critical_path": round(sec / cp, 2) if cp else None}
        suffix = "" if r["device_type"] == "cpu" else f"_{r['device_type']}"
        out.append(
            entry(
                f"epoch_{run}{suffix}",
                round(sec, 2),
                "s",
                reference=round(r["matmul_gflops"], 1),
                device=r["device"],
                ratio=float(f"{ratio:.3g}") if ratio is not None else None,  # 3 significant figures
                reference_is=f"GFLOP/s of torch.matmul {REFERENCE_MATMUL[0]}x{REFERENCE_MATMUL[1]} @ "
                f"{REFERENCE_MATMUL[1]}x{REFERENCE_MATMUL[2]}, same process",
                train_s=round(statistics.median(r["train_s"]), 2),
                val_s=round(statistics.median(r["val_s"]), 2),
                gflop=round(flops / 1e9, 1),
                gflop_train=round(r["flops_train"] / 1e9, 1),
                gflop_val=round(r["flops_val"] / 1e9, 2),
                achieved_gflops=round(flops / sec / 1e9, 1) if sec else None,
                steps=r["steps"],
                closed_form_fit=r["fit"],
                views=r["views"],
                rows_per_image=r["rows_per_image"],
                threads=threads,
                repeats=repeats,
                all_runs=[round(x, 2) for x in seconds],
                peak_rss_mb=round(r["peak_rss_mb"]),
                peak_gpu_mb=round(r["peak_gpu_mb"]) if "peak_gpu_mb" in r else None,
                **extra,
            )
        )
        print(
            f"[bench]   epoch_{run}{suffix}: {sec:.2f} s, {flops / 1e9:.1f} GFLOP, ratio {out[-1]['ratio']}"
            + (f", critical path {extra['critical_path_s']} s" if extra else ""),
            flush=True,
        )
    return out + gpu_absent("epoch_gpu")


def bench_profile(runs: list[str] | None = None) -> list[dict[str, Any]]:
    """Where one training epoch's time goes (``torch.profiler``), for ``params.yaml: bench.profile_runs`` at
    Pascal1K size on random inputs, on the selected device: the epoch's seconds unprofiled, the operators
    with the most self time (host, and device on a GPU), the device's busy share of the epoch, and per step
    the kernel launches and the host–device synchronisations (each one stalls the host until the device
    has drained its queue: on a GPU the usual reason a small model runs far under the matmul rate)."""
    from torch.profiler import ProfilerActivity, profile

    from fraglib.core.device import select_device
    from fraglib.core.distributed import Context
    from fraglib.run.train import Step, make_optimizer, train_epoch
    from fraglib_study.schema import read_checked

    runs = runs or (read_checked("params.yaml").get("bench") or {}).get("profile_runs") or []
    dev, dev_name = select_device()
    out = []
    for run in runs:
        _, system, tc, train, _ = _pascal1k_sized(run, dev)
        system.use_training_split(train)
        opt = make_optimizer(tc, system.lr_groups())
        step = Step(system, Context())
        n_steps: list[int] = []

        def epoch(e: int) -> float:
            return _timed(dev, lambda: n_steps.append(train_epoch(step, system, opt, train, tc, e, dev)[1]))

        epoch(0)
        sec = statistics.median(epoch(e) for e in (1, 2, 3))
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            epoch(4)
        ev = prof.key_averages()
        steps = n_steps[-1]
        count = {
            k: sum(e.count for e in ev if e.key == k)
            for k in (
                "cudaStreamSynchronize",
                "cudaDeviceSynchronize",
                "cudaMemcpyAsync",
                "cudaLaunchKernel",
                "cudaLaunchKernelExC",
                "aten::_local_scalar_dense",
            )
        }
        top_cpu = sorted(ev, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
        extra: dict[str, Any] = {
            "steps": steps,
            "top_self_cpu_ms_per_step": [
                [e.key, round(e.self_cpu_time_total / 1e3 / steps, 3), e.count] for e in top_cpu
            ],
            "scalar_reads_per_step": round(count["aten::_local_scalar_dense"] / steps, 1),
        }
        if dev.type == "cuda":
            kern = [e for e in ev if e.self_device_time_total > 0 and not e.key.startswith("aten::")]
            busy = sum(e.self_device_time_total for e in kern) / 1e6
            top_dev = sorted(kern, key=lambda e: e.self_device_time_total, reverse=True)[:10]
            extra.update(
                device_busy_s_per_step=round(busy / steps, 5),
                device_busy_share=round(busy / sec, 3),
                launches_per_step=round((count["cudaLaunchKernel"] + count["cudaLaunchKernelExC"]) / steps, 1),
                syncs_per_step=round((count["cudaStreamSynchronize"] + count["cudaDeviceSynchronize"]) / steps, 1),
                memcpy_per_step=round(count["cudaMemcpyAsync"] / steps, 1),
                top_device_ms_per_step=[
                    [e.key[:80], round(e.self_device_time_total / 1e3 / steps, 3), e.count] for e in top_dev
                ],
            )
        suffix = "" if dev.type == "cpu" else f"_{dev.type}"
        out.append(
            entry(
                f"profile_{run}{suffix}",
                round(sec, 3),
                "s per epoch (unprofiled)",
                device=dev_name,
                ms_per_step=round(sec / steps * 1000, 2),
                **extra,
            )
        )
        print(
            prof.key_averages().table(
                sort_by="self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total",
                row_limit=15,
                max_name_column_width=60,
            ),
            flush=True,
        )
    return out


def amp_entry(run: str, dev_type: str, fp32: dict[str, Any], bf16: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The ``amp_<run>_<device>`` entry from two study summaries (``metrics.json`` + ``seconds``): value =
    bf16 − fp32 annotation R@1 (points), with both runs' R@1 means and seed SDs and their training seconds."""

    def part(m: dict[str, Any]) -> dict[str, Any]:
        return {
            "annotation_r1": round(m["annotation"]["r1"], 2),
            "search_r1": round(m["search"]["r1"], 2),
            "annotation_r1_sd": round(m["annotation_sd"]["r1"], 2),
            "search_r1_sd": round(m["search_sd"]["r1"], 2),
            "seconds": round(m["seconds"], 1),
        }

    a, b = part(fp32), part(bf16)
    return entry(
        f"amp_{run}_{dev_type}",
        round(b["annotation_r1"] - a["annotation_r1"], 2),
        "R@1 points (bf16 - fp32)",
        reference=a["seconds"],
        ratio=round(b["seconds"] / a["seconds"], 3),
        fp32=a,
        bf16=b,
        search_r1_change=round(b["search_r1"] - a["search_r1"], 2),
        seeds=fp32.get("seeds"),
        reference_is="seconds of the fp32 study (ratio: bf16 seconds / fp32 seconds)",
        **extra,
    )


def bench_amp(runs: list[str] | None = None, seeds: tuple[int, ...] = (0, 1, 2)) -> list[dict[str, Any]]:
    """bfloat16 autocast of the training step (``train.amp``) against fp32, on the selected device: each run of
    ``params.yaml: bench.amp_runs`` trained on the synthetic benchmark (``data/synthetic``, from `dvc repro`) for
    ``seeds`` with ``amp`` off and on, one seed after another; test metrics and seconds of each (validation and
    test are fp32 in both). Meant for a GPU; on a CPU autocast runs too, slowly."""
    import copy

    from fraglib.core.device import select_device
    from fraglib.run.inputs import DataPaths
    from fraglib_study.experiments.study import run_study
    from fraglib_study.schema import read_checked

    params = read_checked("params.yaml")
    runs = runs or (params.get("bench") or {}).get("amp_runs") or []
    dev, dev_name = select_device()
    out = []
    for run in runs:
        got = {}
        for amp in (False, True):
            p = copy.deepcopy(params)
            p["train"]["amp"], p["study"]["jobs"] = amp, 1
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                m = run_study(DataPaths("data/synthetic"), run, p, tmp, seeds=list(seeds))
                got[amp] = {**m, "seconds": time.perf_counter() - t0}
        out.append(amp_entry(run, dev.type, got[False], got[True], device=dev_name))
    return out
