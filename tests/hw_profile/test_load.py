"""Machine load during a CPU profile: the decision on numbers, and a real run's sidecar and warnings agreeing
with it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from hw_profile.measure.load import SPREAD, LoadWatch, competing, oversubscribed, relative_spread


def test_oversubscription_counts_the_profiles_own_threads_once():
    # before the run the load average is all other work; during it, the profile's threads are inside it
    assert competing(4.5, 1) == 3.5 and competing(0.7, 2) == 0.0
    assert not oversubscribed(0.2, threads=2, cores=2)  # a quiet 2-core machine running a 2-thread profile
    assert not oversubscribed(1.4, threads=1, cores=2)  # another job on the spare core, not yet half a core over
    assert oversubscribed(1.5, threads=1, cores=2)
    assert oversubscribed(3.5, threads=1, cores=2)  # the loaded machine of the issue: 4.5 runnable on 2 cores


def test_relative_spread_is_the_median_over_points():
    p10, med, p90 = np.array([9.0, 90.0, 1.0]), np.array([10.0, 100.0, 2.0]), np.array([11.0, 150.0, 4.0])
    assert relative_spread(p10, p90, med) == pytest.approx(np.median([0.2, 0.6, 1.5]))
    assert np.isnan(relative_spread([], [], []))
    assert relative_spread([1.0, np.nan], [1.1, 5.0], [1.0, 0.0]) == pytest.approx(0.1)


def test_watch_warns_once_per_sign_and_records_a_verdict():
    quiet = LoadWatch(cores=2, threads=1, before=0.3, during_max=1.4)
    assert quiet.warnings(spread=0.05) == [] and quiet.record(0.05)["verdict"] == "quiet"
    busy = LoadWatch(cores=2, threads=1, before=4.48, during_max=5.2)
    first = busy.warnings()
    assert [line.split(": ", 2)[2][:12] for line in first] == ["load average", "4.20 runnabl"]
    assert all(line.startswith("warning: machine load: ") for line in first)
    assert busy.warnings() == []  # already said
    (spread_line,) = busy.warnings(spread=0.4)
    assert "repeats spread 40%" in spread_line
    rec = busy.record(0.4)
    assert rec == {"cores": 2, "threads": 1, "load_before": 4.48, "load_max_during": 5.2,
                   "competing_max_during": 4.2, "repeat_spread_median": 0.4, "verdict": "busy"}
    assert LoadWatch(cores=8, threads=4, before=0.1, during_max=4.0).record(SPREAD + 0.01)["verdict"] == "noisy"


def test_a_cpu_profile_records_the_load_it_ran_under(tiny_config, tmp_path):
    pytest.importorskip("torch")
    from hw_profile.measure.profiler import ProfileConfig, profile

    lines = []
    cfg = ProfileConfig(model=str(tiny_config), requests=[1, 4], tokens_per_request=[1, 4], contexts=[32],
                        dtype="fp32", warmup=1, repeats=5, threads=1)
    out = tmp_path / "t.csv"
    profile(cfg, out, progress=False, log=lines.append)
    meta = json.loads(out.with_suffix(".json").read_text())
    load = meta["machine_load"]
    assert load["cores"] == os.cpu_count() and load["threads"] == 1
    assert load["load_before"] is not None and load["load_max_during"] is not None
    # the sidecar's verdict and the printed warnings follow the same rule from the same numbers
    watch = LoadWatch(cores=load["cores"], threads=1, before=load["load_before"], during_max=load["load_max_during"])
    assert watch.record(load["repeat_spread_median"])["verdict"] == load["verdict"]
    warned = [line for line in lines if line.startswith("warning: machine load")]
    assert bool(warned) == (load["verdict"] != "quiet")
