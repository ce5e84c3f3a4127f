"""launch.process: what every absl launcher does first."""

from __future__ import annotations

import logging
import os

import pytest
from absl import app

from launch import process


def test_a_positional_argument_is_refused_with_its_text():
    with pytest.raises(app.UsageError, match="config.steps=3"):
        process.begin(["launch.local", "config.steps=3"])   # the flag's `--` forgotten


def test_per_request_http_lines_are_kept_off_the_console():
    httpx = logging.getLogger("httpx")
    before = httpx.level
    try:
        httpx.setLevel(logging.INFO)
        process.begin(["launch.local"])
        assert not httpx.isEnabledFor(logging.INFO)
        assert httpx.isEnabledFor(logging.WARNING)
    finally:
        httpx.setLevel(before)


def test_without_an_accelerator_jax_is_pinned_to_the_cpu(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(process.importlib.util, "find_spec", lambda name: None)
    other = tmp_path / "vendor"
    other.write_text("0x8086\n")
    monkeypatch.setattr(process.glob, "glob", lambda pattern: [str(other)])
    process.pin_cpu_without_accelerator()
    assert os.environ["JAX_PLATFORMS"] == "cpu"


def test_a_tpu_chip_or_a_users_choice_is_left_alone(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(process.importlib.util, "find_spec", lambda name: None)
    tpu = tmp_path / "vendor"
    tpu.write_text(process.GOOGLE_PCI_VENDOR + "\n")
    monkeypatch.setattr(process.glob, "glob", lambda pattern: [str(tpu)])
    process.pin_cpu_without_accelerator()
    assert "JAX_PLATFORMS" not in os.environ
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    process.pin_cpu_without_accelerator()
    assert os.environ["JAX_PLATFORMS"] == "cuda"
