"""The restart command the monitoring tier hands to check_vllm_restart (after --).

    restart_sim.py URL COUNTER revive   # count, take 3 s (like a unit stopping), then the simulator
                                        # "restarts": dead 1.5 s, then a new process, busy
    restart_sim.py URL COUNTER noop     # count only: a restart that does not help a dead server

Every call appends one line to COUNTER, so the tests count restarts exactly.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request

DOWN_SECONDS = 1.5
#: A real `systemctl restart` takes a while to stop the old process; meanwhile the frozen server keeps
#: answering /metrics and both services keep reaching CRITICAL HARD, which is what the tier must survive.
STOP_SECONDS = 3.0


def main() -> int:
    url, counter, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(counter, "a", encoding="utf-8") as fh:
        fh.write(f"{time.time():.3f} {mode}\n")
    if mode == "revive":
        time.sleep(STOP_SECONDS)
        # A process restart as the check sees it: port closed for a moment, then a new process
        # (new start time, counters from 0) serving work again.
        body = json.dumps({"scenario": "dead", "seconds": DOWN_SECONDS, "then": "busy"}).encode()
        req = urllib.request.Request(url.rstrip("/") + "/_sim/scenario", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()
        print(f"simulator restarting (down {DOWN_SECONDS} s)")
    else:
        print("restart command ran; the server stays dead")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
