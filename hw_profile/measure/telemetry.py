"""NVML telemetry for each measured point: clocks, power, temperature, utilisation, throttle reasons, energy.

``NvmlSampler.open(...)`` never raises: without nvidia-ml-py, without the NVML library (no driver), without a GPU,
or when profiling on the CPU, it returns a sampler whose ``available`` is False and whose ``reason`` is the one
line the profiler prints; every point then gets empty telemetry. With NVML, ``start()`` begins a background thread
that polls the device every ``interval_s`` seconds and ``stop()`` returns a ``PointTelemetry`` for the window:

- SM and memory clocks: medians over the window (what the kernels ran at);
- power: mean; temperature: max; utilisation: mean;
- throttle reasons: every reason seen in the window (NVML's clocks-event bitmask, OR-ed);
- energy: the device's total-energy counter (mJ, Volta and later) read at start and stop where supported, else the
  trapezoidal integral of the power samples (which also takes a synchronous sample at both ends).

It only reads: no clock, power-limit or persistence setting is ever changed.

The NVML module is a parameter (``nvml=``), the real ``pynvml`` by default; tests inject a small fake object with
the same functions where no GPU exists.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

# NVML clocks-event (throttle) reason bits, as nvml.h defines them; stable across driver versions.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the clocks were held below what the work asked for. Idle, application clocks (a setting the
# operator chose), sync boost and display clocks do not slow a measurement down.
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

_CLOCK_SM, _CLOCK_MEM, _TEMPERATURE_GPU = 1, 2, 0  # NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU


def reason_names(mask: int) -> str:
    """'sw_power_cap|hw_thermal_slowdown' for a bitmask; unknown bits as hex."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    if rest:
        names.append(hex(rest))
    return "|".join(names)


@dataclass
class PointTelemetry:
    """What NVML saw while one point was measured. NaN fields: not supported by the device, or no NVML."""

    sm_clock_mhz: float = math.nan
    mem_clock_mhz: float = math.nan
    power_w: float = math.nan
    temp_c: float = math.nan
    util_pct: float = math.nan
    reasons_mask: int = 0
    energy_j: float = math.nan  # over the whole window (divide by the steps run in it for joules per step)
    energy_source: str = ""  # "counter" | "power_integral" | ""
    duration_s: float = 0.0
    samples: int = 0

    @property
    def throttled(self) -> bool:
        return bool(self.reasons_mask & THROTTLING)

    @property
    def throttle_reasons(self) -> str:
        return reason_names(self.reasons_mask)

    def columns(self, steps: int) -> dict:
        """The table's telemetry columns for this point, energy per step."""
        return {
            "throttled": self.throttled,
            "throttle_reasons": self.throttle_reasons,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "power_w": self.power_w,
            "temp_c": self.temp_c,
            "util_pct": self.util_pct,
            "energy_j": self.energy_j / steps if steps else math.nan,
        }


@dataclass
class _Samples:
    t: list = field(default_factory=list)
    sm: list = field(default_factory=list)
    mem: list = field(default_factory=list)
    power: list = field(default_factory=list)
    temp: list = field(default_factory=list)
    util: list = field(default_factory=list)
    reasons: int = 0


