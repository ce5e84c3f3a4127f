"""A real server over HTTP on 127.0.0.1 for the serving tests, on a real engine and a tiny
model whose output is known.

The model is a bigram table written into a Decoder's weights: hidden size = vocabulary, the
embedding is the identity, every block adds nothing (zero output projections), so the logits at
a position are a row of the output projection chosen by the token there alone. A row puts logit
20 on the script's next token (two next tokens at a branch, for sampling to choose), so greedy
decoding and temperature-1 sampling both follow a script. Two policies of one engine, served as
two model names: `tiny-agent` answers a Hermes tool call whose tokens are NOT the tokenizer's
own encoding of its text (the call is split into other tokens that decode to the same text), and
`tiny-text` says a sentence over and over (it never ends a turn by itself).

The scripts start from the last token of the generation prompt, so each is a chain of distinct
token ids found in the tokenizer's vocabulary (`_segment`).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

import jax.numpy as jnp
import numpy as np
import pytest
import uvicorn

from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer
from agentrl_jax.chat.templates import hermes_tools_block
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import AsyncSamplingEngine, EngineConfig, SamplingEngine
from agentrl_jax.serving.app import create_app
from agentrl_jax.serving.service import ServerConfig, Service
from launch.demo import WEATHER_TOOL

TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# Whole tokens of the tokenizer, so that the call's text can be said in distinct tokens.
CALL_PIECES = ["<tool_call>", "</tool_call>", '\n{"name": "', '", "arguments": {"city": "',
               '"}}\n']
SENTENCE = ["Hello", [" there", " world"], ",", " friend", ".", " How", " are", " you", "?"]
MODELS = {"tiny-agent": "current", "tiny-text": "text"}
ENGINE = EngineConfig(max_batch=4, page_size=16, num_pages=160, max_context=512,
                      prefill_buckets=(64, 256), prefill_batch_buckets=(1,),
                      context_buckets=(256,), batch_buckets=(1, 4), steps_per_sync=4)


def _corpus() -> list[str]:
    chat = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "What is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    tool = "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n"
    words = "Hello there world, friend. How are you? Par is Paris city weather get_ name"
    return [chat, tool, hermes_tools_block([WEATHER_TOOL]), TOOL_CALL, words] * 20


def _segment(tokenizer, text: str, banned: set[int]) -> list[int]:
    """Distinct token ids (none in `banned`) that decode to `text`, longest pieces first,
    avoiding the tokenizer's own encoding where another split exists."""
    vocab = {i: tokenizer.decode([i]) for i in range(len(tokenizer))}
    own = set(tokenizer.encode(text, add_special_tokens=False))

    def search(pos: int, used: list[int]) -> list[int] | None:
        if pos == len(text):
            return used
        fits = [i for i, s in vocab.items() if s and text.startswith(s, pos)
                and i not in used and i not in banned]
        fits.sort(key=lambda i: (i in own, -len(vocab[i])))
        for i in fits:
            found = search(pos + len(vocab[i]), used + [i])
            if found is not None:
                return found
        return None

    found = search(0, [])
    assert found is not None, f"no distinct-token split of {text!r}"
    return found


def _bigram_model(vocab: int, eos: int, successors: dict[int, list[int]]) -> Decoder:
    cfg = ModelConfig.tiny("llama", vocab_size=vocab, hidden_size=vocab, intermediate_size=8,
                           num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8,
                           tie_word_embeddings=False, max_position_embeddings=1024,
                           eos_token_id=eos)
    from flax import nnx

    model = Decoder(cfg, rngs=nnx.Rngs(0))
    table = np.zeros((vocab, vocab), np.float32)
    table[:, eos] = 1.0  # off script: end the turn
    for token, nexts in successors.items():
        table[token] = 0.0
        table[token, nexts] = 1.0
    # The final norm scales the one-hot hidden state to sqrt(vocab): logits are 20 * table.
    model.embed.set_value(jnp.eye(vocab, dtype=jnp.float32))
    model.lm_head.set_value(jnp.asarray(table * 20.0 / np.sqrt(vocab)))
    model.layers.o_proj.set_value(jnp.zeros_like(model.layers.o_proj[...]))
    model.layers.down_proj.set_value(jnp.zeros_like(model.layers.down_proj[...]))
    return model


