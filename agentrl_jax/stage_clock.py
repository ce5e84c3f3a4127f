"""Where a process's wall clock goes, stage by stage: timed spans at the seams, split.

The engine, the pipeline, the trainer, the controller client and the launcher mark what they
spend with `span(category)` (a context manager, also around an `await`) or `record(category,
start, end)` (`time.perf_counter()` seconds). JAX's compilation is taken from its own
`jax.monitoring` duration events (tracing, lowering to MLIR, the backend compile, which
includes a persistent-cache read) on whatever thread compiles. `mark(stage)` closes the
current stage: the time since the previous mark (or `enable()`) is that stage's, as
`experiment.run_dir.RunDir.mark` counts a stage's seconds.

Off by default: until `enable()`, `span` hands out one shared no-op and `record` and `mark`
return at once, so a seam costs a global lookup and a call. The one behaviour the clock
changes: enabled, the sampler's weight preparation (`SamplingEngine.prepare_weights`, run in a
worker thread) waits for its copy to finish, so that its span ends with the copy.

Categories, the order of `CATEGORIES` (highest first):

    compile           tracing + lowering + XLA compile (or a persistent-cache read)
    train_step        an optimizer step (SFT or RL), its batch placed on device included
    prefill           the engine's prefill calls, their first tokens fetched
    decode            the engine's decode chunks, their tokens fetched
    transfer          weights between trainer and sampler (RL weight sync, the sampler's
                      copy of new weights, the trained parameters fetched to the host)
    checkpoint        train state and policies written to disk
    eval_bookkeeping  evaluation's scoring, transcripts, reports, first-call summaries,
                      copy probes
    env_wait          awaiting the environments: controller requests (start, interact,
                      cancel), the fleet starting, oracle demonstrations being played
    start_jitter      the controller client's random sleep before each episode start

Overlap. Spans run on several threads at once (the sampler's loop thread, the trainer's
worker thread, the event loop with many episodes awaiting the controller), so a stage's
seconds are given two ways:

    exclusive  each instant of the stage's wall clock is charged to the first category in
               the order above that has a span open on any thread or task at that instant;
               `idle` is the rest, the instants when no span is open (the event loop's own
               Python between seams: the agent loop, tokenising, parsing; data building;
               or nothing at all). The exclusive seconds and idle add up to the wall clock.
    busy       per category, the wall seconds during which at least one of its spans was
               open, whatever else ran: busy seconds overlap, and their sum may pass the
               wall clock (e.g. decode on the engine's thread while the trainer steps).

So compile nested in a prefill call or a train step counts as compile, not as both; decode
that runs while environments answer counts as decode, and `env_wait` exclusive is the time
the whole process had nothing to do but wait for environments. On a CPU backend the device
is the host: device work in two threads competes for the same cores, and exclusive time
says which kind was under way, not which one a core was running.

Process CPU seconds per stage (every thread of this process; the environment workers are
other processes) are recorded too: CPU seconds / wall seconds near 0 in `idle` time means
waiting, near the core count means busy host work between seams; and the number of backend
compilations (XLA compiles or persistent-cache reads) that ended in the stage.

`AGENTRL_JAX_STAGE_CLOCK=PATH` in a process's environment makes `from_environment()` (which
`launch.local` calls) enable the clock and write its splits to PATH as JSON at exit
(`benchmarks/main_job.py` reads it).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

CATEGORIES = ("compile", "train_step", "prefill", "decode", "transfer", "checkpoint",
              "eval_bookkeeping", "env_wait", "start_jitter")
IDLE = "idle"
ENV_VAR = "AGENTRL_JAX_STAGE_CLOCK"
# jax.monitoring duration events that are compilation; each is reported once it has ended.
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
BACKEND_COMPILE_EVENT = COMPILE_EVENTS[-1]


@dataclasses.dataclass(frozen=True)
class StageSplit:
    """One stage's wall clock: `exclusive` (every category and `IDLE`, adding up to
    `seconds`), `busy` (per category, overlapping), `cpu_seconds` of this process, the
    backend `compilations` that ended in it."""

    stage: str
    seconds: float
    exclusive: dict[str, float]
    busy: dict[str, float]
    cpu_seconds: float = 0.0
    compilations: int = 0


class StageClock:
    """Spans of named categories and the stage marks between them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[tuple[str, float, float]] = []
        self._compiled: list[tuple[float, str, float]] = []   # backend compilations:
        # (when it ended, the program's name, its seconds)
        self._start = time.perf_counter()
        self._cpu_start = time.process_time()
        # (stage, start, end, cpu seconds)
        self._stages: list[tuple[str, float, float, float]] = []

    def record(self, category: str, start: float, end: float) -> None:
        """A span of `category` from `start` to `end` (`time.perf_counter()` seconds)."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r} (known: {CATEGORIES})")
        if end > start:
            with self._lock:
                self._spans.append((category, start, end))

    def count_compilation(self, end: float, program: str = "", seconds: float = 0.0) -> None:
        """A backend compilation of `program` that ended at `end` and took `seconds`."""
        with self._lock:
            self._compiled.append((end, program, seconds))

    def programs(self) -> dict[str, dict[str, float]]:
        """Per program name, its backend `compilations` and their `seconds`, most seconds
        first."""
        with self._lock:
            compiled = list(self._compiled)
        out: dict[str, dict[str, float]] = {}
        for _, program, seconds in compiled:
            entry = out.setdefault(program, {"compilations": 0, "seconds": 0.0})
            entry["compilations"] += 1
            entry["seconds"] += seconds
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))

    def mark(self, stage: str) -> None:
        """Ends the current stage, named `stage`; the next one starts now."""
        now, cpu = time.perf_counter(), time.process_time()
        with self._lock:
            self._stages.append((stage, self._start, now, cpu - self._cpu_start))
            self._start, self._cpu_start = now, cpu

    def splits(self) -> list[StageSplit]:
        """Every marked stage's split, in order."""
        with self._lock:
            spans, stages = list(self._spans), list(self._stages)
            compiled = [t for t, _, _ in self._compiled]
        return [dataclasses.replace(split_interval(stage, start, end, spans, cpu),
                                    compilations=sum(start < t <= end for t in compiled))
                for stage, start, end, cpu in stages]


