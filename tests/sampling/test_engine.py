"""The synchronous engine: outputs, logprobs, continuous batching, sessions, policies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.sampling import FinishReason, GenerateRequest, SamplingParams
from tests.sampling.conftest import make_engine, random_prompt, reference_greedy, tiny_model

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


def test_greedy_equals_full_recompute_reference(family):
    model = tiny_model(family)
    engine = make_engine(model)
    prompts = [random_prompt(n, seed=n) for n in (3, 9, 20)]  # one, two and three prefill chunks
    results = engine.generate([GenerateRequest(p, GREEDY) for p in prompts])
    for prompt, result in zip(prompts, results, strict=True):
        assert result.tokens == reference_greedy(model, prompt, 10)
        assert result.finish_reason == FinishReason.LENGTH
        assert result.versions == [0] * 10


@pytest.mark.parametrize("heads", [4, 1])
def test_greedy_equals_reference_for_ungrouped_models(heads):
    """With one query per kv head (4 over 4, and a single head) decode scores take the dot,
    not the multiply-reduce of grouped models; they must decode as the full recompute does."""
    model = tiny_model("llama", num_heads=heads, num_kv_heads=heads)
    engine = make_engine(model)
    prompts = [random_prompt(n, seed=n) for n in (5, 20)]
    results = engine.generate([GenerateRequest(p, GREEDY) for p in prompts])
    for prompt, result in zip(prompts, results, strict=True):
        assert result.tokens == reference_greedy(model, prompt, 10)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_trainer_recomputation(family, temperature):
    model = tiny_model(family)
    engine = make_engine(model)
    params = SamplingParams(temperature=temperature, top_k=20, top_p=0.9, max_new_tokens=12,
                            seed=3)
    prompts = [random_prompt(n, seed=n) for n in (5, 13)]
    for prompt, result in zip(
        prompts, engine.generate([GenerateRequest(p, params) for p in prompts]), strict=True
    ):
        seq = jnp.asarray([prompt + result.tokens], jnp.int32)
        positions = jnp.arange(seq.shape[1])[None]
        logp, _ = token_logprobs(model, seq[:, :-1], positions[:, :-1], jnp.ones_like(seq[:, :-1]),
                                 seq[:, 1:], temperature=temperature)
        expected = np.asarray(logp[0, len(prompt) - 1 :])
        np.testing.assert_allclose(result.logprobs, expected, atol=1e-4)


def test_sampling_is_reproducible_across_batch_composition(llama):
    engine = make_engine(llama)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    alone = engine.generate([GenerateRequest(random_prompt(6, 1), params)])[0]
    crowd = engine.generate([GenerateRequest(random_prompt(9, s), params) for s in (2, 3)]
                            + [GenerateRequest(random_prompt(6, 1), params)])[-1]
    assert alone.tokens == crowd.tokens
    other = engine.generate([GenerateRequest(random_prompt(6, 1), params.__class__(
        temperature=1.0, max_new_tokens=8, seed=12))])[0]
    assert other.tokens != alone.tokens


def test_stop_token_ids_end_the_turn_and_are_kept(llama):
    engine = make_engine(llama)
    prompt = random_prompt(7, 0)
    full = reference_greedy(llama, prompt, 10)
    stop = full[4]
    first = full.index(stop)
    result = engine.generate([GenerateRequest(prompt, SamplingParams(
        temperature=0.0, max_new_tokens=10, stop_token_ids=(stop,)))])[0]
    assert result.tokens == full[: first + 1]
    assert result.finish_reason == FinishReason.STOP
    assert len(result.logprobs) == len(result.versions) == first + 1


def test_stop_strings_truncate_after_the_completing_token(llama):
    def decode(tokens):
        return "".join(chr(ord("a") + t % 26) for t in tokens)

    prompt = random_prompt(7, 0)
    full = reference_greedy(llama, prompt, 10)
    text = decode(full)
    stop = text[5:7]
    end = text.index(stop) + 2  # tokens are one character each
    engine = make_engine(llama)
    engine.decode_fn = decode
    result = engine.generate([GenerateRequest(prompt, SamplingParams(
        temperature=0.0, max_new_tokens=10, stop_strings=(stop,)))])[0]
    assert result.tokens == full[:end]
    assert result.stop_string == stop
    assert result.finish_reason == FinishReason.STOP


def test_continuous_batching_admits_into_freed_slots(llama):
    # 4 slots, 9 requests of very different lengths: all finish, each equals running alone.
    engine = make_engine(llama)
    lengths = [1, 17, 3, 9, 2, 12, 5, 1, 8]
    requests = [GenerateRequest(random_prompt(4 + i, i), SamplingParams(
        temperature=0.0, max_new_tokens=n)) for i, n in enumerate(lengths)]
    results = engine.generate(requests)
    assert [len(r.tokens) for r in results] == lengths
    for request, result in zip(requests[:3], results[:3], strict=True):
        assert result.tokens == reference_greedy(llama, request.prompt, len(result.tokens))


def test_waiting_prompts_are_prefilled_together(llama):
    # 4 fresh prompts (one prefill chunk each) fill the 4-row prefill bucket: one device call.
    # Then turns continuing 3 of them (cached context) and one new prompt: one call for the
    # continuations, one for the fresh prompt. Outputs equal the reference either way.
    engine = make_engine(llama)
    prompts = [random_prompt(5 + i, i) for i in range(4)]
    first = engine.generate([GenerateRequest(p, GREEDY, session_id=f"s{i}")
                             for i, p in enumerate(prompts)])
    assert engine.stats["prefill_calls"] == 1
    # the time of each phase is kept too (what a serving profile splits on)
    assert engine.stats["prefill_seconds"] > 0 and engine.stats["decode_seconds"] > 0
    streams = [p + r.tokens + random_prompt(3, 10 + i)
               for i, (p, r) in enumerate(zip(prompts[:3], first[:3], strict=True))]
    fresh = random_prompt(7, 99)
    second = engine.generate([GenerateRequest(s, GREEDY, session_id=f"s{i}")
                              for i, s in enumerate(streams)] + [GenerateRequest(fresh, GREEDY)])
    assert engine.stats["prefill_calls"] == 3
    assert all(r.num_reused_tokens > 0 for r in second[:3])
    for prompt, result in zip([*prompts, *streams, fresh], first + second, strict=True):
        assert result.tokens == reference_greedy(llama, prompt, 10)


def test_prefill_token_cap_splits_long_chunks_into_fewer_rows(llama):
    # Cap 32 tokens: four 5-token prompts (length bucket 8) still share one 4-row call; four
    # 12-token prompts (bucket 16: 4 x 16 = 64 > 32) go one row per call. Same outputs.
    engine = make_engine(llama, max_prefill_tokens=32)
    short = [random_prompt(5, i) for i in range(4)]
    engine.generate([GenerateRequest(p, GREEDY) for p in short])
    assert engine.stats["prefill_calls"] == 1
    long = [random_prompt(12, 20 + i) for i in range(4)]
    results = engine.generate([GenerateRequest(p, GREEDY) for p in long])
    assert engine.stats["prefill_calls"] == 1 + 4
    for prompt, result in zip(long, results, strict=True):
        assert result.tokens == reference_greedy(llama, prompt, 10)
    # Warm-up never compiles a shape over the cap: the 4-row 16-token calls are left out.
    capped = make_engine(llama, max_prefill_tokens=32)
    shapes, run = [], capped._run_prefill

    def recorded(w, chunks, rows, t, *rest):
        shapes.append((rows, t))
        return run(w, chunks, rows, t, *rest)

    capped._run_prefill = recorded
    capped.warmup()
    assert set(shapes) == {(1, 8), (1, 16), (4, 8)}


def _episode(engine, session_id, turns=4, policy="current", seed=0):
    """A multi-turn episode: each turn appends 5 'environment' tokens to the whole stream."""
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, 128, 6).tolist()
    outputs, reused = [], []
    for _ in range(turns):
        result = engine.generate([GenerateRequest(
            stream, SamplingParams(temperature=0.0, max_new_tokens=4), policy=policy,
            session_id=session_id)])[0]
        outputs.append(result.tokens)
        reused.append(result.num_reused_tokens)
        stream = stream + result.tokens + rng.integers(0, 128, 5).tolist()
    return outputs, reused


def test_session_reuse_gives_identical_greedy_outputs(llama):
    with_reuse, reused = _episode(make_engine(llama, prefix_cache=False), "ep")
    without, reused_none = _episode(make_engine(llama, prefix_cache=False), None)
    assert with_reuse == without
    assert reused[0] == 0 and all(r > 0 for r in reused[1:])
    assert reused_none == [0] * 4
    # Without a session, the shared-prefix cache still finds the earlier turns' whole pages.
    shared, reused_shared = _episode(make_engine(llama), None)
    assert shared == without
    assert reused_shared[0] == 0
    assert all(r > 0 and r % 4 == 0 for r in reused_shared[1:])


def test_eviction_under_memory_pressure_re_prefills_transparently(llama):
    # 12 pages of 4 tokens: two interleaved episodes cannot both stay cached.
    engine = make_engine(llama, num_pages=13, max_context=40, context_buckets=(16,))
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(2)
    streams = {"a": rng_a.integers(0, 128, 6).tolist(), "b": rng_b.integers(0, 128, 6).tolist()}
    rngs = {"a": rng_a, "b": rng_b}
    outputs = {"a": [], "b": []}
    for _ in range(3):
        for sid in ("a", "b"):
            result = engine.generate([GenerateRequest(
                streams[sid], SamplingParams(temperature=0.0, max_new_tokens=4),
                session_id=sid)])[0]
            outputs[sid].append(result.tokens)
            streams[sid] = streams[sid] + result.tokens + rngs[sid].integers(0, 128, 5).tolist()
    assert engine.pages.evictions > 0
    assert outputs["a"] == _episode(make_engine(llama), None, turns=3, seed=1)[0]
    assert outputs["b"] == _episode(make_engine(llama), None, turns=3, seed=2)[0]


def test_update_params_changes_outputs_and_versions_without_recompiling(llama):
    engine = make_engine(llama)
    engine.warmup()
    compiled = engine.num_compiled()
    prompt = random_prompt(9, 0)
    before = engine.generate([GenerateRequest(prompt, GREEDY)])[0]
    new_model = tiny_model("llama", seed=1)
    engine.update_params(new_model, version=5)
    after = engine.generate([GenerateRequest(prompt, GREEDY)])[0]
    assert after.versions == [5] * 10
    assert after.tokens == reference_greedy(new_model, prompt, 10)
    assert after.tokens != before.tokens
    assert engine.num_compiled() == compiled


def test_weights_from_a_trainer_mesh_do_not_recompile(llama):
    """A mesh-less engine given weights that carry a trainer's one-device NamedSharding (what RL
    syncs) places them as it placed its first weights, so no program compiles again."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from agentrl_jax.sampling.weights import weights_of

    engine = make_engine(llama)
    engine.warmup()
    compiled = engine.num_compiled()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
    new_model = tiny_model("llama", seed=1)
    trainer_weights = jax.device_put(weights_of(new_model), NamedSharding(mesh, PartitionSpec()))
    engine.update_params(trainer_weights, version=1)
    prompt = random_prompt(9, 0)
    out = engine.generate([GenerateRequest(prompt, GREEDY)])[0]
    assert out.tokens == reference_greedy(new_model, prompt, 10)
    assert engine.num_compiled() == compiled


