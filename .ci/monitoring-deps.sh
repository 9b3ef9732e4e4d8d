#!/usr/bin/env bash
# Install (once) the real Icinga 2 and Nagios 4 that the monitoring test tier (tests/monitoring/)
# starts as plain background processes. Idempotent: when both binaries are present it only says so.
#
#   .ci/monitoring-deps.sh        # needs root (apt-get); exits non-zero when anything is missing after
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - .ci/apt-install.sh: no daemon starts on install (policy-rc.d), waits for the dpkg lock.
#   - `apt-get update` runs at most once per invocation, and only when a package is missing.
#   - openssl is needed for the Icinga 2 REST API certificate the tests generate.
set -Eeuo pipefail

PACKAGES=(icinga2 nagios4-core monitoring-plugins-basic openssl)
T0=$(date +%s)
log() { printf '[monitoring-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[monitoring-deps] FAILED: %s\n' "$*" >&2; exit 1; }

have_all() {
    command -v icinga2 >/dev/null && command -v nagios4 >/dev/null && command -v openssl >/dev/null
}

if have_all; then
    log "present: $(icinga2 --version 2>/dev/null | head -1 | sed 's/^ *//'); $(nagios4 --version 2>/dev/null | grep -m1 -i '^nagios core')"
    exit 0
fi

source "$(dirname "$0")/apt-install.sh"
apt_install monitoring-deps "${PACKAGES[@]}" || exit 1

have_all || die "installed, but icinga2 / nagios4 / openssl are still not on PATH"
log "installed: $(icinga2 --version 2>/dev/null | head -1 | sed 's/^ *//'); $(nagios4 --version 2>/dev/null | grep -m1 -i '^nagios core')"
