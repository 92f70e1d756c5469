"""Our own reader of aiconfigurator-core's measured kernel database.

aiconfigurator-core (NVIDIA, Apache-2.0) ships per-GPU, per-engine tables of measured kernel latencies as parquet
files under ``aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/<table>.parquet`` (latency in
ms; families such as ``gemm``, ``attention``, ``mla``, ``mla_bmm``, ``moe``, ``comm``). This module reads those
files with pandas; it never calls aiconfigurator's estimator, and it imports nothing of it, so the simulator and the
rest of hw_profile work without the package (it is the optional extra ``kernels``). Tests point ``data_dir`` at a
directory they write in the same layout.

What this module does: find the data, say what it covers, load a table, and build the GEMM grid with the
implausible-floor repair (see ``gemm_grid``). How one forward step is priced from those tables is
``hw_profile.kernels.ops``, which imports this module and never the other way round; the estimate asks for kernel
times through ``hw_profile.kernels.source.MeasuredKernels``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hw_profile.errors import HwProfileError
from hw_profile.hardware.gpus import GPUS
from hw_profile.kernels.grid import Grid

PACKAGE = "aiconfigurator_core"
MISSING_EXTRA = "the kernel database needs the optional extra: pip install 'dspark-sim[kernels]'"
ENGINES = ("vllm", "sglang", "trtllm")


def systems() -> dict[str, str]:
    """Our GPU names -> the database's system folders: each datasheet entry's ``kernel_db_system``
    (``hw_profile.hardware.gpus``), read when asked, so that an entry added there is covered with no edit here."""
    return {name: gpu.kernel_db_system for name, gpu in GPUS.items() if gpu.kernel_db_system}


def _gpu_of_system() -> dict[str, str]:
    return {system: name for name, system in systems().items()}


# A GEMM whose time lies this far above another engine's time for the same (M, N, K) on the same GPU, and by at
# least FLOOR_EXCESS_MS, is taken for a measurement floor, not a kernel property (issue (c)).
FLOOR_RATIO = 3.0
FLOOR_EXCESS_MS = 0.015
# The least a GEMM kernel takes, whatever its size: the smallest GEMMs in aiconfigurator-core 0.12's data take
# 1.5-2.5 us in bf16 and 3-5 us in fp8 on the data-center GPUs. The roofline replacement never goes below it.
GEMM_MIN_MS = 0.002

GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "fp4": "nvfp4"}


@dataclass(frozen=True)
class KernelTimes:
    ms: np.ndarray  # kernel time of one forward (all layers + LM head) per point, engine overheads excluded
    inside: np.ndarray  # bool per point: every kernel lookup of that point lay inside measured data
    parts: dict[str, np.ndarray]  # ms per op family per point (gemm, attention, moe, comm, lm_head)
    source: str  # e.g. "aiconfigurator-core 0.12.0: h200_sxm / vllm 0.24.0"
    notes: list[str] = field(default_factory=list)  # what was done about (a), (b), (c) and other adjustments


def default_data_dir() -> Path:
    """The installed package's ``systems/data``; one HwProfileError line when the package is absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise HwProfileError(MISSING_EXTRA)
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def package_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return None


def resolve_dir(data_dir: str | Path | None) -> Path:
    if data_dir is None:
        return default_data_dir()
    path = Path(data_dir)
    if not path.is_dir():
        raise HwProfileError(f"{path}: kernel database directory not found")
    return path


def version_key(v: str) -> tuple:
    """Numeric order of engine versions ("0.5.6.post2" < "0.5.14", "1.3.0rc20" < "1.3.0rc23")."""
    return tuple(int(p) if p.isdigit() else -1 for p in re.findall(r"\d+|[a-z]+", v))


def versions(base: Path, system: str, family: str, engine: str) -> list[str]:
    d = base / system / family / engine
    if not d.is_dir():
        return []
    return sorted((p.name for p in d.iterdir() if p.is_dir()), key=version_key)


