"""Issue 46, case 3: an RL weight update judged by what moves. `vllm:rl_weight_update_operations_in_flight` counts
operations the API server awaits, not bytes moving: a trainer that died inside an update leaves it at 1 for ever.
The same page's `vllm:rl_weight_update_operations_total` moves while operations finish. The installed check, end to
end, against a real vLLM 0.32 page (frozen: work present, nothing moving) with both families added."""

from __future__ import annotations

import time

from check_vllm.contract.vocab import CRITICAL, OK
from tests.rig.pages import PageServer, page
from tests.rig.scripts import FAST

ARGS = (*FAST, "--pause-grace", "1.5", "--stuck-seconds", "1", "--stuck-readings", "2")


def _with_weights(finished: int) -> str:
    return page("frozen_a") + (
        'vllm:rl_weight_update_operations_in_flight{operation="update"} 1.0\n'
        f'vllm:rl_weight_update_operations_total{{operation="update",outcome="success"}} {finished}.0\n')


def _runs(srv: PageServer, run_check, pages: list[str]) -> list:
    seen = []
    for text in pages:
        srv.hand_out(text)
        seen.append(run_check("-u", srv.url, *ARGS))
        time.sleep(0.6)
    return seen


def test_a_dead_trainers_update_is_proven_stuck_after_the_pause_grace(run_check):
    with PageServer(_with_weights(3)) as srv:
        seen = _runs(srv, run_check, [_with_weights(3)] * 9)
    lines = [r.first for r in seen]
    assert seen[1].word == "paused" and seen[1].code == OK, lines
    assert seen[-1].word == "stuck" and seen[-1].code == CRITICAL, lines
    assert "none finished for" in seen[-1].status and "weights are moving in" not in seen[-1].status, lines


def test_a_long_update_whose_operations_keep_finishing_is_never_critical(run_check):
    with PageServer(_with_weights(3)) as srv:
        seen = _runs(srv, run_check, [_with_weights(3 + n) for n in range(9)])
    lines = [r.first for r in seen]
    assert all(r.word == "paused" and r.code == OK for r in seen[1:]), lines
    assert "weights are moving in" in seen[-1].status, lines
