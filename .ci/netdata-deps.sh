#!/usr/bin/env bash
# Install (once) the real Netdata agent that the netdata test tier (tests/netdata/) starts as a plain
# background process on 127.0.0.1. Idempotent: when the netdata binary is present it only says so.
#
#   .ci/netdata-deps.sh        # needs root (apt-get); exits non-zero when netdata is missing after
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - Debian's maintainer scripts would start the agent: /usr/sbin/policy-rc.d (exit 101) stops that.
#     The tests start their own agent with a generated netdata.conf, RAM database and loopback port.
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

[ "$(id -u)" = 0 ] || die "not root: run as root, or install ${PACKAGES[*]} yourself"
command -v apt-get >/dev/null || die "no apt-get: install ${PACKAGES[*]} from your distribution"

if [ ! -e /usr/sbin/policy-rc.d ]; then
    log "writing /usr/sbin/policy-rc.d so no daemon starts on install"
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
fi

export DEBIAN_FRONTEND=noninteractive
LOCK=(-o DPkg::Lock::Timeout=600)
log "apt-get update"
apt-get "${LOCK[@]}" update -qq || die "apt-get update failed"
log "apt-get install ${PACKAGES[*]}"
apt-get "${LOCK[@]}" install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null \
    || die "apt-get install ${PACKAGES[*]} failed"

netdata_bin >/dev/null || die "installed, but no netdata binary on PATH or in /usr/sbin"
log "installed: $(version)"
