"""A pretrained model made small: the pruned tokenizer encodes its corpus exactly as the
original, and the shrunk model's logits are the truncated original's over the kept tokens."""

import json
import shutil

import numpy as np
import pytest

from agentrl_jax.models.shrink import shrink_pretrained
from agentrl_jax.models.zoo import resolve_model_dir

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CORPUS = [
    'You are an agent. <tool_call>\n{"name": "execute_sql", "arguments": {"query": '
    '"SELECT COUNT(*) FROM `Employees` WHERE age > 30"}}\n</tool_call>',
    "Here is your task. You see a cabinet 3, a countertop 1 and a fridge 1. AVAILABLE "
    "ACTIONS: go to cabinet 3 | go to countertop 1 | open fridge 1",
    "How many countries use the Libyan Dinar? Entities: [Libyan Dinar]",
]


@pytest.fixture(params=[True, False], ids=["tied", "untied"])
def source(request, tmp_path_factory):
    """A random 3-layer Llama over SmolLM2-135M-Instruct's real tokenizer and vocabulary."""
    directory = tmp_path_factory.mktemp("source")
    zoo = resolve_model_dir("smollm2-135m-instruct")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(zoo / name, directory / name)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=request.param)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(directory)
    return directory, model


def _tokens(tokenizer, text):
    return tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))


def test_the_pruned_tokenizer_encodes_the_corpus_as_the_original(source, tmp_path):
    src, _ = source
    sizes = shrink_pretrained(src, tmp_path, num_layers=2, texts=CORPUS)
    assert sizes["original_vocab_size"] == 49152 and 256 < sizes["vocab_size"] < 2000
    original = transformers.AutoTokenizer.from_pretrained(src)
    pruned = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert len(pruned) == sizes["vocab_size"]
    for text in CORPUS:   # the same tokens, under new ids
        assert _tokens(pruned, text) == _tokens(original, text)
        assert pruned.decode(pruned.encode(text, add_special_tokens=False)) == text
    # Text the corpus never had still encodes, in smaller pieces, and decodes back.
    other = "Zebras née Ωmega 🦓 quantum"
    assert len(_tokens(pruned, other)) > len(_tokens(original, other))
    assert pruned.decode(pruned.encode(other, add_special_tokens=False)) == other
    # Special tokens and the ids the config names follow the renumbering.
    config = json.loads((tmp_path / "config.json").read_text())
    assert pruned.convert_ids_to_tokens(config["eos_token_id"]) == "<|im_end|>"
    assert pruned.eos_token == "<|im_end|>" and pruned.eos_token_id == config["eos_token_id"]
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == len(pruned)


def test_common_tokens_keep_unseen_words_encoded_as_in_pretraining(source, tmp_path):
    src, _ = source
    original = transformers.AutoTokenizer.from_pretrained(src)
    unseen = " Scholastic published Berazategui jeans"   # in no text of the corpus
    narrow = shrink_pretrained(src, tmp_path / "narrow", num_layers=2, texts=CORPUS)
    pruned = transformers.AutoTokenizer.from_pretrained(tmp_path / "narrow")
    assert _tokens(pruned, unseen) != _tokens(original, unseen)
    common = max(original.encode(unseen, add_special_tokens=False)) + 1
    wide = shrink_pretrained(src, tmp_path / "wide", num_layers=2, texts=CORPUS,
                             common_tokens=common)
    widened = transformers.AutoTokenizer.from_pretrained(tmp_path / "wide")
    assert narrow["vocab_size"] < wide["vocab_size"] < narrow["vocab_size"] + common
    assert _tokens(widened, unseen) == _tokens(original, unseen)
    for text in CORPUS:
        assert _tokens(widened, text) == _tokens(original, text)
    # At the vocabulary's size nothing is pruned.
    whole = shrink_pretrained(src, tmp_path / "whole", num_layers=2, texts=CORPUS,
                              common_tokens=49152)
    assert whole["vocab_size"] == 49152


def test_the_shrunk_model_is_the_truncated_original_over_the_kept_tokens(source, tmp_path):
    src, model = source
    shrink_pretrained(src, tmp_path, num_layers=2, texts=CORPUS)
    original = transformers.AutoTokenizer.from_pretrained(src)
    pruned = transformers.AutoTokenizer.from_pretrained(tmp_path)
    kept = original.convert_tokens_to_ids(pruned.convert_ids_to_tokens(range(len(pruned))))
    text = CORPUS[0] + CORPUS[1]
    model.model.layers = model.model.layers[:2]   # the original, truncated by hand
    model.config.num_hidden_layers = 2
    with torch.no_grad():
        expected = model(torch.tensor([original.encode(text)])).logits[0].numpy()[:, kept]
        shrunk = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
        got = shrunk(torch.tensor([pruned.encode(text)])).logits[0].numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)

    from agentrl_jax.models.hf_io import load_hf

    ours = load_hf(tmp_path)
    ids = np.asarray([pruned.encode(text)], np.int32)
    logits = np.asarray(ours(ids, np.arange(ids.shape[1])[None], np.ones_like(ids)))[0]
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-4)


def test_a_layer_count_outside_the_model_is_refused(source, tmp_path):
    src, _ = source
    for layers in (0, 4):
        with pytest.raises(ValueError, match="num_layers"):
            shrink_pretrained(src, tmp_path, num_layers=layers, texts=CORPUS)
