"""BFCL v3 evaluation: scripted replies graded by BFCL's own checkers, and SmolLM2 end to end.

The fast tests play a scripted model (replies in the Hermes tool-call format our parser reads)
through the same runner the real model uses; for each kind of category one right answer must be
graded correct and one wrong answer incorrect.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from agentrl_jax.evaluation import bfcl, bfcl_data, bfcl_grade, bfcl_score  # noqa: E402


def hermes(*calls: tuple[str, dict[str, Any]], text: str = "") -> str:
    """A reply with `calls` written as Hermes <tool_call> blocks."""
    blocks = [f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>'
              for n, a in calls]
    return "\n".join(([text] if text else []) + blocks)


class ScriptedPolicy:
    """Answers each conversation (keyed by its first user message) from a list of replies."""

    tool_parser = "hermes"

    def __init__(self, replies: dict[str, list[str]]):
        self.replies = {k: list(v) for k, v in replies.items()}
        self.seen_tools: list[list[str]] = []

    async def respond(self, messages, tools, *, session_id):
        self.seen_tools.append([t["function"]["name"] for t in tools])
        question = next(m["content"] for m in messages if m["role"] == "user")
        queue = self.replies[question]
        return queue.pop(0) if queue else "Done."

    async def end_session(self, session_id):
        pass


def example(example_id: str) -> bfcl_data.BfclExample:
    category = example_id.rsplit("_", 1)[0]
    (found,) = [e for e in bfcl_data.load_category(category) if e.id == example_id]
    return found


def question(ex: bfcl_data.BfclExample) -> str:
    return next(m["content"] for m in ex.turns[0] if m["role"] == "user")


def run(ex: bfcl_data.BfclExample, replies: Sequence[str]) -> bfcl.ExampleResult:
    policy = ScriptedPolicy({question(ex): list(replies)})
    return asyncio.run(bfcl.run_example(policy, ex))


# (example, right reply, wrong reply) for each single-turn kind: AST simple / multiple /
# parallel / Java, irrelevance, live AST and live relevance.
SINGLE_TURN = [
    ("simple_0", hermes(("calculate_triangle_area", {"base": 10, "height": 5})),
     hermes(("calculate_triangle_area", {"base": 5, "height": 10}))),
    ("multiple_0", hermes(("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3})),
     hermes(("math.triangle_area_heron", {"side1": 5, "side2": 4, "side3": 3}))),
    ("parallel_0", hermes(("spotify.play", {"artist": "Taylor Swift", "duration": 20}),
                          ("spotify.play", {"artist": "Maroon 5", "duration": 15})),
     hermes(("spotify.play", {"artist": "Taylor Swift", "duration": 20}))),
    ("java_0", hermes(("GeometryPresentation.createPresentation",
                       {"controller": "mapController", "parent": "mapArea"})),
     hermes(("GeometryPresentation.createPresentation",
             {"controller": "mapArea", "parent": "mapController"}))),
    ("irrelevance_0", "None of the tools can compute a triangle's area.",
     hermes(("determine_body_mass_index", {"weight": 10, "height": 5}))),
    ("live_simple_0-0-0", hermes(("get_user_info", {"user_id": 7890, "special": "black"})),
     hermes(("get_user_info", {"user_id": 7891, "special": "black"}))),
    ("live_relevance_0-0-0", hermes(("search_engine.query", {"prompt": "masked woman portrait"})),
     "Here is a description of the painting instead."),
]


@pytest.mark.parametrize("example_id,right,wrong", SINGLE_TURN, ids=[c[0] for c in SINGLE_TURN])
def test_single_turn_right_answer_passes_and_wrong_answer_fails(example_id, right, wrong):
    ex = example(example_id)
    good = run(ex, [right])
    assert good.valid, (good.error_type, good.error)
    bad = run(ex, [wrong])
    assert not bad.valid and bad.error_type


def test_unparseable_reply_is_a_decode_failure():
    result = run(example("simple_0"), ['<tool_call>{"name": "calculate_triangle_area"'])
    assert not result.valid and result.error_type == "ast_decoder:decoder_failed"


# ---- multi-turn --------------------------------------------------------------------------------


def _ground_truth_calls(ex: bfcl_data.BfclExample, call: str) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string as (name, JSON arguments), positional arguments named."""
    node = ast.parse(call, mode="eval").body
    name = node.func.id
    for class_name in ex.entry["involved_classes"]:
        module = importlib.import_module(
            bfcl_grade.checkers().utils.CLASS_FILE_PATH_MAPPING[class_name])
        method = getattr(getattr(module, class_name), name, None)
        if method is not None:
            break
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return name, args


def replay(ex: bfcl_data.BfclExample) -> list[str]:
    """Each turn: one step with the ground truth's calls, then a reply without calls."""
    replies = []
    for turn in ex.ground_truth:
        if turn:
            replies.append(hermes(*(_ground_truth_calls(ex, c) for c in turn)))
        replies.append("Done." if turn else "I cannot do that with the available functions.")
    return replies


def test_multi_turn_ground_truth_replay_passes_and_wrong_calls_fail():
    ex = example("multi_turn_base_0")
    wrong = replay(ex)
    wrong[0] = wrong[0].replace('"temp"', '"tmp"')  # mkdir / mv into the wrong directory
    bad = run(ex, wrong)
    assert not bad.valid and bad.error_type.startswith("multi_turn:")
    good = run(ex, replay(ex))  # the same entry again: no state leaks from the first run
    assert good.valid, (good.error_type, good.error)
    assert len(good.graded) == len(ex.ground_truth)
    silent = run(ex, [])
    assert not silent.valid and silent.error_type == "multi_turn:empty_turn_model_response"


