"""What every absl launcher does first (`launch.local`, `launch.eval`, `launch.tpu_pod`)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from absl import app
from absl import logging as absl_logging

from agentrl_jax.backend_choice import pin_cpu_without_accelerator


def begin(argv: Sequence[str]) -> None:
    """Refuse positional arguments (a flag typed without its `--` lands there) and keep the
    console to warnings: absl's INFO lines and httpx's line per request would bury the
    progress bars and the results."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    pin_cpu_without_accelerator()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
