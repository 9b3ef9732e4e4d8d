"""Real Nagios 4 runs the shipped command definitions and service template against simulators.

One nagios4 process for the module, in the foreground as a plain background child, with its own
nagios.cfg (interval_length=1, so intervals are seconds) and directories. Results are read from
status.dat and nagios.log (SERVICE ALERT / SERVICE EVENT HANDLER lines), never by running the check
ourselves; forced checks go through the external command file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.rig.monitoring import (
    FAST_CHECK,
    Simulator,
    after_the_stuck,
    count_lines,
    ensure_installed,
    free_port,
    plugin_dir,
    restart_command,
    restarted_once_by_the_restart_service,
    serve,
    shipped,
    stop_group,
    tail,
    wait_for,
)

from .conftest import TIMINGS, Timer

pytestmark = pytest.mark.monitoring

HOST = "vllm-host"
#: A host named as in the shipped example: its services are called "vllm" and "vllm-restart", the names the
#: restart service's on-demand macros ($SERVICESTATETYPE::vllm$, $SERVICEDOWNTIME::vllm$) look up.
GPU = "gpu-01"
CHECK_ARGS = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in FAST_CHECK.items())


def service(name: str, url: str, state_dir: Path, restart: list[str], cooldown: float, max_per_hour: int,
            log: Path, template: str = "vllm-service", args: str = "", attempts: int = 3, host: str = HOST) -> str:
    main = template == "vllm-service"  # the restart service keeps its template's command and one attempt
    lines = (f"check_command                   check_vllm!{CHECK_ARGS}{args}\n    retry_interval                  1\n"
             f"    max_check_attempts              {attempts}") if main else "notes                           restart service"
    return f"""
define service {{
    use                             {template}
    host_name                       {host}
    service_description             {name}
    {lines}
    check_interval                  1
    _VLLM_URL                       {url}
    _VLLM_STATE_DIR                 {state_dir}
    _VLLM_RESTART_COOLDOWN          {cooldown:g}
    _VLLM_RESTART_MAX_PER_HOUR      {max_per_hour}
    _VLLM_RESTART_MAX_VERDICT_AGE   30
    _VLLM_RESTART_LOG               {log}
    _VLLM_RESTART_COMMAND           {' '.join(restart)}
}}
"""


OBJECTS = f"""
define timeperiod {{
    timeperiod_name 24x7
    alias           always
    sunday          00:00-24:00
    monday          00:00-24:00
    tuesday         00:00-24:00
    wednesday       00:00-24:00
    thursday        00:00-24:00
    friday          00:00-24:00
    saturday        00:00-24:00
}}
define command {{
    command_name    notify-nobody
    command_line    /bin/true
}}
define command {{
    command_name    check-true
    command_line    /bin/true
}}
define contact {{
    contact_name                    nobody
    host_notifications_enabled      0
    service_notifications_enabled   0
    host_notification_period        24x7
    service_notification_period     24x7
    host_notification_options       n
    service_notification_options    n
    host_notification_commands      notify-nobody
    service_notification_commands   notify-nobody
}}
define contactgroup {{
    contactgroup_name   admins
    alias               admins
    members             nobody
}}
define host {{
    host_name               {HOST}
    address                 127.0.0.1
    check_command           check-true
    max_check_attempts      1
    check_interval          300
    check_period            24x7
    notification_period     24x7
    contact_groups          admins
}}
define host {{
    host_name               {GPU}
    address                 127.0.0.1
    check_command           check-true
    max_check_attempts      1
    check_interval          300
    check_period            24x7
    notification_period     24x7
    contact_groups          admins
}}
"""


class Nagios4:
    def __init__(self, root: Path, plugins: Path, services: str) -> None:
        self.root = root
        for d in ("tmp", "checkresults"):
            (root / d).mkdir()
        self.log = root / "nagios.log"
        self.status = root / "status.dat"
        self.cmd = root / "nagios.cmd"
        self.stdout = root / "nagios.stdout"
        shutil.copy(shipped("nagios/check_vllm.cfg"), root / "check_vllm.cfg")
        (root / "objects.cfg").write_text(OBJECTS + services)
        (root / "resource.cfg").write_text(f"$USER1$={plugins}\n")
        self.cfg = root / "nagios.cfg"
        self.cfg.write_text(f"""
