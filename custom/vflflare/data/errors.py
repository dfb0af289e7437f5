"""The one exception for bad input data, and what of an error may cross to another party.

A site operator who gets an error at job start must be able to fix the file without reading code,
so every message names who (site or dataset), which file, and which line/ID/column. The coordinator
and the other parties must learn nothing about a row they did not already hold, so an error also
carries a `public` form: the same message without row IDs and values, which is all that leaves the
party (`public_message`). The full message stays in the party's own log.
"""

from __future__ import annotations

import os

VALUE = "{value}"  # where a problem text shows the offending value (filled in the full message only)
WITHHELD = "(withheld)"


class PartyError(ValueError):
    """An error about one party's data or alignment whose `public` form holds no row IDs or values."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self.public = message if public is None else public


class DataError(PartyError):
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
        value: object = None,
        unit: str = "line",
    ) -> DataError:
        """Build the standard message, e.g.
        ``site 'site-2': /x/site-2/train.csv line 18 (id '4411'), column 'PAY_0': non-numeric value 'abc'``
        (problem ``"non-numeric value {value}"``, value ``'abc'``). Its public form leaves out the ID and
        puts `WITHHELD` where the problem shows the value. `unit`: what `line` counts ("row" in Parquet)."""
        place = str(source)
        if line is not None:
            place += f" {unit} {line}"
        public = place
        if line is not None and row_id is not None:
            place += f" (id {row_id!r})"
        if column is not None:
            place += f", column {column!r}"
            public += f", column {column!r}"
        shown = problem.replace(VALUE, str(value)) if value is not None else problem
        hidden = problem.replace(VALUE, WITHHELD)
        return cls(f"{owner}: {place}: {shown}", f"{owner}: {public}: {hidden}")


def site_owner(site: str) -> str:
    """The owner part of a message about a party's files."""
    return f"site {site!r}"


def dataset_owner(name: str) -> str:
    """The owner part of a message about a source dataset read by `vflflare split`."""
    return f"dataset {name!r}"
