"""A pretrained model made small: its first layers, over the vocabulary a corpus uses.

    shrink_pretrained(src_dir, dst_dir, num_layers=4, texts=corpus)

writes an HF directory (weights, config, tokenizer) that `load_hf` and transformers load like
any other. The reason (issue #17): on a small CPU, a full pretrained model is too slow to train
and to sample, and a model trained from scratch on a few hundred demonstrations cannot copy from
its context. A pretrained model's early layers hold the token embeddings and the copying
circuits, and for a narrow set of tasks most of the vocabulary is dead weight: SmolLM2-135M's
49k-entry tied LM head costs more per token than four of its layers.

- **Layers**: decoder layers [0, num_layers) and the final norm are kept; the final norm and the
  tied head then read an early layer's residual stream, which fine-tuning adapts to.
- **Vocabulary**: every token the tokenizer produces on `texts`, its first `common_tokens`
  ids, its special tokens and the byte alphabet, closed under the BPE merges that build them.
  Kept tokens are renumbered in their original order. The pruned tokenizer encodes every text
  of the corpus exactly as the original does (mapped to the new ids): a merge the original
  applies to a corpus word builds part of a kept token, so it is kept, and a dropped merge was
  never the one chosen. Other text still encodes, in smaller pieces (at worst bytes), and
  pieces the model never saw in pretraining are what it must then copy: on the validation
  episodes of a policy pruned to its demonstrations' vocabulary, a third of DB's and KG's
  words were split differently from the original. `common_tokens` keeps the tokenizer's most
  frequent tokens for such text.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _merge_pair(merge: str | Sequence[str]) -> tuple[str, str]:
    if isinstance(merge, str):   # older tokenizer.json files write "a b"
        left, right = merge.split(" ")
        return left, right
    return merge[0], merge[1]


def used_token_ids(tokenizer_json: dict[str, Any], texts: Iterable[str]) -> set[int]:
    """The ids the tokenizer produces on `texts`."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json))
    used: set[int] = set()
    for encoding in tokenizer.encode_batch(list(texts), add_special_tokens=False):
        used.update(encoding.ids)
    return used


def prune_bpe(tokenizer_json: dict[str, Any], keep: set[int]
              ) -> tuple[dict[str, Any], np.ndarray]:
    """(tokenizer.json over `keep` ∪ specials ∪ bytes closed under merges, the kept old ids
    in new-id order). Only byte-level BPE without a fallback token is handled."""
    model = tokenizer_json["model"]
    if model["type"] != "BPE" or model.get("byte_fallback"):
        raise ValueError("only byte-level BPE tokenizers can be pruned")
    vocab: dict[str, int] = model["vocab"]
    by_id = {i: token for token, i in vocab.items()}
    merges = [_merge_pair(m) for m in model["merges"]]
    merged = {left + right for left, right in merges}
    kept = {by_id[i] for i in keep if i in by_id}
    kept |= {token for token in vocab if token not in merged}   # the alphabet: never built
    producers: dict[str, list[tuple[str, str]]] = {}
    for left, right in merges:
        producers.setdefault(left + right, []).append((left, right))
    stack = list(kept)
    while stack:   # every merge that builds a kept token needs its two parts
        for left, right in producers.get(stack.pop(), ()):
            for part in (left, right):
                if part not in kept:
                    kept.add(part)
                    stack.append(part)
    specials = {t["id"] for t in tokenizer_json.get("added_tokens", [])}
    old_ids = np.array(sorted({vocab[t] for t in kept} | specials), np.int64)
    new_id = renumbering(old_ids)

    pruned = json.loads(json.dumps(tokenizer_json))
    pruned["model"]["vocab"] = {t: new_id[i] for t, i in vocab.items() if i in new_id}
    pruned["model"]["merges"] = [[left, right] for left, right in merges
                                 if left in kept and right in kept and left + right in kept]
    for token in pruned.get("added_tokens", []):
        token["id"] = new_id[token["id"]]
    _remap_post_processor(pruned.get("post_processor"), new_id)
    return pruned, old_ids


