"""benchmarks/timing: warm-up calls untimed, the median of the timed ones."""

from __future__ import annotations

from benchmarks import timing


def test_warm_up_calls_run_untimed_and_the_median_ignores_one_slow_call(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    durations = iter([9.0, 1.0, 2.0, 50.0, 3.0])   # one warm-up (compiling), then four calls

    def fn():
        clock[0] += next(durations)

    assert timing.median_seconds(fn, repeats=4, warmup=1) == 2.5   # median of 1, 2, 50, 3
    assert next(durations, None) is None   # every call ran
