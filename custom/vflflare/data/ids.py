"""Row IDs as the parties join on them, and the optional normalisation of IDs written differently.

IDs are compared exactly by default: "007" and "7" are different rows. A job that knows its parties
write IDs differently sets ``id_normalize`` (JobConfig), which every party applies to its own IDs
before hashing or PSI. The job config is one for all parties, so the normalisation is identical
everywhere by construction. Steps run in the fixed order of `ID_NORMALIZATIONS`, whatever order the
job lists them in, so two jobs naming the same steps normalise alike.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from vflflare.data.errors import VALUE
from vflflare.data.strings import StringColumn
from vflflare.data.table import CsvTable

_LEADING_ZEROS = re.compile(r"^0+(?=.)")
# an integer written as a float ("123.0", "-4.00"), as spreadsheets and pandas export integer IDs
_ZERO_FRACTION = re.compile(r"^([+-]?\d+)\.0+$")

ID_NORMALIZATIONS: dict[str, Callable[[str], str]] = {
    "nfc": lambda s: unicodedata.normalize("NFC", s),
    "strip": str.strip,
    "casefold": str.casefold,
    # before strip_leading_zeros, which would turn "0.0" into ".0"
    "strip_zero_fraction": lambda s: _ZERO_FRACTION.sub(r"\1", s),
    # keeps one character, so "000" becomes "0", not ""
    "strip_leading_zeros": lambda s: _LEADING_ZEROS.sub("", s),
}


def normalizer(steps: Sequence[str]) -> Callable[[str], str]:
    unknown = sorted(set(steps) - set(ID_NORMALIZATIONS))
    if unknown:
        raise ValueError(f"unknown id_normalize steps {unknown}; known: {list(ID_NORMALIZATIONS)}")
    chosen = [f for name, f in ID_NORMALIZATIONS.items() if name in steps]

    def apply(row_id: str) -> str:
        for step in chosen:
            row_id = step(row_id)
        return row_id

    return apply


def normalize_table_ids(table: CsvTable, id_column: str, steps: Sequence[str]) -> None:
    """Check `table`'s IDs and replace them by their normal form under `steps`. Two IDs of one file
    that become equal are an error naming both lines, since both rows would join the same partner."""
    if table.ids is None:
        table.check_ids(id_column)
    if not steps:
        return
    assert table.ids is not None
    apply = normalizer(steps)
    first: dict[str, int] = {}
    normal = []
    for row, row_id in enumerate(table.ids):
        new = apply(row_id)
        if not new:
            raise table.error(f"ID is empty under id_normalize {list(steps)}", row=row, column=id_column)
        if new in first:
            raise table.error(
                f"ID is {VALUE} on {table.unit} {table.lines[first[new]]}; make them distinct or drop a "
                "normalisation step",
                row=row,
                column=id_column,
                value=f"{new!r} under id_normalize {list(steps)}, like {table.ids[first[new]]!r}",
            )
        first[new] = row
        normal.append(new)
    table.ids = normal


# No step changes printable ASCII without capitals that neither starts with "0" nor ends in ".0", ".00", ...:
# only IDs this finds anything in are run through the steps (at 1M IDs a site spent 5 s on them all).
_MIGHT_CHANGE = r"[^\x21-\x7e]|[A-Z]|^0|\.0+$|^$"


def might_change(ids: Sequence[str]) -> np.ndarray:
    """Positions of the IDs some normalisation step could change: every one that does, and usually no other."""
    column = ids if isinstance(ids, StringColumn) else StringColumn(pa.array(list(ids), pa.string()))
    return column.matching(_MIGHT_CHANGE)


def changing_steps(ids: Sequence[str], applied: Sequence[str]) -> list[str]:
    """The normalisation steps, beyond those `applied`, that change at least one of `ids` in the full
    normalisation, each step after the ones before it: what the alignment report suggests when rows fail
    to match ("0.0" needs only strip_zero_fraction, though strip_leading_zeros alone would change it)."""
    changed = set()
    for position in might_change(ids):
        row_id = ids[int(position)]
        for name, step in ID_NORMALIZATIONS.items():
            new = step(row_id)
            if new != row_id:
                changed.add(name)
            row_id = new
    return [name for name in ID_NORMALIZATIONS if name in changed and name not in applied]
