"""A byte-level BPE tokenizer with a ChatML template, trained on a run's own text.

For models trained from scratch (the local default): a small vocabulary fitted to the tasks'
demonstrations compresses their boilerplate (tool schemas, system prompts) about 3.8 characters
per token at 4k entries, so episodes fit a small context. Byte-level, so any text encodes.

The chat template is plain ChatML without a `tools` variable: `chat.templates.render` then writes
the tool list and tool calls Hermes-style (`<tool_call>{...}</tool_call>`), which the `hermes`
parser reads back.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def train_chat_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """A byte-level BPE of `vocab_size` entries (specials included) trained on `texts`.

    `<|im_end|>` is the eos token (it ends assistant turns, so sampling stops there).
    """
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=None, eos_token=IM_END, pad_token=END_OF_TEXT,
        unk_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
