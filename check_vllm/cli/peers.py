"""Which peers a listener answers (--allow): the agent's TCP side and its httpGet probes' HTTP side take the same
list, and close any other peer before a thread or a byte is spent on it."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allow(text: str) -> list[Network]:
    """ADDR or CIDR, comma-separated -> networks; ValueError with the reason."""
    nets = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            nets.append(ipaddress.ip_network(part.strip("[]"), strict=False))
        except ValueError:
            raise ValueError(f"--allow {part!r}: not an IP address or network (10.0.0.5, 10.0.0.0/24, ::1)") from None
    if not nets:
        raise ValueError("--allow needs at least one address")
    return nets


def allowed(peer: str, nets: Sequence[Network]) -> bool:
    """Whether `peer` (as accept() gave it; an IPv4 peer of a dual-stack socket comes as ::ffff:a.b.c.d)
    is in one of `nets`."""
    try:
        ip = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    return any(ip.version == net.version and ip in net for net in nets)


def peer_allowed(client_address: object, nets: Sequence[Network]) -> bool:
    """A listener's verify_request: every peer without an allow list, else only the listed ones."""
    if not nets:
        return True
    host = client_address[0] if isinstance(client_address, tuple) and client_address else ""
    return allowed(str(host), nets)
