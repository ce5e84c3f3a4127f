"""The sampling engine's scheduler: continuous batching over a paged KV pool, policy pool.

`SamplingEngine` is synchronous and single-threaded: `submit` queues requests and `step` does one
round of work (admit waiting requests into free decode slots and prefill them together, several
prompts per device call, then one decode chunk of `steps_per_sync` steps for every running
request). `AsyncSamplingEngine` runs `step` on a
background thread and gives asyncio callers `await engine.generate(request)`.

Scheduling:
  * at most `max_batch` requests decode at once; a finished request frees its slot at once and
    the next waiting request is prefilled into it (nobody waits for the longest sequence);
  * shapes come from a few buckets (prefill rows and length, decode batch, context width), so
    after `warmup()` traffic never compiles;
  * a request reserves pages for its prompt plus `max_new_tokens` at admission, evicting idle
    sessions and unused cached prefixes (LRU) if needed, so decode never runs out of memory
    half way.

Shared prefixes (`EngineConfig.prefix_cache`): the full pages of every prompt stay cached,
read-only, keyed by their tokens and everything before them (`prefix_cache`), so a request
whose prompt begins like an earlier one (a task's system prompt and tools, a GRPO group's
first prompt) prefills only the rest. The pages are published at admission, before they are
computed, and prefill calls are ordered so that a request reading another's pages runs after
the call that writes them: the G members of a group admitted together prefill their common
prompt once, not G times.

Policies and cache validity: the pool serves named policies ("current", "stale", ...) with a
version each. KV computed under one set of weights is wrong for another, so cached k/v (a
session's, and every shared prefix) are tagged with the weights that computed them (policy,
version, install serial) and reused only by a turn of that same tag; any other turn
re-prefills the whole context. Installing weights also flushes the shared prefixes of tags no
longer served. This is SGLang's flush-on-update, and it keeps behaviour logprobs exact: every
token of a turn is computed entirely by the weights its version number names.

Streaming: a request submitted with `on_tokens` is told its new tokens at each host sync (the
prefill's first token, then every decode chunk of `steps_per_sync` steps), after stops are
applied (`types.TokenEvent`), so a server can send text while the turn is still decoding.

Constrained turns (`GenerateRequest.constraint`, a grammar): before each token the engine
asks the turn's grammar which tokens may come next and masks the others' logits on device. The
next mask depends on the token drawn, so these turns decode in calls of one step each
(`steps_per_sync` of them a round, as many tokens as the others get), apart from the
unconstrained turns, whose chunks are dispatched first: the host computes the masks while the
device runs them. Unconstrained turns pay nothing; their programs do not change.

In-flight requests on `update_params`: `in_flight="finish"` lets running turns finish on the
weights they started with (a request pins its `PolicyWeights`); `"abort"` restarts them on the
new weights, discarding their tokens so far.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax import stage_clock
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel import sharding as sharding_lib
from agentrl_jax.sampling.constraint import ConstraintError
from agentrl_jax.sampling.decode_plan import DecodePlanner, call_tokens_of
from agentrl_jax.sampling.kv_pages import PagedKVManager, Session
from agentrl_jax.sampling.prefill_plan import PrefillPlanner, bucket_of
from agentrl_jax.sampling.prefix_cache import PrefixNode
from agentrl_jax.sampling.programs import SamplerPrograms
from agentrl_jax.sampling.types import (
    FinishReason,
    GenerateRequest,
    GenerationResult,
    TokenEvent,
)
from agentrl_jax.sampling.weights import (
    PolicyWeights,
    SamplerWeights,
    Weights,
    cast_floating,
    place_weights,
    weight_shardings,
    weights_of,
)

DoneCallback = Callable[[Any], None]  # receives a GenerationResult or an Exception
TokenCallback = Callable[[TokenEvent], None]  # a running turn's new tokens (streaming)


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Sizes of the engine.

    Attributes:
      max_batch: decode slots (requests decoding at once).
      page_size: tokens per KV page.
      num_pages: pages in the pool (page 0 is scratch), shared by all sessions.
      max_context: longest sequence (prompt + generated) in tokens.
      prefill_buckets: prefill lengths (at most the largest per call). A prompt's new tokens
        are cut into chunks of these (`prefill_plan.PrefillPlanner`), not padded up to one.
        Attention over the chunk itself makes long buckets dearer per position: a 2,048-token
        call costs 1.75x a 512-token one per position (SmolLM2, docs/performance.md).
      prefill_call_tokens: a prefill call's fixed cost in positions, which the planner weighs
        against padding: ~32 on the 2-core CPU (60 ms against 2.3 ms a position, SmolLM2). A
        large value makes as few calls as possible, padding each chunk up.
      prefill_batch_buckets: prompts prefilled together in one device call (rows); capped at
        max_batch. Batching fills the matmuls (one 128-token prompt is a thin matrix).
      max_prefill_tokens: the most tokens (rows × length bucket, padding included) one prefill
        call computes; 0: no cap. Attention's scores grow with rows × length × context, so a
        call of 4 rows of 2,048 tokens over a 4,096 context needs 5.5 GB of temporaries on a
        30-layer SmolLM2, against 1.4 GB for one row; with a cap, long chunks go in fewer rows
        (never fewer than the smallest row bucket) and shapes over it are never compiled.
      context_buckets: widths (tokens) of the context read by a step; max_context is added.
        Attention reads the whole bucket, so finer buckets cost compilations but save reads.
      batch_buckets: decode batch sizes; max_batch is added.
      decode_call_tokens: a decode call's fixed cost in row-tokens of context (rows × context
        bucket), which `decode_plan.DecodePlanner` weighs against reading padded context when
        it splits the running rows into calls by context. -1 derives it from the model's bytes
        (`decode_plan.call_tokens_of`: ~2,000 for the scratch model, ~5,900 for SmolLM2); a
        large value decodes every row of a policy in one call.
      steps_per_sync: decode steps per device call (host syncs once per chunk).
      in_flight: "finish" or "abort" (see the module docstring).
      max_stop_ids: stop token ids per request the device checks.
      seed: seeds requests that bring none.
      prefix_cache: share the k/v of common prompt prefixes between requests.
      compute_dtype: the dtype the engine keeps its weights and KV pool in and computes in
        (e.g. "bfloat16": products accumulate in fp32, logits are fp32); None: the model's;
        "auto": bf16 where this host runs bf16 products natively (`agentrl_jax/precision.py`).
        Weights are cast once as they are installed. bf16 halves the bytes a decode step
        reads; on a CPU whether it is faster depends on the CPU and the rows per call
        (`benchmarks/sampler_dtype.py`).
    """

    max_batch: int = 32
    page_size: int = 16
    num_pages: int = 1024
    max_context: int = 2048
    prefill_buckets: tuple[int, ...] = (32, 128, 512)
    prefill_batch_buckets: tuple[int, ...] = (1, 4)
    max_prefill_tokens: int = 0
    prefill_call_tokens: int = 32
    context_buckets: tuple[int, ...] = (256, 1024)
    batch_buckets: tuple[int, ...] = (1, 4, 8, 16)
    decode_call_tokens: int = -1
    steps_per_sync: int = 8
    in_flight: str = "finish"
    max_stop_ids: int = 8
    seed: int = 0
    prefix_cache: bool = True
    compute_dtype: str | None = None

    def __post_init__(self):
        if not self.prefill_batch_buckets or min(self.prefill_batch_buckets) < 1:
            raise ValueError(f"bad prefill_batch_buckets {self.prefill_batch_buckets!r}")
        if self.in_flight not in ("finish", "abort"):
            raise ValueError(f"in_flight must be 'finish' or 'abort', got {self.in_flight!r}")
        for width in (*self.context_buckets, self.max_context):
            if width % self.page_size:
                raise ValueError(f"context width {width} is not a multiple of the page size")

    def sorted_buckets(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(prefill, context, batch) buckets, sorted and capped."""
        ctx = sorted({c for c in self.context_buckets if c < self.max_context} | {self.max_context})
        batch = sorted({b for b in self.batch_buckets if b < self.max_batch} | {self.max_batch})
        return tuple(sorted(set(self.prefill_buckets))), tuple(ctx), tuple(batch)

    def prefill_rows(self) -> tuple[int, ...]:
        """Row buckets of a prefill call, sorted and capped at max_batch (fewer waiting prompts
        than the smallest bucket are padded with empty rows)."""
        return tuple(sorted({min(r, self.max_batch) for r in self.prefill_batch_buckets}))

    def prefill_call_fits(self, rows: int, length: int) -> bool:
        """Whether a prefill call of `rows` (a row bucket) × `length` (a length bucket) is
        within `max_prefill_tokens`; the smallest row bucket always is."""
        return (not self.max_prefill_tokens or rows * length <= self.max_prefill_tokens
                or rows == self.prefill_rows()[0])


# Cumulative counters of `SamplingEngine.prefill_stats`; the rest of its keys are derived or now.
PREFILL_COUNTERS = ("prefill_tokens_requested", "prefill_tokens_computed",
                    "prefill_positions_computed", "prefill_tokens_reused",
                    "prefix_reused_tokens", "prefix_cache_evictions")


def prefill_window(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Prefill stats between two `prefill_stats()` snapshots (`before` may be empty).

    prefill_tokens_requested = computed + reused, where reused counts a session's own k/v
    and shared prefixes; prefill_positions_computed counts the positions prefill calls
    computed, padding included (rows × length bucket of each call); prefix_cache_hit_rate =
    prefix_reused_tokens / requested (0 with nothing requested); prefix_cache_pages is
    `after`'s (pages the cache holds then).
    """
    out = {k: after[k] - before.get(k, 0.0) for k in PREFILL_COUNTERS}
    requested = out["prefill_tokens_requested"]
    out["prefix_cache_hit_rate"] = out["prefix_reused_tokens"] / requested if requested else 0.0
    out["prefix_cache_pages"] = after["prefix_cache_pages"]
    return out


@dataclasses.dataclass(eq=False)
class _Turn:
    """A request in the engine: queued, or decoding in a slot."""

    id: int
    request: GenerateRequest
    on_done: DoneCallback | None
    seed: int
    session: Session | None = None
    policy: PolicyWeights | None = None
    max_new: int = 0
    tokens: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    reused: int = 0
    stop_string: str | None = None
    prefilled: int = 0  # prompt tokens whose k/v are in the pool so far (during admission)
    waits: list[PrefixNode] = dataclasses.field(default_factory=list)  # others' pages it reads
    pending: list[PrefixNode] = dataclasses.field(default_factory=list)  # its pages to compute
    on_tokens: TokenCallback | None = None
    reported: int = 0  # tokens already passed to on_tokens
    bitmask: np.ndarray | None = None  # a constrained turn's allowed next tokens

    def next_bitmask(self) -> np.ndarray:
        """The tokens a constrained turn may draw next, from its grammar's state."""
        constraint = self.request.constraint
        assert constraint is not None and self.bitmask is not None, "turn not constrained"
        constraint.fill_bitmask(self.bitmask)
        return self.bitmask

    def restart(self) -> None:
        self.policy, self.tokens, self.logprobs, self.stop_string = None, [], [], None
        self.reported = 0
        if self.request.constraint is not None:
            self.request.constraint.reset()

    def held_session(self) -> Session:
        """The KV session of a turn that has been admitted."""
        assert self.session is not None, "turn not admitted"
        return self.session

    def served_by(self) -> PolicyWeights:
        """The policy weights a started turn is generated with."""
        assert self.policy is not None, "turn not started"
        return self.policy

    @property
    def position(self) -> int:
        """Position of the last generated token (its k/v is not in the pool yet)."""
        return len(self.request.prompt) + len(self.tokens) - 1


class SamplingEngine:
    """Continuous-batching generation over a paged KV pool for a pool of named policies."""

    def __init__(
        self,
        model: Decoder,
        config: EngineConfig = EngineConfig(),
        *,
        mesh: Mesh | None = None,
        rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES,
        decode_fn: Callable[[Sequence[int]], str] | None = None,
        policy: str = "current",
        version: int = 0,
    ):
        """Args:
          model: the Decoder; its weights become `policy` at `version`.
          mesh: the sampler mesh (e.g. a 'tensor' axis); weights and pool are sharded on it.
          rules: logical-axis rules mapping parameters onto `mesh`.
          decode_fn: token ids → text, needed for stop strings.
        """
        self.config = config
        self.decode_fn = decode_fn
        self._graphdef = nnx.graphdef(model)
        self._programs = SamplerPrograms(model.cfg, config, mesh,
                                         weight_shardings(model, mesh, rules), rules)
        self.cfg = self._programs.cfg  # the model's, in the engine's compute dtype
        self._prefill_buckets, self._context_buckets, self._batch_buckets = (
            config.sorted_buckets()
        )
        self._prefill_rows = config.prefill_rows()
        self._prefill_planner = PrefillPlanner(
            self._prefill_buckets, self._prefill_rows, config.prefill_call_tokens,
            config.prefill_call_fits)
        decode_call_tokens = config.decode_call_tokens
        if decode_call_tokens == -1:
            itemsize = np.dtype(self.cfg.dtype).itemsize
            weight_bytes = sum(x.size * (itemsize if jnp.issubdtype(x.dtype, jnp.floating)
                                         else x.dtype.itemsize)
                               for x in jax.tree.leaves(weights_of(model)))
            kv_bytes = (2 * self.cfg.num_layers * self.cfg.num_kv_heads * self.cfg.head_dim
                        * itemsize)
            decode_call_tokens = call_tokens_of(weight_bytes, kv_bytes)
        self._decode_planner = DecodePlanner(self._context_buckets, self._batch_buckets,
                                             decode_call_tokens)
        self._cache = self._programs.new_pool()
        self._mask_words = self._programs.mask_words
        self.pages = PagedKVManager(config.num_pages, config.page_size, config.prefix_cache)
        self._policies: dict[str, PolicyWeights] = {}
        self._serials = itertools.count()
        self._waiting: collections.deque[_Turn] = collections.deque()
        self._running: list[_Turn] = []
        self._ids = itertools.count()
        self._rng = np.random.default_rng(config.seed)
        # Counts, and the prefill_/decode_seconds of step(); a Counter, read as a dict.
        self.stats = cast("dict[str, float]", collections.Counter())
        self.update_params(model, version, policy=policy)

    # ---- policies ------------------------------------------------------------------------

    def prepare_weights(self, params: Decoder | nnx.State | Weights) -> SamplerWeights:
        """Sampler-layout weights on the sampler's shardings (safe to call from any thread).

        A copy: the caller may go on updating (or donating) its own arrays.
        """
        with stage_clock.span("transfer"):
            if isinstance(params, nnx.State):
                params = nnx.merge(self._graphdef, params)
            weights = weights_of(params) if isinstance(params, Decoder) else params
            # Cast where they are, before the copy: no full-precision copy on the sampler's
            # devices beside the weights it serves.
            weights = cast_floating(weights, self._programs.weights_dtype)
            weights = place_weights(weights, self._programs.weight_shardings)
            weights = self._programs.layout(weights)
            if stage_clock.enabled():   # timed to its end, not to its dispatch
                jax.block_until_ready(weights)
            return weights

    def update_params(
        self, params: Decoder | nnx.State | Weights, version: int, policy: str = "current"
    ) -> None:
        """Serves `params` as `policy` at `version` from now on (adds the policy if new).

        Shapes, dtypes and shardings are the model's, so nothing recompiles. Running turns of
        the policy finish on their old weights or restart, per `config.in_flight`.
        """
        self.install(policy, version, self.prepare_weights(params))

    def install(self, policy: str, version: int, weights: SamplerWeights) -> None:
        """`update_params` with weights already in the sampler's layout (`prepare_weights`, or
        placed by a trainer on the sampler's devices: cast there if their dtype is not the
        engine's)."""
        weights = self._programs.in_compute_dtype(weights)
        self._policies[policy] = PolicyWeights(policy, version, weights, next(self._serials))
        self._flush_unserved()
        if self.config.in_flight == "abort":
            for turn in [t for t in self._running if t.served_by().name == policy]:
                self._running.remove(turn)
                turn.restart()
                self._waiting.appendleft(turn)
                self.stats["aborted_turns"] += 1

    def remove_policy(self, policy: str) -> None:
        del self._policies[policy]
        self._flush_unserved()

    def _flush_unserved(self) -> None:
        served = {p.tag for p in self._policies.values()}
        self.pages.flush(lambda tag: tag in served)

    @property
    def policies(self) -> dict[str, int]:
        """Policy name → version served."""
        return {name: p.version for name, p in self._policies.items()}

    # ---- requests ------------------------------------------------------------------------

    def submit(self, request: GenerateRequest, on_done: DoneCallback | None = None,
               on_tokens: TokenCallback | None = None) -> int:
        """Queues a request; returns its id (for `cancel`).

        `on_done(result)` is called from `step` when it finishes (or with the exception that
        failed it). `on_tokens(event)`, if given, is called from `step` at each host sync with
        the tokens sampled since the last call (`TokenEvent`), before `on_done`: a server
        streams them. Both run on the engine's thread, between device calls, so they must be
        quick and must not raise.
        """
        params = request.params
        if params.stop_strings and self.decode_fn is None:
            raise ValueError("stop strings need the engine's decode_fn")
        if len(params.stop_token_ids) > self.config.max_stop_ids:
            raise ValueError(f"at most {self.config.max_stop_ids} stop token ids")
        if not request.prompt:
            raise ValueError("empty prompt")
        if len(request.prompt) >= self.config.max_context:
            raise ValueError(
                f"prompt of {len(request.prompt)} tokens leaves no room in max_context="
                f"{self.config.max_context}"
            )
        seed = params.seed if params.seed is not None else int(self._rng.integers(2**31))
        turn = _Turn(next(self._ids), request, on_done, seed, on_tokens=on_tokens)
        self._waiting.append(turn)
        return turn.id

    def cancel(self, request_id: int) -> None:
        """Ends a queued or running request with finish reason "aborted"."""
        for turn in list(self._waiting) + self._running:
            if turn.id == request_id:
                if turn in self._waiting:
                    self._waiting.remove(turn)
                else:
                    self._running.remove(turn)
                self._finish(turn, FinishReason.ABORTED)

    def end_session(self, session_id: str) -> None:
        """Frees an episode's cached KV (when its turn is not in flight)."""
        self.pages.drop(session_id)

    def prefill_stats(self) -> dict[str, float]:
        """Prefill work and the shared-prefix cache since the engine started (see
        `prefill_window` for the keys; a window between two snapshots is `prefill_window`)."""
        cache = self.pages.cache
        totals = {
            "prefill_tokens_requested": float(self.stats["prefill_tokens_requested"]),
            "prefill_tokens_computed": float(self.stats["prefilled_tokens"]),
            "prefill_positions_computed": float(self.stats["prefill_positions"]),
            "prefill_tokens_reused": float(self.stats["reused_tokens"]),
            "prefix_reused_tokens": float(self.stats["prefix_reused_tokens"]),
            "prefix_cache_evictions": float(cache.evictions if cache is not None else 0),
            "prefix_cache_pages": float(self.pages.cache_pages),
        }
        return prefill_window({}, totals)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def step(self) -> None:
        """Admits waiting requests into free slots, prefills them, then runs one decode chunk."""
        admitted: list[_Turn] = []
        while self._waiting and len(self._running) + len(admitted) < self.config.max_batch:
            turn = self._waiting[0]
            try:
                ok = self._admit(turn, pending=len(admitted))
            except Exception as e:  # a bad request fails alone, the engine goes on
                self._waiting.popleft()
                self._fail(turn, e)
                continue
            if not ok:
                break
            self._waiting.popleft()
            admitted.append(turn)
        # Both phases end by fetching their tokens to the host, so wall time is device time.
        start = time.perf_counter()
        if admitted:
            try:
                self._prefill_turns(admitted)
            except Exception as e:  # fail the turns of the failed call, as admission errors do
                for turn in admitted:
                    if turn.session is not None and turn not in self._running:
                        # Pages it never computed must not be found by anyone later.
                        self.pages.trim_unready(turn.session, detach=True)
                        self._fail(turn, e)
        middle = time.perf_counter()
        groups: dict[tuple[int, bool], list[_Turn]] = collections.defaultdict(list)
        for turn in self._running:
            groups[id(turn.policy), turn.request.constraint is not None].append(turn)
        # Unconstrained chunks first, collected last: constrained turns' masks are computed
        # on the host while the device runs them.
        dispatched = [self._dispatch_decode(call)
                      for (_, constrained), turns in groups.items() if not constrained
                      for call in self._decode_calls(turns, self.config.steps_per_sync)]
        for (_, constrained), turns in groups.items():
            if constrained:
                self._decode_constrained(turns)
        for call in dispatched:
            self._collect_decode(call)
        end = time.perf_counter()
        self.stats["prefill_seconds"] += middle - start
        self.stats["decode_seconds"] += end - middle
        if admitted:
            stage_clock.record("prefill", start, middle)
        if groups:
            stage_clock.record("decode", middle, end)

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerationResult]:
        """Synchronous convenience: runs `requests` to completion, results in order."""
        results: dict[int, Any] = {}
        ids = [self.submit(r, functools.partial(results.__setitem__, i))
               for i, r in enumerate(requests)]
        while len(results) < len(ids):
            self.step()
        out = [results[i] for i in range(len(ids))]
        for r in out:
            if isinstance(r, Exception):
                raise r
        return out

    def fail_all(self, error: Exception) -> None:
        """Fails every queued and running request (the background loop died)."""
        for turn in list(self._waiting) + self._running:
            self._fail(turn, error)
        self._waiting.clear()
        self._running.clear()

    # ---- compilation ---------------------------------------------------------------------

    def num_compiled(self) -> int:
        """Compiled variants of the device programs so far."""
        return self._programs.num_compiled()

    def warmup(self, constrained: bool = False) -> None:
        """Compiles every bucket shape, so traffic afterwards never compiles; `constrained`:
        also the masked programs of constrained turns (prefill's, and one-step decode's).

        Returns once the warm-up calls have run, not just been dispatched: otherwise the first
        requests would wait behind them and be timed with them.
        """
        weights = next(iter(self._policies.values())).weights
        for call in self._programs.calls(constrained):
            if call.kind == "prefill":
                self._run_prefill(weights, [], call.rows, call.length, call.width, call.masked)
            else:
                self._run_decode(weights, [], call.rows, call.width, call.masked)
        # Every call takes the KV pool the previous one returned: the last pool ready, all ran.
        jax.block_until_ready(self._cache)

    # ---- internals -----------------------------------------------------------------------

    def _row_params(self, turns: Sequence[_Turn], rows: int) -> dict[str, np.ndarray]:
        """`SamplerPrograms.row_arrays` with each turn's sampling parameters in its row."""
        out = self._programs.row_arrays(rows)
        for i, turn in enumerate(turns):
            p = turn.request.params
            out["temperature"][i], out["top_k"][i], out["top_p"][i] = (
                p.temperature, p.top_k, p.top_p)
            out["seed"][i] = turn.seed
            out["stop_ids"][i, : len(p.stop_token_ids)] = p.stop_token_ids
        return out

    def _run_prefill(self, weights, chunks: Sequence[tuple[_Turn, int, int]], rows: int,
                     bucket: int, width: int, constrained: bool = False):
        """One prefill call: row i prefills prompt[start:stop] of chunks[i] = (turn, start, stop).

        `width` is the context width in pages (0: no row has cached context); `constrained`:
        the rows' turns have grammars (a row whose chunk ends its prompt samples under its
        turn's mask; other rows' samples are unused). Returns the device arrays of the sampled
        tokens and their log-probabilities, one per row.
        """
        a = self._programs.prefill_arrays(rows, bucket, width, constrained)
        for i, (turn, lo, hi) in enumerate(chunks):
            a["tokens"][i, : hi - lo] = turn.request.prompt[lo:hi]
            a["start"][i], a["length"][i] = lo, hi - lo
            a["write"][i, : hi - lo] = self.pages.slots(turn.held_session(), lo, hi)
            if width:
                a["table"][i] = self.pages.page_row(turn.held_session(), width)
            if constrained and hi == len(turn.request.prompt) and turn.bitmask is not None:
                a["bitmask"][i] = turn.bitmask
        self._cache, token, logprob = self._programs.run_prefill(
            weights, self._cache, a, self._row_params([turn for turn, _, _ in chunks], rows))
        self.stats["prefill_calls"] += 1
        return token, logprob

    def _admit(self, turn: _Turn, pending: int) -> bool:
        """Gives a waiting turn its session, pages and policy (`_prefill_turns` prefills it).

        False if memory is short for now; `pending` turns were admitted this round already.
        """
        request, config = turn.request, self.config
        if request.policy not in self._policies:
            raise KeyError(f"unknown policy {request.policy!r}; serving {sorted(self._policies)}")
        if turn.session is None:
            turn.session = self.pages.acquire(request.session_id)
        session, policy, prompt = turn.session, self._policies[request.policy], list(request.prompt)
        turn.max_new = min(request.params.max_new_tokens, config.max_context - len(prompt))
        invalidated = bool(session.tokens) and session.tag != policy.tag
        reuse, shared = self.pages.prepare(session, policy.tag, prompt)
        if not self.pages.reserve(session, len(prompt) + turn.max_new):
            # A waiting request holds no page still to be computed by a request that goes on.
            self.pages.trim_unready(session)
            if not self._running and not pending:
                raise MemoryError(
                    f"a request of {len(prompt) + turn.max_new} tokens does not fit the KV pool"
                )
            return False
        if request.constraint is not None:   # the first token's mask (anew after a restart)
            if turn.bitmask is None:
                turn.bitmask = np.zeros(self._mask_words, np.int32)
            turn.next_bitmask()   # a grammar that allows nothing fails here, alone
        turn.policy = policy
        turn.waits = [n for n in session.nodes if not n.ready]
        turn.pending = self.pages.publish(session, prompt, reuse)
        turn.reused = turn.prefilled = reuse
        self.stats["invalidated_sessions"] += invalidated
        self.stats["prefill_tokens_requested"] += len(prompt)
        self.stats["reused_tokens"] += reuse
        self.stats["prefix_reused_tokens"] += reuse if shared else 0
        self.stats["prefix_hits"] += shared
        self.stats["prefilled_tokens"] += len(prompt) - reuse
        return True

    def _prefill_turns(self, turns: list[_Turn]) -> None:
        """Prefills admitted turns, several per call, and samples each one's first token.

        In rounds: a round prefills the next chunk of every turn with prompt left (the chunks
        the planner cuts its prompt into, longest first), one policy and one length bucket per
        call, in as many rows as the planner packs; fresh prompts (no cached context: no
        context read) go apart from continuations. A turn that reads shared pages another turn
        has still to compute waits for a later round.
        """
        page = self.config.page_size
        first: dict[int, tuple[Any, Any, int]] = {}  # turn id -> (tokens, logprobs, row)
        left = list(turns)
        while left:
            calls: dict[tuple[bool, int, bool], list[_Turn]] = collections.defaultdict(list)
            for turn in left:
                if all(n.ready for n in turn.waits):
                    constrained = turn.request.constraint is not None
                    calls[turn.prefilled == 0, id(turn.policy), constrained].append(turn)
            if not calls:  # pages are only ever read after those of earlier admissions
                raise RuntimeError("prefill waits on shared pages that no turn computes")
            for (fresh, _, constrained), group in calls.items():
                for bucket, chunks in self._prefill_calls(group):
                    width = 0
                    if not fresh:
                        context = max(lo for _, lo, _ in chunks)
                        width = bucket_of(self._context_buckets, context) // page
                    rows = bucket_of(self._prefill_rows, len(chunks))
                    token, logprob = self._run_prefill(
                        chunks[0][0].served_by().weights, chunks, rows, bucket, width,
                        constrained)
                    self.stats["prefill_positions"] += rows * bucket
                    for row, (turn, _, hi) in enumerate(chunks):
                        turn.prefilled = hi
                        for node in turn.pending:  # written by the call just issued
                            node.ready = node.ready or (node.depth + 1) * page <= hi
                        if hi == len(turn.request.prompt):
                            first[turn.id] = (token, logprob, row)
            left = [t for t in left if t.prefilled < len(t.request.prompt)]
        fetched = jax.device_get(first)
        for turn in turns:
            token, logprob, row = fetched[turn.id]
            turn.held_session().tokens = list(turn.request.prompt)
            if not self._append(turn, [int(token[row])], [float(logprob[row])]):
                continue
            reason = self._finished(turn, first_new=0)
            self._report(turn)
            if reason is not None:
                self._finish(turn, reason)
            else:
                self._running.append(turn)

    def _prefill_calls(self, group: list[_Turn]
                       ) -> list[tuple[int, list[tuple[_Turn, int, int]]]]:
        """This round's calls for `group`: (length bucket, [(turn, start, stop)]), each turn's
        next chunk as the planner cuts it, grouped by bucket and split into the planner's rows
        (within `max_prefill_tokens`)."""
        by_bucket: dict[int, list[tuple[_Turn, int, int]]] = collections.defaultdict(list)
        for turn in group:
            lo = turn.prefilled
            hi = lo + self._prefill_planner.first_chunk(len(turn.request.prompt) - lo)
            by_bucket[bucket_of(self._prefill_buckets, hi - lo)].append((turn, lo, hi))
        calls = []
        for bucket, chunks in by_bucket.items():
            for rows in self._prefill_planner.row_counts(len(chunks), bucket):
                calls.append((bucket, chunks[:rows]))
                chunks = chunks[rows:]
        return calls

    def _run_decode(self, weights, turns: Sequence[_Turn], rows: int, width: int,
                    constrained: bool = False):
        """One decode call: `steps_per_sync` steps, or with `constrained` one step under each
        turn's bitmask (`_Turn.bitmask`, filled by the caller). Returns the device arrays of
        `steps.decode_chunk`'s outputs."""
        a = self._programs.decode_arrays(rows, width, constrained)
        for i, turn in enumerate(turns):
            a["tokens"][i], a["positions"][i], a["active"][i] = (
                turn.tokens[-1], turn.position, True)
            a["remaining"][i] = turn.max_new - len(turn.tokens)
            a["table"][i] = self.pages.page_row(turn.held_session(), width)
            if constrained:
                assert turn.bitmask is not None, "a constrained turn's mask is filled first"
                a["bitmask"][i] = turn.bitmask
        self._cache, *out = self._programs.run_decode(weights, self._cache, a,
                                                      self._row_params(turns, rows))
        return out

    def _decode_calls(self, turns: list[_Turn], steps: int) -> list[list[_Turn]]:
        """The running turns of one policy, split into decode calls of `steps` steps by
        context (`decode_plan.DecodePlanner`)."""
        needs = [turn.position + steps for turn in turns]
        return [[turns[i] for i in group] for group in self._decode_planner.groups(needs)]

    def _dispatch_decode(self, turns: list[_Turn], constrained: bool = False
                         ) -> tuple[list[_Turn], Any]:
        """Starts one decode call of `turns` (one step if `constrained`); `_collect_decode`
        takes its tokens."""
        steps = 1 if constrained else self.config.steps_per_sync
        page = self.config.page_size
        rows = bucket_of(self._batch_buckets, len(turns))
        width = bucket_of(self._context_buckets, max(t.position for t in turns) + steps)
        out = self._run_decode(turns[0].served_by().weights, turns, rows, width // page,
                               constrained)
        self.stats["decode_chunks"] += 1
        self.stats["constrained_decode_calls"] += constrained
        self.stats["decode_context_tokens"] += rows * width
        return turns, out

    def _decode_constrained(self, turns: list[_Turn]) -> None:
        """A round of `steps_per_sync` one-step calls for constrained turns of one policy, each
        step's masks filled on the host from the tokens before."""
        for _ in range(self.config.steps_per_sync):
            ready = []
            for turn in turns:
                if turn not in self._running:
                    continue
                try:
                    turn.next_bitmask()
                except ConstraintError as e:
                    self._running.remove(turn)
                    self._fail(turn, e)
                    continue
                ready.append(turn)
            if not ready:
                return
            for call in self._decode_calls(ready, steps=1):
                self._collect_decode(self._dispatch_decode(call, constrained=True))
            turns = ready

    def _collect_decode(self, call: tuple[list[_Turn], Any]) -> None:
        turns, out = call
        tokens, logprobs, emitted = jax.device_get(out)
        for i, turn in enumerate(turns):
            n = int(emitted[:, i].sum())
            first_new = len(turn.tokens)
            if not self._append(turn, tokens[:n, i].tolist(), logprobs[:n, i].tolist()):
                self._running.remove(turn)
                continue
            reason = self._finished(turn, first_new)
            self._report(turn)
            if reason is not None:
                self._running.remove(turn)
                self._finish(turn, reason)

    def _append(self, turn: _Turn, tokens: list[int], logprobs: list[float]) -> bool:
        """Adds sampled tokens to `turn` and moves its grammar past them; False (the turn
        failed) if the grammar refuses one."""
        turn.tokens += tokens
        turn.logprobs += logprobs
        constraint = turn.request.constraint
        if constraint is not None:
            try:
                for token in tokens:
                    constraint.consume(token)
            except ConstraintError as e:
                self._fail(turn, e)
                return False
        return True

    def _report(self, turn: _Turn) -> None:
        """Passes the tokens `turn` has not reported yet to its `on_tokens` (after `_finished`
        has cut them at a stop: a reported token stays in the result)."""
        if turn.on_tokens is None or turn.reported == len(turn.tokens):
            return
        start, turn.reported = turn.reported, len(turn.tokens)
        turn.on_tokens(TokenEvent(start, turn.tokens[start:], turn.logprobs[start:],
                                  turn.served_by().version))

    def _finished(self, turn: _Turn, first_new: int) -> FinishReason | None:
        """Why `turn` is done after tokens[first_new:] were appended, truncating at a stop."""
        params = turn.request.params
        stops = set(params.stop_token_ids)
        for i in range(first_new, len(turn.tokens)):
            if turn.tokens[i] in stops:
                del turn.tokens[i + 1 :], turn.logprobs[i + 1 :]
                return FinishReason.STOP
        if params.stop_strings:
            assert self.decode_fn is not None  # submit() refuses stop strings without it
            for end in range(first_new + 1, len(turn.tokens) + 1):
                text = self.decode_fn(turn.tokens[:end])
                hit = next((s for s in params.stop_strings if s in text), None)
                if hit is not None:
                    del turn.tokens[end:], turn.logprobs[end:]
                    turn.stop_string = hit
                    return FinishReason.STOP
        if len(turn.tokens) >= turn.max_new:
            return FinishReason.LENGTH
        return None

    def _release_session(self, turn: _Turn) -> None:
        if turn.session is not None:
            self.pages.release(turn.session)
            turn.session = None

    def _finish(self, turn: _Turn, reason: FinishReason) -> None:
        session = turn.session
        if session is not None and reason is not FinishReason.ABORTED and turn.tokens:
            # Every token but the last generated one has its k/v in the pool now.
            session.tokens = list(turn.request.prompt) + turn.tokens[:-1]
        self._release_session(turn)
        version = turn.policy.version if turn.policy is not None else -1
        result = GenerationResult(
            tokens=turn.tokens,
            logprobs=turn.logprobs,
            versions=[version] * len(turn.tokens),
            policy=turn.request.policy,
            finish_reason=reason,
            stop_string=turn.stop_string,
            num_prompt_tokens=len(turn.request.prompt),
            num_reused_tokens=turn.reused,
        )
        self.stats["finished"] += 1
        if turn.on_done is not None:
            turn.on_done(result)

    def _fail(self, turn: _Turn, error: Exception) -> None:
        self._release_session(turn)
        if turn.on_done is not None:
            turn.on_done(error)
