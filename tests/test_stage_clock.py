"""The stage clock's accounting (agentrl_jax/stage_clock.py) on spans of known times."""

from __future__ import annotations

import asyncio
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax import stage_clock
from agentrl_jax.stage_clock import CATEGORIES, IDLE, split_interval


@pytest.fixture
def clock():
    clock = stage_clock.enable()
    yield clock
    stage_clock.disable()


def test_nested_spans_count_once_for_the_first_category_and_fill_the_wall_clock():
    # compile nested in a prefill call, decode overlapping it on another thread, an env wait
    split = split_interval("s", 0.0, 10.0, [
        ("prefill", 1.0, 4.0), ("compile", 2.0, 3.0), ("decode", 3.5, 6.0),
        ("env_wait", 5.0, 8.0), ("env_wait", 7.0, 9.0)])
    assert split.exclusive["compile"] == 1.0
    assert split.exclusive["prefill"] == 2.0        # 1-2 and 3-4: its compile taken out
    assert split.exclusive["decode"] == 2.0         # 4-6: prefill ran first until 4
    assert split.exclusive["env_wait"] == 3.0       # 6-9: two waits, their union
    assert split.exclusive[IDLE] == 2.0             # 0-1 and 9-10
    assert sum(split.exclusive.values()) == split.seconds == 10.0
    assert split.busy["prefill"] == 3.0 and split.busy["decode"] == 2.5
    assert split.busy["env_wait"] == 4.0            # 5-9 once, not 3 + 2


def test_spans_are_clipped_to_the_stage():
    split = split_interval("s", 2.0, 4.0, [("decode", 0.0, 3.0), ("train_step", 3.5, 9.0)])
    assert split.exclusive["decode"] == 1.0 and split.exclusive["train_step"] == 0.5
    assert split.exclusive[IDLE] == 0.5 and split.seconds == 2.0


def test_marks_cut_stages_and_spans_land_in_the_stage_they_ran_in(clock):
    with stage_clock.span("decode"):
        pass
    stage_clock.mark("first")
    stage_clock.record("train_step", 0.0, 1e9)   # straddles both stages and beyond
    stage_clock.mark("second")
    first, second = clock.splits()
    assert (first.stage, second.stage) == ("first", "second")
    assert first.busy["decode"] > 0 and second.busy["decode"] == 0
    assert second.exclusive["train_step"] == pytest.approx(second.seconds)
    assert first.exclusive["train_step"] == pytest.approx(first.seconds)
    figures = stage_clock.flat_figures(clock.splits())
    assert figures["total_seconds"] == pytest.approx(first.seconds + second.seconds)
    assert figures["second_train_step_share"] == pytest.approx(1.0)
    assert sum(figures[f"{c}_share"] for c in (*CATEGORIES, IDLE)) == pytest.approx(1.0)


def test_spans_from_threads_and_tasks_are_all_recorded(clock):
    def work():
        for _ in range(100):
            stage_clock.record("decode", 1.0, 2.0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def wait(seconds):
        with stage_clock.span("env_wait"):
            await asyncio.sleep(seconds)

    async def episodes():
        await asyncio.gather(wait(0.05), wait(0.05), wait(0.05))

    asyncio.run(episodes())
    stage_clock.mark("s")
    assert len(clock._spans) == 400 + 3
    (split,) = clock.splits()
    # three concurrent waits: their union, about one wait long, never their sum
    assert 0.05 <= split.busy["env_wait"] < 0.15


def test_compilation_is_recorded_from_jax_events(clock):
    x = jax.device_put(np.arange(7.0, dtype=np.float32))   # a transfer: nothing compiled
    def sine_program(x):
        return jnp.sin(x) * 3 + 1

    jax.jit(sine_program)(x).block_until_ready()
    stage_clock.mark("s")
    (split,) = clock.splits()
    assert split.busy["compile"] > 0 and split.compilations == 1
    ((name, program),) = clock.programs().items()
    assert "sine_program" in name and program["compilations"] == 1
    assert 0 < program["seconds"] <= split.busy["compile"]
    assert stage_clock.from_json(stage_clock.to_json([split])) == [split]
    categories = {c for c, _, _ in clock._spans}
    assert categories == {"compile"}


def test_disabled_seams_record_nothing_and_hand_out_one_shared_no_op():
    clock = stage_clock.enable()
    stage_clock.disable()
    assert stage_clock.enabled() is None
    assert stage_clock.span("decode") is stage_clock.span("prefill")
    with stage_clock.span("decode"):
        pass
    stage_clock.record("decode", 0.0, 1.0)
    stage_clock.mark("s")
    jax.jit(lambda x: x * 5 - 2)(jnp.arange(3.0)).block_until_ready()   # compiles: no entry
    assert clock.splits() == [] and clock._spans == []


def test_an_unknown_category_is_refused(clock):
    with pytest.raises(ValueError, match="unknown category"):
        stage_clock.record("lunch", 0.0, 1.0)
