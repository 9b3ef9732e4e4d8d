#!/usr/bin/env bash
# Install (once) what the incident tier (tests/incident/) starts: supervisord (Debian's supervisor
# 4.2.5, the restart target's process manager), the real vLLM CPU build (.ci/vllm-env.sh) and
# Icinga 2 (.ci/monitoring-deps.sh). Idempotent: each part only says "present" when it is there,
# and apt-get runs only for what is missing.
#
#   .ci/incident-deps.sh        # needs root (apt-get); exits non-zero when anything is missing after
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - .ci/apt-install.sh: no daemon starts on install (policy-rc.d: Debian's supervisor package would
#     start the system supervisord, which the test does not want), waits for the dpkg lock.
#   - the vLLM venv is cached (~3.4 GB, a few minutes the first time, < 1 s afterwards).
set -Eeuo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
T0=$(date +%s)
log() { printf '[incident-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[incident-deps] FAILED: %s\n' "$*" >&2; exit 1; }

have_supervisor() { command -v supervisord >/dev/null && command -v supervisorctl >/dev/null; }

if have_supervisor; then
    log "present: supervisord $(supervisord --version 2>/dev/null)"
else
    source "$HERE/apt-install.sh"
    apt_install incident-deps supervisor || exit 1
    have_supervisor || die "installed supervisor, but supervisord / supervisorctl are not on PATH"
    log "installed: supervisord $(supervisord --version 2>/dev/null)"
fi

bash "$HERE/monitoring-deps.sh" || die ".ci/monitoring-deps.sh (icinga2) failed"
# vllm-env.sh prints the venv path on stdout (its last line): keep it off ours, tox shows stderr.
bash "$HERE/vllm-env.sh" >&2 || die ".ci/vllm-env.sh (the vLLM CPU venv) failed"
log "incident tier ready"
