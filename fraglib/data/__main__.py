"""``python -m fraglib.data NAME …``: dataset reader NAME writes a data folder (:mod:`fraglib.data.readers`, one
module per reader: ``python -m fraglib.data`` lists them); ``python -m fraglib.data download NAME …`` runs a reader's
download, the one documented online step."""

from __future__ import annotations

import sys

from fraglib.core.config import ConfigError
from fraglib.data import readers


def listing() -> str:
    """One line per reader: its name and the first line of its docstring."""
    return "\n".join(f"  {n:<10} {(readers.reader(n).__doc__ or '').strip().splitlines()[0]}" for n in readers.names())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    download = argv[:1] == ["download"]
    argv = argv[1:] if download else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m fraglib.data [download] NAME [options]  (NAME --help: its options)\n\n{listing()}")
        return
    try:
        module = readers.reader(argv[0])
    except ConfigError as exc:
        raise SystemExit(f"python -m fraglib.data: {exc}") from None
    if download and not hasattr(module, "download"):
        raise SystemExit(f"python -m fraglib.data download: reader {argv[0]!r} has no download")
    sys.argv[0] = f"python -m fraglib.data {'download ' if download else ''}{argv[0]}"
    (module.download if download else module.main)(argv[1:])


if __name__ == "__main__":
    main()
