#!/usr/bin/env bash
# Build docker/webshop/Dockerfile without a Docker engine (CI, and machines without dockerd):
# buildah with chroot isolation, FROM a local stand-in for python:3.11-slim that debootstrap makes
# (Debian bookworm minbase + python3 3.11, pip, venv, ca-certificates; `python`/`pip` linked into
# /usr/local/bin as in the official image).  The stand-in is built once per machine and cached
# outside the repository; tests/test_docker_image.py then serves from the image.
#
#   apt-get install -y buildah debootstrap          # needs root (debootstrap, chroot)
#   bash docker/webshop/build_local.sh              # = base + image
#   bash docker/webshop/build_local.sh base|image   # one step
#
# Users with Docker do not need this: `docker build -f docker/webshop/Dockerfile .` pulls the real
# python:3.11-slim-bookworm.  Times measured on 2 shared cores: the base 1 min 45 s once
# (debootstrap; ~7 min on a loaded machine), then 4 s to re-import it from the cache; the image
# 1-4 min the first time, and after a source edit only the layers from `COPY agent_envs` on
# (README.md's WebShop server section has the measured figures).
#
# Environment (all optional):
#   RUBRICGYM_DOCKER_CACHE   where the base's root filesystem tarball is cached
#                            (default: ${RUBRICGYM_CACHE:-~/.cache/rubricgym-ci}/docker)
#   RUBRICGYM_DOCKER_BASE    the stand-in's image name (default localhost/rubricgym-ci/python:3.11-slim)
#   RUBRICGYM_DOCKER_IMAGE   the image built (default localhost/rubricgym-webshop:ci)
#   RUBRICGYM_DEBIAN_MIRROR  Debian mirror for debootstrap (default: the one apt uses here)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${RUBRICGYM_DOCKER_CACHE:-${RUBRICGYM_CACHE:-$HOME/.cache/rubricgym-ci}/docker}
BASE_IMAGE=${RUBRICGYM_DOCKER_BASE:-localhost/rubricgym-ci/python:3.11-slim}
IMAGE=${RUBRICGYM_DOCKER_IMAGE:-localhost/rubricgym-webshop:ci}
SUITE=bookworm                      # python:3.11-slim's Debian; its python3 is 3.11
BASE_TAR=$CACHE/python-3.11-slim-standin-$SUITE.tar

die() { echo "build_local.sh: $*" >&2; exit 1; }

need() {
  local missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: apt-get install -y buildah debootstrap"
  [ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"
}

debian_mirror() {
  # The mirror apt already uses (deb822 .sources or one-line sources.list), else deb.debian.org.
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
          | awk '{print $2}' | grep -vE 'security|updates' | grep -m1 -i debian || true)
  [ -n "$uri" ] || uri=$(grep -hE '^deb (\[[^]]*\] )?https?://' /etc/apt/sources.list 2>/dev/null \
          | grep -v security | grep -m1 -oE 'https?://[^ ]+' || true)
  echo "${RUBRICGYM_DEBIAN_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

cleanup_rootfs() {
  # debootstrap mounts /proc, /sys, ... inside the target: unmount before deleting anything.
  local root=$1 m
  [ -d "$root" ] || return 0
  for m in $(awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
  rm -rf --one-file-system "$root"
}

make_base_tar() {
  # Debian minbase with python 3.11 -> $BASE_TAR (written atomically; ~300 MB).
  local mirror rootfs
  mirror=$(debian_mirror)
  mkdir -p "$CACHE"
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'cleanup_rootfs "'"$rootfs"'"' EXIT
  echo "== debootstrap $SUITE from $mirror -> $rootfs (~7 min)"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$mirror" > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  # What python:3.11-slim offers that Debian's python3 does not: pip may install system-wide,
  # and `python` / `pip` are on PATH in /usr/local/bin.
  rm -f "$rootfs"/usr/lib/python3.*/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  "$rootfs/usr/bin/python3" --version >/dev/null 2>&1 || chroot "$rootfs" python3 --version
  tar -C "$rootfs" --numeric-owner -cf "$BASE_TAR.tmp" . && mv "$BASE_TAR.tmp" "$BASE_TAR"
  cleanup_rootfs "$rootfs"
  trap - EXIT
}

build_base() {
  need buildah debootstrap chroot
  if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "== base $BASE_IMAGE: present"
    return
  fi
  [ -s "$BASE_TAR" ] && echo "== base: cached $BASE_TAR" || make_base_tar
  echo "== base: import $BASE_TAR as $BASE_IMAGE"
  local ctr mnt
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  tar -C "$mnt" --numeric-owner -xpf "$BASE_TAR"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  buildah commit --rm --quiet "$ctr" "$BASE_IMAGE" >/dev/null
}

pip_mounts() {
  # pip inside the build reaches the registry only with this machine's CA bundle and global pip
  # configuration (as `pip config debug` lists it), bind-mounted read-only at the same paths.
  local cert f
  cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
  [ -n "$cert" ] || cert=/etc/ssl/certs/ca-certificates.crt
  [ -e "$cert" ] && printf -- '-v\n%s:%s:ro\n' "$(dirname "$cert")" "$(dirname "$cert")"
  for f in /etc/pip.conf /etc/xdg/pip; do
    [ -e "$f" ] && printf -- '-v\n%s:%s:ro\n' "$f" "$f"
  done
  return 0
}

build_image() {
  need buildah chroot
  buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1 || die "no $BASE_IMAGE: run '$0 base' first"
  local mounts=() old new
  mapfile -t mounts < <(pip_mounts)
  old=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
  echo "== buildah bud $IMAGE FROM $BASE_IMAGE (first build 1-4 min: pip installs the locked deps;"
  echo "   after a source edit only the package layers rebuild)"
  # --format docker: the OCI format has no HEALTHCHECK (buildah drops it with a warning).
  # --layers: keep each step's layer as a cache, as Docker does (buildah's default is not to).
  (cd "$REPO" && buildah bud --isolation chroot --network host --pull=never --format docker --layers \
      --build-arg "BASE=$BASE_IMAGE" "${mounts[@]}" \
      --ignorefile docker/webshop/Dockerfile.dockerignore \
      -f docker/webshop/Dockerfile -t "$IMAGE" .)
  # The previous build (~800 MB) is now untagged: drop it so reruns do not fill the disk.
  new=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
  if [ -n "$old" ] && [ "$old" != "$new" ]; then buildah rmi "$old" >/dev/null 2>&1 || true; fi
}

case "${1:-all}" in
  base) build_base ;;
  image) build_image ;;
  all) build_base; build_image ;;
  *) die "usage: $0 [base|image|all]" ;;
esac
