"""What can go wrong with one HTTP exchange, in the kinds the verdict understands: "down" for a server where
nothing listens, "unreachable" when the monitoring side cannot get to it at all (DNS, TLS), "client" for a request
this host could not send (a header httpx cannot encode): never the server's silence, "not http" for a peer that
answers with something that is not HTTP (a TLS port, a header past h11's limit), "timeout" and "broken answer" for one
that does not answer properly. Each with a message an operator can act on; what it quotes from the server or the
network is cleaned and capped. check_vllm.server.fetch raises nothing else.
"""

from __future__ import annotations

import socket
import ssl
import unicodedata
from collections.abc import Callable

import httpx

from check_vllm.contract.safe_text import clean
from check_vllm.server.watchdog import Watchdog


class FetchError(Exception):
    def __init__(self, kind: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        # "down" | "unreachable" | "client" | "not http" | "timeout" | "broken answer" | "status" | "too large"
        # | "redirect" | "encoding"
        self.kind = kind
        self.detail = detail
        self.status = status


def unsendable(value: str) -> str | None:
    """Why `value` cannot go in an HTTP header as httpx and h11 send one (ASCII only, no control
    characters, no white space at either end), or None. Names a position, never the value."""
    for at, char in enumerate(value, 1):
        if not (" " <= char <= "~" or char == "\t"):
            name = unicodedata.name(char, "a control character") if char >= " " else "a control character"
            return f"character {at} is U+{ord(char):04X} ({name.lower()}), which an HTTP header cannot carry"
    if value != value.strip(" \t"):
        return "it begins or ends with white space, which an HTTP header cannot carry"
    return None


def why_connect_failed(err: Exception) -> tuple[str, str]:
    """(kind, detail) for a connection that was never made. Refused means nothing listens there:
    "down". A name that does not resolve or a TLS handshake that fails is the monitoring side's
    problem (resolver, CA bundle, scheme, certificate): "unreachable", which no restart can cure."""
    chain: BaseException | None = err
    while chain is not None:
        if isinstance(chain, ssl.SSLError):
            reason = getattr(chain, "reason", None) or chain.__class__.__name__
            return "unreachable", f"TLS handshake failed ({clean(str(reason), 60)})"
        if isinstance(chain, socket.gaierror):
            why = chain.strerror or str(chain)
            return "unreachable", f"DNS lookup failed ({clean(why, 80)})" if why else "DNS lookup failed"
        chain = chain.__cause__ or chain.__context__
    text = str(err)
    low = text.lower()
    if "name or service not known" in low or "name resolution" in low or "nodename" in low or "no address" in low:
        return "unreachable", "DNS lookup failed"
    if "refused" in low:
        return "down", "connection refused"
    return "down", f"cannot connect ({clean(text or err.__class__.__name__, 160)})"


def unsent(where: str, redact: Callable[[str], str], err: Exception) -> str:
    """A request this host could not send: say why, without the header value that could not go."""
    if isinstance(err, UnicodeEncodeError):
        why = f"a header holds {unicodedata.name(err.object[err.start], 'a character')} (U+{ord(err.object[err.start]):04X}), not ASCII"
    else:
        why = clean(redact(str(err) or err.__class__.__name__), 160)
    return f"{where} could not be sent from here ({why}); nothing reached the server"


def failed(err: Exception, where: str, redact: Callable[[str], str], connect_timeout: float, timeout: float,
           watch: Watchdog) -> FetchError:
    """The FetchError for an exchange that raised."""
    if isinstance(err, httpx.ConnectTimeout):
        return FetchError("timeout", f"{where}: no connection within {min(connect_timeout, timeout):.1f} s")
    if isinstance(err, httpx.TimeoutException):
        return FetchError("timeout", f"{where} timed out after {timeout:.1f} s")
    if watch.fired:  # the watchdog cut a read that kept being fed
        what = "body still arriving" if watch.answered else "timed out"
        return FetchError("timeout", f"{where} {what} after {timeout:.1f} s")
    if isinstance(err, httpx.ConnectError) and (_reset(err) or "reset by peer" in str(err).lower()):
        # a peer that accepted, then reset: the same as a reset before any answer, wherever the client noticed it
        # (connecting, sending, or reading: a loopback race decides which), never "nothing listens"
        return FetchError("not http", f"{where}: connection reset at once, no HTTP answer")
    if isinstance(err, httpx.ConnectError):
        return FetchError(*why_connect_failed(err))
    if isinstance(err, httpx.TooManyRedirects):
        return FetchError("redirect", f"{where}: too many redirects")
    if isinstance(err, httpx.DecodingError):
        return FetchError("broken answer", f"{where} sent an undecodable body")
    if isinstance(err, httpx.UnsupportedProtocol):  # the URL was checked: only a redirect gets here
        return FetchError("redirect", f"{where}: redirected off http(s): {clean(str(err), 160)}")
    if isinstance(err, (httpx.LocalProtocolError, UnicodeEncodeError)):  # h11 refused to send what we built
        return FetchError("client", unsent(where, redact, err))
    detail = str(err) or err.__class__.__name__
    if isinstance(err, httpx.RemoteProtocolError) and "location header" in detail.lower():
        return FetchError("redirect", f"{where}: {clean(detail, 200)}")
    if isinstance(err, httpx.RemoteProtocolError) and not any(
            sign in detail.lower() for sign in ("disconnected", "peer closed")):
        return FetchError("not http", f"{where}: the answer is not HTTP ({clean(detail, 120)})")
    if not watch.answered and (_reset(err) or "reset by peer" in detail.lower()):
        return FetchError("not http", f"{where}: connection reset at once, no HTTP answer")
    if "refused" in detail.lower():
        return FetchError("down", "connection refused")
    return FetchError("broken answer", f"{where}: {clean(detail, 200)}")


def _reset(err: BaseException) -> bool:
    chain: BaseException | None = err
    while chain is not None:
        if isinstance(chain, ConnectionResetError):
            return True
        chain = chain.__cause__ or chain.__context__
    return False
