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
# Needs root and the `debootstrap` Debian package. The build goes to a temporary directory next to
# OUT_DIR and is renamed into place only when complete, so a half-built image is never used. A
# stamp file, OUT_DIR/.agentrl_rootfs, records what was built.
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
case "${image}" in
  default)  pkgs="${base_pkgs} python3 python3-pip git vim curl wget unzip zip tree" ;;
  packages) pkgs="${base_pkgs} python3 python3-pip git vim curl wget unzip zip tree"
            extra_pkgs="npm" ;;
  ubuntu)   pkgs="" ;;
  *) echo "unknown image '${image}' (default | packages | ubuntu)" >&2; exit 2 ;;
esac

recipe="${suite}: ${pkgs} + ${extra_pkgs}; owners=root"
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

# Smaller image, and no stale package lists: the sandbox has no network by default anyway.
chroot "${tmp}" apt-get clean
rm -rf "${tmp}"/var/lib/apt/lists/* "${tmp}"/var/cache/apt/*.bin
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
printf 'image=%s\nmirror=%s\nrecipe=%s\n' "${image}" "${DEBIAN_MIRROR}" "${recipe}" \
  > "${tmp}/.agentrl_rootfs"

rm -rf --one-file-system "${out}"
mv "${tmp}" "${out}"
trap - EXIT
echo "${out}"
