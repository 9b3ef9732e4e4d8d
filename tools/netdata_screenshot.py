#!/usr/bin/env python3
"""Take docs/netdata-frozen-engine.png: the REAL Netdata dashboard's vllm charts through a frozen engine.

    bash .ci/screenshot-deps.sh && python tools/netdata_screenshot.py

`python`: one with check_vllm installed (`pip install -e .`, or .tox/py3/bin/python). A figure for
docs/netdata.md, not a test (not run by CI or tox). It installs nothing: without Debian's netdata or chromium, or
check_vllm's dependencies, it says what to run and exits 2. What it does, all on 127.0.0.1:

1. starts the vLLM simulator (vllm_simulator, scenario "busy": 2 running, 3 waiting, tokens moving);
2. starts a real Netdata 1.37 with our vllm.plugin and health file (tests/netdata/agent.py: RAM database,
   every other plugin off), one job `sim` with stuck_readings = 2 and stuck_seconds = 15;
3. charts busy for --busy seconds, freezes the engine (scenario "stuck": work present, no counter moves)
   for --frozen seconds, so the verdict goes stalling -> stuck and the vllm_stuck alarm raises, then
   resumes ("busy") for --resumed seconds;
4. serves a small page that embeds Netdata's own dashboard.js charts (state, requests, tokens, stalled,
   steps) from just before the run until now, the frozen period shaded, the agent's alarm log below,
   and renders it with headless Chromium;
5. stops Chromium, the page server, Netdata and the simulator (also on Ctrl-C or an error).

Takes about busy + frozen + resumed + 10 s (~90 s by default). The PNG goes through pngquant when it
is installed (Debian package pngquant) and the script warns when the file is over 400 KB.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

try:
    from tests.netdata.agent import Agent, NetdataError, netdata_binary
    from vllm_simulator import Simulator
except ImportError as err:  # e.g. prometheus_client: this interpreter lacks check_vllm's dependencies
    print(f"netdata_screenshot: {err}: run it with a Python that has check_vllm installed "
          f"(`pip install -e {REPO}`, or {REPO}/.tox/py3/bin/python after `tox -e py3`)", file=sys.stderr)
    sys.exit(2)

OUT = REPO / "docs" / "netdata-frozen-engine.png"
NETDATA_DEPS = ".ci/netdata-deps.sh"
SCREENSHOT_DEPS = ".ci/screenshot-deps.sh"
MAX_BYTES = 400_000
JOB = "sim"
STUCK_SECONDS = 15
CHROMIUM_FLAGS = (  # the closed network refuses Chromium's own background connections without these
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--force-device-scale-factor=1",
)
# state chart: only the verdicts this story goes through, stacked, so the band changes colour
STATES = (("busy", "#3c9a3c"), ("stalling", "#f0a30a"), ("stuck", "#d62728"))


def log(msg: str) -> None:
    print(f"[netdata-screenshot {time.monotonic() - T0:5.1f}s] {msg}", file=sys.stderr, flush=True)


T0 = time.monotonic()


def prerequisites(chromium: str | None) -> str:
    """The chromium binary; exits 2 with what to run when netdata or chromium is missing."""
    missing = []
    try:
        netdata_binary()
    except NetdataError:
        missing.append(f"netdata (Debian package netdata): bash {NETDATA_DEPS}")
    found = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not os.access(found, os.X_OK):
        missing.append(f"chromium (Debian package chromium): bash {SCREENSHOT_DEPS}")
    if missing:
        print("netdata_screenshot: missing prerequisites (this script installs nothing):\n  "
              + "\n  ".join(missing), file=sys.stderr)
        sys.exit(2)
    assert found
    return found


# --- the page ------------------------------------------------------------------------------------------------

def chart_div(chart: str, title: str, after: int, before: int, height: int, extra: str = "") -> str:
    return (f'<div class="chart"><div data-netdata="vllm_{JOB}.{chart}" data-title="{html.escape(title)}" '
            f'data-after="{after}" data-before="{before}" data-width="100%" data-height="{height}px" '
            f'data-chart-library="dygraph" data-dygraph-legend="always" {extra}></div></div>')


def alarm_rows(agent: Agent) -> str:
    entries = agent.get("/api/v1/alarm_log?after=0")
    rows = []
    for e in sorted((e for e in entries if str(e.get("chart", "")).startswith("vllm_")),
                    key=lambda e: (e.get("when", 0), e.get("unique_id", 0))):
        if not {e.get("status"), e.get("old_status")} & {"WARNING", "CRITICAL"}:
            continue  # the initial UNINITIALIZED -> CLEAR of every alarm
        when = time.strftime("%H:%M:%S", time.localtime(e["when"]))
        status = html.escape(str(e.get("status")))
        rows.append(f"<tr><td>{when}</td><td>{html.escape(e['chart'])}</td><td><b>{html.escape(e['name'])}</b></td>"
                    f"<td>{html.escape(str(e.get('old_status')))} &rarr; <span class='{status}'>{status}</span></td>"
                    f"<td>{html.escape(html.unescape(str(e.get('info', ''))))}</td></tr>")  # netdata escapes it
    return "\n".join(rows) or "<tr><td colspan=5>(no vllm alarm transitions logged)</td></tr>"


def page(agent: Agent, marks: dict[str, float], version: str) -> str:
    # The window ends at "now" (before = 0): dashboard.js shows the latest values in the legends only when
    # the window ends at the agent's last point, so a fixed end drew "-" there. It starts just before the run.
    after, before = -(int(time.time() - marks["start"]) + 4), 0
    freeze, resume = marks["freeze"], marks["resume"]
    hms = {k: time.strftime("%H:%M:%S", time.localtime(v)) for k, v in marks.items()}
    states = ",".join(s for s, _ in STATES)
    colors = " ".join(c for _, c in STATES)
    charts = "\n".join((
        chart_div("state", "verdict (check_vllm's words): busy / stalling / stuck", after, before, 190,
                  f'data-dimensions="{states}" data-colors="{colors}" data-dygraph-type="stacked" '
                  'data-dygraph-valuerange="[0, 1.05]"'),
        chart_div("requests", "requests: running and waiting (work stays queued while frozen)", after, before, 190,
                  'data-dygraph-includezero="true"'),
        chart_div("tokens", "tokens/s: prompt and generation (drop to 0 while frozen)", after, before, 190),
        chart_div("steps", "engine steps/s", after, before, 160),
        chart_div("stalled", "seconds without progress while work is present", after, before, 190),
    ))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>check_vllm in Netdata: a frozen engine</title>
<style>
 body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 18px 26px; color: #222;
        background: #fff; }}
 h1 {{ font-size: 22px; margin: 0 0 4px 0; }}
 p.sub {{ margin: 0 0 10px 0; color: #444; font-size: 14px; }}
 .chart {{ margin: 0 0 10px 0; }}
 .legend-band {{ display: inline-block; width: 28px; height: 11px; background: rgba(214,39,40,0.13);
                border: 1px solid rgba(214,39,40,0.5); vertical-align: middle; }}
 table {{ border-collapse: collapse; font-size: 13px; margin-top: 4px; }}
 td, th {{ border-bottom: 1px solid #ddd; padding: 3px 10px 3px 0; text-align: left; }}
 .CRITICAL {{ color: #d62728; font-weight: bold; }} .WARNING {{ color: #c77c00; font-weight: bold; }}
 .CLEAR {{ color: #2a8a2a; font-weight: bold; }}
</style>
<script>
 var netdataServer = "{agent.base}";
 var netdataTheme = "white";
 var netdataNoBootstrap = true;
 var netdataShowHelp = false;
 var netdataShowAlarms = false;
 var netdataRegistry = false;
 var netdataPrepCallback = function () {{
   NETDATA.options.current.stop_updates_when_focus_is_lost = false;
   NETDATA.options.current.eliminate_zero_dimensions = false;
   NETDATA.options.current.update_only_visible = false;
   NETDATA.options.current.smooth_plot = false;
   NETDATA.options.current.seconds_as_time = false;  // the stalled chart in plain seconds
   // Netdata's own "highlighted time-frame" (what a drag with Alt does in its dashboard): the frozen period
   NETDATA.themes.current.highlight = "rgba(214, 39, 40, 0.11)";
   NETDATA.globalChartUnderlay.init(null, {freeze * 1000:.0f}, {resume * 1000:.0f}, null, null);
 }};
</script>
<script src="{agent.base}/dashboard.js"></script>
</head><body>
<h1>check_vllm's vllm.plugin in a real Netdata {html.escape(version)}: an engine frozen with work, then resumed</h1>
<p class="sub">vLLM simulator on 127.0.0.1, job <code>{JOB}</code>, one reading per second,
 <code>stuck_readings = 2</code>, <code>stuck_seconds = {STUCK_SECONDS}</code>.
 Busy from {hms['start']}, <span class="legend-band"></span> <b>frozen</b> {hms['freeze']} &ndash; {hms['resume']}
 (requests stay running and waiting, no counter moves), resumed until {hms['end']}.</p>
{charts}
<h1 style="font-size:17px; margin-top:8px">Netdata alarm log (health.d/vllm.conf)</h1>
<table><tr><th>time</th><th>chart</th><th>alarm</th><th>status</th><th>info</th></tr>
{alarm_rows(agent)}
</table>
</body></html>
"""


