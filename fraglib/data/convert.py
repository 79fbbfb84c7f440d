"""What every reader's command shares (:mod:`fraglib.data.readers`): its parser and the writing of its data folder.

A converted dataset is ``<out>/dataset.json`` (Karpathy's format, docs/formats.md), plus ``<out>/conversion.json``
when the reader skipped or counted anything (which lines, which images, how many). Both go through the output
contract (:mod:`fraglib.core.outputs`): a file another run wrote is replaced only with ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, write_text
from fraglib.data.dataset import Dataset, write_karpathy_json


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The command line of reader ``name`` (``python -m fraglib.data NAME``): ``--out`` and ``--overwrite``; the
    reader adds its own options. ``doc``: its module docstring, shown by ``--help``."""
    ap = argparse.ArgumentParser(
        prog=f"python -m fraglib.data {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, help="the data folder to write (dataset.json)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    return ap


def write(
    ap: argparse.ArgumentParser,
    args: argparse.Namespace,
    ds: Dataset,
    report: dict[str, Any] | None = None,
    image_root: Path | None = None,
) -> None:
    """Write ``ds`` to ``<args.out>/dataset.json`` (``image_root``: the absolute image folder it records) and, when
    ``report`` holds counts, ``conversion.json``; refused before anything is written where another run's files
    stand and ``--overwrite`` is not given."""
    out = Path(args.out)
    family = [out / "dataset.json", out / "conversion.json"]
    claim_cli(ap, family, family if report else family[:1], args.overwrite, f"{ap.prog} --out {out}")
    write_karpathy_json(ds, out / "dataset.json", image_root=image_root)
    if report:
        write_text(out / "conversion.json", json.dumps(report, indent=1) + "\n")
        print("skipped/counted: " + ", ".join(f"{k}={v}" for k, v in report.items()))
    print(f"wrote {ds} to {out}/dataset.json")