def test_miss_func_offers_held_out_functions_from_their_turn_on():
    ex = example("multi_turn_miss_func_0")
    ((turn, held),) = ex.held_out.items()
    names = [d["name"] for d in held]
    policy = ScriptedPolicy({question(ex): replay(ex)})
    result = asyncio.run(bfcl.run_example(policy, ex))
    assert result.valid, (result.error_type, result.error)
    # Two requests per turn (calls, then "Done."), one for the empty turn before.
    offered = [any(n in tools for n in names) for tools in policy.seen_tools]
    first = offered.index(True)
    assert not any(offered[:first]) and all(offered[first:])
    assert sum(len(r) for r in result.replies[:turn]) == first


def test_multi_turn_step_limit_forces_quit():
    ex = example("multi_turn_base_0")
    limit = bfcl_grade.step_limit()
    result = run(ex, [hermes(("pwd", {}))] * (limit + 5))
    assert not result.valid and result.error_type == "multi_turn:force_terminated"
    assert len(result.replies) == 1 and len(result.replies[0]) == limit + 1


def test_calls_outside_the_simulated_apis_are_never_evaluated(tmp_path):
    target = tmp_path / "created"
    with bfcl_grade.SimulatedApis(example("multi_turn_base_0")) as apis:
        strings = apis.call_strings([{"open": {"file": str(target), "mode": "w"}},
                                     {"ls": {}}])
        results = apis.execute(strings)
        namespace = apis.namespace
    assert results[0].startswith("Error during execution") and not target.exists()
    assert "document" in results[1]
    assert not [n for n in vars(bfcl_grade.checkers().utils) if n.startswith(namespace)]


# ---- data, tools and the report ----------------------------------------------------------------


def test_tools_use_json_schema_types():
    (tool,) = bfcl_data.openai_tools(example("simple_0").functions, "simple")
    params = tool["function"]["parameters"]
    assert params["type"] == "object" and params["properties"]["base"]["type"] == "integer"
    (java,) = bfcl_data.openai_tools(example("java_0").functions, "java")
    assert {p["type"] for p in java["function"]["parameters"]["properties"].values()} == {"string"}
    assert bfcl_data.resolve_categories(["live"])[0] == "live_simple"
    with pytest.raises(ValueError):
        bfcl_data.resolve_categories(["nope"])


def test_leaderboard_follows_bfcl_rules():
    sizes = {c: 10 for c in bfcl_data.all_categories()}
    board = bfcl_score.leaderboard({"simple": (1.0, 4), "live_simple": (0.5, 2),
                                    "live_multiple": (1.0, 6)}, sizes.__getitem__)
    assert board["non_live_simple"].accuracy == pytest.approx(1 / 3)
    assert board["non_live_simple"].display is None  # java and javascript missing: N/A
    assert board["non_live"].accuracy == pytest.approx(1 / 15)
    assert board["non_live"].display is not None  # BFCL always shows the overalls
    # Live is weighted by count; the four missing categories count 10 each at 0.
    assert board["live"].accuracy == pytest.approx((0.5 * 2 + 1.0 * 6) / (2 + 6 + 40))
    assert board["overall"].accuracy == pytest.approx((1 / 15 + 7 / 48 + 0) / 3)


def test_evaluate_writes_the_report(tmp_path):
    simple, irrelevant = example("simple_0"), example("irrelevance_0")
    policy = ScriptedPolicy({question(simple): [SINGLE_TURN[0][1]],
                             question(irrelevant): [SINGLE_TURN[4][2]]})
    report = asyncio.run(bfcl.evaluate(policy, ["simple", "irrelevance"], limit=1,
                                       model="scripted"))
    assert report.categories["simple"] == {"accuracy": 1.0, "correct": 1, "count": 1}
    assert report.categories["irrelevance"]["accuracy"] == 0.0
    out = bfcl.write_report(report, tmp_path)
    summary = json.loads((out / "bfcl_report.json").read_text())
    assert set(summary["leaderboard"]) >= {"overall", "non_live", "live", "multi_turn"}
    assert "| simple | 100.00% | 1 / 1 |" in (out / "bfcl_report.md").read_text()
    lines = (out / "bfcl_examples.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["simple_0", "irrelevance_0"]


# ---- the real model ----------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_on_a_sample(tmp_path):
    from launch import bfcl as launcher

    # One example of each kind; the multi-turn one has a ~7k-token prompt (minutes on a CPU).
    categories = ["simple", "parallel", "irrelevance", "live_simple", "live_irrelevance",
                  "multi_turn_base"]
    launcher.main(["--model", "smollm2-135m-instruct", "--categories", *categories,
                   "--limit", "1", "--out", str(tmp_path), "--max-new-tokens", "128"])
    summary = json.loads((tmp_path / "bfcl_report.json").read_text())
    assert summary["model"] == "smollm2-135m-instruct"
    assert sorted(summary["categories"]) == sorted(categories)
    for c in summary["categories"].values():
        assert c["count"] == 1 and 0.0 <= c["accuracy"] <= 1.0
    for score in summary["leaderboard"].values():
        assert 0.0 <= score["accuracy"] <= 1.0
    assert (tmp_path / "bfcl_report.md").exists()
