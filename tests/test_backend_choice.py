"""agentrl_jax.backend_choice: the CPU backend where no accelerator is."""

from __future__ import annotations

import os

from agentrl_jax import backend_choice


def test_without_an_accelerator_jax_is_pinned_to_the_cpu(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(backend_choice.importlib.util, "find_spec", lambda name: None)
    other = tmp_path / "vendor"
    other.write_text("0x8086\n")
    monkeypatch.setattr(backend_choice.glob, "glob", lambda pattern: [str(other)])
    backend_choice.pin_cpu_without_accelerator()
    assert os.environ["JAX_PLATFORMS"] == "cpu"


def test_a_tpu_chip_or_a_users_choice_is_left_alone(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(backend_choice.importlib.util, "find_spec", lambda name: None)
    tpu = tmp_path / "vendor"
    tpu.write_text(backend_choice.GOOGLE_PCI_VENDOR + "\n")
    monkeypatch.setattr(backend_choice.glob, "glob", lambda pattern: [str(tpu)])
    backend_choice.pin_cpu_without_accelerator()
    assert "JAX_PLATFORMS" not in os.environ
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    backend_choice.pin_cpu_without_accelerator()
    assert os.environ["JAX_PLATFORMS"] == "cuda"
