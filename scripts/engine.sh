#!/usr/bin/env bash
# A real Docker engine for kdkit's tests and CI, on a machine that reaches no container registry.
#
#   make engine          (or: bash scripts/engine.sh)
#
# Idempotent: every step is skipped when its result is already there.
#   1. If no engine answers `docker info`: install Debian's docker.io and debootstrap (apt-get),
#      start dockerd as root in the background (log: .engine/dockerd.log), trying the overlay2
#      storage driver first and falling back to vfs, and wait until it answers.
#   2. If the image $KDKIT_TEST_BASE (default kdkit-test/debian-python:3.11) is missing: build a
#      minimal Debian bookworm with python3, python3-venv and ca-certificates with
#      `debootstrap --variant=minbase` and `docker import` it. Nothing is pulled from a registry;
#      tests pass this image to `kdkit build --base-image`.
# Settings (environment): KDKIT_TEST_BASE, KDKIT_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# KDKIT_ENGINE_DIR (default <repo>/.engine), KDKIT_STORAGE_DRIVER (skip the overlay2/vfs probe).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENGINE_DIR=${KDKIT_ENGINE_DIR:-$REPO/.engine}
BASE_TAG=${KDKIT_TEST_BASE:-kdkit-test/debian-python:3.11}
MIRROR=${KDKIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
START=$SECONDS

say() { printf 'engine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "$1 needs root; run as root (or with sudo), or start an engine yourself"
}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  need_root "installing ${missing[*]}"
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Start dockerd with one storage driver; succeed once `docker info` answers, else stop it again.
try_driver() {
  local driver=$1 log=$ENGINE_DIR/dockerd.log
  say "starting dockerd (storage driver $driver, log $log)"
  # setsid: its own session, so the engine outlives the shell (and process group) that started it.
  setsid dockerd --storage-driver="$driver" >"$log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$ENGINE_DIR/dockerd.pid"
  for _ in $(seq 1 60); do
    if engine_answers; then say "engine up (dockerd pid $pid, $driver)"; return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  say "dockerd with $driver did not come up: $(grep -m1 -iE 'error|fail' "$log" || tail -n1 "$log")"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f /var/run/docker.pid
  return 1
}

start_engine() {
  need_root "starting dockerd"
  mkdir -p "$ENGINE_DIR"
  local drivers=(overlay2 vfs)
  [ -n "${KDKIT_STORAGE_DRIVER:-}" ] && drivers=("$KDKIT_STORAGE_DRIVER")
  for driver in "${drivers[@]}"; do
    try_driver "$driver" && return 0
  done
  die "dockerd would not start with any of: ${drivers[*]}; see $ENGINE_DIR/dockerd.log"
}

build_base_image() {
  if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    say "base image $BASE_TAG already present"
    return 0
  fi
  need_root "debootstrap"
  local rootfs
  rootfs=$(mktemp -d /tmp/kdkit-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  say "debootstrap $SUITE (minbase + python3, python3-venv, ca-certificates) from $MIRROR"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR" >"$ENGINE_DIR/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $ENGINE_DIR/debootstrap.log"
  # Keep the image small: no package lists, caches, docs or man pages.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*
  say "docker import -> $BASE_TAG"
  tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/usr/bin/python3"]' \
    --message "debootstrap --variant=minbase $SUITE with python3, python3-venv (scripts/engine.sh)" \
    - "$BASE_TAG" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
}

main() {
  mkdir -p "$ENGINE_DIR"
  if engine_answers; then
    say "an engine already answers"
  else
    install_packages
    start_engine
  fi
  command -v debootstrap >/dev/null || install_packages
  build_base_image
  say "ready in $((SECONDS - START)) s: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}'), $(docker info --format 'storage {{.Driver}}'), base $BASE_TAG"
}

main "$@"
