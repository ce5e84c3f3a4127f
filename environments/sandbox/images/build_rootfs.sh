#!/usr/bin/env bash
# Builds a Debian bookworm root filesystem for the bwrap sandbox backend.
#
# The images mirror AgentBench's OS-interaction Dockerfiles
# (../shared/data/agentbench/os_interaction/dockerfiles), which are Ubuntu-based; the packages
# below are their Debian bookworm equivalents:
#   default   python3 python3-pip git vim curl wget unzip zip tree
#   packages  default + npm
#   ubuntu    the bare base image plus /file.txt containing "tmp"
# AgentBench builds all three FROM ubuntu; only Debian's archive is reachable from the machines
# this project runs on, so all three are Debian bookworm (docs/security.md, "OS task", lists the
# differences an agent can notice: /etc/os-release, apt sources, package versions).
#
# Offline package sources. AgentBench's containers have a network, and its init and reference
# scripts run `apt update && apt install -y X`, `apt remove X`, `pip install X`; the machines
# have none. So each image carries, read-only under OFFLINE (below), what those may install:
#   apt  a flat apt repository (indexed with apt-ftparchive) of the .debs `apt install` of
#        OFFLINE_APT needs in *this* image: downloaded, dependencies included, by the image's own
#        apt against its own dpkg state, so each package installs there whatever the archive
#        has moved to since; /etc/apt/sources.list names only it ([trusted=yes]: it is part of
#        the image, which nobody but this script writes);
#   pip  a wheelhouse of OFFLINE_PIP (exact versions, dependencies included, wheels for the
#        image's Python), which /etc/pip.conf makes pip's only index. It also lets `pip install`
#        write to the system's Python as Ubuntu 22.04 (AgentBench's base when it was made) does:
#        Debian 12 marks it externally managed (PEP 668) and would refuse.
# `apt update` then reads the local index, `apt install` and `pip install` of a listed package
# succeed, and anything else fails the same way every time; nothing is fetched at run time.
# Identical .debs and wheels of the images are hard-linked to one copy.
#
# Usage: build_rootfs.sh [--if-stale] [IMAGE] [OUT_DIR]
#   --if-stale  do nothing when OUT_DIR already holds this recipe (suite and packages); the way
#               scripts/setup.sh calls it, so that set-up is idempotent and cheap once built
#   IMAGE    default | packages | ubuntu                  (default: default)
#   OUT_DIR  where the rootfs directory goes              (default: $AGENTRL_ROOTFS_CACHE/IMAGE,
#            AGENTRL_ROOTFS_CACHE defaults to /var/cache/agentrl_jax/rootfs)
#            Every parent of OUT_DIR must be world-traversable (not under /root): sandboxes run
#            as unprivileged uids, and bwrap opens the image as that uid.
# Env:
#   DEBIAN_MIRROR  (default: the first deb.debian.org-style URI in apt's sources, else
#                  http://deb.debian.org/debian)
#
# Needs root, network access to the Debian archive and PyPI (or the host's pip index), and the
# Debian packages `debootstrap`, `apt-utils` (apt-ftparchive) and `python3-venv` (pip, to
# download the wheels). The build goes to a temporary directory next to
# OUT_DIR and is renamed into place only when complete, so a half-built image is never used. A
# stamp file, OUT_DIR/.agentrl_rootfs, records what was built (and, as `offline=`, where the
# offline sources are: the OS task's grader reads it).
set -euo pipefail

if_stale=0
if [[ "${1:-}" == --if-stale ]]; then if_stale=1; shift; fi
image="${1:-default}"
cache="${AGENTRL_ROOTFS_CACHE:-/var/cache/agentrl_jax/rootfs}"
out="${2:-${cache}/${image}}"
suite=bookworm

