"""The one exception for bad input data.

A site operator who gets an error at job start must be able to fix the file without reading code,
so every message names who (site or dataset), which file, and which line/ID/column.
"""
from __future__ import annotations

import os


class DataError(ValueError):
    """Bad input data. A ValueError so generic argument checks still catch it; its own type so a job
    can tell "fix your files" apart from a bug."""

    @classmethod
    def at(
        cls,
        owner: str,
        source: str | os.PathLike[str],
        problem: str,
        *,
        line: int | None = None,
        row_id: str | None = None,
        column: str | None = None,
    ) -> "DataError":
        """Build the standard message, e.g.
        ``site 'site-2': /x/site-2/train.csv line 18 (id '4411'), column 'PAY_0': non-numeric value 'abc'``."""
        place = str(source)
        if line is not None:
            place += f" line {line}"
            if row_id is not None:
                place += f" (id {row_id!r})"
        if column is not None:
            place += f", column {column!r}"
        return cls(f"{owner}: {place}: {problem}")


def site_owner(site: str) -> str:
    """The owner part of a message about a party's files."""
    return f"site {site!r}"


def dataset_owner(name: str) -> str:
    """The owner part of a message about a source dataset read by `vflflare split`."""
    return f"dataset {name!r}"
