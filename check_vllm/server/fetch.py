"""All of the check's HTTP: one httpx client, hard time and size limits, typed errors.

Every failure becomes a FetchError (check_vllm.server.fetch_errors: its kinds and messages); nothing here raises
anything else.
"""

from __future__ import annotations

import json
import ssl
import time
import zlib
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import httpx

from check_vllm.contract.defaults import CONNECT_TIMEOUT
from check_vllm.contract.safe_text import clean, without_userinfo
from check_vllm.server.fetch_errors import FetchError, failed, unsent
from check_vllm.server.watchdog import Watchdog

DEFAULT_MAX_BYTES = 8 << 20  # a real /metrics page is ~55 KB; 8 data-parallel engines ~0.5 MB
#: httpx's defaults that say what HTTP/1.1 already means (any type; a persistent connection): 37 bytes of every
#: request, ~2 % of a steady-state run's bytes on the wire, kept off it.
UNSENT_HEADERS = ("Accept", "Connection")


class Response(NamedTuple):
    status: int
    body: bytes
    content_type: str
    seconds: float
    sent: int  # request bytes, for the bench
    redirects: int = 0  # redirects followed to get here
    headers: Mapping[str, str] = MappingProxyType({})

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
    #: The CA bundle's PEM text, as it was checked (cli.connection): loaded from these bytes, never again from
    #: its path, so the file checked is the file used.
    ca_data: str | None = None
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
        elif self.ca_data:
            verify = ssl.create_default_context(cadata=self.ca_data)
        elif self.url.startswith("https:"):
            verify = True
        else:  # plain http needs no CA bundle (loading one is most of a client's start-up); a redirect
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # to https meets no trusted CA: it fails closed
        client = httpx.Client(
            verify=verify, trust_env=False, follow_redirects=True, max_redirects=3,
            headers={"User-Agent": "check_vllm", "Accept-Encoding": "gzip, identity"},
        )
        for default in UNSENT_HEADERS:
            del client.headers[default]
        return client


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
        raise FetchError("broken answer", f"{where} sent an undecodable body", resp.status_code) from None
    # A compressed stream carries its own end (and gzip a length and CRC): HTTP framing that matches
    # the bytes sent proves nothing when the sender cut the stream before it. Half a page is no reading.
    if received and not inflate.eof:
        raise FetchError("broken answer", f"{where} sent a compressed body that ends early "
                                     f"({received} bytes, the {encoding} stream is cut short)", resp.status_code)


def request(
    client: httpx.Client, endpoint: Endpoint, method: str, path: str, timeout: float,
    body: dict[str, Any] | None = None,
) -> Response:
    """One request with a deadline for the whole exchange, headers and body included, and a size cap. Every
    request carries the key when there is one: llama-server with --api-key guards every route but its health and
    model list, /metrics included (tools/server/server-http.cpp public_endpoints)."""
    url = endpoint.url.rstrip("/") + path
    headers = {}
    if endpoint.api_key:
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
            raise FetchError("client", unsent(where, endpoint.redact, err)) from None
        resp = client.send(req, stream=True)
        try:
            watch.answered = True
            watch.watch(resp.extensions.get("network_stream"))
            data = _body(resp, endpoint, where, timeout, watch.deadline)
        finally:
            resp.close()
        sent = len(content or b"") + len(method) + len(path) + 100
        return Response(resp.status_code, data, resp.headers.get("content-type", ""),
                        time.monotonic() - started, sent, len(resp.history), resp.headers)
    except FetchError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure becomes a FetchError; nothing else is raised
        raise failed(err, where, endpoint.redact, endpoint.connect_timeout, timeout, watch) from None
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


