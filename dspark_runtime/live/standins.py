"""CPU stand-ins for the two GPU-only parts of a live run's clock, behind the interfaces the GPU path uses, so that
a dry run on the CPU (``benchmarks/hil_gpu.sh --dry-run``, ``acceptance.gpu_stand_in: true``) goes through the
same code as a run on a GPU:

- ``HOST_EVENTS``: event pairs recorded around each forward and read once per step, as ``CUDA_EVENTS`` does with
  ``torch.cuda.Event``; on the CPU a forward has finished when its call returns, so recording reads a monotonic
  clock and the once-per-step synchronisation has nothing to wait for.
- ``HostNvml``: the NVML functions ``hw_profile.measure.telemetry.NvmlSampler`` calls, answered from the host: the CPU's
  current clock (cpufreq) as the SM clock, CPU utilisation from /proc/stat, a thermal zone's temperature where
  Linux exposes one. What the host cannot tell (memory clock, power, energy) raises, as NVML does for a query a
  device does not support, and the sampler leaves those fields empty. No clock-event reason is ever reported: the
  host has no equivalent of NVML's throttle bitmask.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch


class HostEvent:
    """``torch.cuda.Event(enable_timing=True)``'s two methods the step timer uses, on the host clock."""

    def __init__(self):
        self.t: float | None = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        """Milliseconds from this event to ``end``, as CUDA events report."""
        return 1000.0 * (end.t - self.t)


@dataclass(frozen=True)
class Events:
    """How a step timer makes events and waits for them: ``event()`` a new timing event, ``synchronize()`` once
    per step before reading them."""

    name: str
    event: object
    synchronize: object


CUDA_EVENTS = Events("cuda", lambda: torch.cuda.Event(enable_timing=True), lambda: torch.cuda.synchronize())
HOST_EVENTS = Events("host", HostEvent, lambda: None)


class NotSupported(Exception):
    """What a stand-in NVML query raises for something the host cannot tell (NVML's NotSupported error)."""


@dataclass
class _Utilization:
    gpu: float


class HostNvml:
    """The NVML calls ``NvmlSampler`` makes, answered from the host (Linux files; anything absent is unsupported)."""

    CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")
    THERMAL = Path("/sys/class/thermal/thermal_zone0/temp")

    def __init__(self):
        self._stat: tuple[int, int] | None = None

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return int(index)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str):
        raise NotSupported("the host has no PCI bus id for its CPU")

    def nvmlDeviceGetName(self, handle) -> str:
        name = platform.processor() or platform.machine()
        cpuinfo = Path("/proc/cpuinfo")
        if cpuinfo.is_file():
            for line in cpuinfo.read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        return f"{name} (host stand-in for NVML, {os.cpu_count()} CPUs)"

    def nvmlSystemGetDriverVersion(self) -> str:
        return f"{platform.system()} {platform.release()}"

    def nvmlSystemGetCudaDriverVersion(self):
        raise NotSupported("no CUDA driver on the host")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        raise NotSupported("no power limit on the host")

    def nvmlDeviceGetMaxClockInfo(self, handle, kind: int) -> float:
        return self._cpufreq("cpuinfo_max_freq", kind)

    def nvmlDeviceGetClockInfo(self, handle, kind: int) -> float:
        return self._cpufreq("scaling_cur_freq", kind)

    def nvmlDeviceGetPowerUsage(self, handle):
        raise NotSupported("no power reading on the host")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        raise NotSupported("no energy counter on the host")

    def nvmlDeviceGetTemperature(self, handle, kind: int) -> float:
        if not self.THERMAL.is_file():
            raise NotSupported("no thermal zone on the host")
        return int(self.THERMAL.read_text()) / 1000.0

    def nvmlDeviceGetUtilizationRates(self, handle) -> _Utilization:
        """Busy share of all CPUs since the previous call (since boot on the first)."""
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle, total = fields[3] + fields[4], sum(fields)
        prev_idle, prev_total = self._stat or (0, 0)
        self._stat = (idle, total)
        spent = total - prev_total
        return _Utilization(100.0 * (1 - (idle - prev_idle) / spent) if spent > 0 else 0.0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        return 0

    def _cpufreq(self, name: str, kind: int) -> float:
        if kind != 1:  # only the SM clock (NVML_CLOCK_SM = 1) has a host analogue
            raise NotSupported("no memory clock on the host")
        path = self.CPUFREQ / name
        if path.is_file():
            return int(path.read_text()) / 1000.0  # kHz -> MHz
        if name == "scaling_cur_freq" and Path("/proc/cpuinfo").is_file():  # no cpufreq (VMs): the kernel's figure
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("cpu MHz"):
                    return float(line.split(":", 1)[1])
        raise NotSupported(f"no {name} on the host")
