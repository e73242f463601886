"""The server's one reader of locks (`runner/config/locks.py`: pins, hashes, who needs what), for the
scripts that build the package environment and the wheelhouse. Loaded by its path, since the image's
build runs those scripts with no package installed: there the file is copied in beside them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

NAME = "python_runner_locks"


def load() -> ModuleType:
    """`runner/config/locks.py` as a module: the copy beside this file (the image's build), else the
    checkout's."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    here = Path(__file__).resolve().parent
    for path in (here / "locks.py", here.parent / "runner" / "config" / "locks.py"):
        if path.is_file():
            spec = importlib.util.spec_from_file_location(NAME, path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[NAME] = module  # dataclasses look their module up while the class is made
            spec.loader.exec_module(module)
            return module
    raise SystemExit(f"{here}: no locks.py beside it and no runner/config/locks.py above it")
