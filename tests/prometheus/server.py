"""A real Prometheus (Debian's 2.42) started for one test on 127.0.0.1, and the agents it scrapes: one way to start
them, to wait for Prometheus' own readiness, and to ask its HTTP API."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.rig.ports import free_port
from tests.rig.scripts import script
from tests.rig.waiting import wait_for


@contextlib.contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose output goes to `log`, terminated (then killed) on the way out."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def logs(tmp: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted(tmp.glob("*.log")))


@contextlib.contextmanager
def prometheus(tmp: Path, config: str) -> Iterator[str]:
    """Prometheus on `config` (YAML text), yielded as its API's base URL once its own /-/ready says 200: before
    that its query API answers 503 while the TSDB opens (a CI run read it so)."""
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus package (.ci/prometheus-deps.sh) brings the server with promtool"
    (tmp / "prometheus.yml").write_text(config)
    web = free_port()
    api = f"http://127.0.0.1:{web}"
    with process([binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                  f"--web.listen-address=127.0.0.1:{web}"], tmp / "prometheus.log"):
        wait_for("Prometheus' /-/ready", lambda: _status(f"{api}/-/ready") == 200, 60, 0.2, lambda: logs(tmp))
        yield api


def agent(tmp: Path, name: str, server: str, metrics_port: int, *judge: str) -> contextlib.AbstractContextManager:
    """The installed check_vllm_agent judging `server` every 0.5 s, its verdicts on --metrics-listen."""
    return process([script("check_vllm_agent"), "-u", server, "--listen", f"127.0.0.1:{free_port()}",
                    "--metrics-listen", f"127.0.0.1:{metrics_port}", "--allow", "127.0.0.1", "--interval", "0.5",
                    *judge], tmp / f"{name}.log")


def query(api: str, expr: str) -> list[dict]:
    got = httpx.get(f"{api}/api/v1/query", params={"query": expr}, timeout=5)
    assert got.status_code == 200, got.text
    return got.json()["data"]["result"]


def answered(api: str, expr: str) -> list[dict]:
    """The query's result, or nothing yet when the API cannot be read (for polling)."""
    with contextlib.suppress(httpx.HTTPError):
        return query(api, expr)
    return []


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return 0
