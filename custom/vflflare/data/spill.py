"""Numeric columns held in an unnamed temporary file while a table is in use, and read back one at a time.

A CSV file can only be parsed row by row, but preprocessing uses one float64 column at a time. Holding
every float64 column of a large table at once cost 2.1 times the float32 block it becomes (1M x 50 per
site); written here as they are parsed, they are read back a column at a time, as a Parquet table's are.
The file has no name (Linux: O_TMPFILE) and is gone when the table is. It lies in Python's temporary
directory (TMPDIR): on a RAM-backed /tmp (tmpfs) the values stay in memory, outside the process.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref

import numpy as np

_SEGMENT_BYTES = 2 << 20  # rows written at once: 5k rows of 50 columns (a read per segment); 8 MB kept 30 MB more


class SpilledColumns:
    """float64 columns, appended a block of rows at a time by one `Writer` per part of the file (threads may
    write at once), and read back whole in the parts' order. A column holding a value that is not finite
    (a missing cell read as NaN, an infinity) is listed in `flagged`."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.flagged: set[str] = set()
        self._position = {name: j for j, name in enumerate(names)}
        self._segments: list[tuple[int, int, int, int]] = []  # (part, sequence, offset, rows)
        self._end = 0
        self._lock = threading.Lock()
        self._file = tempfile.TemporaryFile(prefix="vflflare-columns-", buffering=0) if names else None
        if self._file is not None:  # closed (and so gone) with the table that reads from it
            weakref.finalize(self, self._file.close)

    def writer(self, part: int) -> Writer:
        return Writer(self, part)

    def column(self, name: str) -> np.ndarray:
        j = self._position[name]
        segments = sorted(self._segments)
        values = np.empty(sum(rows for *_, rows in segments), dtype=np.float64)
        start = 0
        for _, _, offset, rows in segments:
            target = memoryview(values[start : start + rows]).cast("B")
            self._file.seek(offset + j * rows * 8)
            if self._file.readinto(target) != len(target):
                raise OSError("the temporary file holding a table's numeric columns was cut short")
            start += rows
        return values

    def _write(self, part: int, sequence: int, block: np.ndarray) -> None:
        flagged = {self.names[j] for j in np.flatnonzero(~np.isfinite(block).all(axis=1))}  # outside the lock
        with self._lock:
            offset, self._end = self._end, self._end + block.nbytes
            self._segments.append((part, sequence, offset, block.shape[1]))
            self.flagged |= flagged
        if os.pwrite(self._file.fileno(), block, offset) != block.nbytes:
            raise OSError(f"no room for a table's numeric columns in the temporary directory {tempfile.gettempdir()}")


class Writer:
    """One part's rows, gathered column by column into segments of about _SEGMENT_BYTES."""

    def __init__(self, store: SpilledColumns, part: int) -> None:
        self._store, self._part, self._sequence = store, part, 0
        width = len(store.names)
        self._block = np.empty((width, max(1, _SEGMENT_BYTES // (8 * max(1, width)))), dtype=np.float64)
        self._filled = 0

    def add(self, columns: list[np.ndarray]) -> None:
        """The next rows of this part: one array per column, in the store's column order."""
        if not columns:
            return
        done, rows, room = 0, len(columns[0]), self._block.shape[1]
        while done < rows:
            take = min(rows - done, room - self._filled)
            for j, values in enumerate(columns):
                self._block[j, self._filled : self._filled + take] = values[done : done + take]
            self._filled += take
            done += take
            if self._filled == room:
                self.flush()

    def flush(self) -> None:
        if self._filled:
            self._store._write(self._part, self._sequence, np.ascontiguousarray(self._block[:, : self._filled]))
            self._sequence += 1
            self._filled = 0
