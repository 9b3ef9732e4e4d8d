#!/usr/bin/env bash
# Build the Debian package from this checkout with Debian's own tooling, lint it, and apt-install it.
#
#   .ci/deb.sh            # needs root (apt-get); exits non-zero on a build failure, a lintian E:/W:, or an
#                         # install failure. Prints the .deb's path last. Idempotent.
#
# - The build runs in a temporary copy of the tracked (and new, unignored) files: no build products in the tree.
# - lintian at its default level; any E: or W: line fails. Its whole output is printed.
# - `apt-get install ./check-vllm_*.deb` pulls Debian 12's python3-httpx and python3-nagiosplugin.
# - CHECK_VLLM_DEB_DIR keeps the .deb and the lintian output there (default: a temp dir, removed).
set -Eeuo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
T0=$(date +%s)
log() { printf '[deb %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[deb] FAILED: %s\n' "$*" >&2; exit 1; }

BUILD_DEPS=(build-essential debhelper dh-python python3-all python3-setuptools lintian python3-httpx
            python3-nagiosplugin)
missing=()
for p in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    source "$REPO/.ci/apt-install.sh"
    apt_install deb "${missing[@]}" || exit 1
fi
log "build deps present: debhelper $(dpkg-query -W -f='${Version}' debhelper), dh-python $(dpkg-query -W -f='${Version}' dh-python), lintian $(dpkg-query -W -f='${Version}' lintian)"

WORK=$(mktemp -d /tmp/check-vllm-deb.XXXXXX)
OUT=${CHECK_VLLM_DEB_DIR:-$WORK/out}
mkdir -p "$OUT"
[ -n "${CHECK_VLLM_DEB_DIR:-}" ] || trap 'rm -rf "$WORK"' EXIT
VERSION=$(dpkg-parsechangelog -l debian/changelog -S Version)
SRC=$WORK/check-vllm-$VERSION
mkdir -p "$SRC"
# A checkout: its tracked and new unignored files. An unpacked sdist (no git): all of it but build products.
sources() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
            if [ -e "$f" ]; then printf '%s\0' "$f"; fi
        done | tar -C "$REPO" --null -T - -cf -
    else
        tar -C "$REPO" --exclude=./.tox --exclude=./build --exclude=./dist --exclude='*.egg-info' -cf - .
    fi
}
sources | tar -C "$SRC" -xf -

log "dpkg-buildpackage check-vllm $VERSION in $SRC"
( cd "$SRC" && dpkg-buildpackage -us -uc -b ) > "$WORK/build.log" 2>&1 \
    || { tail -60 "$WORK/build.log" >&2; die "dpkg-buildpackage failed"; }
DEB=$(ls "$WORK"/check-vllm_"$VERSION"_all.deb)
cp "$DEB" "$OUT/"
DEB=$OUT/$(basename "$DEB")

log "lintian $(basename "$DEB")"
lintian --tag-display-limit 0 "$WORK"/check-vllm_"$VERSION"_*.changes > "$OUT/lintian.txt" 2>&1 || true
cat "$OUT/lintian.txt" >&2
if grep -Eq '^[EW]: ' "$OUT/lintian.txt"; then
    die "lintian reported errors or warnings (above)"
fi

log "apt-get install $DEB"
lock=(-o DPkg::Lock::Timeout=600)
DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq --reinstall --no-install-recommends "$DEB" \
    > "$WORK/install.log" 2>&1 || { tail -40 "$WORK/install.log" >&2; die "apt-get install $DEB failed"; }
dpkg-query -W -f='${Package} ${Version} ${Status}\n' check-vllm >&2
log "installed: $(/usr/lib/nagios/plugins/check_vllm --version 2>&1 | head -1)"
echo "$DEB"
