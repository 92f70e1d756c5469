"""Column-declared containers of the engine: the request log, the step log and a replica's running batch.

A per-request field is declared once, as a ``Field`` (dtype, value at arrival, and whether a replica's running
batch holds a copy of it). The containers build their arrays from the declarations, so admission, eviction,
compaction, write-back and the logs handle every field without naming it: adding one is one line where the
fields are declared (``simulator/core/engine.py``), plus the line that updates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

#: a batch column read from the request log at admission and never written back (e.g. the prompt length)
COPY = "copy"
#: a batch column read at admission and written back when the request leaves the batch (evicted, finished) or
#: the run ends; the log's value is stale while the request runs
LIVE = "live"


@dataclass(frozen=True)
class Field:
    """One per-request column: its dtype, its value when a request arrives, and its place in a running batch
    (``""``: log only, ``COPY`` or ``LIVE``)."""

    dtype: type
    default: object = 0
    batch: str = ""

    def __post_init__(self):
        if self.batch not in ("", COPY, LIVE):
            raise ValueError(f"Field.batch must be '', {COPY!r} or {LIVE!r}, got {self.batch!r}")


class ColumnLog:
    """Columns indexed by row (a request id), appended in blocks of rows and grown geometrically. Rows not yet
    written already hold their field's default, so ``extend`` writes only the columns it is given."""

    def __init__(self, fields: dict[str, Field], capacity: int = 4096):
        self.fields = fields
        self.n = 0
        self.capacity = capacity
        self.data = {k: np.full(capacity, f.default, dtype=f.dtype) for k, f in fields.items()}

    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        self.capacity = max(need, 2 * self.capacity)
        for k, v in self.data.items():
            new = np.full(self.capacity, self.fields[k].default, dtype=v.dtype)
            new[: self.n] = v[: self.n]
            self.data[k] = new

    def extend(self, rows: int, /, **cols) -> np.ndarray:
        """Append ``rows`` rows; named columns take the given values, the others their declared default.
        Returns the new rows' indices."""
        unknown = cols.keys() - self.data.keys()
        if unknown:
            raise KeyError(f"no such column(s): {', '.join(sorted(unknown))}")
        start = self.n
        end = start + rows
        self._grow(end)
        for k, v in cols.items():
            self.data[k][start:end] = v
        self.n = end
        return np.arange(start, end)

    def frame(self) -> dict[str, np.ndarray]:
        return {k: v[: self.n].copy() for k, v in self.data.items()}


class RowLog:
    """A log written one whole row at a time, by column name, into a 2-D float array (one numpy assignment per
    row); ``frame`` returns typed columns. Every declared column must be given on every row."""

    def __init__(self, columns: dict[str, type], capacity: int = 4096):
        self.columns = columns
        self._names = tuple(columns)
        self.n = 0
        self.data = np.zeros((capacity, len(columns)))

    def append(self, **row) -> None:
        try:
            if len(row) != len(self._names):
                raise KeyError
            values = [row[k] for k in self._names]
        except KeyError:
            missing, extra = set(self._names) - row.keys(), row.keys() - set(self._names)
            raise KeyError(f"record: missing {sorted(missing)}, unknown {sorted(extra)}") from None
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.n] = values
        self.n += 1

    def frame(self) -> dict[str, np.ndarray]:
        return {k: self.data[: self.n, i].astype(t) for i, (k, t) in enumerate(self.columns.items())}


class Batch:
    """A replica's running requests: one array per column (attributes of this object), rows 0..n-1 in admission
    order, capacity fixed. The columns are the request fields declared with ``batch`` set, plus ``local`` ones
    that exist only while a request runs. ``rid`` (the request id, the row of the request log) is always there.

    Use ``col(name)`` or ``getattr(batch, name)[:batch.n]`` for the live rows.
    """

    def __init__(self, fields: dict[str, Field], local: dict[str, type], capacity: int):
        self.n = 0
        self.copied = tuple(k for k, f in fields.items() if f.batch)
        self.live = tuple(k for k, f in fields.items() if f.batch == LIVE)
        self._local = ("rid", *(k for k in local if k != "rid"))
        clash = set(self.copied) & set(self._local)
        if clash:
            raise ValueError(f"batch columns declared twice: {sorted(clash)}")
        self.names = (*self._local, *self.copied)
        reserved = [k for k in self.names if k.startswith("_") or k in _BATCH_ATTRIBUTES]
        if reserved:
            raise ValueError(f"batch column name(s) {reserved} clash with the Batch's own attributes")
        dtypes = {"rid": np.int64, **local, **{k: fields[k].dtype for k in self.copied}}
        # columns of one dtype are the rows of one 2-D block (each attribute a view of its row), so that
        # compaction is one compiled pass per dtype rather than a numpy operation per column
        self._blocks = []
        for dt in dict.fromkeys(np.dtype(t) for t in dtypes.values()):
            names = [k for k in self.names if np.dtype(dtypes[k]) == dt]
            block = np.zeros((len(names), capacity), dtype=dt)
            self._blocks.append(block)
            for i, k in enumerate(names):
                setattr(self, k, block[i])

    def col(self, name: str) -> np.ndarray:
        return getattr(self, name)[: self.n]

    def admit(self, log: ColumnLog, rids: list[int] | np.ndarray, **local) -> slice:
        """Append the requests ``rids`` as new rows: their logged fields copied from ``log``, local columns from
        ``local`` (a value or one per request; unnamed local columns start at 0). Returns the new rows."""
        rids = np.asarray(rids, dtype=np.int64)
        start, end = self.n, self.n + len(rids)
        self.rid[start:end] = rids
        data = log.data
        for k in self.copied:
            getattr(self, k)[start:end] = data[k][rids]
        for k in self._local[1:]:
            getattr(self, k)[start:end] = local.get(k, 0)
        self.n = end
        return slice(start, end)

    def save(self, log: ColumnLog, rows: slice | np.ndarray) -> None:
        """Write the live columns of these rows back to the request log."""
        data, ids = log.data, self.rid[rows]
        for k in self.live:
            data[k][ids] = getattr(self, k)[rows]

    def drop(self, rows: np.ndarray) -> None:
        """Remove these rows (ascending indices); the others move up, in order."""
        for block in self._blocks:
            m = _compact(block, rows, self.n)
        self.n = m

    def drop_last(self) -> int:
        """Remove the most recently admitted row; returns its request id."""
        self.n -= 1
        return int(self.rid[self.n])


@njit(cache=True)
def _compact(block, drop, n):
    """Move the columns i < n of ``block`` that are not in ``drop`` (ascending) to the front, in order; returns
    how many there are."""
    k = 0
    d = 0
    for i in range(n):
        if d < drop.shape[0] and drop[d] == i:
            d += 1
            continue
        if k != i:
            for c in range(block.shape[0]):
                block[c, k] = block[c, i]
        k += 1
    return k


_BATCH_ATTRIBUTES = {"n", "copied", "live", "names", *dir(Batch)}
