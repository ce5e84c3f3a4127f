"""Streaming: a running turn's tokens are reported at each host sync, before its result, and the
reported tokens put together are the result's (stops applied, restarts replacing)."""

import asyncio

from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    GenerateRequest,
    GenerationResult,
    SamplingParams,
    TokenEvent,
)
from tests.sampling.conftest import make_engine, random_prompt, reference_greedy, tiny_model


class Log:
    """What the engine tells one request, in the order it tells it."""

    def __init__(self):
        self.entries: list[TokenEvent | GenerationResult] = []

    def events(self) -> list[TokenEvent]:
        return [e for e in self.entries if isinstance(e, TokenEvent)]

    def result(self) -> GenerationResult:
        results = [e for e in self.entries if isinstance(e, GenerationResult)]
        assert len(results) == 1 and self.entries[-1] is results[0], "the result comes last"
        return results[0]

    def replayed(self) -> tuple[list[int], list[float]]:
        """The tokens as a consumer keeps them: each event replaces the turn's from `start`."""
        tokens: list[int] = []
        logprobs: list[float] = []
        for event in self.events():
            tokens[event.start:] = event.tokens
            logprobs[event.start:] = event.logprobs
        return tokens, logprobs


def _submit(engine, request):
    log = Log()
    engine.submit(request, log.entries.append, log.entries.append)
    return log


def test_tokens_are_reported_at_each_sync_before_the_result(llama):
    engine = make_engine(llama)  # steps_per_sync=3
    prompt = random_prompt(7, 0)
    log = _submit(engine, GenerateRequest(prompt, SamplingParams(temperature=0.0,
                                                                 max_new_tokens=11)))
    engine.step()  # admission: the prefill's first token, then one decode chunk of 3 steps
    assert [len(e.tokens) for e in log.entries] == [1, 3]  # reported, and no result yet
    assert engine.num_running == 1
    while engine.has_work:
        engine.step()
    events, result = log.events(), log.result()
    assert [len(e.tokens) for e in events] == [1, 3, 3, 3, 1]
    assert [e.start for e in events] == [0, 1, 4, 7, 10]  # contiguous: nothing replaced
    tokens, logprobs = log.replayed()
    assert tokens == result.tokens == reference_greedy(llama, prompt, 11)
    assert logprobs == result.logprobs
    assert {e.version for e in events} == {0}


def test_stops_cut_tokens_before_they_are_reported(llama):
    prompt = random_prompt(7, 1)
    greedy = reference_greedy(llama, prompt, 12)

    def decode(ids):
        return "".join(f"<{i}>" for i in ids)

    engine = make_engine(llama)
    engine.decode_fn = decode
    # The stop string is completed by token 5 and the stop id is token 8, both mid-chunk.
    by_string = _submit(engine, GenerateRequest(prompt, SamplingParams(
        temperature=0.0, max_new_tokens=12, stop_strings=(f"<{greedy[5]}>",))))
    by_id = _submit(engine, GenerateRequest(prompt, SamplingParams(
        temperature=0.0, max_new_tokens=12, stop_token_ids=(greedy[8],))))
    while engine.has_work:
        engine.step()
    for log, token in ((by_string, greedy[5]), (by_id, greedy[8])):
        result = log.result()
        end = greedy.index(token) + 1
        assert result.tokens == greedy[:end]
        assert log.replayed() == (result.tokens, result.logprobs)
        assert sum(len(e.tokens) for e in log.events()) == end  # nothing reported past it


def test_a_restart_on_new_weights_replaces_the_reported_tokens(llama):
    engine = make_engine(llama, in_flight="abort")
    new_model = tiny_model("llama", seed=1)
    prompt = random_prompt(6, 2)
    log = _submit(engine, GenerateRequest(prompt, SamplingParams(temperature=0.0,
                                                                 max_new_tokens=9)))
    engine.step()
    reported = sum(len(e.tokens) for e in log.entries)
    assert reported == 4
    engine.update_params(new_model, version=1)  # aborts the turn: it starts again
    while engine.has_work:
        engine.step()
    events, result = log.events(), log.result()
    restart = next(i for i, e in enumerate(events) if i and e.start == 0)
    assert {e.version for e in events[:restart]} == {0}
    assert {e.version for e in events[restart:]} == {1}
    tokens, logprobs = log.replayed()
    assert tokens == result.tokens == reference_greedy(new_model, prompt, 9)
    assert logprobs == result.logprobs and result.versions == [1] * 9


def test_async_engine_delivers_every_event_before_the_result(llama):
    prompt = random_prompt(5, 3)

    async def main():
        log = Log()
        with AsyncSamplingEngine(make_engine(llama)) as engine:
            result = await engine.generate(GenerateRequest(
                prompt, SamplingParams(temperature=0.0, max_new_tokens=10)), log.entries.append)
            log.entries.append(result)  # what the awaiting task sees once generate returns
        return log

    log = asyncio.run(main())
    result = log.result()
    assert len(log.events()) == 4  # 1 + 3 + 3 + 3: one event per host sync
    assert log.replayed() == (result.tokens, result.logprobs)
    assert result.tokens == reference_greedy(llama, prompt, 10)
