"""Berkeley Function Calling Leaderboard v3 evaluation of a policy in our chat format.

Flow, per example (examples of all categories run concurrently, up to `concurrency` at once):
  1. bfcl_data loads the entry and its possible answer and renders BFCL's function docs as
     OpenAI tools;
  2. the `Policy` answers messages + tools with the assistant's text (`EnginePolicy`: our chat
     template, JAX sampling engine, greedy by default; tests plug in a scripted policy);
  3. our tool-call parser (the policy's format: hermes/qwen25/glm4) reads the calls;
  4. bfcl_grade hands them to BFCL's checker: the AST checker for single-turn categories, or for
     multi-turn ones the loop below and then BFCL's multi-turn checker;
  5. bfcl_score turns per-category accuracies into BFCL's overall and summary numbers.

The multi-turn loop is BFCL's function-calling loop: for each user turn (miss_func: at the
turn where held-out functions appear, they are added to the tools and BFCL's "I have updated some
more functions" message is the user turn), the model is asked again and again; each reply's calls
run on BFCL's simulated APIs and come back as tool messages, until a reply has no call (or does
not parse), which ends the turn. More than BFCL's step limit of calling steps in one turn ends
the whole run, which BFCL grades as a failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from agentrl_jax.chat.tool_parsers import ParsedTurn, ToolParseError, get_parser
from agentrl_jax.evaluation import bfcl_data, bfcl_grade, bfcl_score
from agentrl_jax.evaluation.bfcl_data import BfclExample, Message


class PromptTooLongError(Exception):
    """The conversation no longer fits the policy's context; the example fails."""


class Policy(Protocol):
    """The model under evaluation: messages + tools in, the assistant's reply text out.

    `tool_parser` names the format its replies write calls in (`chat.tool_parsers.get_parser`).
    Calls with the same `session_id` continue one conversation (an engine may reuse its KV
    cache); `end_session` says that conversation is over.
    """

    tool_parser: str

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], *, session_id: str
    ) -> str: ...

    async def end_session(self, session_id: str) -> None: ...


@dataclasses.dataclass
class ExampleResult:
    """One graded example: BFCL's verdict, the raw replies per turn and what was graded."""

    id: str
    category: str
    valid: bool
    error_type: str = ""
    error: str = ""
    replies: list[list[str]] = dataclasses.field(default_factory=list)
    graded: Any = None  # decoded calls (single turn) or call strings per turn and step


# ---- running one example ----------------------------------------------------------------------


async def run_single_turn(policy: Policy, example: BfclExample) -> ExampleResult:
    """Asks once and grades the reply with BFCL's AST or relevance check."""
    session = f"bfcl-{example.id}-{uuid.uuid4().hex[:8]}"
    tools = bfcl_data.openai_tools(example.functions, example.category)
    try:
        text = await policy.respond(list(example.turns[0]), tools, session_id=session)
    except PromptTooLongError as e:
        return ExampleResult(example.id, example.category, False, "inference:prompt_too_long",
                             str(e))
    finally:
        await policy.end_session(session)
    parsed = get_parser(policy.tool_parser).parse(text)
    calls = bfcl_grade.decode_calls(parsed)
    parse_error = parsed.message if isinstance(parsed, ToolParseError) else ""
    grade = bfcl_grade.grade_single_turn(example, calls, parse_error)
    return ExampleResult(example.id, example.category, grade.valid, grade.error_type,
                         grade.error, [[text]], calls)


async def run_multi_turn(policy: Policy, example: BfclExample) -> ExampleResult:
    """Runs BFCL's multi-turn function-calling loop on its simulated APIs, then grades it."""
    parser = get_parser(policy.tool_parser)
    session = f"bfcl-{example.id}-{uuid.uuid4().hex[:8]}"
    functions = list(example.functions)
    messages: list[Message] = []
    turns: list[list[list[str]]] = []  # per turn, the call strings of each calling step
    replies: list[list[str]] = []
    limit = bfcl_grade.step_limit()
    with bfcl_grade.SimulatedApis(example) as apis:
        try:
            for index, user_turn in enumerate(example.turns):
                if index in example.held_out:
                    functions += example.held_out[index]
                    user_turn = [{"role": "user",
                                  "content": bfcl_grade.additional_function_prompt()}]
                messages += [dict(m) for m in user_turn]
                tools = bfcl_data.openai_tools(functions, example.category)
                steps: list[list[str]] = []
                replies.append([])
                while True:
                    text = await policy.respond(messages, tools, session_id=session)
                    replies[-1].append(text)
                    parsed = parser.parse(text)
                    if isinstance(parsed, ParsedTurn):
                        messages.append(parsed.message())
                    else:
                        messages.append({"role": "assistant", "content": text})
                    calls = bfcl_grade.decode_calls(parsed)
                    # No call, or not parseable: the turn is over (as in BFCL).
                    if not calls or not isinstance(parsed, ParsedTurn):
                        break
                    strings = apis.call_strings(calls)
                    steps.append(strings)
                    for call, result in zip(parsed.tool_calls, apis.execute(strings),
                                            strict=True):
                        messages.append({"role": "tool", "tool_call_id": call["id"],
                                         "name": call["function"]["name"], "content": result})
                    if len(steps) > limit:
                        break
                turns.append(steps)
                if len(steps) > limit:  # forced quit: the remaining turns are not run
                    break
        except PromptTooLongError as e:
            return ExampleResult(example.id, example.category, False,
                                 "inference:prompt_too_long", str(e), replies, turns)
        finally:
            await policy.end_session(session)
        grade = apis.grade(turns)
    return ExampleResult(example.id, example.category, grade.valid, grade.error_type,
                         grade.error, replies, turns)


