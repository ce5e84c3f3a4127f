"""The packages a machine installed from its image's offline repository, as its grader trusts them.

Each image carries a read-only apt repository of what its problems may `apt install`
(`images/build_rootfs.sh`, "Offline package sources"; its stamp says where, as `offline=`). A
grader runs on the image's pristine system code (`bwrap.py`, `pristine_system`), so a command the
agent installed, `sudo` say, would be missing from it, though AgentBench's checks (`sudo whoami`)
call it. The grader cannot take the agent's copy: the agent is root of its machine and may have
changed it. It can take the repository's: the image's own .deb of each package that the
machine's dpkg database says is installed at exactly a version the repository holds, and that
the image itself lacks. The database is the agent's and may lie; all it can do is choose
among the repository's packages, every one of which it could have installed for real.

`added_debs` picks them; `unpack` unpacks them (pure Python: ar, then tar) with the image's
ownership as the machine sees it; `layer.PrivateLayer.grading_system` lays the result over the
pristine image, read-only. The agent's files are read without following its links.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator, Sequence

STAMP = ".agentrl_rootfs"        # build_rootfs.sh's record of an image
_DPKG_STATUS = "var/lib/dpkg/status"
_STATUS_LIMIT = 64 * 1024**2     # of the agent's dpkg database (a full system's is ~1 MB)
_INSTALLED = "install ok installed"

Key = tuple[str, str, str]       # (package, architecture, version)


def offline_repo(image: str) -> str | None:
    """Host path of `image`'s offline apt repository, or None (an image without one)."""
    try:
        with open(os.path.join(image, STAMP)) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    offline = next((line[len("offline="):] for line in lines if line.startswith("offline=")),
                   None)
    if not offline or not offline.startswith("/"):
        return None
    repo = os.path.join(image, offline.lstrip("/"), "apt")
    return repo if os.path.isfile(os.path.join(repo, "Packages")) else None


def stanzas(text: str) -> Iterator[dict[str, str]]:
    """The paragraphs of a Debian control file (dpkg's status, apt's Packages): field -> value.

    Only single-line values are kept (continuation lines are skipped): the fields read here
    (Package, Architecture, Version, Status, Filename) have one line.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields = {}
        elif not line[0].isspace() and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    if fields:
        yield fields


def installed(status: str) -> set[Key]:
    """The packages a dpkg status file says are installed."""
    return {(s.get("Package", ""), s.get("Architecture", ""), s.get("Version", ""))
            for s in stanzas(status) if s.get("Status") == _INSTALLED}


def read_beneath(root: str, rel: str, limit: int) -> str | None:
    """The text of `root/rel`, opened without following any link on the way; None if it is not
    a regular file there (or is over `limit` bytes, or cannot be read)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(limit + 1)
    return None if len(data) > limit else data.decode("utf-8", errors="replace")


def added_debs(image: str, machine_root: str) -> list[str]:
    """Host paths of the .debs of `image`'s repository that the machine whose `/` is
    `machine_root` (host side) has installed and the image has not, in repository order."""
    repo = offline_repo(image)
    if repo is None:
        return []
    status = read_beneath(machine_root, _DPKG_STATUS, _STATUS_LIMIT)
    if status is None:
        return []
    with open(os.path.join(image, _DPKG_STATUS)) as f:
        theirs = installed(f.read())
    ours = installed(status) - theirs
    with open(os.path.join(repo, "Packages")) as f:
        index = f.read()
    debs = []
    for s in stanzas(index):
        key = (s.get("Package", ""), s.get("Architecture", ""), s.get("Version", ""))
        filename = os.path.normpath(s.get("Filename", ""))
        if key in ours and not filename.startswith(("/", "..")):
            debs.append(os.path.join(repo, filename))
    return debs


def unpack(debs: Sequence[str], target: str, host_id: Callable[[int], int], image: str) -> None:
    """Unpacks each .deb's files into `target`, on-disk owner k given host id `host_id(k)`.

    As dpkg would on `image`: its top-level links (merged /usr: /lib -> usr/lib, /bin...) are
    made first, so that a package's ./lib/... lands in usr/lib, as the overlay over the image
    must show it. Modes are kept (set-id bits included: they are set after the owner). Raises
    OSError (e.g. ENOSPC) or ValueError (not a .deb this can read).
    """
    for name in sorted(os.listdir(image)):
        link = os.path.join(image, name)
        if not os.path.islink(link):
            continue
        points_to = os.readlink(link)
        os.symlink(points_to, os.path.join(target, name))
        os.lchown(os.path.join(target, name), host_id(0), host_id(0))
        inside = os.path.normpath(os.path.join(target, points_to.lstrip("/")))
        if os.path.isdir(link) and inside.startswith(target + "/") and not os.path.isdir(inside):
            os.makedirs(inside, 0o755)   # (a dangling link would stop tar's directory entry)
    for deb in debs:
        with open(deb, "rb") as f, tarfile.open(fileobj=_data_member(f, deb)) as tar:
            members = []
            for member in tar.getmembers():
                member.uid, member.gid = host_id(member.uid), host_id(member.gid)
                member.uname = member.gname = ""
                members.append(member)
            tar.extractall(target, members=members, numeric_owner=True,
                           filter="fully_trusted")   # the image's own, trusted .debs


def _data_member(f: io.BufferedReader, name: str) -> io.BytesIO:
    """The data.tar.* of a .deb (an ar archive), read into memory."""
    if f.read(8) != b"!<arch>\n":
        raise ValueError(f"{name} is not a .deb (no ar header)")
    while header := f.read(60):
        if len(header) < 60:
            break
        member = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        if member.startswith("data.tar"):
            if member.endswith(".zst"):
                raise OSError(errno.ENOTSUP, f"{name}: zstd-compressed data is not readable here")
            return io.BytesIO(f.read(size))
        f.seek(size + (size & 1), os.SEEK_CUR)
    raise ValueError(f"{name} has no data.tar member")
