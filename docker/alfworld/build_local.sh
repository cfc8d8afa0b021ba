#!/usr/bin/env bash
# Build docker/alfworld/Dockerfile without a Docker engine (CI, machines without dockerd): buildah
# with chroot isolation, FROM the same local stand-in for python:3.11-slim that
# docker/webshop/build_local.sh makes with debootstrap (built once per machine and cached);
# tests/test_docker_alfworld.py then serves from the image.
#
#   apt-get install -y buildah debootstrap          # needs root (debootstrap, chroot)
#   bash docker/alfworld/build_local.sh             # = the stand-in base (if missing) + the image
#
# Users with Docker do not need this: `docker build -f docker/alfworld/Dockerfile .` pulls the real
# python:3.11-slim-bookworm.  The wheels stage installs g++/cmake with apt (the stand-in's apt
# sources are debootstrap's mirror) and compiles fast-downward-textworld and jericho; the
# generated games are made in the image.
#
# Environment (all optional): RUBRICGYM_DOCKER_CACHE and RUBRICGYM_DOCKER_BASE as for
# docker/webshop/build_local.sh; RUBRICGYM_ALFWORLD_IMAGE, the image built (default
# localhost/rubricgym-alfworld:ci).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BASE_IMAGE=${RUBRICGYM_DOCKER_BASE:-localhost/rubricgym-ci/python:3.11-slim}
IMAGE=${RUBRICGYM_ALFWORLD_IMAGE:-localhost/rubricgym-alfworld:ci}

bash "$REPO/docker/webshop/build_local.sh" base

mounts=()
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
[ -n "$cert" ] || cert=/etc/ssl/certs/ca-certificates.crt
[ -e "$cert" ] && mounts+=(-v "$(dirname "$cert"):$(dirname "$cert"):ro")
for f in /etc/pip.conf /etc/xdg/pip; do [ -e "$f" ] && mounts+=(-v "$f:$f:ro"); done

old=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
echo "== buildah bud $IMAGE FROM $BASE_IMAGE"
# --format docker keeps the HEALTHCHECK; --layers keeps each step's layer as a cache.
(cd "$REPO" && buildah bud --isolation chroot --network host --pull=never --format docker --layers \
    --build-arg "BASE=$BASE_IMAGE" "${mounts[@]}" \
    --ignorefile docker/alfworld/Dockerfile.dockerignore \
    -f docker/alfworld/Dockerfile -t "$IMAGE" .)
new=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
if [ -n "$old" ] && [ "$old" != "$new" ]; then buildah rmi "$old" >/dev/null 2>&1 || true; fi
