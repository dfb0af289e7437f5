"""How the reports print a spread over seeds."""

from __future__ import annotations

import numpy as np


def mean_std(values: list[float], digits: int = 3) -> str:
    """'mean ± sample std' ('-' for none, the value alone for one)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"
