"""Which URLs name the same vLLM server: the one key its state, lock, marker and restart history go by."""

from __future__ import annotations

import hashlib
import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

from check_vllm.machine.thishost import is_local
from check_vllm.memory import statedir

#: Names of this host's loopback interface: a server on it is one server whichever name reaches it.
LOOPBACK = "loopback"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host(host: str) -> str:
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return LOOPBACK
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(ip, "ipv4_mapped", None)
    return LOOPBACK if (mapped or ip).is_loopback else (f"[{ip.compressed}]" if ip.version == 6 else str(ip))


def _path(path: str) -> str:
    """Dot segments resolved, repeated and trailing slashes dropped: /v1/./x/../ is /v1."""
    out: list[str] = []
    for seg in path.split("/"):
        if seg == "..":
            if out:
                out.pop()
        elif seg not in ("", "."):
            out.append(seg)
    return "".join("/" + seg for seg in out)


def canonical_url(url: str) -> str:
    """One spelling per server, for everything keyed by it (state, lock, marker, restart history).

    The same server: scheme and host in any case; the default port (80/443) given or not; dot segments
    and trailing slashes in the path; userinfo and fragment (never part of where the server is). Every
    loopback name of this host (localhost, *.localhost, 127.0.0.0/8, ::1, ::ffff:127.x) is one server:
    a port on this host is served by one process, however it is reached. Anything else is another
    server (another name, another port, another path prefix)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a port: keep what was written, still one key per spelling
        return f"{scheme}://{parts.netloc.lower()}{_path(parts.path)}"
    host = _host(parts.hostname or "")
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{host}{f':{port}' if port else ''}{_path(parts.path)}{query}"


def network_namespace() -> str | None:
    """This process's network namespace as the kernel names it (net:[inode]), or None where /proc cannot say."""
    try:
        return f"net:[{os.stat('/proc/self/ns/net').st_ino}]"
    except OSError:
        return None


def server_key(url: str) -> str:
    """The server a URL reaches: its canonical URL, and for this host (its loopback, 0.0.0.0, its own names and
    addresses: check_vllm.machine.thishost) the network namespace it is reached in. 127.0.0.1:8000 or
    0.0.0.0:8000 in two containers (two namespaces) is two servers; their probes sharing one state volume must
    never read each other's memory."""
    key = canonical_url(url)
    ns = network_namespace() if urlsplit(key).hostname == LOOPBACK or is_local(url, resolve=False) \
        else None
    return f"{key} {ns}" if ns else key


def target_key(url: str, mode: str) -> str:
    return f"{mode} {server_key(url)}"


def legacy_key(url: str, mode: str) -> str:
    """The key before canonical_url (1.x): what files written then are named and tagged by."""
    return f"{mode} {url.rstrip('/')}"


def earlier_keys(url: str, mode: str) -> tuple[str, ...]:
    """The keys earlier versions named this target's files by, newest first, read until the first save: the
    canonical URL alone (before a loopback URL's key held its network namespace), then the URL as spelt."""
    return (f"{mode} {canonical_url(url)}", legacy_key(url, mode))


#: What every file (and a server's post-mortem directory) named by a key starts with.
KEY_PREFIX = "vllm-"


def key_path(state_dir: Path, key: str, suffix: str = ".json") -> Path:
    """The file of one key in the directory this runner keeps its files in (statedir.home)."""
    return statedir.home(state_dir) / f"{KEY_PREFIX}{file_stem(key)}{suffix}"


def file_stem(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:20]
