"""The NVML sampler: for real without a GPU (this machine has no NVML library), and its logic against a small fake
NVML object injected through the ``nvml=`` parameter, since a real NVML cannot exist where no GPU does."""

import math
import time

import pytest

from hw_profile.measure.telemetry import THROTTLING, NvmlSampler, PointTelemetry, reason_names


def test_without_nvml_nothing_crashes_and_one_line_says_why():
    sampler = NvmlSampler.open("cuda")  # the real pynvml, on a machine without the NVML library or a GPU
    if sampler.available:
        pytest.skip("this machine has a working NVML; the no-GPU path is what this test is about")
    assert sampler.reason.startswith("no NVML telemetry: ") and "\n" not in sampler.reason
    sampler.start()
    t = sampler.stop()
    assert isinstance(t, PointTelemetry) and t.samples == 0
    cols = t.columns(steps=10)
    assert cols["throttled"] is False and cols["throttle_reasons"] == ""
    assert all(math.isnan(cols[k]) for k in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temp_c", "util_pct",
                                             "energy_j"))
    assert sampler.device_info() == {"telemetry": sampler.reason}
    sampler.close()


def test_cpu_profiling_has_no_telemetry():
    sampler = NvmlSampler.open("cpu")
    assert not sampler.available and "cpu" in sampler.reason


class FakeNvml:
    """The handful of pynvml functions the sampler calls, over a scripted device."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy=True, throttle_after=None, init_error=None):
        self.energy = energy
        self.throttle_after = throttle_after  # sample count after which the power cap engages
        self.init_error = init_error
        self.calls = 0
        self.energy_mj = 1_000_000
        self.t0 = time.perf_counter()
        self.writes = []  # any setter called would land here; the sampler must never call one

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetName(self, h):
        return b"Fake H200"

    def nvmlSystemGetDriverVersion(self):
        return "999.1"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == 1 else 3201

    def nvmlDeviceGetClockInfo(self, h, kind):
        self.calls += 1 if kind == 1 else 0
        return 1755 if kind == 1 else 3201

    def nvmlDeviceGetPowerUsage(self, h):
        return 500_000  # 500 W

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + min(self.calls, 5)

    def nvmlDeviceGetUtilizationRates(self, h):
        class U:
            gpu = 100
        return U()

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if self.throttle_after is not None and self.calls > self.throttle_after:
            return 0x4  # SW power cap
        return 0x1 if self.calls == 1 else 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy:
            raise self.NVMLError("Not Supported")
        # 500 W x elapsed time, in millijoules
        return int(self.energy_mj + 500_000 * (time.perf_counter() - self.t0))


def _window(sampler, seconds=0.3):  # long enough for several samples even when the CPU is busy
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_sampler_reads_the_window_and_energy_counter():
    fake = FakeNvml()
    sampler = NvmlSampler.open("cuda", nvml=fake, interval_s=0.002)
    assert sampler.available
    t = _window(sampler)
    assert t.samples >= 3
    assert t.sm_clock_mhz == 1755 and t.mem_clock_mhz == 3201 and t.power_w == 500 and t.util_pct == 100
    assert t.temp_c == 65  # the max over the window
    assert t.reasons_mask == 0x1 and not t.throttled  # idle at the first sample is not throttling
    assert t.energy_source == "counter"
    assert t.energy_j == pytest.approx(500 * t.duration_s, rel=0.05, abs=0.002)
    assert t.columns(steps=4)["energy_j"] == pytest.approx(t.energy_j / 4)
    info = sampler.device_info()
    assert info["gpu_name"] == "Fake H200" and info["power_limit_w"] == 700 and info["energy_counter"] is True
    assert fake.writes == []


def test_sampler_integrates_power_without_an_energy_counter():
    sampler = NvmlSampler.open("cuda", nvml=FakeNvml(energy=False), interval_s=0.002)
    t = _window(sampler)
    assert t.energy_source == "power_integral"
    # trapezoid over the samples covers start-to-stop sample times, a little under the wall window
    assert t.energy_j == pytest.approx(500 * t.duration_s, rel=0.1)
    assert sampler.device_info()["energy_counter"] is False


def test_throttling_is_flagged_with_its_reason():
    sampler = NvmlSampler.open("cuda", nvml=FakeNvml(throttle_after=2), interval_s=0.002)
    t = _window(sampler)
    assert t.throttled and "sw_power_cap" in t.throttle_reasons
    assert t.columns(steps=1)["throttled"] is True
    assert reason_names(0x4 | 0x40) == "sw_power_cap|hw_thermal_slowdown"
    assert not (0x1 | 0x2 | 0x10 | 0x100) & THROTTLING


def test_nvml_that_fails_to_start_is_reported_not_raised():
    sampler = NvmlSampler.open("cuda", nvml=FakeNvml(init_error="Driver Not Loaded"))
    assert not sampler.available and "Driver Not Loaded" in sampler.reason
