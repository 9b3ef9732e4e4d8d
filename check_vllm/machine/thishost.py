"""Whether a URL's host is this host: a loopback name or address, an unspecified address (0.0.0.0, ::: vLLM prints
`http://0.0.0.0:8000` at start, and a connection to it reaches this host), this host's own names and addresses.
One answer for both that need it: the host's witness looks for the server's process only here, and the state key
adds the network namespace for exactly these URLs (two containers' `0.0.0.0:8000` on one state volume are two
servers, as their `127.0.0.1:8000` are).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


def is_local(url: str, resolve: bool = True) -> bool:
    """The URL's host is this host: a loopback name or address, this host's own name, or an address a socket here
    can bind. `resolve` False: a name is not looked up (the state key of every run: a resolver's delay there would
    come before any request and outside -t; the witness, asked only on a failure, resolves)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in ("localhost", "localhost.localdomain", socket.gethostname().lower()) or host.endswith(".localhost"):
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if not resolve:
            return False
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return False
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    return bool(addresses) and all(_bindable(a) for a in addresses)


def _bindable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((str(address), 0))  # EADDRNOTAVAIL for an address that is not this host's
        return True
    except OSError:
        return False
