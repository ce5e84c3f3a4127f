"""The OpenAI-compatible server against the engine called in process, and against transformers'
`generate`, on SmolLM2-135M-Instruct; and grammar-constrained decoding against unconstrained.

One engine (the model-zoo's `smollm2-135m-instruct`, loaded by the project's own code) serves
every phase, at 1, 8 and 32 concurrent clients, in the same run:

  inprocess   C asyncio tasks await `AsyncSamplingEngine.generate` with exactly the engine
              requests the server makes of the same chat requests (`Service.prepare_chat`)
  serving     C clients (the real `openai.AsyncOpenAI`, in a separate process so that they do
              not hold the server's interpreter lock) POST the chat requests to a real uvicorn
              server on 127.0.0.1, non-streamed
  stream      the same with `stream=True` (text arrives at each host sync)
  constrained the inprocess phase with every request under a JSON-schema grammar whose string
              outlasts the turn, so that every token is drawn under a mask (one decode step a
              device call, masks computed on the host)
  hf          transformers' own `generate` on the same weights and prompt tokens, the C
              clients' k-th requests as one left-padded batch (its static batching), if
              transformers and torch are installed

Each client sends its requests one after another; a request is a short distinct chat prompt
asking for `--new_tokens` greedy tokens (the end-of-turn token may end it sooner; the figures
count the tokens actually sampled, which are the same in every phase of ours). The prefix cache
is off, so that a phase that runs later does not find the earlier phases' prompts cached. Our
three phases run `--rounds` times, interleaved, and each keeps its fastest round (with that
round's latencies): on a shared machine the least disturbed one.

Figures (benchmarks/results/serving.json, flat, plus the machine):
  tok_s_{inprocess,serving,stream,hf}_C   sampled tokens / wall seconds of the phase
  serving_vs_inprocess_C                  serving / inprocess (target: >= 0.9 at 32)
  constrained_vs_inprocess_C              constrained / inprocess (target: >= 0.8 at 32)
  ttft_p50_constrained_C                  submit -> the first token event, under a grammar
  grammar_ms_C                            building one request's grammar (host), milliseconds
  stream_vs_inprocess_C, serving_vs_hf_C  the same for streaming, and against transformers
  ttft_p50_stream_C, ttft_p99_stream_C    request sent -> its first text chunk, seconds
  ttft_p50_C, ttft_p99_C                  non-streamed: request sent -> the response (the first
                                          token arrives with the whole)
  ttft_p50_inprocess_C                    submit -> the engine's first token event
  added_latency_ms_C                      p50 request latency through the server minus in
                                          process (HTTP, JSON, the client), milliseconds
  added_latency_stream_ms_C               the same for a stream's whole response
  {prefill_calls,decode_chunks}_PHASE_C   the engine's device calls in the phase: requests
                                          that arrive over HTTP a few at a time are prefilled
                                          in more, smaller calls than those submitted at once
p99 is over C x requests-per-client requests (a few dozen at most): near the maximum.

    python -m benchmarks.serving                     # ~ a few minutes on 2 CPU cores
    python -m benchmarks.serving --concurrency 1,8 --no-hf --new_tokens 16

Timings are wall clock on a possibly shared machine: the JSON records the share of the cores
other jobs used during the run (`other_jobs_cpu_share`: the machine's busy CPU time less this
process's and its clients'), `machine_quiet` (under 10%), the load average before and after,
and `--note`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

MODEL = "smollm2-135m-instruct"
SERVED_NAME = "smollm2"
SUBJECTS = ("fox", "robot", "lighthouse", "dragon", "baker", "comet", "river", "violin")
QUALITIES = ("brave", "tired", "tiny", "curious", "lonely", "clever", "old", "happy")


def chat_bodies(n: int, new_tokens: int) -> list[dict[str, Any]]:
    """`n` distinct short chat requests, each asking for `new_tokens` greedy tokens."""
    topics = [f"a {q} {s}" for s in SUBJECTS for q in QUALITIES]
    assert n <= len(topics), f"at most {len(topics)} distinct prompts"
    return [{"model": SERVED_NAME, "max_tokens": new_tokens, "temperature": 0,
             "messages": [{"role": "user", "content": f"Tell me a short story about {t}."}]}
            for t in topics[:n]]


def requests_per_client(concurrency: int, requested: int) -> int:
    """`requested`, or by default 2 (4 for a single client)."""
    return requested if requested > 0 else max(2, 4 // concurrency)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation (numpy's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# ---- the clients' process (imports no JAX) ----------------------------------------------------

async def _client_phase(url: str, per_client: list[list[dict[str, Any]]], stream: bool
                        ) -> dict[str, Any]:
    """Each list of `per_client` is one client's requests, sent one after another; returns the
    phase's wall time and each request's (first text, end) times and sampled tokens."""
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                                timeout=1800)

    async def one(body: dict[str, Any]) -> dict[str, float]:
        start = time.perf_counter()
        first = None
        if stream:
            tokens = 0
            async for chunk in await client.chat.completions.create(stream=True, **body):
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter()
                if not chunk.choices and chunk.model_extra:
                    tokens = len(chunk.model_extra["agentrl"]["choices"][0]
                                 ["completion_token_ids"])
        else:
            response = await client.chat.completions.create(**body)
            assert response.usage is not None
            tokens = response.usage.completion_tokens
        end = time.perf_counter()
        return {"ttft": (first or end) - start, "latency": end - start, "tokens": tokens}

    async def run_client(bodies: list[dict[str, Any]]) -> list[dict[str, float]]:
        return [await one(body) for body in bodies]

    await client.models.list()  # the connection and the HTTP path, untimed, no engine call
    start = time.perf_counter()
    results = await asyncio.gather(*(run_client(bodies) for bodies in per_client))
    wall = time.perf_counter() - start
    await client.close()
    return {"wall": wall, "requests": [r for client_results in results for r in client_results]}


def client_main(spec_path: str) -> None:
    spec = json.loads(pathlib.Path(spec_path).read_text())
    out = asyncio.run(_client_phase(spec["url"], spec["per_client"], spec["stream"]))
    print(json.dumps(out))


def run_clients(url: str, per_client: list[list[dict[str, Any]]], stream: bool
                ) -> dict[str, Any]:
    """`_client_phase` in a fresh process (`python -m benchmarks.serving --client SPEC`)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"url": url, "per_client": per_client, "stream": stream}, f)
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.serving", "--client", f.name],
                              capture_output=True, text=True, check=False,
                              cwd=pathlib.Path(__file__).parent.parent)
    finally:
        os.unlink(f.name)
    if done.returncode:
        raise RuntimeError(f"client process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the server's process --------------------------------------------------------------------

class Server:
    """The app on a real uvicorn server on a free 127.0.0.1 port, in a thread."""

    def __init__(self, app: Any):
        import socket

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()


def engine_config(max_batch: int, max_context: int) -> Any:
    """One prompt length and context width (short prompts), but row and batch buckets in
    powers of two: requests arriving over HTTP are admitted a few at a time, and a coarse
    bucket would pad 2 waiting prompts to 8 rows, 9 running requests to 32. No prefix cache
    (see the module docstring)."""
    from agentrl_jax.sampling import EngineConfig

    return EngineConfig(max_batch=max_batch, page_size=16,
                        num_pages=max_batch * max_context // 16 + 8, max_context=max_context,
                        prefill_buckets=(64,), prefill_batch_buckets=(1, 2, 4, 8),
                        context_buckets=(), batch_buckets=(1, 2, 4, 8, 16), prefix_cache=False)


async def inprocess_phase(engine: Any, per_client: list[list[Any]]) -> dict[str, Any]:
    """The engine requests of each client awaited one after another, the clients at once."""

    async def one(request: Any) -> dict[str, float]:
        start = time.perf_counter()
        first: list[float] = []
        result = await engine.generate(
            request, lambda event: first.append(time.perf_counter()) if not first else None)
        end = time.perf_counter()
        return {"ttft": first[0] - start, "latency": end - start, "tokens": len(result.tokens)}

    async def run_client(requests: list[Any]) -> list[dict[str, float]]:
        return [await one(r) for r in requests]

    start = time.perf_counter()
    results = await asyncio.gather(*(run_client(rs) for rs in per_client))
    wall = time.perf_counter() - start
    return {"wall": wall, "requests": [r for client_results in results for r in client_results]}


def run_inprocess(engine: Any, per_client: list[list[Any]]) -> dict[str, Any]:
    return asyncio.run(inprocess_phase(engine, per_client))


# A document that outlasts the turn: every token of it is drawn under the grammar's mask.
CONSTRAINT_SCHEMA = {"type": "object", "required": ["answer"], "additionalProperties": False,
                     "properties": {"answer": {"type": "string", "minLength": 1000}}}


def run_constrained(engine: Any, per_client: list[list[Any]], compiler: Any) -> dict[str, Any]:
    """The in-process phase with each request under a fresh JSON-schema grammar (built before
    the clock starts; `grammar_ms` is the cost of one)."""
    start = time.perf_counter()
    constrained = [[dataclasses.replace(r, constraint=compiler.json_schema(CONSTRAINT_SCHEMA))
                    for r in requests] for requests in per_client]
    built = time.perf_counter()
    run = asyncio.run(inprocess_phase(engine, constrained))
    run["grammar_ms"] = 1000 * (built - start) / sum(map(len, constrained))
    return run


def hf_phase(hf_model: Any, tokenizer: Any, per_client: list[list[list[int]]],
             new_tokens: int, eos: int) -> dict[str, Any]:
    """transformers' `generate`, greedy: the clients' k-th prompts as one left-padded batch.

    Tokens counted per sequence up to its first end-of-turn token (included), as ours."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    rounds = [[prompts[k] for prompts in per_client] for k in range(len(per_client[0]))]
    tokens, start = 0, time.perf_counter()
    for batch in rounds:
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = hf_model.generate(ids, attention_mask=mask, do_sample=False,
                                    max_new_tokens=new_tokens, eos_token_id=eos,
                                    pad_token_id=pad)
        for row in out[:, width:].tolist():
            tokens += next((i + 1 for i, t in enumerate(row) if t == eos), len(row))
    return {"wall": time.perf_counter() - start, "tokens": tokens}


def with_engine_calls(engine: Any, phase: Any) -> dict[str, Any]:
    """`phase()`'s result with the engine's prefill calls and decode chunks during it (read
    while the engine is idle: every request of a phase has ended when it returns)."""
    before = dict(engine.stats)
    run = phase()
    for key in ("prefill_calls", "decode_chunks"):
        run[key] = engine.stats[key] - before.get(key, 0)
    return run


def summarize(name: str, concurrency: int, phase: dict[str, Any], figures: dict[str, Any]
              ) -> None:
    requests = phase["requests"]
    tokens = sum(r["tokens"] for r in requests)
    figures[f"tok_s_{name}_{concurrency}"] = tokens / phase["wall"]
    figures[f"tokens_{name}_{concurrency}"] = tokens
    for key in ("prefill_calls", "decode_chunks"):
        figures[f"{key}_{name}_{concurrency}"] = phase[key]
    ttft = [r["ttft"] for r in requests]
    suffix = {"serving": "", "stream": "_stream", "inprocess": "_inprocess",
              "constrained": "_constrained"}[name]
    if "grammar_ms" in phase:
        figures[f"grammar_ms_{concurrency}"] = phase["grammar_ms"]
    figures[f"ttft_p50{suffix}_{concurrency}"] = percentile(ttft, 0.5)
    figures[f"ttft_p99{suffix}_{concurrency}"] = percentile(ttft, 0.99)
    figures[f"latency_p50_{name}_{concurrency}"] = percentile([r["latency"] for r in requests],
                                                              0.5)


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine since boot, of this process and its finished
    children): their difference over a run is what other jobs used meanwhile."""
    import resource

    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    machine = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    ours = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    return machine, ours


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per client (default: max(2, 4 // clients))")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of our three phases, interleaved; the best of each kept")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' generate")
    parser.add_argument("--note", default="", help="recorded in the JSON (e.g. other jobs)")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        client_main(args.client)
        return {}

    from agentrl_jax import compile_cache

    compile_cache.enable()
    from agentrl_jax.experiment.saved_policy import load_checkpoint, resolve_checkpoint
    from agentrl_jax.sampling import GenerateRequest
    from agentrl_jax.serving.app import create_app
    from agentrl_jax.serving.schemas import ChatCompletionRequest
    from agentrl_jax.serving.served_engine import served_engine
    from agentrl_jax.serving.service import ServerConfig, Service
    from benchmarks.machine_info import write_result

    load_start = os.getloadavg()
    cpu_start, wall_start = cpu_seconds(), time.perf_counter()
    levels = [int(c) for c in args.concurrency.split(",")]
    checkpoint = resolve_checkpoint(MODEL)
    policy = load_checkpoint(checkpoint, "hermes")
    tokenizer = policy.tokenizer
    config = engine_config(max(levels), 128)
    engine, _ = served_engine(policy.model, config, tokenizer, {})
    t = time.perf_counter()
    engine.engine.warmup(constrained=True)
    print(f"engine warm-up (compiles every shape): {time.perf_counter() - t:.1f} s")
    service = Service(engine, tokenizer, "hermes", policy.end_of_turn_ids,
                      ServerConfig(models={SERVED_NAME: "current"},
                                   max_context=config.max_context))
    server = Server(create_app(service))
    hf_model = None
    if not args.no_hf:
        try:
            from benchmarks.sampler import load_hf_baseline

            hf_model, hf_setup = load_hf_baseline(checkpoint.model_dir)
        except ImportError as e:
            print(f"transformers' generate skipped: {e!r}")

    figures: dict[str, Any] = {"model": f"{MODEL} (zoo)", "new_tokens": args.new_tokens,
                               "steps_per_sync": config.steps_per_sync,
                               "max_batch": config.max_batch, "prefix_cache": False,
                               "rounds": args.rounds}
    if hf_model is not None:
        figures.update({f"hf_{k}": v for k, v in hf_setup.items()})
    lines = []
    try:
        for c in levels:
            k = requests_per_client(c, args.requests)
            bodies = chat_bodies(c * k, args.new_tokens)
            per_client = [bodies[i * k:(i + 1) * k] for i in range(c)]
            prepared = [[service.prepare_chat(ChatCompletionRequest(**b), None) for b in bs]
                        for bs in per_client]
            requests = [[GenerateRequest(p.prompt, p.params[0], p.policy) for p in ps]
                        for ps in prepared]
            figures[f"requests_{c}"] = c * k
            best: dict[str, dict[str, Any]] = {}
            phases = {"inprocess": functools.partial(run_inprocess, engine, requests),
                      "constrained": functools.partial(run_constrained, engine, requests,
                                                       service.grammar_compiler()),
                      "serving": functools.partial(run_clients, server.url, per_client, False),
                      "stream": functools.partial(run_clients, server.url, per_client, True)}
            for _ in range(args.rounds):  # interleaved: a burst of load hits every phase
                runs = {name: with_engine_calls(engine.engine, phase)
                        for name, phase in phases.items()}
                for name, run in runs.items():
                    if name not in best or run["wall"] < best[name]["wall"]:
                        best[name] = run
            for name, run in best.items():
                summarize(name, c, run, figures)
            base = figures[f"tok_s_inprocess_{c}"]
            figures[f"serving_vs_inprocess_{c}"] = figures[f"tok_s_serving_{c}"] / base
            figures[f"stream_vs_inprocess_{c}"] = figures[f"tok_s_stream_{c}"] / base
            figures[f"constrained_vs_inprocess_{c}"] = figures[f"tok_s_constrained_{c}"] / base
            for name, key in (("serving", "added_latency_ms"),
                              ("stream", "added_latency_stream_ms")):
                figures[f"{key}_{c}"] = 1000 * (figures[f"latency_p50_{name}_{c}"]
                                                - figures[f"latency_p50_inprocess_{c}"])
            hf = ""
            if hf_model is not None:
                run = hf_phase(hf_model, tokenizer, [[p.prompt for p in ps] for ps in prepared],
                               args.new_tokens, policy.end_of_turn_ids[0])
                figures[f"tok_s_hf_{c}"] = run["tokens"] / run["wall"]
                figures[f"serving_vs_hf_{c}"] = figures[f"tok_s_serving_{c}"] / figures[
                    f"tok_s_hf_{c}"]
                hf = f", HF generate {figures[f'tok_s_hf_{c}']:.1f}"
            line = (f"{c:>2} clients x {k}: tok/s in-process {base:.1f}, served "
                    f"{figures[f'tok_s_serving_{c}']:.1f} "
                    f"({figures[f'serving_vs_inprocess_{c}']:.2f}x), streamed "
                    f"{figures[f'tok_s_stream_{c}']:.1f} "
                    f"({figures[f'stream_vs_inprocess_{c}']:.2f}x), constrained "
                    f"{figures[f'tok_s_constrained_{c}']:.1f} "
                    f"({figures[f'constrained_vs_inprocess_{c}']:.2f}x){hf}; TTFT p50 stream "
                    f"{figures[f'ttft_p50_stream_{c}']:.3f} s / whole "
                    f"{figures[f'ttft_p50_{c}']:.3f} s / in-process "
                    f"{figures[f'ttft_p50_inprocess_{c}']:.3f} s / constrained "
                    f"{figures[f'ttft_p50_constrained_{c}']:.3f} s; added latency p50 "
                    f"{figures[f'added_latency_ms_{c}']:.0f} ms")
            print(line, flush=True)
            lines.append(line)
    finally:
        server.close()
        engine.close()
    same = all(figures[f"tokens_serving_{c}"] == figures[f"tokens_inprocess_{c}"]
               == figures[f"tokens_stream_{c}"] for c in levels)
    load_end = os.getloadavg()
    (machine_end, ours_end), wall = cpu_seconds(), time.perf_counter() - wall_start
    cores = os.cpu_count() or 1
    others = max(0.0, (machine_end - cpu_start[0]) - (ours_end - cpu_start[1])) / (wall * cores)
    quiet = others < 0.1
    note = args.note or ("" if quiet else f"machine not quiet: other jobs used {others:.0%} of "
                         f"the {cores} cores during the run")
    figures.update({"same_tokens_all_phases": same, "load_average_start": round(load_start[0], 2),
                    "load_average_end": round(load_end[0], 2),
                    "other_jobs_cpu_share": round(others, 3), "machine_quiet": quiet,
                    "note": note, "wall_s": round(wall, 1)})
    path = write_result("serving", figures)
    print("\nServing benchmark (" + figures["model"] + f", {args.new_tokens} new tokens)")
    print("\n".join(lines))
    print(f"same sampled tokens in every phase of ours: {same}; {note or 'machine quiet'}")
    print(f"wrote {path}")
    return figures


if __name__ == "__main__":
    main()