class PausableEngine(AsyncSamplingEngine):
    """Lets a test hold the engine loop between two steps (requests queue meanwhile)."""

    @contextlib.contextmanager
    def paused(self):
        held, gate = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            gate.wait()

        self._call(hold)
        held.wait()
        try:
            yield
        finally:
            gate.set()


    @contextlib.contextmanager
    def stepping(self):
        """Holds the engine loop and yields a `Stepper`: the test says when the loop thread
        runs the commands queued meanwhile (submits, cancels) and engine steps, one at a time,
        so that what a client sees can be checked against how far the engine has got."""
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        done: queue.SimpleQueue = queue.SimpleQueue()
        held = threading.Event()

        def hold() -> None:  # runs on the loop thread, which does the jobs until released
            held.set()
            while (job := jobs.get()) is not None:
                try:
                    job()
                    done.put(None)
                except BaseException as e:  # noqa: BLE001 - handed to the test thread
                    done.put(e)

        def run(job) -> None:
            jobs.put(job)
            error = done.get()
            if error is not None:
                raise error

        self._call(hold)
        held.wait()
        try:
            yield Stepper(self, run)
        finally:
            jobs.put(None)


class Stepper:
    """One engine step, or the queued commands, at a time (`PausableEngine.stepping`)."""

    def __init__(self, engine: PausableEngine, run):
        self.engine, self._run = engine, run

    def pump(self) -> None:
        """Runs the commands queued on the loop (a request's submit, a cancel)."""
        commands = self.engine._commands

        def job() -> None:
            while not commands.empty():
                commands.get()()

        self._run(job)

    def until_submitted(self) -> None:
        """Pumps until the engine has a request (the server submits it from its own thread)."""
        wait_until(lambda: (self.pump(), self.engine.engine.has_work)[1])

    def step(self) -> None:
        """Runs the queued commands and one `SamplingEngine.step` (a prefill and a decode
        chunk: `steps_per_sync` tokens per running request)."""
        self.pump()
        self._run(self.engine.engine.step)


class Stack:
    """The tokenizer, the scripts' token ids and the engine behind the servers."""

    def __init__(self):
        tok = train_chat_tokenizer(_corpus(), vocab_size=1000)
        tok.add_tokens(CALL_PIECES)  # as Qwen's vocabulary has <tool_call> and </tool_call>
        self.tokenizer = tok
        self.eos = tok.eos_token_id
        prompt_end = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)[-1]
        self.prompt_end = prompt_end
        self.tool_ids = _segment(tok, TOOL_CALL, {prompt_end, self.eos}) + [self.eos]
        agent = {prompt_end: [self.tool_ids[0]]}
        agent.update({a: [b] for a, b in zip(self.tool_ids, self.tool_ids[1:], strict=False)})
        pieces = [[tok.encode(w, add_special_tokens=False) for w in
                   (p if isinstance(p, list) else [p])] for p in SENTENCE]
        flat = [ids for options in pieces for ids in options]
        assert all(len(ids) == 1 for ids in flat), "each sentence piece is one token"
        self.sentence = [[ids[0] for ids in options] for options in pieces]
        text: dict[int, list[int]] = {prompt_end: self.sentence[0]}
        for here, there in zip(self.sentence, self.sentence[1:] + self.sentence[:1],
                               strict=True):
            for token in here:
                text[token] = there
        ids = [i for options in self.sentence for i in options]
        assert len(set(ids)) == len(ids) and prompt_end not in ids
        engine = SamplingEngine(_bigram_model(len(tok), self.eos, agent), ENGINE,
                                decode_fn=lambda t: tok.decode(t, skip_special_tokens=False))
        self.text_model = _bigram_model(len(tok), self.eos, text)
        engine.update_params(self.text_model, 0, policy="text")
        self.engine = PausableEngine(engine)

    def greedy_sentence(self, n: int) -> list[int]:
        """The first n tokens tiny-text says greedily (the first option at each branch)."""
        return [self.sentence[k % len(self.sentence)][0] for k in range(n)]

    def service(self, **config) -> Service:
        cfg = ServerConfig(models=dict(MODELS), max_context=ENGINE.max_context, **config)
        return Service(self.engine, self.tokenizer, "hermes", (self.eos,), cfg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    """A uvicorn server of `create_app(service)` in a thread on a free loopback port."""

    def __init__(self, service: Service, app=None):
        """Serves `app` (default `create_app(service)`)."""
        self.service = service
        self.app = app if app is not None else create_app(service)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started)

    @property
    def counters(self):
        return self.app.state.counters

    def client(self, api_key: str = "none"):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=120)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()


def wait_until(condition, timeout: float = 120.0) -> None:
    """Polls `condition` (a liveness bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture(scope="session")
def stack():
    stack = Stack()
    yield stack
    stack.engine.close()


@pytest.fixture(scope="session")
def server(stack):
    running = RunningServer(stack.service())
    yield running
    running.close()


@pytest.fixture(scope="session")
def guarded(stack):
    """A second server on the same engine with an API key and tight limits."""
    running = RunningServer(stack.service(api_key="sesame", max_concurrent=1,
                                          max_body_bytes=4096, max_n=2))
    yield running
    running.close()


@pytest.fixture
def client(server):
    return server.client()
