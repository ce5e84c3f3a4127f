"""Command line of the Apptainer backend (the `apptainer` CLI, for clusters and TPU VMs).

There is no Python binding worth depending on (`apptainer-python` does not exist; `spython` drives
`singularity` synchronously), so the sandbox runs this argv through an asyncio subprocess exactly
like the bwrap one. Flags, as in Apptainer >= 1.1 `exec`:
  --containall   own PID and IPC namespaces, clean environment, minimal /dev, no host $HOME/tmp;
  --no-mount bind-paths,cwd   not even the site-wide binds of apptainer.conf or the host cwd;
  --net --network none   own network namespace with loopback only (allowed unprivileged);
  --userns       run in a user namespace (no setuid starter: the same model as bwrap);
  --fakeroot     only when the sandbox's uid is 0: the caller's uid mapped to root, as bwrap does;
  --no-privs     drop all capabilities;
  --bind src:dst / --home src:dst   the private layer's directories, the only writable paths.
The image (a sandbox directory or a .sif) is read-only because --writable is never passed.
With a writable root (`SandboxConfig.writable_root`) the private layer's `overlay/` directory is
an `--overlay` over the image: the same copy-on-write `/` as bwrap's, kept across the session's
shell restarts and deleted with the layer. A pristine-system process mounts that overlay
read-only and binds the image's /usr (a directory image only) over it, as bwrap's does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from environments.sandbox.config import SandboxConfig
from environments.sandbox.layer import PrivateLayer


def apptainer_argv(config: SandboxConfig, layer: PrivateLayer, command: Sequence[str],
                   apptainer: str = "apptainer", pristine_system: bool = False,
                   env: Mapping[str, str] | None = None) -> list[str]:
    """The argv that runs `command` in a sandbox described by `config` over `layer`."""
    if config.image is None:
        raise ValueError("the apptainer backend needs an image (a .sif or a sandbox directory)")
    argv = [apptainer, "--silent", "exec", "--containall", "--no-mount", "bind-paths,cwd",
            "--userns", "--no-privs", "--hostname", config.hostname]
    if config.inside_uid == 0:
        argv.append("--fakeroot")  # otherwise the sandbox keeps its host uid: no remapping
    if not config.network:
        argv += ["--net", "--network", "none"]
    if config.writable_root:
        overlay = os.path.join(layer.path, "overlay")
        os.makedirs(overlay, mode=0o755, exist_ok=True)
        argv += ["--overlay", f"{overlay}:ro" if pristine_system else overlay]
    if pristine_system:
        if not os.path.isdir(config.image):
            raise ValueError("a pristine-system process needs a directory image (not a .sif)")
        argv += ["--bind", f"{os.path.join(config.image, 'usr')}:/usr:ro"]
    home = layer.writable.get(config.workdir)
    for dest, src in layer.writable.items():
        if dest == config.workdir:
            continue
        argv += ["--bind", f"{src}:{dest}:rw"]
    if home is not None:
        argv += ["--home", f"{home}:{config.workdir}"]
    for src, dest in config.ro_binds:
        argv += ["--bind", f"{src}:{dest}:ro"]
    argv += ["--pwd", config.workdir]
    for key, value in {"HOME": config.workdir, **(config.env if env is None else env)}.items():
        if "," in value:  # --env is a comma-separated map flag: a comma would split the value
            raise ValueError(f"apptainer --env cannot carry commas: {key}={value!r}")
        argv += ["--env", f"{key}={value}"]
    return [*argv, config.image, *command]
