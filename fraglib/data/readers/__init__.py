"""Dataset readers, registered by name: one module per reader in this folder, named after it.

``python -m fraglib.data NAME …`` runs reader NAME; a ``params.yaml`` dataset section (a section with a ``root``)
names its reader in ``reader:`` (default: the section's own name). A reader module has

* ``main(argv)`` — the command: reads the source and writes ``<out>/dataset.json`` (:mod:`fraglib.data.convert`);
* ``TITLE`` — the data's name on pages ("Pascal1K");
* ``CREDIT`` — where its pictures come from, printed beside them on pages ("" when it shows none);
* optionally ``download(argv)`` — ``python -m fraglib.data download NAME …``, the one documented online step.

A reader outside fraglib is named by its module path (``mypackage.my_reader``), so adding a dataset needs no edit
of fraglib (docs/adding_a_dataset.md). A dataset's name is typed nowhere else in the package (tests/test_readers.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from fraglib.core.config import ConfigError, did_you_mean

REQUIRED = ("main", "TITLE", "CREDIT")


def names() -> tuple[str, ...]:
    """The readers of this folder, sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def reader(name: str) -> ModuleType:
    """Reader ``name``: a module of this folder, or a module path with a dot (``mypackage.my_reader``). An unknown
    name, or a module without ``main``, ``TITLE`` and ``CREDIT``, is a ConfigError naming it."""
    if "." not in name and name not in names():
        raise ConfigError(
            f"unknown dataset reader {name!r}{did_you_mean(name, names())}; readers: {', '.join(names())}"
        )
    try:
        module = importlib.import_module(name if "." in name else f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        raise ConfigError(f"dataset reader {name!r}: no module {exc.name!r} to import") from None
    missing = [a for a in REQUIRED if not hasattr(module, a)]
    if missing:
        raise ConfigError(f"dataset reader {name!r} ({module.__file__}) lacks {', '.join(missing)}")
    return module


def title(name: str) -> str:
    """Reader ``name``'s ``TITLE``; the name itself for a name no reader has (data converted elsewhere)."""
    try:
        return reader(name).TITLE
    except ConfigError:
        return name


def credit(name: str) -> str:
    """Reader ``name``'s ``CREDIT`` ("" for a name no reader has)."""
    try:
        return reader(name).CREDIT
    except ConfigError:
        return ""
