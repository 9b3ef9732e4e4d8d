#!/usr/bin/env bash
# Install (once) what the fleet tier (tests/fleet/, tests/prometheus/) starts or runs: HAProxy (the
# least-connection balancer in front of two simulators), Caddy and nginx (same-host reverse proxies in front
# of vLLM), Icinga 2 (a master and an agent), Netdata (a child streaming to a parent) and promtool. Idempotent: each part only says "present" when its
# binary is there, and apt-get runs only for what is missing.
#
#   .ci/fleet-deps.sh        # needs root (apt-get); exits non-zero when anything is missing after
#
# Reuses the other tiers' installers (policy-rc.d so no daemon starts on install, the dpkg lock
# wait of .ci/apt-install.sh): monitoring-deps.sh (icinga2, with nagios4 and openssl),
# netdata-deps.sh, prometheus-deps.sh.
set -Eeuo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
T0=$(date +%s)
log() { printf '[fleet-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[fleet-deps] FAILED: %s\n' "$*" >&2; exit 1; }

haproxy_bin() { command -v haproxy || { [ -x /usr/sbin/haproxy ] && echo /usr/sbin/haproxy; }; }

if haproxy_bin >/dev/null; then
    log "present: $("$(haproxy_bin)" -v 2>/dev/null | head -1)"
else
    source "$HERE/apt-install.sh"
    apt_install fleet-deps haproxy || exit 1
    haproxy_bin >/dev/null || die "installed haproxy, but no haproxy binary on PATH or in /usr/sbin"
    log "installed: $("$(haproxy_bin)" -v 2>/dev/null | head -1)"
fi

# Caddy and nginx: the same-host reverse proxies in front of vLLM (tests/fleet/test_proxies.py, issue 38)
proxies=()
[ -x /usr/bin/caddy ] || proxies+=(caddy)
[ -x /usr/sbin/nginx ] || proxies+=(nginx-light)
if [ ${#proxies[@]} -gt 0 ]; then
    source "$HERE/apt-install.sh"
    apt_install fleet-deps "${proxies[@]}" || exit 1
fi
[ -x /usr/bin/caddy ] && [ -x /usr/sbin/nginx ] || die "installed caddy and nginx-light, but /usr/bin/caddy or /usr/sbin/nginx is missing"
log "present: $(/usr/bin/caddy version 2>/dev/null | head -1), $(/usr/sbin/nginx -v 2>&1 | head -1)"

bash "$HERE/monitoring-deps.sh" || die ".ci/monitoring-deps.sh (icinga2) failed"
bash "$HERE/netdata-deps.sh" || die ".ci/netdata-deps.sh (netdata) failed"
bash "$HERE/prometheus-deps.sh" || die ".ci/prometheus-deps.sh (promtool) failed"
log "fleet tier ready"
