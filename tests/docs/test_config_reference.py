"""docs/configuration.md is generated from the live configs; it must not drift from them."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_up_to_date_and_every_key_is_described():
    done = subprocess.run([sys.executable, "docs/make_config_reference.py", "--check"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
