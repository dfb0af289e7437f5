"""The bench's suites: a module per report or question, holding what `vflflare bench run NAME` runs and the
table builders of its report (registered with `vflflare.bench.tables.table`). A new suite is a new module
here: `load()` imports every one."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache


@cache
def load() -> list[str]:
    """Import every suite module (each registers its tables and its suite as it loads); their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names
