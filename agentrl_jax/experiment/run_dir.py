"""A run's directory and its record of finished stages (`stages.json`).

Each stage is marked done, with its seconds and what later stages need from it (the warm
start's policy directory, the demonstrations' files), only once its outputs are complete, and
the record is replaced atomically: rerunning the same command after a crash, even `kill -9`,
skips the finished stages. The run's resolved config is written beside it (`config.json`); a
directory made with another config is refused rather than resumed with mixed settings.

`run_dir` may be a bucket URL (`gs://bucket/run`, a pod's): the checkpoints go there, and
everything else is written to a local directory (`local_dir`), copied beneath it at the end.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import ml_collections

from agentrl_jax import stage_clock


def is_url(path: str) -> bool:
    """Whether `path` is a URL (a bucket) rather than a local path."""
    return "://" in path


def local_dir(config: ml_collections.ConfigDict) -> pathlib.Path:
    """Where the run writes its markers, config, metrics and results: `log_dir` where the
    config sets one, else `run_dir`, or runs/NAME when `run_dir` is a bucket URL."""
    if config.get("log_dir"):
        return pathlib.Path(config.log_dir)
    if is_url(config.run_dir):
        return pathlib.Path("runs") / config.run_dir.rstrip("/").rsplit("/", 1)[-1]
    return pathlib.Path(config.run_dir)


class RunDir:
    """The run's directory and its record of finished stages."""

    def __init__(self, path: str | pathlib.Path, *, create: bool = True):
        """`create`: make the directory (a run's own); False opens another run's to read."""
        self.path = pathlib.Path(path).resolve()
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "logs").mkdir(exist_ok=True)
        self._stages_file = self.path / "stages.json"
        self._last_mark = time.monotonic()

    def is_run(self) -> bool:
        """Whether the directory holds a run: a record of stages or RL checkpoints."""
        return self._stages_file.is_file() or (self.path / "checkpoints").is_dir()

    def config(self) -> ml_collections.ConfigDict | None:
        """The config the run was started with (`config.json`), if it wrote one."""
        path = self.path / "config.json"
        return ml_collections.ConfigDict(json.loads(path.read_text())) if path.is_file() else None

    def stages(self) -> dict[str, Any]:
        """{stage: {"finished", "seconds", ...what it recorded}} of the finished stages."""
        if not self._stages_file.exists():
            return {}
        return json.loads(self._stages_file.read_text())

    def done(self, stage: str) -> bool:
        return stage in self.stages()

    def record(self, stage: str) -> dict[str, Any]:
        """What finished `stage` recorded (KeyError if it has not finished)."""
        return self.stages()[stage]

    def mark(self, stage: str, **info: Any) -> None:
        """Records `stage` as done, with its seconds: the time since the previous stage (or
        this process) started."""
        now = time.monotonic()
        stages = self.stages()
        stages[stage] = {"finished": time.time(), "seconds": round(now - self._last_mark, 1),
                         **info}
        self._last_mark = now
        stage_clock.mark(stage)
        tmp = self._stages_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(stages, indent=1) + "\n")
        tmp.replace(self._stages_file)   # atomic: a kill never leaves a torn file

    def check_config(self, config: ml_collections.ConfigDict, *, restart: bool = False) -> None:
        """Writes config.json. A run directory made with another config is refused, or with
        `restart` (a run whose state is its checkpoints) has its stage markers dropped, so
        that every stage runs again with the new config."""
        path = self.path / "config.json"
        text = config.to_json(indent=1, sort_keys=True)
        if path.exists() and self.stages() and path.read_text() != text:
            if not restart:
                raise SystemExit(f"{self.path} holds a run with a different config; pass "
                                 "another --config.run_dir or delete it")
            print(f"{self.path}: the config changed; every stage runs again (RL resumes from "
                  "its checkpoints)", flush=True)
            self._stages_file.unlink()
        path.write_text(text)