def split_interval(stage: str, start: float, end: float,
                   spans: list[tuple[str, float, float]], cpu_seconds: float = 0.0
                   ) -> StageSplit:
    """The split of [start, end] by `spans` (clipped to it), by the rules of the module
    docstring."""
    rank = {c: i for i, c in enumerate(CATEGORIES)}
    events: list[tuple[float, int, int]] = []   # (time, +1 open / -1 close, category rank)
    for category, lo, hi in spans:
        lo, hi = max(lo, start), min(hi, end)
        if hi > lo:
            events += [(lo, 1, rank[category]), (hi, -1, rank[category])]
    events.sort()
    exclusive = [0.0] * len(CATEGORIES)
    busy = [0.0] * len(CATEGORIES)
    open_count = [0] * len(CATEGORIES)
    idle, now = 0.0, start
    for t, delta, r in [*events, (end, 0, 0)]:
        if t > now:
            active = [i for i, n in enumerate(open_count) if n]
            if active:
                exclusive[active[0]] += t - now
                for i in active:
                    busy[i] += t - now
            else:
                idle += t - now
            now = t
        open_count[r] += delta
    return StageSplit(
        stage, end - start,
        exclusive={**dict(zip(CATEGORIES, exclusive, strict=True)), IDLE: idle},
        busy=dict(zip(CATEGORIES, busy, strict=True)), cpu_seconds=cpu_seconds)


