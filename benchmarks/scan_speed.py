"""Time fraglib's SCAN scorer (fraglib.systems.scan.xattn_scores) against the authors' own functions
(kuanghuei/SCAN model.py: xattn_score_t2i / xattn_score_i2t, read from a local mirror as tests/test_scan.py
does) on identical inputs: a SCAN training batch (128 images x 36 regions, 128 captions of 8-16 words,
D = 1024, float32), SCAN's defaults (clipped_l2norm, AVG; lambda1 9 for t2i, 4 for i2t), scores alone and
scores + backward, median of several runs, one thread each (same thread count for both).

    .venv/bin/python benchmarks/scan_speed.py [--threads 1] [--repeats 5] [--out benchmarks/scan_speed.json]

Writes entries of fraglib.bench's schema (name, value, unit, reference = SCAN's time, ratio = SCAN / ours)
to --out. Needs SCAN's model.py ($SCAN_MODEL_PY or a kuanghuei+SCAN mirror under $FRAGLIB_MIRROR).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_scan import load_scan, scan_model_source  # noqa: E402

from fraglib.bench.common import entry  # noqa: E402
from fraglib.systems.scan import xattn_scores  # noqa: E402


def median_s(f, repeats: int) -> float:
    f()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=128, help="images and captions")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "scan_speed.json"))
    args = ap.parse_args()
    found = scan_model_source()
    if found is None:
        raise SystemExit("SCAN's model.py not found: set SCAN_MODEL_PY or mirror github.com/kuanghuei/SCAN")
    scan = load_scan(found[0])
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UserWarning)  # SCAN's nn.Softmax() without dim
    g = torch.Generator().manual_seed(0)
    n, R, L, D = args.n, 36, 16, args.dim
    V = torch.nn.functional.normalize(torch.randn(n, R, D, generator=g), dim=-1)
    lengths = torch.randint(8, L + 1, (n,), generator=g)
    em = torch.arange(L)[None] < lengths[:, None]
    E = torch.nn.functional.normalize(torch.randn(n, L, D, generator=g), dim=-1) * em[..., None]
    vm = torch.ones(n, R, dtype=torch.bool)
    cap_lens = lengths.tolist()
    out = []
    for direction, lam in (("t2i", 9.0), ("i2t", 4.0)):
        opt = argparse.Namespace(raw_feature_norm="clipped_l2norm", agg_func="Mean", lambda_softmax=lam, lambda_lse=6.0)
        ours = lambda v, e: xattn_scores(v, vm, e, em, direction, lam, "clipped_l2norm", "Mean")
        theirs = lambda v, e: scan["xattn_score_" + direction](v, e, cap_lens, opt)
        with torch.no_grad():
            diff = float((ours(V, E) - theirs(V, E)).abs().max())
        for mode in ("scores", "scores_backward"):

            def run(f):
                if mode == "scores":
                    with torch.no_grad():
                        f(V, E)
                else:
                    v, e = V.clone().requires_grad_(), E.clone().requires_grad_()
                    f(v, e).sum().backward()

            t_ours = median_s(lambda: run(ours), args.repeats)
            t_scan = median_s(lambda: run(theirs), args.repeats)
            e = entry(
                f"scan_{direction}_{mode}_{n}x{n}_s",
                round(t_ours, 4),
                "s",
                reference=round(t_scan, 4),
                ratio=round(t_scan / t_ours, 2),
                threads=args.threads,
                repeats=args.repeats,
                shape=f"{n} images x {R} regions, {n} captions x 8-{L} words, D {D}, float32",
                max_abs_diff_vs_scan=diff,
                scan_source="github.com/kuanghuei/SCAN model.py",
            )
            print(json.dumps(e))
            out.append(e)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
