"""Evaluate a model on BFCL v3 (Berkeley Function Calling Leaderboard) with BFCL's own checker.

Run: `python -m launch.bfcl --model smollm2-135m-instruct --categories simple live multi_turn
--limit 20 --out runs/bfcl`. Categories are BFCL's names or groups ("all", "non_live", "live",
"multi_turn", "python", ...). Writes bfcl_report.json (overall, summaries, per category),
bfcl_report.md (the same as tables) and bfcl_examples.jsonl (every reply and verdict) to --out.
Needs the `[bfcl]` extra (scripts/setup.sh installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from agentrl_jax import compile_cache
from agentrl_jax.evaluation import bfcl
from agentrl_jax.evaluation.bfcl_policy import EnginePolicy


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="zoo name or HF model dir")
    p.add_argument("--categories", nargs="+", default=["all"], help="BFCL categories or groups")
    p.add_argument("--limit", type=int, default=None, help="first N examples of each category")
    p.add_argument("--out", default="runs/bfcl", help="output directory")
    p.add_argument("--max-new-tokens", type=int, default=512, help="per assistant turn")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    p.add_argument("--max-context", type=int, default=None,
                   help="prompt + reply tokens (default: the model's limit)")
    p.add_argument("--max-batch", type=int, default=4, help="turns decoded at once")
    p.add_argument("--concurrency", type=int, default=8, help="examples in flight")
    p.add_argument("--tool-parser", default=None, help="hermes, qwen25 or glm4 (default: by model)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> bfcl.Report:
    args = parse_args(argv)
    compile_cache.enable()
    start = time.monotonic()
    with EnginePolicy(args.model, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, max_context=args.max_context,
                      max_batch=args.max_batch, tool_parser=args.tool_parser) as policy:
        report = asyncio.run(bfcl.evaluate(policy, args.categories, limit=args.limit,
                                           concurrency=args.concurrency, model=args.model))
    out = bfcl.write_report(report, args.out)
    print(report.markdown())
    print(f"{len(report.examples)} examples in {time.monotonic() - start:.0f}s; wrote {out}")
    return report


if __name__ == "__main__":
    main()
