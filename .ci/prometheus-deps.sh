#!/usr/bin/env bash
# Install (once) Prometheus' promtool, which tests/prometheus/ uses to check and unit-test
# contrib/prometheus/vllm-rules.yml. Idempotent: when promtool is on PATH it only says so.
#
#   .ci/prometheus-deps.sh        # needs root (apt-get); exits non-zero when promtool is missing after
#
# Debian 12 ships promtool inside the `prometheus` package (2.42.0; there is no separate promtool
# package). Its maintainer script would start the server: .ci/apt-install.sh writes policy-rc.d first,
# and the tier never starts a Prometheus server, it only runs `promtool check rules` / `test rules`.
set -Eeuo pipefail

PACKAGES=(prometheus)
T0=$(date +%s)
log() { printf '[prometheus-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[prometheus-deps] FAILED: %s\n' "$*" >&2; exit 1; }

version() { promtool --version 2>&1 | head -1; }

if command -v promtool >/dev/null; then
    log "present: $(version)"
    exit 0
fi

source "$(dirname "$0")/apt-install.sh"
apt_install prometheus-deps "${PACKAGES[@]}" || exit 1

command -v promtool >/dev/null || die "installed ${PACKAGES[*]}, but promtool is still not on PATH"
log "installed: $(version)"
