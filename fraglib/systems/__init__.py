"""The compared systems: one module each, behind the protocol of :mod:`fraglib.systems.base`.

``SYSTEMS`` is the registry (name -> class); the name is also the module's file name. Importing it imports
every system, so a DVC stage depends on the whole folder (tests/test_dvc_deps.py). Adding a system:
docs/adding_a_system.md.
"""

from __future__ import annotations

from fraglib.core.config import ConfigError
from fraglib.systems.base import System
from fraglib.systems.devise import DeviseSystem
from fraglib.systems.fragment import FragmentSystem
from fraglib.systems.kcca import KccaSystem
from fraglib.systems.random import RandomSystem
from fraglib.systems.scan import ScanSystem
from fraglib.systems.socher import SocherSystem
from fraglib.systems.stt import SttSystem
from fraglib.systems.vse import VseSystem

SYSTEMS: dict[str, type[System]] = {
    "fragment": FragmentSystem,
    "devise": DeviseSystem,
    "random": RandomSystem,
    "socher": SocherSystem,
    "kcca": KccaSystem,
    "vse": VseSystem,
    "stt": SttSystem,
    "scan": ScanSystem,
}


def get_system(name: str, where: str = "system") -> type[System]:
    """The class registered as ``name``; a ConfigError listing the known names otherwise."""
    if name not in SYSTEMS:
        raise ConfigError(f"{where}={name!r}: unknown system, known: {', '.join(SYSTEMS)}")
    return SYSTEMS[name]