def renumbering(old_ids: np.ndarray) -> dict[int, int]:
    """Old id -> new id of every kept token: its position in `old_ids` (`prune_bpe`'s order)."""
    return {int(old): new for new, old in enumerate(old_ids)}


def _remap_post_processor(processor: dict[str, Any] | None, new_id: dict[int, int]) -> None:
    if not processor:
        return
    for special in (processor.get("special_tokens") or {}).values():
        special["ids"] = [new_id[i] for i in special.get("ids", [])]
    for inner in processor.get("processors") or []:
        _remap_post_processor(inner, new_id)


def _shrunk_weights(weights: dict[str, np.ndarray], num_layers: int, old_ids: np.ndarray
                    ) -> dict[str, np.ndarray]:
    out = {}
    for name, array in weights.items():
        if name.startswith("model.layers."):
            if int(name.split(".")[2]) >= num_layers:
                continue
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            array = array[old_ids]
        out[name] = np.ascontiguousarray(array)
    return out


def shrink_pretrained(src: str | pathlib.Path, dst: str | pathlib.Path, *, num_layers: int,
                      texts: Iterable[str], common_tokens: int = 0) -> dict[str, int]:
    """Writes the shrunk model of HF directory `src` into `dst`; returns its sizes.

    `src` must hold one `model.safetensors` of a Llama-style decoder and a `tokenizer.json`.
    `common_tokens`: the tokenizer's first N ids are kept too, whatever `texts` use (a
    byte-level BPE numbers its tokens in merge order, the most frequent first); at the
    vocabulary's size nothing is pruned.
    """
    from safetensors.numpy import load_file, save_file

    src, dst = pathlib.Path(src), pathlib.Path(dst)
    config = json.loads((src / "config.json").read_text())
    if not 0 < num_layers <= config["num_hidden_layers"]:
        raise ValueError(f"num_layers must be in [1, {config['num_hidden_layers']}], "
                         f"got {num_layers}")
    tokenizer_json = json.loads((src / "tokenizer.json").read_text())
    keep = used_token_ids(tokenizer_json, texts) | set(range(common_tokens))
    pruned, old_ids = prune_bpe(tokenizer_json, keep)
    new_id = renumbering(old_ids)

    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():   # chat template, generation config, ...: copied, then edited
        if path.is_file() and path.suffix in (".json", ".jinja", ".txt") and not (
                path.name.startswith("agentrl_jax_")):
            shutil.copy(path, dst / path.name)
    weights = _shrunk_weights(load_file(src / "model.safetensors"), num_layers, old_ids)
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    (dst / "tokenizer.json").write_text(json.dumps(pruned, ensure_ascii=False))

    config.update(num_hidden_layers=num_layers, vocab_size=len(old_ids))
    for name in ("config.json", "generation_config.json"):
        if (dst / name).exists():
            data = config if name == "config.json" else json.loads((dst / name).read_text())
            for field in _TOKEN_ID_FIELDS:
                if isinstance(data.get(field), int):
                    data[field] = new_id[data[field]]
                elif isinstance(data.get(field), list):
                    data[field] = [new_id[i] for i in data[field]]
            (dst / name).write_text(json.dumps(data, indent=2) + "\n")
    if (dst / "tokenizer_config.json").exists():
        tcfg = json.loads((dst / "tokenizer_config.json").read_text())
        if "added_tokens_decoder" in tcfg:
            tcfg["added_tokens_decoder"] = {str(new_id[int(k)]): v for k, v in
                                            tcfg["added_tokens_decoder"].items()}
        (dst / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    return {"vocab_size": len(old_ids), "num_layers": num_layers,
            "original_vocab_size": len(tokenizer_json["model"]["vocab"])}