def test_update_params_accepts_trainer_state(llama):
    from flax import nnx

    engine = make_engine(llama)
    new_model = tiny_model("llama", seed=1)
    _, state = nnx.split(new_model)
    engine.update_params(state, version=2)
    prompt = random_prompt(5, 0)
    assert engine.generate([GenerateRequest(prompt, GREEDY)])[0].tokens == reference_greedy(
        new_model, prompt, 10)


@pytest.mark.parametrize("in_flight", ["finish", "abort"])
def test_in_flight_policy_on_update(llama, in_flight):
    new_model = tiny_model("llama", seed=1)
    engine = make_engine(llama, in_flight=in_flight)
    prompt = random_prompt(8, 0)
    results = []
    engine.submit(GenerateRequest(prompt, SamplingParams(temperature=0.0, max_new_tokens=12)),
                  results.append)
    engine.step()  # prefill + one chunk on version 0
    engine.update_params(new_model, version=1)
    while engine.has_work:
        engine.step()
    (result,) = results
    if in_flight == "finish":
        assert result.versions == [0] * 12
        assert result.tokens == reference_greedy(llama, prompt, 12)
    else:
        assert result.versions == [1] * 12
        assert result.tokens == reference_greedy(new_model, prompt, 12)
        assert engine.stats["aborted_turns"] == 1


