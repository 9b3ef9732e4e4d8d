#!/bin/sh
# Restart every container Docker marks unhealthy, when it carries the label check_vllm.restart=unhealthy.
# Docker itself never restarts an unhealthy container (only Swarm does); this is the one restart authority
# on a single host. The HEALTHCHECK is `check_vllm --probe liveness`: unhealthy means proven stuck or down,
# never a slow or saturated server, and never a fault of the check itself.
#
#   RESTARTER_LABEL         the label to act on (default: check_vllm.restart=unhealthy)
#   RESTARTER_STOP_TIMEOUT  seconds vLLM gets to stop before it is killed (default: 60)
#   RESTARTER_COOLDOWN      seconds after a restart of a container in which it is not restarted again (default: 900)
set -eu
label=${RESTARTER_LABEL:-check_vllm.restart=unhealthy}
stop=${RESTARTER_STOP_TIMEOUT:-60}
cooldown=${RESTARTER_COOLDOWN:-900}
state=$(mktemp -d)
log() { printf '%s restarter: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }
log "watching health_status events of containers labelled $label"
docker events --filter type=container --filter event=health_status --filter "label=$label" \
    --format '{{.ID}} {{.Action}}' |
while read -r id action; do
    [ "$action" = "health_status: unhealthy" ] || continue
    now=$(date +%s)
    last=$(cat "$state/$id" 2>/dev/null || echo 0)
    if [ $((now - last)) -lt "$cooldown" ]; then
        log "$id unhealthy, restarted $((now - last)) s ago (cooldown $cooldown s): not again"
        continue
    fi
    echo "$now" > "$state/$id"
    log "$id unhealthy: restarting"
    docker restart --time "$stop" "$id" >/dev/null && log "$id restarted" || log "$id restart failed"
done
