#!/usr/bin/env bash
# Install (once) what tools/netdata_screenshot.py needs besides Netdata (.ci/netdata-deps.sh):
# Debian's headless-capable Chromium, which renders the dashboard page to docs/netdata-frozen-engine.png.
# Not part of CI: the screenshot is a figure for docs/netdata.md, not a test. Idempotent: when chromium is
# present it only says so.
#
#   bash .ci/screenshot-deps.sh && python tools/netdata_screenshot.py
#
# Uses .ci/apt-install.sh (no daemon starts on install, waits for the dpkg lock, one apt-get update).
set -Eeuo pipefail

PACKAGES=(chromium)
T0=$(date +%s)
log() { printf '[screenshot-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[screenshot-deps] FAILED: %s\n' "$*" >&2; exit 1; }

chromium_bin() { command -v chromium || command -v chromium-browser || { [ -x /usr/bin/chromium ] && echo /usr/bin/chromium; }; }
version() { "$(chromium_bin)" --version 2>/dev/null | head -1; }

bash "$(dirname "$0")/netdata-deps.sh"

if chromium_bin >/dev/null; then
    log "present: $(version)"
    exit 0
fi

source "$(dirname "$0")/apt-install.sh"
apt_install screenshot-deps "${PACKAGES[@]}" || exit 1

chromium_bin >/dev/null || die "installed, but no chromium binary on PATH"
log "installed: $(version)"