def test_policy_pool_and_cache_invalidation_across_policies(llama):
    stale = tiny_model("llama", seed=1)
    engine = make_engine(llama)
    engine.update_params(stale, version=0, policy="stale")
    assert engine.policies == {"current": 0, "stale": 0}
    stream = random_prompt(6, 0)
    turn1 = engine.generate([GenerateRequest(stream, GREEDY, policy="current",
                                             session_id="ep")])[0]
    stream2 = stream + turn1.tokens + random_prompt(5, 1)
    turn2 = engine.generate([GenerateRequest(stream2, GREEDY, policy="stale",
                                             session_id="ep")])[0]
    # KV computed by "current" must not be reused by "stale": full re-prefill, exact outputs.
    assert turn2.num_reused_tokens == 0
    assert turn2.policy == "stale"
    assert turn2.tokens == reference_greedy(stale, stream2, 10)
    assert engine.stats["invalidated_sessions"] == 1
    # A weight update of the session's own policy invalidates it too.
    engine.update_params(llama, version=1, policy="stale")
    stream3 = stream2 + turn2.tokens + random_prompt(5, 2)
    turn3 = engine.generate([GenerateRequest(stream3, GREEDY, policy="stale",
                                             session_id="ep")])[0]
    assert turn3.num_reused_tokens == 0 and turn3.versions[0] == 1
    assert turn3.tokens == reference_greedy(llama, stream3, 10)


