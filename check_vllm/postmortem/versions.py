"""What a post-mortem says of the versions: check_vllm's, the kernel's, the engine's and its libraries' from the
package metadata beside each Python process's interpreter, and the server's own word (vLLM's GET /version,
llama.cpp's /props build_info). Never by running anything: a server's executable is whoever started it's file, and
the handler runs as root (issue 51)."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence

from check_vllm.contract.safe_text import clean
from check_vllm.postmortem import procs
from check_vllm.server.processes import engine_of

#: The server's routes that say its version, in the order they are asked, and the JSON key that holds it.
ROUTES = (("/version", "version"), ("/props", "build_info"))


def answered(route: str, status: int, body: bytes) -> str | None:
    """The version a route's answer names ("vLLM /version: 0.32.0"), or None when it names none."""
    key = dict(ROUTES).get(route)
    if status != 200 or key is None:
        return None
    try:
        doc = json.loads(body[:64 << 10])
    except ValueError:
        return None
    value = doc.get(key) if isinstance(doc, dict) else None
    return f"{route}: {clean(str(value), 120)}" if isinstance(value, (str, int, float)) and value != "" else None


def text(family: Sequence[procs.Proc], server_said: str) -> str:
    """versions.txt: one line each, none twice."""
    from check_vllm import __version__

    lines = [f"check_vllm {__version__}", f"kernel {platform.release()} {platform.machine()}"]
    if server_said:
        lines.append(f"the server says {server_said}")
    for p in family:
        engine = engine_of(p.argv)
        if p.python:
            lines += [f"pid {p.pid}: {v}" for v in procs.versions(p)]
        elif engine is not None and p.exe:  # never run: whoever started the process chose that file
            lines += [f"pid {p.pid}: {engine.name} {p.exe} (never run to ask its version)"]
    return "\n".join(dict.fromkeys(lines)) + "\n"
