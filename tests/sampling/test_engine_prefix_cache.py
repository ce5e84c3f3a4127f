"""The engine with shared prefixes: outputs equal the cache off; no KV crosses weights."""

import collections

import numpy as np
import pytest

from agentrl_jax.sampling import GenerateRequest, SamplingParams
from tests.sampling.conftest import make_engine, random_prompt, tiny_model

SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5)
SYSTEM = random_prompt(13, 100)  # three full pages of 4 and one token over


def _assert_same(on, off):
    """Same tokens; log-probs equal to fp32 rounding (a prefix read from the cache is summed
    in another order than one prefilled with the prompt: 1.2e-5 at -5.14 on one host)."""
    for a, b in zip(on, off, strict=True):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)


def _cache_on_and_off(model, requests, **config):
    on = make_engine(model, **config)
    results = on.generate(requests)
    _assert_same(results, make_engine(model, prefix_cache=False, **config).generate(requests))
    return on, results


def test_batches_mixing_shared_and_unshared_prompts_equal_the_cache_off(llama):
    prompts = ([SYSTEM + random_prompt(5, s) for s in range(3)]   # a shared system prompt
               + [random_prompt(9, 50), random_prompt(17, 51)]    # nothing shared
               + [SYSTEM + random_prompt(5, 0)] * 2               # a group's repeated prompt
               + [SYSTEM[:8] + random_prompt(11, 60)])            # shares two pages
    requests = [GenerateRequest(p, SAMPLED) for p in prompts]
    engine, results = _cache_on_and_off(llama, requests)
    assert [r.num_reused_tokens for r in results] == [0, 12, 12, 0, 0, 16, 16, 8]
    stats = engine.prefill_stats()
    assert stats["prefill_tokens_requested"] == sum(map(len, prompts))
    assert stats["prefix_reused_tokens"] == 64
    assert stats["prefill_tokens_computed"] == sum(map(len, prompts)) - 64
    assert stats["prefix_cache_hit_rate"] == pytest.approx(64 / sum(map(len, prompts)))
    assert stats["prefix_cache_pages"] > 0


def test_prompts_diverging_in_the_middle_of_a_page(llama):
    base = random_prompt(14, 7)
    prompts = [base, base[:6] + random_prompt(8, 8), base[:11] + random_prompt(3, 9)]
    requests = [GenerateRequest(p, SAMPLED) for p in prompts]
    _, results = _cache_on_and_off(llama, requests, max_batch=1)  # one at a time
    # only the whole pages before the divergence are shared: 6 -> 4 tokens, 11 -> 8
    assert [r.num_reused_tokens for r in results] == [0, 4, 8]


def test_a_session_whose_history_diverges_inside_a_shared_page(llama):
    # Turn 1 publishes its pages; turn 2 of the same session rewrites the history from token 6
    # on, inside the second (shared, read-only) page: it recomputes from the page boundary.
    first = random_prompt(14, 3)
    second = first[:6] + random_prompt(10, 4)
    on, off = make_engine(llama), make_engine(llama, prefix_cache=False)
    for prompt in (first, second):
        a = on.generate([GenerateRequest(prompt, SAMPLED, session_id="ep")])[0]
        b = off.generate([GenerateRequest(prompt, SAMPLED, session_id="ep")])[0]
        _assert_same([a], [b])
    assert a.num_reused_tokens == 4 and b.num_reused_tokens == 6


def test_group_members_admitted_together_prefill_the_prompt_once(llama):
    prompt = SYSTEM + random_prompt(7, 1)  # 20 tokens: 4 whole pages before the last token
    requests = [GenerateRequest(prompt, SAMPLED, session_id=f"m{i}") for i in range(4)]
    engine, results = _cache_on_and_off(llama, requests)
    assert [r.num_reused_tokens for r in results] == [0, 16, 16, 16]
    assert engine.stats["prefilled_tokens"] == 20 + 3 * 4  # not 4 · 20
    assert len({tuple(r.tokens) for r in results}) == 1


def test_eviction_under_memory_pressure_while_requests_wait(llama):
    # 12 usable pages for 8 requests of up to 8 pages each: requests wait for memory, and the
    # cached prefixes are evicted and recomputed along the way.
    prompts = [SYSTEM + random_prompt(3 + i, i) for i in range(4)]
    prompts += [random_prompt(20, 30 + i) for i in range(2)] + prompts[:2]
    requests = [GenerateRequest(p, SamplingParams(temperature=1.0, max_new_tokens=8, seed=i))
                for i, p in enumerate(prompts)]
    engine, _ = _cache_on_and_off(llama, requests, num_pages=13, max_context=40)
    assert engine.pages.cache.evictions > 0
    # a prefix evicted before its request came is recomputed, never served from a freed page
    again, = engine.generate(requests[:1])
    fresh, = make_engine(llama, prefix_cache=False).generate(requests[:1])
    _assert_same([again], [fresh])


