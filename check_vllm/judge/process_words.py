"""The words for a run without a reading, of the server's process as the host sees it: starting, loading, never
served, stopping, stopped too long, a crash loop, unreachable, not HTTP, an engine that died. Said by
check_vllm.judge.no_reading; the words of a reading are check_vllm.judge.wording's. Pure.
"""

from __future__ import annotations

from check_vllm.contract.values import ServerProcess
from check_vllm.judge.wording import seconds


def starting(since_restart: float, detail: str) -> str:
    return f"restarted {seconds(since_restart)} ago, not serving yet ({detail})"



def _named(process: ServerProcess) -> str:
    return f"{process.engine} process {process.pid}" + (f" (from its {process.how})" if process.how != "command line" else "")



def loading(process: ServerProcess, age: float, grace: float, detail: str) -> str:
    return f"{_named(process)} started {seconds(age)} ago, not serving yet (grace {seconds(grace)}; {detail})"



def never_served(process: ServerProcess, age: float, grace: float, detail: str) -> str:
    return (f"not serving {seconds(age)} after its start ({_named(process)}, grace {seconds(grace)}; "
            f"{detail})")



def stopping(process: ServerProcess, span: float, grace: float, detail: str) -> str:
    return (f"{_named(process)} served and still lives, refusing for {seconds(span)} (grace {seconds(grace)}; "
            f"{detail})")



def stopping_exited(pid: str, span: float, grace: float, detail: str) -> str:
    return (f"server process {pid} served, stopped and exited, no new process yet; refusing for {seconds(span)} "
            f"(grace {seconds(grace)}; {detail})")



def gone_look_again(detail: str) -> str:
    return (f"nothing listens and no engine server process here, right after it served: a restart between its stop and its "
            f"start? looking again ({detail})")



def stopped_too_long(process: ServerProcess, span: float, grace: float, detail: str) -> str:
    return (f"refusing {seconds(span)} while {_named(process)} lives (it served; stop grace {seconds(grace)}; "
            f"{detail})")



def crash_loop(count: float, span: float, process: ServerProcess, detail: str) -> str:
    return (f"crash loop: {count:g} server processes started in {seconds(span)}, none has served "
            f"(newest {process.pid}; {detail})")



def unreachable(detail: str) -> str:
    return f"{detail}: the monitoring side cannot reach the server; a restart would not help"



def not_http(detail: str) -> str:
    return (f"{detail}: the server does not speak HTTP as asked (an https port behind an http:// URL? a header "
            "too long?); a restart would not help")



def engine_died(detail: str) -> str:
    return f"engine died ({detail})"
