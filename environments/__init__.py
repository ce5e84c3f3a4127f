"""Task environments: one folder per task, found by `environments.registry`.

Any `environments/` directory on `sys.path` contributes its task folders
(`pkgutil.extend_path`), so a task kept outside this repository is added by putting its
parent directory on `PYTHONPATH`.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