def test_sessions_keep_their_own_kv_across_turns_on_top_of_shared_prefixes(llama):
    def episodes(engine):
        rng = np.random.default_rng(0)
        streams = [SYSTEM + rng.integers(0, 128, 4).tolist() for _ in range(2)]
        outputs, reused = [], []
        for _ in range(3):
            results = engine.generate([GenerateRequest(s, SAMPLED, session_id=f"ep{i}")
                                       for i, s in enumerate(streams)])
            outputs.append([r.tokens for r in results])
            reused.append([r.num_reused_tokens for r in results])
            streams = [s + r.tokens + rng.integers(0, 128, 3).tolist()
                       for s, r in zip(streams, results, strict=True)]
        return outputs, reused

    on, reused_on = episodes(make_engine(llama))
    off, reused_off = episodes(make_engine(llama, prefix_cache=False))
    assert on == off
    assert reused_on[0] == [0, 12]  # the second episode shares the system prompt
    assert reused_on[1:] == reused_off[1:]  # later turns reuse the session's whole stream
    assert all(r > 12 for turn in reused_on[1:] for r in turn)


def test_a_failed_prefill_leaves_no_uncomputed_page_behind(llama):
    engine = make_engine(llama)
    prompt = SYSTEM + random_prompt(7, 1)
    real = engine._programs.prefill

    def failing(*args):
        raise RuntimeError("device lost")

    engine._programs.prefill = failing
    outcomes = []
    for i in range(2):
        engine.submit(GenerateRequest(prompt, SAMPLED, session_id=f"m{i}"), outcomes.append)
    engine.step()
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    engine._programs.prefill = real
    result, = engine.generate([GenerateRequest(prompt, SAMPLED)])
    assert result.num_reused_tokens == 0
    _assert_same([result], make_engine(llama, prefix_cache=False).generate(
        [GenerateRequest(prompt, SAMPLED)]))


class _Provenance:
    """Records which weights wrote each KV slot, and checks every read against it."""

    def __init__(self, engine):
        self.engine, self.written, self.reads = engine, {}, 0
        self._prefill, self._decode = engine._run_prefill, engine._run_decode
        engine._run_prefill, engine._run_decode = self.prefill, self.decode

    def _slot(self, session, pos):
        page = self.engine.config.page_size
        return session.pages[pos // page] * page + pos % page

    def _check_reads(self, turn, upto):
        for pos in range(upto):
            assert self.written[self._slot(turn.session, pos)] == turn.policy.tag, (
                f"turn {turn.id} reads position {pos} computed by other weights")
            self.reads += 1

    def prefill(self, weights, chunks, *args):
        for turn, lo, hi in chunks:
            assert weights is turn.policy.weights
            self._check_reads(turn, lo)
            for pos in range(lo, hi):
                self.written[self._slot(turn.session, pos)] = turn.policy.tag
        return self._prefill(weights, chunks, *args)

    def decode(self, weights, turns, *args):
        steps, page = self.engine.config.steps_per_sync, self.engine.config.page_size
        for turn in turns:
            assert weights is turn.policy.weights
            self._check_reads(turn, turn.position)
            last = min(turn.position + steps, len(turn.session.pages) * page)
            for pos in range(turn.position, last):
                self.written[self._slot(turn.session, pos)] = turn.policy.tag
        return self._decode(weights, turns, *args)


def test_no_request_ever_reads_kv_of_other_weights(llama):
    # Two policies, weight updates while turns run ("finish": they end on their old weights),
    # a re-install under a version number already used, shared prompts and multi-turn
    # sessions throughout; every slot a request reads was written by its own weights.
    models = [llama, tiny_model("llama", seed=1), tiny_model("llama", seed=2)]
    engine = make_engine(llama, max_batch=3)
    engine.update_params(models[1], version=0, policy="stale")
    spy = _Provenance(engine)
    rng = np.random.default_rng(0)
    streams = collections.defaultdict(lambda: SYSTEM + rng.integers(0, 128, 3).tolist())
    results = []

    def done(result, sid):
        results.append(result)
        if not isinstance(result, Exception):
            streams[sid] = streams[sid] + result.tokens + rng.integers(0, 128, 2).tolist()

    def submit(i):
        sid = f"ep{i % 4}"
        policy = "stale" if i % 3 == 0 else "current"
        engine.submit(GenerateRequest(streams[sid], SAMPLED, policy=policy, session_id=sid),
                      lambda r, sid=sid: done(r, sid))

    for i, (policy, model, version) in enumerate([
            ("current", models[1], 1), ("stale", models[2], 1), ("current", models[2], 1)]):
        for j in range(4):
            submit(4 * i + j)
        engine.step()  # some turns running on the old weights when they change
        engine.update_params(model, version=version, policy=policy)
        while engine.has_work:
            engine.step()
    assert [r for r in results if isinstance(r, Exception)] == []
    assert len(results) == 12 and spy.reads > 0
    assert engine.stats["prefix_reused_tokens"] > 0
    # re-installing "current" at version 1 with other weights did not reuse the first install's
    served = {p.tag for p in engine._policies.values()}
    assert all(tag in served for tag in engine.pages.cache._roots)
