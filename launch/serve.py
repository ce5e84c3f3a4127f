"""Serves a policy over an OpenAI-compatible HTTP API, with token-exact capture for RL.

    python -m launch.serve --checkpoint=runs/local                  # a run's final model
    python -m launch.serve --checkpoint=runs/local --step=20        # an RL checkpoint
    python -m launch.serve --checkpoint=smollm2-135m-instruct --port=8000 --api_key=KEY

`--checkpoint` is what `launch.eval` takes (an HF directory, a model-zoo name, or a
`launch.local` run directory, resolved by the same `resolve_checkpoint`); `--adapters`
serves PEFT LoRA adapters over it as model names of their own; the run's
`config.json` supplies the tool-call parser and the engine's sizes, flags override them. The
policy is served under `--model_name` (default: the checkpoint's directory name). Bound to
127.0.0.1 unless `--host` says otherwise. SIGTERM or Ctrl-C drains: the listener closes, the
requests in flight (streams included) finish, for at most `--drain_s` seconds, then the engine
stops. docs/serving.md describes the API, the `agentrl` field and the trajectories.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from absl import app, flags

FLAGS = flags.FLAGS
API_KEY_ENV = "AGENTRL_SERVE_API_KEY"

def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The launcher's flags (defined on demand, so importing this module defines none)."""
    specs: list[tuple[str, str, object, str]] = [
        ("string", "checkpoint", None, "HF directory, model-zoo name or launch.local run dir."),
        ("integer", "step", None, "With a run directory: serve this RL checkpoint's weights."),
        ("string", "model_name", None, "Model name clients ask for (default: the checkpoint's "
         "directory name)."),
        ("string", "parser", None, "Tool-call format: hermes | qwen25 | glm4 (default: the "
         "run's, else hermes)."),
        ("string", "host", "127.0.0.1", "Address to bind (loopback by default)."),
        ("integer", "port", 8000, "Port to bind."),
        ("string", "api_key", None, f"Required Bearer key (default: ${API_KEY_ENV}; unset: no "
         "key)."),
        ("integer", "max_context", None, "Engine context, tokens (default: the run's)."),
        ("integer", "max_batch", None, "Engine decode slots (default: the run's)."),
        ("integer", "num_pages", None, "Engine KV pages (default: the run's)."),
        ("integer", "default_max_tokens", 512, "Completion budget when a request sets none."),
        ("integer", "max_n", 8, "Most choices per request."),
        ("integer", "max_concurrent", 64, "Requests generating at once; more get 429."),
        ("integer", "max_body_bytes", 4 << 20, "Larger request bodies get 413."),
        ("integer", "max_trajectories", 1024, "Open trajectories kept (LRU beyond)."),
        ("integer", "drain_s", 60, "On SIGTERM, seconds to let requests in flight finish."),
        ("bool", "warmup", True, "Compile every engine shape before accepting requests."),
        ("bool", "warmup_constrained", False, "With --warmup, also compile the programs of "
         "grammar-constrained requests (strict tools, forced calls, JSON formats); otherwise "
         "the first such request of each shape compiles them."),
        ("list", "adapters", [], "LoRA adapters served as their own model names: NAME=DIR,... "
         "(PEFT directories over the checkpoint's model, all of one rank and targets)."),
    ]
    for kind, name, default, help_text in specs:
        getattr(flags, f"DEFINE_{kind}")(name, default, help_text, flag_values=flag_values)


log = logging.getLogger("launch.serve")


def engine_config(run_config: Any, overrides: dict[str, Any]) -> Any:
    """The run's engine sizes (or `rl_stage`'s defaults), with the flags set on top."""
    from agentrl_jax.dataclass_config import dataclass_from
    from agentrl_jax.experiment import rl_stage
    from agentrl_jax.sampling import EngineConfig

    section = rl_stage.default_config().engine
    if run_config is not None and "rl" in run_config:
        section.update(run_config.rl.engine.to_dict())
    config = dataclass_from(section, EngineConfig)
    return dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})