log_file={self.log}
cfg_file={root / 'check_vllm.cfg'}
cfg_file={root / 'objects.cfg'}
object_cache_file={root / 'objects.cache'}
precached_object_file={root / 'objects.precache'}
resource_file={root / 'resource.cfg'}
status_file={self.status}
status_update_interval=1
nagios_user=root
nagios_group=root
check_external_commands=1
command_file={self.cmd}
lock_file={root / 'nagios.lock'}
temp_file={root / 'nagios.tmp'}
temp_path={root / 'tmp'}
check_result_path={root / 'checkresults'}
state_retention_file={root / 'retention.dat'}
retain_state_information=0
query_socket={root / 'nagios.qh'}
debug_file={root / 'nagios.debug'}
debug_level=0
interval_length=1
enable_event_handlers=1
log_event_handlers=1
log_service_retries=1
log_initial_states=1
enable_notifications=0
enable_flap_detection=0
check_result_reaper_frequency=1
max_check_result_reaper_time=2
service_inter_check_delay_method=n
host_inter_check_delay_method=n
max_service_check_spread=1
service_interleave_factor=1
use_syslog=0
illegal_macro_output_chars=`~$&|'"<>
event_handler_timeout=60
service_check_timeout=30
""")
        self.proc: subprocess.Popen | None = None

    def validate(self) -> subprocess.CompletedProcess:
        return subprocess.run(["nagios4", "-v", str(self.cfg)], capture_output=True, text=True, timeout=60)

    def start(self) -> None:
        self.proc = subprocess.Popen(["nagios4", str(self.cfg)], stdout=open(self.stdout, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                pytest.fail(f"nagios4 exited with {self.proc.returncode}:\n{tail(self.stdout)}\n{tail(self.log)}",
                            pytrace=False)
            return self.status.exists() and self.cmd.exists()
        wait_for("Nagios 4 to write status.dat", up, 60, diag=self.diag)

    def services(self) -> dict[str, dict[str, str]]:
        """servicestatus blocks of status.dat, by service_description."""
        try:
            text = self.status.read_text(errors="replace")
        except FileNotFoundError:
            return {}
        out = {}
        for block in re.findall(r"servicestatus \{\n(.*?)\n\s*\}", text, re.S):
            fields = dict(line.strip().split("=", 1) for line in block.splitlines() if "=" in line)
            out[fields.get("service_description", "")] = fields
        return out

    def alerts(self, name: str, host: str = HOST) -> list[tuple[str, str, str]]:
        """(state, state type, output) of every SERVICE ALERT of a service, in order."""
        rows = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = re.search(rf"SERVICE ALERT: {host};{re.escape(name)};(\w+);(\w+);\d+;(.*)$", line)
            if m:
                rows.append(m.groups())
        return rows

    def handler_calls(self, name: str, host: str = HOST) -> list[str]:
        return [ln for ln in self.log.read_text(errors="replace").splitlines()
                if f"SERVICE EVENT HANDLER: {host};{name};" in ln]

    def command(self, line: str) -> None:
        """One external command through the command file, stamped now."""
        fd = os.open(self.cmd, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, f"[{int(time.time())}] {line}\n".encode())
        finally:
            os.close(fd)

    def force_check(self, name: str) -> None:
        self.command(f"SCHEDULE_FORCED_SVC_CHECK;{HOST};{name};{int(time.time())}")

    def stop(self) -> None:
        stop_group(self.proc)

    def diag(self) -> str:
        return f"--- nagios.log\n{tail(self.log, 30)}\n--- stdout\n{tail(self.stdout, 10)}"


class Scenario:
    def __init__(self, root: Path, name: str, sim_scenario: str | None, mode: str, cooldown: float,
                 max_per_hour: int = 3) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir()
        self.sim = Simulator(sim_scenario, self.dir / "sim.log") if sim_scenario else None
        self.url = self.sim.url if self.sim else f"http://127.0.0.1:{free_port()}"
        self.counter = self.dir / "restarts.txt"
        self.state_dir = self.dir / "state"
        self.restart = restart_command(self.url, self.counter, mode)
        self.cooldown, self.max_per_hour = cooldown, max_per_hour
        self.log = self.dir / "handler.log"

    def services(self, *names: str, args: str = "", attempts: int = 3, host: str = HOST) -> str:
        return "".join(service(n, self.url, self.state_dir, self.restart, self.cooldown, self.max_per_hour,
                               self.log, args=args, attempts=attempts, host=host) for n in names)

    def restart_service(self, name: str, host: str = HOST) -> str:
        """The shipped vllm-restart-service template beside the main service, with the same variables."""
        return service(name, self.url, self.state_dir, self.restart, self.cooldown, self.max_per_hour, self.log,
                       template="vllm-restart-service", host=host)

    def handler_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture(scope="module")
def nagios(tmp_path_factory):
    ensure_installed()
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("nagios4")
    plugins = plugin_dir(root)
    sc = {
        "busy": Scenario(root, "busy", "busy", "revive", cooldown=1),
        "stuck": Scenario(root, "stuck", "stuck", "revive", cooldown=20),
        "dead": Scenario(root, "dead", None, "noop", cooldown=1, max_per_hour=2),
        "masked": Scenario(root, "masked", "stuck", "revive", cooldown=30),
        "downtime": Scenario(root, "downtime", "busy", "revive", cooldown=1),
    }
    # "masked" is HARD CRITICAL on its first (threshold) result, so the proof of stuck always comes after its
    # HARD state; with 3 attempts the two raced (CI, 08:07: HARD and stuck in the same check, the main's call won)
    services = (sc["busy"].services("busy") + sc["stuck"].services("stuck", "stuck-twin") + sc["dead"].services("dead")
                + sc["masked"].services("masked", args=" --waiting-critical 0", attempts=1)
                + sc["masked"].restart_service("masked-restart")
                + sc["downtime"].services("vllm", host=GPU) + sc["downtime"].restart_service("vllm-restart", host=GPU))
    ng = Nagios4(root, plugins, services)
    yield from serve(ng, sc, root, "nagios4 -v", t0, TIMINGS)


def test_nagios4_validates_the_shipped_definitions(nagios):
    out = nagios.validated
    assert "Total Warnings: 0" in out and "Total Errors:   0" in out, out[-2000:]
    # check_vllm, check_vllm_restart, check_vllm_restart_status (the restart service) and the test's own two
    assert "Checked 8 services." in out and "Checked 5 commands." in out, out[-2000:]


def runs_for(ng: Nagios4, url: str) -> int:
    return sum(1 for ln in ng.runs.read_text().splitlines() if url in ln) if ng.runs.exists() else 0


def test_a_busy_saturated_server_is_never_restarted(nagios):
    s = nagios.scenarios["busy"]
    with Timer("nagios4 busy"):
        for _ in range(6):
            nagios.force_check("busy")
            time.sleep(0.3)
        wait_for("12 checks of the busy service", lambda: runs_for(nagios, s.url) >= 12, 60, diag=nagios.diag)
        # the plugin's own log counts a run when it starts; status.dat shows it once Nagios has reaped the
        # result and written the status (CI, stop 32: the block was there with an empty plugin_output)
        wait_for("status.dat to show a result of the busy service",
                 lambda: nagios.services().get("busy", {}).get("plugin_output", "") != "", 20)
    st = nagios.services()["busy"]
    assert st["current_state"] == "0" and st["plugin_output"].startswith("VLLM OK - busy"), st
    assert [a for a in nagios.alerts("busy") if a[0] != "OK"] == [], nagios.alerts("busy")
    assert count_lines(s.counter) == 0
    assert s.sim.inference_requests() == [], "the check sent inference requests to a busy server"


def test_a_frozen_server_is_restarted_exactly_once_and_recovers_without_another(nagios):
    s = nagios.scenarios["stuck"]
    with Timer("nagios4 stuck -> restart -> OK"):
        wait_for("the restart of the frozen server", lambda: count_lines(s.counter) >= 1, 90, diag=nagios.diag)

        def both_ok():
            st = nagios.services()
            return all(st.get(n, {}).get("current_state") == "0" for n in ("stuck", "stuck-twin"))
        wait_for("both services OK after the restart", both_ok, 60, diag=nagios.diag)
        time.sleep(5)
    assert count_lines(s.counter) == 1
    for name in ("stuck", "stuck-twin"):
        alerts = nagios.alerts(name)
        words = [out.split(" - ", 1)[1].split(":", 1)[0] for _, _, out in alerts if " - " in out]
        assert "stalling" in words and "stuck" in words, alerts
        assert ("CRITICAL", "HARD") in [(a[0], a[1]) for a in alerts], alerts
        after = after_the_stuck(words)
        assert after and after[0] in ("starting", "restarted", "busy"), alerts
    calls = nagios.handler_calls("stuck") + nagios.handler_calls("stuck-twin")
    assert sum(";CRITICAL;HARD;" in c for c in calls) >= 2, calls  # both services asked; one restart
    lines = s.handler_lines()
    assert sum(": restarted: verdict 'stuck'" in ln for ln in lines) == 1, "\n".join(lines)
    assert len([ln for ln in lines if " CRITICAL HARD " in ln]) >= 2, "\n".join(lines)
    assert len(lines) == len(calls), "one decision line per event handler call"
    assert any("starting" in out or "restarted" in out
               for name in ("stuck", "stuck-twin") for _, _, out in nagios.alerts(name))


def test_a_dead_server_stops_being_restarted_when_the_circuit_breaker_trips(nagios):
    s = nagios.scenarios["dead"]
    with Timer("nagios4 dead -> breaker"):
        wait_for("the circuit breaker", lambda: any("circuit breaker open" in ln for ln in s.handler_lines()), 90,
                 diag=lambda: nagios.diag() + "\n" + "\n".join(s.handler_lines()))
        time.sleep(4)
    assert count_lines(s.counter) == 2
    lines = s.handler_lines()
    assert sum(": restarted: verdict 'down'" in ln for ln in lines) == 2, "\n".join(lines)
    breaker = [ln for ln in lines if "circuit breaker open" in ln]
    assert "restart refused" in breaker[0] and "2 restarts in the last hour (--max-per-hour 2)" in breaker[0]
    alerts = nagios.alerts("dead")
    assert any("starting" in out for _, _, out in alerts), alerts
    st = nagios.services()["dead"]
    assert st["current_state"] == "2" and "down" in st["plugin_output"], st


def test_a_server_that_freezes_under_a_critical_threshold_is_restarted_by_the_restart_service(nagios):
    """The main service is HARD CRITICAL for --waiting-critical 0 before the engine is proven stuck: no state
    change follows the proof, so Nagios never calls its event handler on it. The shipped
    vllm-restart-service turns CRITICAL when the restart is due, and its handler call restarts, once."""
    s = nagios.scenarios["masked"]
    with Timer("nagios4 masked stuck -> restart service"):
        restarted_once_by_the_restart_service(
            s.counter, s.handler_lines, lambda: [o for _, _, o in nagios.alerts("masked-restart")],
            diag=lambda: nagios.diag() + "\n" + "\n".join(s.handler_lines()[-10:]),
            main_handler_late=lambda: bool(nagios.handler_calls("masked")) and not nagios.alerts("masked-restart"))
    main = nagios.alerts("masked")
    words = [o.split(" - ", 1)[1].split(":", 1)[0] if " - " in o else "" for _, _, o in main]
    assert "stuck" not in words[:1] and main[0][0] == "CRITICAL", main  # CRITICAL for the threshold first
    handled = nagios.handler_calls("masked-restart")
    assert any(";CRITICAL;HARD;" in ln for ln in handled), handled


def test_a_downtime_on_the_main_service_holds_the_restart_service_back(nagios):
    """The shipped names: "vllm" and "vllm-restart" on one host. A downtime scheduled on "vllm" (the external
    command file, as an operator's web UI does) reaches the restart service through $SERVICEDOWNTIME::vllm$:
    it says "held back" and its handler never restarts, although "vllm" freezes and goes HARD CRITICAL stuck.
    With $SERVICEDOWNTIME$ alone it read its own depth, 0: CRITICAL "due", and its handler restarted."""
    s = nagios.scenarios["downtime"]
    now = int(time.time())
    nagios.command(f"SCHEDULE_SVC_DOWNTIME;{GPU};vllm;{now - 5};{now + 3600};1;0;3600;tester;maintenance")
    wait_for("the downtime on vllm", lambda: nagios.services().get("vllm", {}).get("scheduled_downtime_depth") == "1",
             30, diag=nagios.diag)
    s.sim.post("/_sim/scenario", {"scenario": "stuck"})
    with Timer("nagios4 downtime holds the restart service"):
        wait_for("vllm HARD CRITICAL stuck in its downtime",
                 lambda: any(a[:2] == ("CRITICAL", "HARD") and " - stuck" in a[2] for a in nagios.alerts("vllm", GPU)),
                 90, diag=nagios.diag)

        def held():
            st = nagios.services().get("vllm-restart", {})
            return "held back" in st.get("plugin_output", "") and "downtime" in st.get("plugin_output", "")
        wait_for("the restart service to say held back", held, 30,
                 diag=lambda: f"{nagios.services().get('vllm-restart')}\n{nagios.diag()}")
        time.sleep(5)  # room for a restart that must not come
    lines = s.handler_lines()
    assert count_lines(s.counter) == 0, "\n".join(lines)
    assert not any(": restarted:" in ln for ln in lines), "\n".join(lines)
    assert any("restart refused: CRITICAL HARD, but the service is in a scheduled downtime" in ln for ln in lines), \
        "\n".join(lines)
    said = [o for _, _, o in nagios.alerts("vllm-restart", GPU)]
    assert not any(" CRITICAL - due" in o for o in said), said
    assert nagios.services()["vllm-restart"]["current_state"] == "1", nagios.services()["vllm-restart"]
