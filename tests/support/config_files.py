"""A config file read as a launcher's `--config=FILE OVERRIDES...` flags read it."""

from __future__ import annotations

import pathlib

import ml_collections
from absl import flags
from ml_collections import config_flags


def load_config(path: str | pathlib.Path, *overrides: str) -> ml_collections.ConfigDict:
    """The config of `--config=PATH` (with `:mode` if given) and `--config.KEY=VALUE` flags."""
    argv = ["prog", f"--config={path}", *overrides]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True,
                                    sys_argv=argv)
    values(argv)
    return values.config
