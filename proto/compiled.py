"""Loading a module that setup.py may have compiled with mypyc, without ever running a stale build.

Python imports a compiled extension before the .py beside it, so a build older than its source would
shadow an edit of the source. `load` hands out the compiled function only when the build is at least
as new as the source, and otherwise runs the source itself (with a warning saying how to rebuild).
"""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)


def load(module: ModuleType, name: str) -> tuple[Any, bool]:
    """`module.name`, and whether it comes from the mypyc build (False: the interpreted source)."""
    current, built = load_module(module)
    return getattr(current, name), built


def load_module(module: ModuleType) -> tuple[ModuleType, bool]:
    """`module` itself, or its source run by the interpreter if its build is stale; and whether it is the
    mypyc build."""
    built = Path(module.__file__ or "")
    if built.suffix == ".py":
        return module, False
    source = source_path(module)
    if not source.exists() or source.stat().st_mtime <= built.stat().st_mtime:
        return module, True
    log.warning("%s was edited after %s was built from it: running the source (bash scripts/setup.sh rebuilds it)",
                source, built.name)
    return source_module(module), False


def source_path(module: ModuleType) -> Path:
    """The .py file a module (compiled or not) is made from."""
    return Path(module.__file__ or "").with_name(module.__name__.rpartition(".")[2] + ".py")


def from_source(module: ModuleType, name: str) -> Any:
    """`name` from the module's source run by the interpreter, whatever setup.py built from it."""
    return getattr(source_module(module), name)


def source_module(module: ModuleType) -> ModuleType:
    """The module's source run by the interpreter (a module of its own), whatever setup.py built from it."""
    spec = importlib.util.spec_from_file_location(module.__name__ + "_source", source_path(module))
    assert spec is not None and spec.loader is not None
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    return source
