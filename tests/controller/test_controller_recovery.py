"""The verdict on a lost interact, from the sample_status answers of AgentRL's worker and ours."""

from __future__ import annotations

from agentrl_jax.controller.recovery import Outcome, judge_lost_interact

CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "c0", "type": "function",
                        "function": {"name": "multiply", "arguments": '{"a": 3, "b": 7}'}}]}
ANSWER = {"role": "assistant", "content": "21"}
USER = {"role": "user", "content": "What is 3 times 7?"}
TOOL = {"role": "tool", "tool_call_id": "c0", "content": "21"}


def agentrl(history, pointer, waiting_for_env=False, status="running"):
    """AgentRL 0.4.0's sample_status answer."""
    return {"session_id": 1, "index": 0, "status": {
        "waiting_for_env": waiting_for_env, "waiting_for_agent": not waiting_for_env,
        "env_input": None,
        "env_output": {"index": 0, "status": status, "result": None, "history": history,
                       "history_ptr": pointer}}}


def ours(turns, waiting_for_env=False):
    return {"session_id": 1, "index": 0,
            "status": {"waiting_for_env": waiting_for_env, "waiting_for_agent": True,
                       "turns": turns}}


def test_no_such_session_is_gone():
    assert judge_lost_interact(None, [CALL], None, 0).outcome is Outcome.GONE


def test_worker_still_acting_is_in_progress():
    assert judge_lost_interact(ours(1, waiting_for_env=True), [CALL], None, 0).outcome \
        is Outcome.IN_PROGRESS
    assert judge_lost_interact(agentrl([USER], 0, waiting_for_env=True), [CALL], None,
                               0).outcome is Outcome.IN_PROGRESS


def test_our_worker_counts_turns():
    assert judge_lost_interact(ours(2), [ANSWER], [CALL], 2).outcome is Outcome.NOT_APPLIED
    applied = judge_lost_interact(ours(3), [ANSWER], [CALL], 2)
    assert applied.outcome is Outcome.APPLIED and applied.output is None   # reply not kept
    assert judge_lost_interact(ours(5), [ANSWER], [CALL], 2).outcome is Outcome.UNKNOWN


def test_agentrl_first_turn_not_taken():
    verdict = judge_lost_interact(agentrl([USER], 0), [CALL], None, 0)
    assert verdict.outcome is Outcome.NOT_APPLIED


def test_agentrl_turn_taken_and_reply_rebuilt():
    reward = {"reward": 0.5, "score": None, "metrics": {"partial": True}}
    verdict = judge_lost_interact(agentrl([USER, CALL, TOOL, reward], 2), [CALL], None, 0)
    assert verdict.outcome is Outcome.APPLIED
    assert verdict.output.messages == [TOOL]
    assert verdict.output.reward == 0.5 and verdict.output.metric == {"partial": True}
    assert not verdict.output.finish


def test_agentrl_later_turn_not_taken():
    # The worker stands after the CALL turn; ANSWER did not arrive.
    verdict = judge_lost_interact(agentrl([USER, CALL, TOOL], 2), [ANSWER], [CALL], 1)
    assert verdict.outcome is Outcome.NOT_APPLIED


def test_agentrl_matches_a_reserialised_message():
    stored = {**CALL, "content": "", "tool_calls": [{**CALL["tool_calls"][0], "extra": 1}]}
    verdict = judge_lost_interact(agentrl([USER, stored, TOOL], 2), [CALL], None, 0)
    assert verdict.outcome is Outcome.APPLIED


def test_the_same_turn_twice_cannot_be_told_apart():
    history = [USER, CALL, TOOL, CALL, TOOL]
    assert judge_lost_interact(agentrl(history, 4), [CALL], [CALL], 2).outcome \
        is Outcome.UNKNOWN


def test_no_positive_evidence_is_unknown():
    # Full-history tasks report history_ptr 0 after every turn.
    assert judge_lost_interact(agentrl([USER, CALL, TOOL], 0), [ANSWER], [CALL], 1).outcome \
        is Outcome.UNKNOWN
    assert judge_lost_interact(agentrl([USER, CALL, TOOL], 0), [CALL], None, 0).outcome \
        is Outcome.UNKNOWN
    assert judge_lost_interact({"status": "weird"}, [CALL], None, 0).outcome is Outcome.UNKNOWN
    assert judge_lost_interact({}, [CALL], None, 0).outcome is Outcome.UNKNOWN