def parse_adapters(entries: Sequence[str]) -> dict[str, str]:
    """--adapters NAME=DIR entries as {NAME: DIR}."""
    out = {}
    for entry in entries:
        name, sep, directory = entry.partition("=")
        if not sep or not name or not directory:
            raise app.UsageError(f"--adapters takes NAME=DIR entries, not {entry!r}")
        out[name] = directory
    return out


def build(checkpoint: str, step: int | None, parser: str | None, model_name: str | None,
          engine_overrides: dict[str, Any], server: dict[str, Any], warmup: bool = True,
          adapters: dict[str, str] | None = None, warmup_constrained: bool = False
          ) -> tuple[Any, Any, str]:
    """(app, engine, model name): the FastAPI app serving the checkpoint, and its engine (to
    close once the server has stopped)."""
    import pathlib

    from agentrl_jax.experiment.saved_policy import (
        CheckpointError,
        load_checkpoint,
        resolve_checkpoint,
    )
    from agentrl_jax.serving.app import create_app
    from agentrl_jax.serving.served_engine import served_engine
    from agentrl_jax.serving.service import ServerConfig, Service

    try:
        resolved = resolve_checkpoint(checkpoint, step)
    except CheckpointError as error:
        raise SystemExit(f"launch.serve: {error}") from None
    run = resolved.run_config
    parser = parser or (run.model.parser if run is not None and "model" in run else "hermes")
    policy = load_checkpoint(resolved, parser)
    tokenizer = policy.tokenizer
    config = engine_config(run, engine_overrides)
    try:
        async_engine, served = served_engine(policy.model, config, tokenizer, adapters or {})
    except ValueError as error:   # adapters of different shapes
        raise SystemExit(f"launch.serve: {error}") from None
    if warmup:
        async_engine.engine.warmup(constrained=warmup_constrained)
    name = model_name or pathlib.Path(resolved.run_dir or resolved.model_dir).name
    if resolved.step is not None and model_name is None:
        name = f"{name}-step{resolved.step}"
    if name in served:
        raise SystemExit(f"launch.serve: adapter name {name!r} is the model's name")
    service = Service(async_engine, tokenizer, parser, policy.end_of_turn_ids,
                      ServerConfig(models={name: "current", **served},
                                   max_context=config.max_context,
                                   **server))
    if warmup and warmup_constrained:
        service.grammar_compiler()
    return create_app(service), async_engine, name


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    if not FLAGS.checkpoint:
        raise app.UsageError("--checkpoint is required")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import uvicorn

    api = FLAGS.api_key or os.environ.get(API_KEY_ENV) or None
    application, engine, name = build(
        FLAGS.checkpoint, FLAGS.step, FLAGS.parser, FLAGS.model_name,
        dict(max_context=FLAGS.max_context, max_batch=FLAGS.max_batch,
             num_pages=FLAGS.num_pages),
        dict(api_key=api, default_max_tokens=FLAGS.default_max_tokens, max_n=FLAGS.max_n,
             max_concurrent=FLAGS.max_concurrent, max_body_bytes=FLAGS.max_body_bytes,
             max_trajectories=FLAGS.max_trajectories), warmup=FLAGS.warmup,
        adapters=parse_adapters(FLAGS.adapters), warmup_constrained=FLAGS.warmup_constrained)
    log.info("serving %s at http://%s:%d/v1%s", name, FLAGS.host, FLAGS.port,
             " (API key required)" if api else "")
    # uvicorn handles SIGTERM and SIGINT: it stops accepting, lets the requests in flight end
    # (at most timeout_graceful_shutdown seconds), then returns and re-raises the signal to the
    # handler it found; that handler only records it, so that the engine is closed and the
    # process exits 0 (drained) instead of dying of the re-raised signal.
    stopped_by: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda signum, frame: stopped_by.append(signum))
    server = uvicorn.Server(uvicorn.Config(application, host=FLAGS.host, port=FLAGS.port,
                                           timeout_graceful_shutdown=FLAGS.drain_s,
                                           log_level="info"))
    try:
        server.run()
    finally:
        engine.close()
    log.info("drained and stopped%s", f" (signal {stopped_by[0]})" if stopped_by else "")


if __name__ == "__main__":
    define_flags()
    app.run(main)
