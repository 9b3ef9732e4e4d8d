#!/usr/bin/env python3
"""The classic vLLM watchdog, as the incident had it, minus the restart: it only says what it would do.

Every --interval seconds it sends one real chat request (`POST /v1/chat/completions`, max_tokens 1)
with a --timeout, as a systemd watchdog script, a cron job or a liveness probe does. --failures
consecutive failures (timeout, HTTP error, refused connection) mean "would restart": it logs that,
resets its count as if it had restarted the server, and goes on. It never restarts anything.

One JSON line per probe to --log (and stdout):
  {"at": epoch, "ok": bool, "seconds": s, "result": "HTTP 200 length" | "timeout" | "refused" | ...,
   "consecutive": n, "would_restart": bool, "would_restarts": total}

Standard library only, so it runs with any python3, like the scripts it stands for.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
import urllib.error
import urllib.request


def probe(url: str, model: str, timeout: float) -> tuple[bool, str]:
    body = json.dumps({"model": model, "max_tokens": 1, "temperature": 0.0,
                       "messages": [{"role": "user", "content": "are you alive?"}]}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read())
        reason = (data.get("choices") or [{}])[0].get("finish_reason")
        return True, f"HTTP {resp.status} {reason}"
    except urllib.error.HTTPError as err:
        return False, f"HTTP {err.code}"
    except TimeoutError:
        return False, "timeout"
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return False, "timeout"
        if isinstance(reason, ConnectionRefusedError):
            return False, "refused"
        return False, f"error: {reason}"
    except (OSError, ValueError) as err:  # reset mid-answer, bad JSON
        return False, f"error: {type(err).__name__}: {err}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between probe starts")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds a probe may take")
    p.add_argument("--failures", type=int, default=3, help="consecutive failures before 'would restart'")
    p.add_argument("--log", required=True)
    args = p.parse_args(argv)

    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consecutive = would_restarts = 0
    with open(args.log, "a", buffering=1) as log:
        while running:
            started = time.time()
            ok, result = probe(args.url, args.model, args.timeout)
            consecutive = 0 if ok else consecutive + 1
            would = consecutive >= args.failures
            if would:
                would_restarts += 1
                consecutive = 0  # as if it had restarted the server
            line = json.dumps({"at": round(started, 3), "ok": ok, "seconds": round(time.time() - started, 3),
                               "result": result, "consecutive": consecutive, "would_restart": would,
                               "would_restarts": would_restarts})
            log.write(line + "\n")
            print(line, flush=True)
            pause = args.interval - (time.time() - started)
            while running and pause > 0:
                time.sleep(min(pause, 0.2))
                pause -= 0.2
    return 0


if __name__ == "__main__":
    sys.exit(main())
