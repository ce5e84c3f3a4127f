"""Secret files planted on the host, for tests that a sandbox cannot read them."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator

SECRET = "TOP-SECRET"


@contextlib.contextmanager
def planted_secrets() -> Iterator[tuple[str, list[str]]]:
    """(the files' shared name, their paths): a fresh file holding `SECRET` in the host's home
    and in its temporary folder, removed on exit."""
    name = f"agentrl_secret_{secrets.token_hex(6)}"
    paths = [os.path.join(os.path.expanduser("~"), name), os.path.join(tempfile.gettempdir(), name)]
    for path in paths:
        with open(path, "w") as f:
            f.write(SECRET)
    try:
        yield name, paths
    finally:
        for path in paths:
            os.unlink(path)
