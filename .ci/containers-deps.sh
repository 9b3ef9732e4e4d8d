#!/usr/bin/env bash
# Install (once) what the containers tier (tests/containers/) starts: Debian's docker.io (dockerd, the
# /usr/bin/docker client, containerd, runc; the tier starts its own dockerd with its own data root),
# busybox-static (the one binary of the image the tier builds locally: no registry is reachable),
# Debian's python3.11 (the python3 of the base image the shipped contrib/docker/Dockerfile is built on,
# tests/containers/image.py), util-linux's setpriv, unshare and nsenter (the kubelet rig's container and
# exec probes, tests/containers/kubelet.py), Debian's docker-compose 1.29.2 (runs contrib/docker/compose.yaml as
# shipped, tests/containers/test_compose.py) and the real vLLM CPU build (.ci/vllm-env.sh). Idempotent:
# apt-get runs only for what is missing.
#
#   .ci/containers-deps.sh      # needs root (apt-get); exits non-zero when anything is missing after
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - .ci/apt-install.sh: no daemon starts on install (policy-rc.d: Debian's docker.io would start the
#     system dockerd and containerd), waits for the dpkg lock.
#   - /usr/local/bin/docker may be another, newer client: the tier calls /usr/bin/docker explicitly.
set -Eeuo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
T0=$(date +%s)
log() { printf '[containers-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[containers-deps] FAILED: %s\n' "$*" >&2; exit 1; }

have_docker() { [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] && command -v containerd >/dev/null && command -v runc >/dev/null; }
# static: the image holds nothing else (ldd fails on a static binary); its sh is what the image's /bin/sh runs
have_busybox() { [ -x /bin/busybox ] && /bin/busybox sh -c 'exit 0' && ! ldd /bin/busybox >/dev/null 2>&1; }

have_python() { [ -x /usr/bin/python3.11 ] && command -v ldd >/dev/null; }
have_util_linux() { command -v setpriv >/dev/null && command -v unshare >/dev/null && command -v nsenter >/dev/null; }
# Debian's (Python) docker-compose at its own path: a compose v2 plugin or another docker-compose on PATH is not
# what the tier runs
have_compose() { [ -x /usr/bin/docker-compose ] && /usr/bin/docker-compose version --short >/dev/null 2>&1; }

missing=()
have_docker || missing+=(docker.io)
have_busybox || missing+=(busybox-static)
have_python || missing+=(python3.11-minimal python3.11 libc-bin)
have_util_linux || missing+=(util-linux)
have_compose || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
    source "$HERE/apt-install.sh"
    apt_install containers-deps "${missing[@]}" || exit 1
fi
have_docker || die "installed docker.io, but /usr/sbin/dockerd, /usr/bin/docker, containerd or runc is missing"
have_busybox || die "installed busybox-static, but /bin/busybox is not a static busybox with sh"
have_python || die "installed python3.11, but /usr/bin/python3.11 (or ldd) is missing"
have_util_linux || die "installed util-linux, but setpriv, unshare or nsenter is missing"
have_compose || die "installed docker-compose, but /usr/bin/docker-compose does not run: $(/usr/bin/docker-compose version 2>&1 | tail -3)"
log "present: $(/usr/sbin/dockerd --version), docker-compose $(/usr/bin/docker-compose version --short), $(/bin/busybox | head -1)"

# vllm-env.sh prints the venv path on stdout (its last line): keep it off ours, tox shows stderr.
bash "$HERE/vllm-env.sh" >&2 || die ".ci/vllm-env.sh (the vLLM CPU venv) failed"
log "containers tier ready"