def flat_figures(splits: list[StageSplit]) -> dict[str, float]:
    """Named figures of `splits`: per stage `STAGE_seconds`, `STAGE_cpu_seconds`,
    `STAGE_CATEGORY_seconds` and `_share` (exclusive), `STAGE_CATEGORY_busy_seconds`; over
    all stages `total_seconds` and `CATEGORY_seconds` / `_share` (exclusive)."""
    out: dict[str, float] = {}
    totals: dict[str, float] = {}
    for s in splits:
        out[f"{s.stage}_seconds"] = s.seconds
        out[f"{s.stage}_cpu_seconds"] = s.cpu_seconds
        out[f"{s.stage}_compilations"] = s.compilations
        for category, seconds in s.exclusive.items():
            out[f"{s.stage}_{category}_seconds"] = seconds
            out[f"{s.stage}_{category}_share"] = seconds / s.seconds if s.seconds else 0.0
            totals[category] = totals.get(category, 0.0) + seconds
        for category, seconds in s.busy.items():
            out[f"{s.stage}_{category}_busy_seconds"] = seconds
    total = sum(s.seconds for s in splits)
    out["total_seconds"] = total
    for category, seconds in totals.items():
        out[f"{category}_seconds"] = seconds
        out[f"{category}_share"] = seconds / total if total else 0.0
    return out


# ----------------------------------------------------------------------------- the seams


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    __slots__ = ("_clock", "_category", "_start")

    def __init__(self, clock: StageClock, category: str):
        self._clock, self._category = clock, category

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self._clock.record(self._category, self._start, time.perf_counter())


_clock: StageClock | None = None
_listening = False


def span(category: str) -> _Span | _NoSpan:
    """`with span(category): ...` records the block as a span of `category` (no-op when off)."""
    clock = _clock
    return _NO_SPAN if clock is None else _Span(clock, category)


def record(category: str, start: float, end: float) -> None:
    """`StageClock.record` on the enabled clock (no-op when off)."""
    clock = _clock
    if clock is not None:
        clock.record(category, start, end)


def mark(stage: str) -> None:
    """`StageClock.mark` on the enabled clock (no-op when off)."""
    clock = _clock
    if clock is not None:
        clock.mark(stage)


def _on_duration(event: str, duration_secs: float, **metadata: str | int) -> None:
    """jax.monitoring's duration listener; the backend compile event names its `fun_name`."""
    clock = _clock
    if clock is not None and event in COMPILE_EVENTS:
        end = time.perf_counter()
        clock.record("compile", end - duration_secs, end)
        if event == BACKEND_COMPILE_EVENT:
            clock.count_compilation(end, str(metadata.get("fun_name", "")), duration_secs)


def enable() -> StageClock:
    """Starts a fresh clock for this process (its first stage starts now) and returns it."""
    global _clock, _listening
    if not _listening:   # jax offers no unregistering: one listener, checking `_clock`
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    _clock = StageClock()
    return _clock


def disable() -> None:
    """Turns the seams back into no-ops (the clock `enable` returned keeps its record)."""
    global _clock
    _clock = None


def enabled() -> StageClock | None:
    """The clock the seams record on, or None when off."""
    return _clock


def table(splits: list[StageSplit]) -> str:
    """A markdown table: per stage its seconds and each category's exclusive share."""
    columns = [*CATEGORIES, IDLE]
    lines = ["| stage | seconds | " + " | ".join(columns) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in columns) + " |"]
    rows: list[tuple[str, float, Mapping[str, float]]] = [
        (s.stage, s.seconds, s.exclusive) for s in splits]
    total = sum(s.seconds for s in splits)
    rows.append(("**all**", total, {c: sum(s.exclusive[c] for s in splits) for c in columns}))
    for name, seconds, exclusive in rows:
        shares = [f"{100 * exclusive[c] / seconds:.1f}%" if seconds else "-" for c in columns]
        lines.append(f"| {name} | {seconds:.1f} | " + " | ".join(shares) + " |")
    return "\n".join(lines)


def to_json(splits: list[StageSplit]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in splits]


def from_json(rows: list[dict[str, Any]]) -> list[StageSplit]:
    return [StageSplit(**row) for row in rows]


def from_environment() -> StageClock | None:
    """With `AGENTRL_JAX_STAGE_CLOCK=PATH` set: enables the clock and writes
    `{"stages": to_json(splits), "programs": programs()}` to PATH when the process exits;
    the clock, or None when unset."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return None
    clock = enable()

    def write() -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as out:
            json.dump({"stages": to_json(clock.splits()), "programs": clock.programs()}, out,
                      indent=1)
        os.replace(tmp, path)

    atexit.register(write)
    return clock