@functools.lru_cache(maxsize=8)
def _current_versions(base: str) -> dict:
    """The package's own choice of version per (system, engine) (``query_versions.yaml`` beside the data), if any."""
    path = Path(base).parent / "query_versions.yaml"
    if not path.is_file():
        return {}
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def engine_version(base: Path, system: str, engine: str) -> str | None:
    """The version of an engine's data on a system: the package's "current" where it names one that has GEMM
    data, else the newest version with GEMM data."""
    have = versions(base, system, "gemm", engine)
    if not have:
        return None
    doc = _current_versions(str(base))
    slot = ((doc.get("overrides") or {}).get(system) or {}).get(engine) or (doc.get("defaults") or {}).get(engine)
    current = slot.get("current") if isinstance(slot, dict) else None
    return current if current in have else have[-1]


def coverage(data_dir=None) -> list[tuple[str, str, str]]:
    """(our GPU name, engine, version) for every pair with GEMM and attention data (GQA or MLA)."""
    base = resolve_dir(data_dir)
    gpu_of_system = _gpu_of_system()
    out = []
    for sysdir in sorted(p for p in base.iterdir() if p.is_dir()):
        gpu = gpu_of_system.get(sysdir.name)
        if gpu is None:
            continue
        for engine in ENGINES:
            version = engine_version(base, sysdir.name, engine)
            has_attn = any(versions(base, sysdir.name, fam, engine) for fam in ("attention", "mla"))
            if version and has_attn:
                out.append((gpu, engine, version))
    return out


def covers(gpu: str, engine: str, data_dir=None) -> bool:
    """Whether the database has (gpu, engine); False, not an error, when the optional package is absent, so that
    a caller can fall back to another source (``system_of`` says what to install)."""
    if data_dir is None and importlib.util.find_spec(PACKAGE) is None:
        return False
    return any(g == gpu.upper() and e == engine.lower() for g, e, _ in coverage(data_dir))


def system_of(gpu: str, engine: str, data_dir=None) -> tuple[Path, str, str]:
    """(data dir, system folder, engine version) for a covered pair; one HwProfileError line otherwise."""
    base = resolve_dir(data_dir)
    cov = coverage(base)
    for g, e, v in cov:
        if g == gpu.upper() and e == engine.lower():
            return base, GPUS[g].kernel_db_system, v
    listed = ", ".join(f"{g}/{e} {v}" for g, e, v in cov) or "nothing"
    raise HwProfileError(f"kernel database has no {gpu}/{engine} data; it covers: {listed}")


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    version: str  # the engine version the rows come from (may be older than the engine's, see note)
    path: Path


def find_table(base: Path, system: str, family: str, engine: str, version: str, name: str) -> Table | None:
    """One table: the engine's own version where it has this file, else the newest version that has it (the
    package backfills families the same way)."""
    candidates = versions(base, system, family, engine)
    order = [version] if version in candidates else []
    order += [v for v in reversed(candidates) if v != version and version_key(v) <= version_key(version)]
    order += [v for v in reversed(candidates) if v not in order]
    for v in order:
        path = base / system / family / engine / v / f"{name}.parquet"
        if path.is_file():
            return Table(_read(str(path), path.stat().st_mtime_ns), v, path)
    return None


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int) -> pd.DataFrame:  # the mtime keys the cache: a rewritten file is read again
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise HwProfileError(f"{path}: not a readable parquet table ({exc})") from None


