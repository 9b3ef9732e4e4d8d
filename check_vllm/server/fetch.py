"""All of the check's HTTP: one httpx client, hard time and size limits, typed errors.

Every failure becomes a FetchError whose `kind` the verdict understands ("down" for a server
where nothing listens, "unreachable" when the monitoring side cannot get to it at all (DNS, TLS),
"client" for a request this host could not send (a header httpx cannot encode): never the server's
silence, "not http" for a peer that answers with something that is not HTTP (a TLS port, a header
past h11's limit), "timeout" and "protocol" for one that does not answer properly) and whose message
an operator can act on. What a detail quotes from the server or the network is cleaned and capped. Nothing here
raises anything else.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import unicodedata
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx

from check_vllm.contract.safe_text import clean, without_userinfo
from check_vllm.contract.vocab import CONNECT_TIMEOUT
from check_vllm.server.watchdog import Watchdog

DEFAULT_MAX_BYTES = 8 << 20  # a real /metrics page is ~55 KB; 8 data-parallel engines ~0.5 MB


class FetchError(Exception):
    def __init__(self, kind: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        # "down" | "unreachable" | "client" | "not http" | "timeout" | "protocol" | "status" | "too large"
        # | "redirect" | "encoding"
        self.kind = kind
        self.detail = detail
        self.status = status


class Response(NamedTuple):
    status: int
    body: bytes
    content_type: str
    seconds: float
    sent: int  # request bytes, for the bench
    redirects: int = 0  # redirects followed to get here

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class Endpoint(NamedTuple):
    """Where and how to talk to one vLLM server."""

    url: str
    api_key: str | None = None
    ca_file: str | None = None
    insecure: bool = False
    connect_timeout: float = CONNECT_TIMEOUT
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def shown(self) -> str:
        """The URL as any text may show it: without user:password, which every Icinga user could read."""
        return without_userinfo(self.url)

    def redact(self, text: str) -> str:
        """Server-written text with our API key blanked out: some servers echo the key they rejected."""
        text = text.replace(self.url, self.shown) if self.shown != self.url else text
        return text.replace(self.api_key, "***") if self.api_key else text

    def client(self) -> httpx.Client:
        verify: bool | ssl.SSLContext
        if self.insecure:
            verify = False
        elif self.ca_file:
            verify = ssl.create_default_context(cafile=self.ca_file)
        elif self.url.startswith("https:"):
            verify = True
        else:  # plain http needs no CA bundle (loading one is most of a client's start-up); a redirect
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # to https meets no trusted CA: it fails closed
        return httpx.Client(
            verify=verify, trust_env=False, follow_redirects=True, max_redirects=3,
            headers={"User-Agent": "check_vllm", "Accept-Encoding": "gzip, identity"},
        )


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


def _why_connect_failed(err: Exception) -> tuple[str, str]:
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


def _decoded(resp: httpx.Response, where: str, cap: int) -> Iterator[bytes]:
    """The body, gunzipped here with a bound on each step's output: httpx would inflate a whole network
    read at once, and 64 KB of a gzip bomb is 64 MB. Past `cap` the caller stops reading."""
    encoding = resp.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        yield from resp.iter_raw()
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise FetchError("encoding", f"{where} sent Content-Encoding '{clean(encoding, 40)}', which was not asked for",
                         resp.status_code)
    inflate = zlib.decompressobj(47)  # 32 + 15: a gzip or zlib header, detected
    received = 0
    try:
        for raw in resp.iter_raw(16384):
            received += len(raw)
            data = inflate.decompress(raw, cap + 1)
            while True:
                yield data
                if not inflate.unconsumed_tail:
                    break
                data = inflate.decompress(inflate.unconsumed_tail, cap + 1)
        yield inflate.flush()
    except zlib.error:
        raise FetchError("protocol", f"{where} sent an undecodable body", resp.status_code) from None
    # A compressed stream carries its own end (and gzip a length and CRC): HTTP framing that matches
    # the bytes sent proves nothing when the sender cut the stream before it. Half a page is no reading.
    if received and not inflate.eof:
        raise FetchError("protocol", f"{where} sent a compressed body that ends early "
                                     f"({received} bytes, the {encoding} stream is cut short)", resp.status_code)


def request(
    client: httpx.Client, endpoint: Endpoint, method: str, path: str, timeout: float,
    body: dict[str, Any] | None = None, auth: bool = False,
) -> Response:
    """One request with a deadline for the whole exchange, headers and body included, and a size cap."""
    url = endpoint.url.rstrip("/") + path
    headers = {}
    if auth and endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    content = json.dumps(body).encode() if body is not None else None
    if content is not None:
        headers["Content-Type"] = "application/json"
    limits = httpx.Timeout(timeout, connect=min(endpoint.connect_timeout, timeout))
    started = time.monotonic()
    where = f"{method} {path}"
    watch = Watchdog(started + timeout)
    try:
        try:
            req = client.build_request(method, url, headers=headers, content=content, timeout=limits,
                                       extensions={"trace": watch.trace})
        except Exception as err:  # noqa: BLE001 - nothing left this host: the monitoring side's fault
            raise FetchError("client", _unsent(where, endpoint, err)) from None
        resp = client.send(req, stream=True)
        try:
            watch.answered = True
            watch.watch(resp.extensions.get("network_stream"))
            data = _body(resp, endpoint, where, timeout, watch.deadline)
        finally:
            resp.close()
        sent = len(content or b"") + len(method) + len(path) + 100
        return Response(resp.status_code, data, resp.headers.get("content-type", ""),
                        time.monotonic() - started, sent, len(resp.history))
    except FetchError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure becomes a FetchError; nothing else is raised
        raise _failed(err, where, endpoint, timeout, watch) from None
    finally:
        watch.cancel()


def _body(resp: httpx.Response, endpoint: Endpoint, where: str, timeout: float, deadline: float) -> bytes:
    chunks, size = [], 0
    for chunk in _decoded(resp, where, endpoint.max_bytes):
        size += len(chunk)
        if size > endpoint.max_bytes:
            raise FetchError("too large", f"{where} sent more than {endpoint.max_bytes // 1024} KiB; stopped reading",
                             resp.status_code)
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise FetchError("timeout", f"{where} body still arriving after {timeout:.1f} s", resp.status_code)
    return b"".join(chunks)


def _unsent(where: str, endpoint: Endpoint, err: Exception) -> str:
    """A request this host could not send: say why, without the header value that could not go."""
    if isinstance(err, UnicodeEncodeError):
        why = f"a header holds {unicodedata.name(err.object[err.start], 'a character')} (U+{ord(err.object[err.start]):04X}), not ASCII"
    else:
        why = clean(endpoint.redact(str(err) or err.__class__.__name__), 160)
    return f"{where} could not be sent from here ({why}); nothing reached the server"


def _failed(err: Exception, where: str, endpoint: Endpoint, timeout: float, watch: Watchdog) -> FetchError:
    """The FetchError for an exchange that raised."""
    if isinstance(err, httpx.ConnectTimeout):
        return FetchError("timeout", f"{where}: no connection within {min(endpoint.connect_timeout, timeout):.1f} s")
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
        return FetchError(*_why_connect_failed(err))
    if isinstance(err, httpx.TooManyRedirects):
        return FetchError("redirect", f"{where}: too many redirects")
    if isinstance(err, httpx.DecodingError):
        return FetchError("protocol", f"{where} sent an undecodable body")
    if isinstance(err, httpx.UnsupportedProtocol):  # the URL was checked: only a redirect gets here
        return FetchError("redirect", f"{where}: redirected off http(s): {clean(str(err), 160)}")
    if isinstance(err, (httpx.LocalProtocolError, UnicodeEncodeError)):  # h11 refused to send what we built
        return FetchError("client", _unsent(where, endpoint, err))
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
    return FetchError("protocol", f"{where}: {clean(detail, 200)}")


def _reset(err: BaseException) -> bool:
    chain: BaseException | None = err
    while chain is not None:
        if isinstance(chain, ConnectionResetError):
            return True
        chain = chain.__cause__ or chain.__context__
    return False