base_pkgs="ca-certificates procps less file bc gawk"
# npm has too deep a dependency tree for debootstrap's --include (it leaves node-* packages
# unconfigured): it is installed with apt inside the finished base system instead.
extra_pkgs=""
apt_lists=1   # whether AgentBench's Dockerfile ran `apt update` (its lists stay in the image)
case "${image}" in
  default)  pkgs="${base_pkgs} python3 python3-pip git vim curl wget unzip zip tree" ;;
  packages) pkgs="${base_pkgs} python3 python3-pip git vim curl wget unzip zip tree"
            extra_pkgs="npm" ;;
  ubuntu)   pkgs=""; apt_lists=0 ;;
  *) echo "unknown image '${image}' (default | packages | ubuntu)" >&2; exit 2 ;;
esac

# What the offline sources hold (see the top). AgentBench's tasks install sudo, and net-tools
# iproute2 lsof (its install_nettools.sh); its Dockerfiles' packages (what `ubuntu` lacks, and
# npm for the others); then tools an agent commonly reaches for.
offline="/usr/share/offline-packages"
offline_apt="sudo net-tools iproute2 lsof python3 python3-pip git vim curl wget unzip zip tree npm"
offline_apt+=" ca-certificates procps less file bc gawk jq nano psmisc htop rsync sqlite3 time"
offline_pip="requests==2.34.2 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20"
offline_pip+=" urllib3==2.8.0 numpy==2.4.6 psutil==7.2.2 pyyaml==6.0.4 python-dateutil==4.0.0"
offline_pip+=" tzdata==2026.6 tabulate==0.10.0 tqdm==4.70.1"
python_version=3.11   # bookworm's python3: the wheels are for it

recipe="${suite}: ${pkgs} + ${extra_pkgs}; owners=root; hosts; lists=${apt_lists};"
recipe+=" offline apt: ${offline_apt};"
recipe+=" offline pip ${python_version}: ${offline_pip}"
if ((if_stale)) && grep -qxF "recipe=${recipe}" "${out}/.agentrl_rootfs" 2>/dev/null; then
  echo "${out} (up to date)"
  exit 0
fi

if [[ -z "${DEBIAN_MIRROR:-}" ]]; then
  # Reuse the host's configured mirror: it is the one known to be reachable from this machine.
  DEBIAN_MIRROR="$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' \
      /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
    | grep -oE 'https?://[^ ]+' | head -n1 || true)"
  DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
fi

if [[ "$(id -u)" != 0 ]]; then echo "build_rootfs.sh must run as root (debootstrap)" >&2; exit 1; fi
command -v debootstrap >/dev/null || { echo "install the debootstrap package" >&2; exit 1; }
command -v apt-ftparchive >/dev/null || { echo "install the apt-utils package" >&2; exit 1; }
python3 -c 'import ensurepip, venv' 2>/dev/null || { echo "install python3-venv" >&2; exit 1; }

mkdir -p "$(dirname "${out}")"
tmp="$(mktemp -d "${out}.building.XXXXXX")"
trap 'rm -rf --one-file-system "${tmp}"' EXIT

include=()
[[ -n "${pkgs}" ]] && include=(--include="${pkgs// /,}")
debootstrap --variant=minbase "${include[@]}" "${suite}" "${tmp}" "${DEBIAN_MIRROR}"
if [[ -n "${extra_pkgs}" ]]; then
  chroot "${tmp}" apt-get update -qq
  # shellcheck disable=SC2086  # a word list
  chroot "${tmp}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends ${extra_pkgs}
fi

# The offline apt repository: what installing OFFLINE_APT here would download (nothing for a
# package already installed), fetched by the image's apt, then indexed.
chroot "${tmp}" apt-get update -qq
mkdir -p "${tmp}${offline}/apt/partial"
# shellcheck disable=SC2086  # a word list
chroot "${tmp}" env DEBIAN_FRONTEND=noninteractive apt-get install --download-only -y -qq \
  --no-install-recommends -o Dir::Cache::archives="${offline}/apt" ${offline_apt}
rm -rf "${tmp}${offline}/apt/partial" "${tmp}${offline}/apt/lock"
(
  cd "${tmp}${offline}/apt"
  apt-ftparchive packages . > Packages
  gzip -9nk Packages
  # (written next door first: a Release already in place would list itself)
  apt-ftparchive -o APT::FTPArchive::Release::Origin=offline \
    -o APT::FTPArchive::Release::Label=offline release . > ../Release.apt
  mv ../Release.apt Release
)
printf '%s\n' "# No network here: packages come from this image's own repository (${offline}/apt)." \
  "deb [trusted=yes] file:${offline}/apt ./" > "${tmp}/etc/apt/sources.list"
