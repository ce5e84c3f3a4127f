"""The from-scratch BPE: ChatML specials, byte-level coverage, save/load round trip."""

from transformers import AutoTokenizer

from agentrl_jax.chat.conversation import Conversation
from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer

TEXTS = ["select count(*) from table where id = 3", "go to the desk lamp and use it"] * 30


def test_specials_eos_and_unseen_text_round_trip(tmp_path):
    tok = train_chat_tokenizer(TEXTS, vocab_size=300)
    assert len(tok) <= 300 and tok.eos_token == "<|im_end|>"
    assert tok.encode("<|im_start|>", add_special_tokens=False) == [tok.convert_tokens_to_ids(
        "<|im_start|>")]
    unseen = "Ünïcödé ☃ 12345 \t\n"   # never in the training text: bytes cover it
    assert tok.decode(tok.encode(unseen, add_special_tokens=False)) == unseen
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.encode(TEXTS[0]) == tok.encode(TEXTS[0])
    assert again.chat_template == tok.chat_template


def test_chat_template_renders_tools_hermes_style_and_ends_in_generation_prompt():
    tok = train_chat_tokenizer(TEXTS, vocab_size=300)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    conv = Conversation(tok, [{"role": "user", "content": "hi"}], [tool])
    text = tok.decode(conv.tokens)
    assert "<tools>" in text and '"name": "f"' in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
