"""Demonstrations become the token streams RL would have produced, assistant tokens masked in."""

import json

import numpy as np
import pytest

from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer
from agentrl_jax.chat.templates import hermes_tools_block
from agentrl_jax.sft.demos import assistant_text, demo_conversation, demo_texts, demo_trajectory
from tests.support.demos import DEMO


@pytest.fixture(scope="module")
def tokenizer():
    return train_chat_tokenizer(list(demo_texts([DEMO])) * 20, vocab_size=400)


def test_assistant_tokens_are_the_reply_text_and_end_of_turn(tokenizer):
    traj = demo_trajectory(tokenizer, DEMO)
    tokens, mask = np.asarray(traj.tokens), np.asarray(traj.loss_mask)
    # Two assistant turns: two runs of mask 1, each ending in <|im_end|>.
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    runs = list(zip(edges[::2], edges[1::2], strict=True))
    assert len(runs) == 2
    for (start, end), message in zip(runs, [DEMO["messages"][2], DEMO["messages"][4]],
                                     strict=True):
        assert tokens[end - 1] == tokenizer.eos_token_id
        assert tokenizer.decode(tokens[start:end - 1]) == assistant_text(message)
    assert traj.advantage == 1.0 and not np.asarray(traj.behaviour_logprobs).any()


def test_context_weight_puts_a_lighter_loss_on_every_other_token(tokenizer):
    plain = demo_trajectory(tokenizer, DEMO)
    weighted = demo_trajectory(tokenizer, DEMO, context_weight=0.25)
    assistant = np.asarray(plain.loss_mask) == 1
    np.testing.assert_array_equal(weighted.tokens, plain.tokens)
    assert set(np.asarray(weighted.loss_mask)[assistant]) == {1.0}
    assert set(np.asarray(weighted.loss_mask)[~assistant]) == {0.25}
    with pytest.raises(ValueError, match="context_weight"):
        demo_trajectory(tokenizer, DEMO, context_weight=1.5)


def test_replayed_conversation_parses_back_to_the_demo_calls(tokenizer):
    conv = demo_conversation(tokenizer, DEMO)
    replies = [m for m in conv.messages if m["role"] == "assistant"]
    assert replies[0]["tool_calls"][0]["function"]["name"] == "execute_sql"
    assert json.loads(replies[0]["tool_calls"][0]["function"]["arguments"]) == {
        "query": "SELECT 1"}
    assert replies[1]["content"] == "Done: 1."
    # The environment's reply sits between the turns, unmasked.
    text = tokenizer.decode(conv.tokens[conv.loss_mask == 0])
    assert "[(1,)]" in text and "How many rows?" in text


def test_malformed_demos_are_rejected(tokenizer):
    with pytest.raises(ValueError, match="at least one assistant"):
        demo_trajectory(tokenizer, {**DEMO, "messages": DEMO["messages"][:2]})
    doubled = DEMO["messages"][:3] + [DEMO["messages"][4], DEMO["messages"][3]]
    with pytest.raises(ValueError, match="two assistant messages in a row"):
        demo_trajectory(tokenizer, {**DEMO, "messages": doubled})


def test_the_tokenizer_learns_the_tool_prompt_the_policy_reads():
    """The Hermes preamble around the tool list opens every episode; a scratch tokenizer that
    never saw it spells it out a few letters at a time, hundreds of tokens per episode."""
    block = hermes_tools_block(DEMO["tools"])
    assert block in demo_texts([DEMO])
    tokenizer = train_chat_tokenizer(list(demo_texts([DEMO])) * 20, vocab_size=1024)
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(block)
    assert len(tokenizer.encode(block, add_special_tokens=False)) == len(pieces)   # each whole
