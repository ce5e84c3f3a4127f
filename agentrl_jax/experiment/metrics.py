"""A run's metrics: one JSON line per record (the source of truth) and TensorBoard scalars.

    {"stage": "rl", "step": 12, "time": 1733.2, "success": 0.31, "db/success": 0.5, ...}

On resume from a checkpoint at step c, records of the interrupted stage after c are dropped
(those steps' updates were lost with the process and are trained again), so the file always
describes the training that the surviving weights went through.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Iterator, Mapping
from typing import Any


class MetricsLog:
    def __init__(self, run_dir: str | pathlib.Path, tensorboard: bool = True):
        self.run_dir = pathlib.Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))

    def write(self, stage: str, step: int, values: Mapping[str, Any]) -> None:
        scalars = {k: float(v) for k, v in values.items()
                   if isinstance(v, (int, float)) and math.isfinite(float(v))}
        # Non-finite numbers are left out (JSON has no NaN); lists and strings are kept.
        extra = {k: v for k, v in values.items() if not isinstance(v, (int, float))}
        record = {"stage": stage, "step": int(step), "time": time.time(), **scalars, **extra}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(f"{stage}/{key}", value, int(step))
            self._tb.flush()

    def records(self, stage: str | None = None) -> Iterator[dict[str, Any]]:
        """Every record (of `stage`), in order; a torn last line (killed mid-write) is skipped."""
        if not self.path.exists():
            return
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if stage is None or record.get("stage") == stage:
                yield record

    def truncate(self, stage: str, after_step: int) -> int:
        """Drops `stage` records with step > `after_step`; returns how many were dropped."""
        kept, dropped = [], 0
        for record in self.records():
            if record.get("stage") == stage and record["step"] > after_step:
                dropped += 1
            else:
                kept.append(json.dumps(record))
        self.path.write_text("".join(line + "\n" for line in kept))
        return dropped

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
