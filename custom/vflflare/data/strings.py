"""A table's text column (IDs, categories) held in Arrow and read as Python strings.

A million IDs such as "syn-0000001" take about 68 MB as a list of Python strings, a third of a 1M x 50
float32 table, and about 15 MB in Arrow: one buffer of characters and one of offsets. Code that reads the
column sees a sequence of `str`, as it would see a list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_CHUNK = 1 << 16  # strings made at a time while iterating


class StringColumn(Sequence[str]):
    def __init__(self, values: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(values, pa.ChunkedArray):
            values = pa.concat_arrays(values.chunks) if values.num_chunks else pa.array([], pa.string())
        if values.null_count:
            raise ValueError("a StringColumn holds no nulls: fill them first")
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> StringColumn: ...
    def __getitem__(self, index: int | slice) -> str | StringColumn:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return StringColumn(self._values.slice(start, max(0, stop - start)))
            return StringColumn(self._values.take(pa.array(range(start, stop, step), pa.int64())))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("StringColumn index out of range")
        return self._values[index].as_py()

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _CHUNK):
            yield from self._values.slice(start, _CHUNK).to_pylist()

    def take(self, rows: np.ndarray) -> list[str]:
        return self._values.take(pa.array(np.asarray(rows, dtype=np.int64))).to_pylist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringColumn):
            return self._values.equals(other._values)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence, like a list

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self._values.to_numpy(zero_copy_only=False)  # object array of str, made at C speed
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        head = ", ".join(repr(value) for value in self[:3])
        return f"StringColumn([{head}{', ...' if len(self) > 3 else ''}], {len(self)} strings)"

    @property
    def nbytes(self) -> int:
        return self._values.nbytes

    # Checks of a whole column at C speed, without making its strings; where one fails, the caller goes
    # through the strings to name the offending row. Each gives the hash table it built back to the OS: Arrow's
    # pool would keep it (about 100 MB at 1M IDs, held while the blocks are built).
    def distinct_and_non_empty(self) -> bool:
        distinct = len(pc.unique(self._values)) == len(self)
        pa.default_memory_pool().release_unused()
        return distinct and not pc.any(pc.equal(self._values, "")).as_py()

    def matching(self, pattern: str) -> np.ndarray:
        """Positions of the strings in which the RE2 `pattern` finds a match."""
        return pc.indices_nonzero(pc.match_substring_regex(self._values, pattern)).to_numpy()

    def disjoint(self, other: StringColumn) -> bool:
        shared = pc.any(pc.is_in(self._values, value_set=other._values)).as_py()
        pa.default_memory_pool().release_unused()
        return not shared


def pick(values: Sequence[str], rows: np.ndarray) -> list[str]:
    """`values` at `rows`, as str: at Arrow's speed from a StringColumn (a scoring job's 800k IDs)."""
    if isinstance(values, StringColumn):
        return values.take(rows)
    return [values[i] for i in np.asarray(rows, dtype=np.int64).tolist()]
