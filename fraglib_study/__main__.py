"""``python -m fraglib_study COMMAND [ARGS]``: the study's one command line (every DVC stage, notebook and doc
calls it). ``python -m fraglib_study`` lists the commands; ``python -m fraglib_study COMMAND --help`` a command's
arguments. Each command is the ``main`` of one module, imported only when it runs (so a stage loads, and DVC
tracks, only its own code: tests/test_dvc_deps.py reads :data:`COMMANDS`)."""

from __future__ import annotations

import importlib
import sys

# command -> (module whose main(argv) it runs, what it does)
COMMANDS = {
    "study": ("fraglib_study.experiments.study", "train a run's seeds (or folds) and score them on test"),
    "pool": ("fraglib_study.experiments.pool", "dvc repro with the stages side by side, on a Dask cluster"),
    "search": ("fraglib_study.experiments.search", "search a run's settings on validation splits"),
    "fuse": ("fraglib_study.experiments.fusion", "fuse two trained runs' test scores"),
    "captions": ("fraglib_study.experiments.captions", "generate and score captions (pycocoevalcap)"),
    "confirm": ("fraglib_study.experiments.confirm", "re-run the claims' runs on a fresh partition"),
    "explore": ("fraglib_study.experiments.explore", "the fold explorer's data from trained runs (--folds)"),
    "figures": (
        "fraglib_study.report.figure_data",
        "a study's figure data from its checkpoints (its pages' only source)",
    ),
    "notebook": ("fraglib_study.report.notebook", "execute a report notebook into an HTML page"),
    "summary": ("fraglib_study.pages.summary", "a study's summary page"),
    "index": ("fraglib_study.pages.index", "the index page"),
    "explorer-page": ("fraglib_study.pages.explorer_page", "the explorer page"),
    "reports": ("fraglib_study.pages.render", "re-render every page and docs/results.md (make reports)"),
    "facts": ("fraglib_study.audit.facts", "check the numbers the docs quote against the results"),
    "rerun": ("fraglib_study.audit.rerun", "hold a re-run against the committed results"),
    "lockstep": ("fraglib_study.audit.lockstep", "hold the DVC locks against the code; re-record with evidence"),
    "costs": ("fraglib_study.audit.costs", "the cost table's clock (make) and table"),
    "bench": ("fraglib_study.bench", "benchmarks (make bench) and make's timeline"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return f"usage: python -m fraglib_study COMMAND [ARGS]  (COMMAND --help for its arguments)\n\ncommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"python -m fraglib_study: unknown command {argv[0]!r}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    module, _ = COMMANDS[argv[0]]
    sys.argv[0] = f"python -m fraglib_study {argv[0]}"  # argparse's prog in every message
    return importlib.import_module(module).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
