"""Where the Debian package installs each file, and the switch that points the real tiers at them.

`CHECK_VLLM_INSTALLED=deb` (tox -e package, after .ci/deb.sh) makes tests/monitoring and tests/netdata run
the files the .deb installed, on /usr/bin/python3 with Debian's own httpx and nagiosplugin, instead of the
checkout's contrib/ and the venv's check. One place for these paths: the tests of the package assert them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PLUGINS = Path("/usr/lib/nagios/plugins")
CHECK = PLUGINS / "check_vllm"
HANDLER = PLUGINS / "check_vllm_restart"
#: The HAProxy agent is a daemon, not a plugin: the package's own directory (nothing on PATH).
AGENT = Path("/usr/lib/check-vllm/check_vllm_agent")
ITL_CONTRIB = Path("/usr/share/icinga2/include/plugins-contrib.d")
ICINGA2_COMMANDS = ITL_CONTRIB / "vllm-commands.conf"
NETDATA_PLUGINS = Path("/usr/lib/netdata/plugins.d")
NETDATA_PLUGIN = NETDATA_PLUGINS / "vllm.plugin"
NETDATA_STOCK_HEALTH = Path("/usr/lib/netdata/conf.d/health.d")
NETDATA_HEALTH = NETDATA_STOCK_HEALTH / "vllm.conf"
STATE_DIR = Path("/var/lib/check_vllm")
EXAMPLES = Path("/usr/share/doc/check-vllm/examples")
SYSTEM_PYTHON = "/usr/bin/python3"

#: The values CHECK_VLLM_INSTALLED may take: unset (the checkout and the venv) or deb.
CHOICES = ("", "deb")


def installed() -> str:
    """The install the real tiers run against; a value this does not know fails the run, never ignored."""
    value = os.environ.get("CHECK_VLLM_INSTALLED", "")
    if value not in CHOICES:
        pytest.fail(f"CHECK_VLLM_INSTALLED={value!r}: expected unset or 'deb'", pytrace=False)
    if value == "deb" and not CHECK.is_file():
        pytest.fail(f"CHECK_VLLM_INSTALLED=deb but {CHECK} is missing: run `bash .ci/deb.sh` first", pytrace=False)
    return value


def deb() -> bool:
    return installed() == "deb"