def test_no_recompilation_across_varied_traffic(llama):
    compiles = []

    def listener(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    engine = make_engine(llama, max_context=48)
    engine.warmup()
    # warm-up has run, not just been dispatched: the first requests do not queue behind it
    assert all(leaf.is_ready() for leaf in jax.tree.leaves(engine._cache))
    jax.monitoring.register_event_duration_secs_listener(listener)
    rng = np.random.default_rng(0)
    requests = []
    for i in range(14):
        requests.append(GenerateRequest(
            rng.integers(0, 128, int(rng.integers(1, 30))).tolist(),
            SamplingParams(temperature=float(rng.choice([0.0, 0.8])), top_k=int(rng.choice([0, 5])),
                           top_p=float(rng.choice([1.0, 0.9])),
                           max_new_tokens=int(rng.integers(1, 15)),
                           stop_token_ids=tuple(rng.integers(0, 128, int(rng.integers(0, 3))))),
            session_id=f"s{i % 3}" if i % 2 else None))
    for i in range(0, 14, 7):  # the sessions' turns must not overlap
        engine.generate(requests[i : i + 7][:1] + [r for r in requests[i + 1 : i + 7]
                                                   if r.session_id is None])
        for r in requests[i + 1 : i + 7]:
            if r.session_id is not None:
                engine.generate([r])
    engine.update_params(tiny_model("llama", seed=2), version=3)
    engine.generate([GenerateRequest(random_prompt(20, 1), GREEDY)])
    assert compiles == []


def test_bad_requests_fail_alone(llama):
    engine = make_engine(llama)
    with pytest.raises(ValueError):
        engine.submit(GenerateRequest([1] * 64, GREEDY))  # no room left in max_context
    with pytest.raises(ValueError):
        engine.submit(GenerateRequest([1, 2], SamplingParams(stop_strings=("x",))))
    outcomes = []
    engine.submit(GenerateRequest([1, 2], GREEDY, policy="nope"), outcomes.append)
    engine.submit(GenerateRequest([1, 2], GREEDY), outcomes.append)
    while engine.has_work:
        engine.step()
    assert isinstance(outcomes[0], KeyError)
    assert outcomes[1].tokens == reference_greedy(llama, [1, 2], 10)


def test_bf16_engine_keeps_bf16_weights_and_pool_and_matches_bf16_trainer_logprobs(llama):
    """`compute_dtype="bfloat16"`: the weights are cast once as installed (fp32 weights handed
    over later, in the sampler's layout, are cast too), the pool is bf16, and the behaviour
    log-probabilities are the bf16 trainer's recomputation of the same tokens (fp32 logits)."""
    from flax import nnx

    from agentrl_jax.sampling.weights import split_layers, weights_of

    engine = make_engine(llama, compute_dtype="bfloat16")
    assert engine.cfg.dtype == jnp.bfloat16 and llama.cfg.dtype == jnp.float32
    for placed in (engine.prepare_weights(llama), None):
        if placed is None:   # a trainer's copy placed in the sampler's layout, still fp32
            engine.install("current", 1, split_layers(weights_of(llama)))
            placed = engine._policies["current"].weights
        assert {x.dtype for x in jax.tree.leaves(placed)} == {jnp.dtype(jnp.bfloat16)}
    assert engine._cache.k.dtype == engine._cache.v.dtype == jnp.bfloat16

    bf16_model = nnx.merge(*nnx.split(llama))
    bf16_model.cfg = llama.cfg.replace(dtype=jnp.bfloat16)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    prompt = random_prompt(13, seed=4)
    result = engine.generate([GenerateRequest(prompt, params)])[0]
    seq = jnp.asarray([prompt + result.tokens], jnp.int32)
    positions = jnp.arange(seq.shape[1])[None]
    args = (seq[:, :-1], positions[:, :-1], jnp.ones_like(seq[:, :-1]), seq[:, 1:])
    expected_bf16 = np.asarray(token_logprobs(bf16_model, *args)[0][0, len(prompt) - 1:])
    expected_fp32 = np.asarray(token_logprobs(llama, *args)[0][0, len(prompt) - 1:])
    gap_bf16 = np.abs(np.asarray(result.logprobs) - expected_bf16).max()
    gap_fp32 = np.abs(np.asarray(result.logprobs) - expected_fp32).max()
    assert gap_bf16 < 0.05, gap_bf16
    assert gap_bf16 < gap_fp32   # it computes in bf16, not fp32