async def run_example(policy: Policy, example: BfclExample) -> ExampleResult:
    if example.kind == "multi_turn":
        return await run_multi_turn(policy, example)
    return await run_single_turn(policy, example)


# ---- the report -------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """Per-category accuracies, BFCL's leaderboard numbers and every example's result."""

    model: str
    categories: dict[str, dict[str, Any]]  # category -> accuracy, correct, count
    leaderboard: dict[str, bfcl_score.Score]
    examples: list[ExampleResult]

    def summary(self) -> dict[str, Any]:
        return {
            "benchmark": "BFCL v3 (bfcl-eval 2025.6.8)",
            "model": self.model,
            "leaderboard": {k: v.as_dict() for k, v in self.leaderboard.items()},
            "categories": self.categories,
        }

    def markdown(self) -> str:
        def pct(value: float | None) -> str:
            return "N/A" if value is None else f"{100 * value:.2f}%"

        lines = [f"# BFCL v3: {self.model}", "", "| score | accuracy | examples |",
                 "| --- | --- | --- |"]
        lines += [f"| {name} | {pct(s.display)} | {s.count} |"
                  for name, s in self.leaderboard.items()]
        lines += ["", "| category | accuracy | correct / examples |", "| --- | --- | --- |"]
        lines += [f"| {name} | {pct(c['accuracy'])} | {c['correct']} / {c['count']} |"
                  for name, c in self.categories.items()]
        lines += ["", "Categories not evaluated count as 0 in the overall numbers, as in BFCL; "
                  "summaries that include one show N/A."]
        return "\n".join(lines) + "\n"


def make_report(model: str, results: Sequence[ExampleResult]) -> Report:
    """Groups results by category (in BFCL's order) and aggregates them as BFCL does."""
    categories: dict[str, dict[str, Any]] = {}
    for category in bfcl_data.all_categories():
        mine = [r for r in results if r.category == category]
        if mine:
            correct = sum(r.valid for r in mine)
            categories[category] = {"accuracy": correct / len(mine), "correct": correct,
                                    "count": len(mine)}
    board = bfcl_score.leaderboard({c: (v["accuracy"], v["count"]) for c, v in categories.items()})
    return Report(model, categories, board, list(results))


def write_report(report: Report, out_dir: str | pathlib.Path) -> pathlib.Path:
    """Writes bfcl_report.json, bfcl_report.md and bfcl_examples.jsonl into `out_dir`."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bfcl_report.json").write_text(json.dumps(report.summary(), indent=2) + "\n")
    (out / "bfcl_report.md").write_text(report.markdown())
    with open(out / "bfcl_examples.jsonl", "w", encoding="utf-8") as f:
        for r in report.examples:
            f.write(json.dumps(dataclasses.asdict(r), ensure_ascii=False, default=str) + "\n")
    return out


async def evaluate(
    policy: Policy,
    categories: Sequence[str] = ("all",),
    *,
    limit: int | None = None,
    concurrency: int = 8,
    model: str = "policy",
) -> Report:
    """Runs `policy` on the first `limit` examples of each category (or group) and grades them."""
    examples = [e for c in bfcl_data.resolve_categories(categories)
                for e in bfcl_data.load_category(c, limit)]
    gate = asyncio.Semaphore(concurrency)

    async def one(example: BfclExample) -> ExampleResult:
        async with gate:
            return await run_example(policy, example)

    results = await asyncio.gather(*(one(e) for e in examples))
    return make_report(model, results)
