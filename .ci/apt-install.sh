#!/usr/bin/env bash
# Shared by the *-deps.sh scripts: install Debian packages for a test tier, never starting their daemons.
#
#   source .ci/apt-install.sh; apt_install TAG PACKAGE...
#
# - Debian's maintainer scripts would start the daemons: /usr/sbin/policy-rc.d (exit 101) stops that;
#   the tests start their own instances with their own config on 127.0.0.1.
# - Another tier may run apt at the same time: wait for the dpkg lock instead of failing on it.
# - `apt-get update` runs once per call, and callers call only when something is missing.

apt_install() {
    local tag=$1; shift
    [ "$(id -u)" = 0 ] || { echo "[$tag] FAILED: not root: run as root, or install $* yourself" >&2; return 1; }
    command -v apt-get >/dev/null || { echo "[$tag] FAILED: no apt-get: install $* from your distribution" >&2; return 1; }
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        echo "[$tag] writing /usr/sbin/policy-rc.d so no daemon starts on install" >&2
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
    fi
    local lock=(-o DPkg::Lock::Timeout=600)
    # a dpkg run killed half-way (a CI run stopped mid-install) leaves every later install refused ("dpkg was
    # interrupted, you must manually run 'dpkg --configure -a'"): finish it first
    if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
        echo "[$tag] dpkg was interrupted: dpkg --configure -a" >&2
        DEBIAN_FRONTEND=noninteractive timeout 900 dpkg --configure -a >/dev/null 2>&1 || true
    fi
    echo "[$tag] apt-get update" >&2
    DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" update -qq \
        || { echo "[$tag] FAILED: apt-get update failed" >&2; return 1; }
    echo "[$tag] apt-get install $*" >&2
    DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq --no-install-recommends "$@" >/dev/null \
        || { echo "[$tag] FAILED: apt-get install $* failed" >&2; return 1; }
}
