"""launch.process: what every absl launcher does first."""

from __future__ import annotations

import logging

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
