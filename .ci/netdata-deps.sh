#!/usr/bin/env bash
# Install (once) the real Netdata agent that the netdata test tier (tests/netdata/) starts as a plain
# background process on 127.0.0.1. Idempotent: when the netdata binary is present it only says so.
#
#   .ci/netdata-deps.sh        # needs root (apt-get); exits non-zero when netdata is missing after
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - .ci/apt-install.sh: no daemon starts on install (policy-rc.d), waits for the dpkg lock.
#   - `apt-get update` runs at most once per invocation, and only when the package is missing.
#   - Other tiers may run apt at the same time: wait for the dpkg lock instead of failing on it.
set -Eeuo pipefail

PACKAGES=(netdata)
T0=$(date +%s)
log() { printf '[netdata-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[netdata-deps] FAILED: %s\n' "$*" >&2; exit 1; }

netdata_bin() { command -v netdata || { [ -x /usr/sbin/netdata ] && echo /usr/sbin/netdata; }; }
version() { "$(netdata_bin)" -v 2>/dev/null | head -1; }

if netdata_bin >/dev/null; then
    log "present: $(version)"
    exit 0
fi

source "$(dirname "$0")/apt-install.sh"
apt_install netdata-deps "${PACKAGES[@]}" || exit 1

netdata_bin >/dev/null || die "installed, but no netdata binary on PATH or in /usr/sbin"
log "installed: $(version)"
