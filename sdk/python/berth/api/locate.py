"""Where a function lives: the directory synced to the container and its import path there.

The runner imports ``<module>:<function>`` with the synced directory as its
working directory (on sys.path), so the module path is relative to it. A
script run as ``python app.py`` is ``__main__`` locally and ``app`` there.
"""

import os
import sys
from dataclasses import dataclass
from typing import Callable

from ..errors import BerthError


@dataclass(frozen=True)
class Location:
    root: str
    module: str
    qualname: str

    @property
    def handler(self) -> str:
        return f"{self.module}:{self.qualname}"


def _module_name_and_file(module_name: str):
    mod = sys.modules.get(module_name)
    file = getattr(mod, "__file__", None)
    if module_name == "__main__":
        spec = getattr(mod, "__spec__", None)
        if spec is not None and spec.name:
            module_name = spec.name  # run as `python -m pkg.app`
        elif file:
            module_name = os.path.splitext(os.path.basename(file))[0]
    return module_name, file


def locate(func: Callable) -> Location:
    qualname = getattr(func, "__qualname__", getattr(func, "__name__", ""))
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise BerthError(
            "invalid_request",
            f"{qualname} is not defined at the top level of its module: the container imports it by name",
        )
    module_name, file = _module_name_and_file(getattr(func, "__module__", "__main__"))
    if not file:
        raise BerthError(
            "invalid_request",
            f"{qualname} is defined in {module_name!r}, which has no file (an interactive session?): "
            "define the function in a .py file for code sync",
        )
    file = os.path.abspath(file)
    parts = module_name.split(".")
    base = os.path.basename(file)
    if not all(p.isidentifier() for p in parts):
        raise BerthError(
            "invalid_request",
            f"the module name {module_name!r} of {qualname} is not importable (rename {base} to a Python identifier)",
        )
    # A package's __init__ sits one level deeper than a plain module of the same dotted name.
    levels = len(parts) if os.path.splitext(base)[0] == "__init__" else len(parts) - 1
    root = os.path.dirname(file)
    for _ in range(levels):
        root = os.path.dirname(root)
    return Location(root=root, module=module_name, qualname=qualname)