def densest(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the kernel source with the most rows: the engine's default lane for that op (other lanes are
    alternatives the collector also timed)."""
    if "kernel_source" not in frame.columns or frame["kernel_source"].nunique() <= 1:
        return frame
    top = frame["kernel_source"].value_counts().index[0]
    return frame[frame["kernel_source"] == top]


@dataclass(frozen=True)
class GemmGrid:
    grid: Grid
    note: str | None  # the floor repair, when one was made


def _raw_gemm_grid(base: Path, system: str, engine: str, version: str, dtype: str) -> Grid | None:
    table = find_table(base, system, "gemm", engine, version, "gemm_perf")
    if table is None:
        return None
    rows = table.frame[table.frame["gemm_dtype"] == dtype]
    if rows.empty:
        return None
    # The densest kernel source first; cells it did not time are taken from the engine's other kernels for the
    # same dtype (still this engine's measurements) before any cell is filled by interpolation.
    main = densest(rows)
    rest = rows[~rows.index.isin(main.index)]
    keys = ["m", "n", "k"]
    merged = pd.concat([main, rest[~rest.set_index(keys).index.isin(main.set_index(keys).index)]])
    return Grid.from_frame(merged, keys)


@functools.lru_cache(maxsize=32)
def _gemm_grid_cached(base: str, system: str, engine: str, version: str, dtype: str) -> GemmGrid | None:
    basep = Path(base)
    grid = _raw_gemm_grid(basep, system, engine, version, dtype)
    if grid is None:
        return None
    mesh = np.meshgrid(*grid.axes, indexing="ij")
    best_ref = np.full(grid.values.shape, np.inf)
    best_name = np.full(grid.values.shape, "", dtype=object)
    for other in ENGINES:
        if other == engine:
            continue
        ov = engine_version(basep, system, other)
        og = _raw_gemm_grid(basep, system, other, ov, dtype) if ov else None
        if og is None:
            continue
        vals, inside = og.lookup(*mesh)
        better = inside & (vals < best_ref)
        best_ref = np.where(better, vals, best_ref)
        best_name = np.where(better, f"{other} {ov}", best_name)
    values, notes = grid.values, []
    floored = grid.measured & np.isfinite(best_ref) & (values > FLOOR_RATIO * best_ref) & (
        values - best_ref > FLOOR_EXCESS_MS)
    if floored.any():
        donors = sorted(set(best_name[floored]))
        notes.append(_floor_note(dtype, engine, version, system, grid, mesh, floored, best_ref,
                                 f"the same shape in {', '.join(donors)}", f"{', '.join(donors)}'s times"))
        values = np.where(floored, best_ref, values)
    # cells no other engine measured: against the GEMM's roofline on the GPU's datasheet, where it is known
    roof = _roofline_grid(system, dtype, mesh)
    if roof is not None:
        alone = grid.measured & ~np.isfinite(best_ref) & (values > FLOOR_RATIO * roof) & (
            values - roof > FLOOR_EXCESS_MS)
        if alone.any():
            notes.append(_floor_note(dtype, engine, version, system, grid, mesh, alone, roof,
                                     "the GEMM's roofline (no other engine measured it)", "the roofline"))
            values = np.where(alone, roof, values)
    return GemmGrid(grid.replace(values), " ".join(notes) if notes else None)


def _floor_note(dtype, engine, version, system, grid, mesh, hit, ref, against: str, by: str) -> str:
    m_hit = mesh[0][hit]
    ratio = np.median(grid.values[hit] / ref[hit])
    return (f"(c) {dtype} GEMM data of {engine} {version} on {system}: {int(hit.sum())} of "
            f"{int(grid.measured.sum())} measured (M, N, K) cells lay more than {FLOOR_RATIO:g}x (median "
            f"{ratio:.1f}x) and {FLOOR_EXCESS_MS * 1e3:g} us above {against} (M from {int(m_hit.min())} to "
            f"{int(m_hit.max())}), a measurement floor rather than the kernel; those cells were replaced by {by}.")


def _roofline_grid(system: str, dtype: str, mesh) -> np.ndarray | None:
    """A GEMM's time on the datasheet roofline at the roofline model's achieved efficiencies, and never under
    ``GEMM_MIN_MS``; None where the GPU or dtype is not one the datasheet table knows."""
    from hw_profile.kernels.roofline import RooflineParams

    gpu = GPUS.get(_gpu_of_system().get(system, ""))
    width = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0}.get(dtype)
    if gpu is None or width is None:
        return None
    params = RooflineParams()
    m, n, k = mesh
    bytes_ = (m * k + k * n) * width + m * n * 2.0
    flops = 2.0 * m * n * k
    peak = gpu.peak_tflops("fp8" if width == 1.0 else "bf16") * 1e12 * params.comp_eff
    seconds = np.maximum(flops / peak, bytes_ / (gpu.hbm_tb_s * 1e12 * params.mem_eff))
    return np.maximum(seconds * 1e3, GEMM_MIN_MS)


def gemm_grid(base: Path, system: str, engine: str, version: str, dtype: str) -> GemmGrid | None:
    """The (M, N, K) -> ms grid of one GEMM dtype on one (system, engine), with issue (c) repaired: cells far above
    another engine's time for the same GEMM shape on the same GPU (``FLOOR_RATIO`` and ``FLOOR_EXCESS_MS``) take
    the other engine's time (the fastest one, where several have data there); cells no other engine measured are
    held against the GEMM's roofline on the GPU's datasheet (``hw_profile.hardware.gpus``) the same way."""
    return _gemm_grid_cached(str(base), system, engine, version, dtype)

