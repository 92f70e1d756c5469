"""One guard for numba kernels cached on disk that compile in functions of other files.

numba keys a cached kernel (``@njit(cache=True)``) on the stamp of the kernel's own file only, but a call to a
jitted function of another file is compiled into the kernel: after an edit to that file, the cache would serve the
old code. ``guard_cached_kernel`` keeps a digest of every file a kernel compiles in beside its cache and empties the
kernel's cache when it no longer matches, so the kernel compiles afresh on first use.
tests/simulator/test_kernel_cache.py fails for a cached kernel in simulator/ that calls a function imported from
another file without being guarded here with that file.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType


def guard_cached_kernel(kernel, *modules: ModuleType) -> None:
    """Empty ``kernel``'s on-disk cache when its own file or one of ``modules`` (the files whose functions it
    compiles in) changed since the cache was written; nothing for a kernel without a disk cache."""
    cache = getattr(kernel, "_cache", None)
    where = getattr(cache, "_cache_path", None)
    if not where:
        return
    own = sys.modules[kernel.py_func.__module__]
    files = sorted({Path(m.__file__).resolve() for m in (own, *modules)})
    digest = hashlib.sha256(b"".join(f.as_posix().encode() + f.read_bytes() for f in files)).hexdigest()
    stamp = Path(where) / f"{own.__name__}.{kernel.py_func.__name__}.sources"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    cache.flush()
    try:
        stamp.write_text(digest)
    except OSError:  # a read-only install: nothing there can go stale either
        pass