rm -f "${tmp}"/etc/apt/sources.list.d/*

# The wheelhouse, downloaded by a throwaway pip for the image's Python and architecture (every
# manylinux tag its glibc accepts), so that the image needs no pip of its own (`ubuntu` has
# none until the agent installs one).
arch="$(uname -m)"
glibc_minor="$(chroot "${tmp}" getconf GNU_LIBC_VERSION | sed -E 's/.*2\.([0-9]+).*/\1/')"
platforms=(--platform "linux_${arch}")
for ((minor = 5; minor <= glibc_minor; minor++)); do
  platforms+=(--platform "manylinux_2_${minor}_${arch}")
done
platforms+=(--platform "manylinux1_${arch}" --platform "manylinux2010_${arch}"
            --platform "manylinux2014_${arch}")
venv="$(mktemp -d)"
trap 'rm -rf --one-file-system "${tmp}" "${venv}"' EXIT
python3 -m venv "${venv}"
# shellcheck disable=SC2086  # a word list
"${venv}/bin/pip" download -q --disable-pip-version-check --only-binary=:all: \
  --python-version "${python_version}" --implementation cp --abi "cp${python_version/./}" \
  "${platforms[@]}" --dest "${tmp}${offline}/pip" ${offline_pip}
rm -rf --one-file-system "${venv}"
printf '%s\n' "[global]" "# No network here: the wheels of ${offline}/pip are the only index." \
  "no-index = true" "find-links = ${offline}/pip" "disable-pip-version-check = true" \
  "# As on Ubuntu 22.04: pip installs into the system's Python (Debian marks it PEP 668)." \
  "break-system-packages = true" > "${tmp}/etc/pip.conf"

# As Docker writes them for a container (the machines' hostname is localhost): sudo and others
# resolve the host name without a network.
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "${tmp}/etc/hosts"
echo localhost > "${tmp}/etc/hostname"

# Smaller image, and no stale package lists. Then the lists AgentBench's images have: its
# Dockerfiles for default and packages run `apt update` (and keep the lists, so there `apt
# install X` and `apt remove X` work without another update), ubuntu's does not (there only
# `apt update` fills them); here they come from the offline repository.
chroot "${tmp}" apt-get clean
rm -rf "${tmp}"/var/lib/apt/lists/* "${tmp}"/var/cache/apt/*.bin
if ((apt_lists)); then chroot "${tmp}" apt-get update -qq; fi
[[ "${image}" == ubuntu ]] && echo tmp > "${tmp}/file.txt"
# Every file owned by root (uid and gid 0; modes kept, set-id bits included): a sandbox maps only
# its own uid, as "root", onto the image (environments/sandbox/mounts.py), and a file of another
# owner (/etc/shadow's group shadow, say) could be neither copied up nor given back its owner by
# tools such as useradd, which chown what they rewrite to the original's owner.
find "${tmp}" -xdev \( ! -uid 0 -o ! -gid 0 \) -printf '%m %p\0' |
  while IFS=' ' read -r -d '' mode path; do
    chown -h 0:0 "${path}"
    [[ -L "${path}" ]] || chmod "${mode}" "${path}"
  done
# The sandbox runs as an unprivileged host uid: every directory it binds must be traversable.
chmod 0755 "${tmp}"
printf 'image=%s\nmirror=%s\nrecipe=%s\noffline=%s\n' "${image}" "${DEBIAN_MIRROR}" "${recipe}" \
  "${offline}" > "${tmp}/.agentrl_rootfs"

rm -rf --one-file-system "${out}"
mv "${tmp}" "${out}"
trap - EXIT
# One copy of each .deb and wheel that several images hold (same name, same content).
if command -v hardlink >/dev/null; then
  hardlink -q -t -f "$(dirname "${out}")"/*"${offline}" || true
fi
echo "${out}"