class NvmlSampler:
    """Polls one GPU through NVML in a background thread between ``start()`` and ``stop()``."""

    def __init__(self, nvml=None, handle=None, reason: str = "", interval_s: float = 0.005):
        self.nvml = nvml
        self.handle = handle
        self.reason = reason
        self.interval_s = interval_s
        self._unsupported: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._samples = _Samples()
        self._energy0: float | None = None
        self._t0 = 0.0

    @property
    def available(self) -> bool:
        return self.handle is not None

    @classmethod
    def open(cls, device: str = "cuda", index: int = 0, pci_bus_id: str | None = None, nvml=None,
             interval_s: float = 0.005) -> NvmlSampler:
        """A sampler for the GPU the profiler runs on, or an unavailable one that says why (never raises)."""
        if device != "cuda":
            return cls(reason=f"no NVML telemetry: profiling on the {device}, not a GPU")
        if nvml is None:
            try:
                import pynvml as nvml  # nvidia-ml-py
            except ImportError:
                return cls(reason="no NVML telemetry: nvidia-ml-py (pynvml) is not installed")
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: any of them means no telemetry
            return cls(reason=f"no NVML telemetry: NVML could not start ({_describe(exc)})")
        try:
            handle = None
            if pci_bus_id:  # the device torch uses, whatever CUDA_VISIBLE_DEVICES renumbered
                try:
                    handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
                except Exception:
                    handle = None
            if handle is None:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            return cls(reason=f"no NVML telemetry: no GPU {index} ({_describe(exc)})")
        return cls(nvml=nvml, handle=handle, interval_s=interval_s)

    # -- device description for the table's sidecar --------------------------------------------------------
    def device_info(self) -> dict:
        if not self.available:
            return {"telemetry": self.reason}
        info = {"telemetry": "nvml"}
        for key, call in (
            ("gpu_name", lambda: self.nvml.nvmlDeviceGetName(self.handle)),
            ("driver", lambda: self.nvml.nvmlSystemGetDriverVersion()),
            ("cuda_driver", lambda: self.nvml.nvmlSystemGetCudaDriverVersion()),
            ("power_limit_w", lambda: self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0),
            ("max_sm_clock_mhz", lambda: self.nvml.nvmlDeviceGetMaxClockInfo(self.handle, _CLOCK_SM)),
            ("max_mem_clock_mhz", lambda: self.nvml.nvmlDeviceGetMaxClockInfo(self.handle, _CLOCK_MEM)),
        ):
            value = self._read(key, call)
            if value is not None:
                info[key] = value.decode() if isinstance(value, bytes) else value
        info["energy_counter"] = self._energy_mj() is not None
        return info

    # -- sampling ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.available:
            return
        self._samples = _Samples()
        self._stop.clear()
        self._t0 = time.perf_counter()
        self._energy0 = self._energy_mj()
        self._sample()  # one synchronous sample at each end, so even a short window has two
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> PointTelemetry:
        if not self.available:
            return PointTelemetry()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()
        duration = time.perf_counter() - self._t0
        energy1 = self._energy_mj()
        s = self._samples
        out = PointTelemetry(
            sm_clock_mhz=_median(s.sm),
            mem_clock_mhz=_median(s.mem),
            power_w=_mean(s.power),
            temp_c=max(s.temp) if s.temp else math.nan,
            util_pct=_mean(s.util),
            reasons_mask=s.reasons,
            duration_s=duration,
            samples=len(s.t),
        )
        if self._energy0 is not None and energy1 is not None and energy1 >= self._energy0:
            out.energy_j, out.energy_source = (energy1 - self._energy0) / 1000.0, "counter"
        elif len(s.power) >= 2 and len(s.power) == len(s.t):
            out.energy_j, out.energy_source = float(np.trapezoid(s.power, s.t)), "power_integral"
        return out

    def close(self) -> None:
        if self.available:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
            self.handle = None
            self.reason = "no NVML telemetry: sampler closed"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        n, h, s = self.nvml, self.handle, self._samples
        sm = self._read("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, _CLOCK_SM))
        mem = self._read("mem_clock", lambda: n.nvmlDeviceGetClockInfo(h, _CLOCK_MEM))
        power = self._read("power", lambda: n.nvmlDeviceGetPowerUsage(h))  # milliwatts
        temp = self._read("temp", lambda: n.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU))
        util = self._read("util", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu)
        reasons = self._read("reasons", lambda: _reasons(n, h))
        s.t.append(time.perf_counter() - self._t0)
        if sm is not None:
            s.sm.append(sm)
        if mem is not None:
            s.mem.append(mem)
        if power is not None:
            s.power.append(power / 1000.0)
        if temp is not None:
            s.temp.append(temp)
        if util is not None:
            s.util.append(util)
        if reasons is not None:
            s.reasons |= int(reasons)

    def _energy_mj(self) -> float | None:
        return self._read("energy", lambda: self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def _read(self, key: str, call):
        """One NVML query; a query the device does not support is not asked again."""
        if key in self._unsupported:
            return None
        try:
            return call()
        except Exception:
            self._unsupported.add(key)
            return None


def _reasons(nvml, handle) -> int:
    # renamed "clocks event reasons" in recent drivers; the throttle-reasons call is the older name
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return fn(handle)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _median(xs: list) -> float:
    return float(np.median(xs)) if xs else math.nan


def _mean(xs: list) -> float:
    return float(np.mean(xs)) if xs else math.nan