class PageServer:
    """One HTML page on 127.0.0.1 (a free port), served from a thread."""

    def __init__(self, body: str) -> None:
        data = body.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200 if self.path in ("/", "/index.html") else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def screenshot(chromium: str, url: str, out: Path, width: int, height: int, wait_ms: int, tmp: Path) -> None:
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}",
           f"--window-size={width},{height}", f"--virtual-time-budget={wait_ms}", f"--screenshot={out}", url]
    log(f"chromium: {' '.join(cmd[1:])}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, start_new_session=True)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"chromium exited with {done.returncode}, no {out}:\n{done.stderr[-3000:]}")


def shrink(path: Path) -> None:
    pngquant = shutil.which("pngquant")
    if pngquant:
        subprocess.run([pngquant, "--force", "--skip-if-larger", "--quality=70-95", "--output", str(path),
                        str(path)], check=False)
    size = path.stat().st_size
    if size > MAX_BYTES:
        log(f"WARNING: {path} is {size / 1000:.0f} KB (over {MAX_BYTES / 1000:.0f} KB): install pngquant "
            "(apt-get install pngquant) or pass a smaller --height")


# --- the run -------------------------------------------------------------------------------------------------

def state_now(agent: Agent) -> str | None:
    doc = agent.get(f"/api/v1/data?chart=vllm_{JOB}.state&after=-2&format=json")
    row = next((r for r in doc["data"] if None not in r[1:]), None)
    return next((doc["labels"][i] for i, v in enumerate(row or []) if i and v), None)  # 1 + its state


def watch(agent: Agent, seconds: float, seen: list[tuple[float, str]]) -> None:
    """Sleep `seconds`, noting each change of the charted verdict and of the vllm_stuck alarm."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            word = state_now(agent) or "?"
            alarm = agent.get("/api/v1/alarms")["alarms"].get(f"vllm_{JOB}.state.vllm_stuck", {}).get("status")
            now = f"{word}" + (f", vllm_stuck {alarm}" if alarm else "")
        except OSError as err:
            now = f"(agent: {err})"
        if not seen or seen[-1][1] != now:
            seen.append((time.time(), now))
            log(f"charted: {now}")
        time.sleep(0.5)


def run(args: argparse.Namespace) -> None:
    chromium = prerequisites(args.chromium)
    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="netdata-screenshot-") as tmpdir:
        tmp = Path(tmpdir)
        sim = Simulator(scenario="busy").start()
        agent: Agent | None = None
        try:
            conf = f"[DEFAULT]\nstuck_readings = 2\nstuck_seconds = {STUCK_SECONDS}\n[{JOB}]\nurl = {sim.url}\n"
            agent = Agent(tmp / "netdata", conf).start()
            version = str(agent.get("/api/v1/info").get("version", "1.37"))
            log(f"simulator {sim.url} (busy), netdata {version} on {agent.base}")
            agent.wait_for("busy charted", lambda: state_now(agent) == "busy", 20)
            seen: list[tuple[float, str]] = []
            marks = {"start": time.time()}
            watch(agent, args.busy, seen)
            sim.set_scenario("stuck")
            marks["freeze"] = time.time()
            log("simulator frozen (scenario stuck)")
            watch(agent, args.frozen, seen)
            sim.set_scenario("busy")
            marks["resume"] = time.time()
            log("simulator resumed (scenario busy)")
            watch(agent, args.resumed, seen)
            marks["end"] = time.time()
            time.sleep(2)  # the last points and alarm-log entries
            if not any("stuck" in what.split(",")[0] for _, what in seen):
                log("WARNING: the verdict never reached stuck; is --frozen longer than "
                    f"stuck_seconds ({STUCK_SECONDS}) + a few seconds?")
            body = page(agent, marks, version)
            if args.keep_html:
                args.keep_html.write_text(body)
            with PageServer(body) as server:
                screenshot(chromium, server.url, out, args.width, args.height, args.wait_ms, tmp)
        finally:
            if agent is not None:
                agent.stop()
            sim.stop()
    shrink(out)
    log(f"wrote {out} ({out.stat().st_size / 1000:.0f} KB) in {time.monotonic() - T0:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help=f"PNG to write (default {OUT.relative_to(REPO)})")
    p.add_argument("--busy", type=float, default=20, help="seconds busy before the freeze (default 20)")
    p.add_argument("--frozen", type=float, default=40, help="seconds frozen (default 40)")
    p.add_argument("--resumed", type=float, default=20, help="seconds busy after the freeze (default 20)")
    p.add_argument("--width", type=int, default=1400, help="window width (default 1400)")
    p.add_argument("--height", type=int, default=1220, help="window height (default 1220)")
    p.add_argument("--wait-ms", type=int, default=15000,
                   help="Chromium's --virtual-time-budget for the charts to load (default 15000)")
    p.add_argument("--chromium", help="Chromium binary (default: chromium on PATH)")
    p.add_argument("--keep-html", type=Path, help="also write the rendered page here (to debug it)")
    try:
        run(p.parse_args(argv))
    except (NetdataError, RuntimeError, AssertionError) as err:
        print(f"netdata_screenshot: FAILED: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
