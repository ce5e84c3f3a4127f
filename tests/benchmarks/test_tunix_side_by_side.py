"""The Tunix side of benchmarks/sampler.py: token ids pass through Tunix's tokenizer slot intact,
and a missing Tunix environment is reported as absent, not as a failure."""

import sys

from benchmarks import sampler
from benchmarks.tunix_generate import IdTokenizer


def test_id_tokenizer_round_trips_ids_and_adds_nothing():
    tok = IdTokenizer(pad=7)
    ids = [5, 17, 3, 49151]
    assert tok.encode(tok.decode(ids)) == ids
    assert not tok.bos_id() and tok.eos_id() == -1 and tok.pad_id() == 7


def test_tunix_python_is_none_without_tunix(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTRL_JAX_TUNIX_PYTHON", str(tmp_path / "missing" / "python"))
    assert sampler.tunix_python() is None
    monkeypatch.setenv("AGENTRL_JAX_TUNIX_PYTHON", sys.executable)  # the project's: no Tunix
    assert sampler.tunix_python() is None
