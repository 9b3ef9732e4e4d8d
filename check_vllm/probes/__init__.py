"""An orchestrator's probe (a Kubernetes exec or httpGet probe, a Docker HEALTHCHECK) answered from check_vllm's
verdicts: the pure table of pass and fail (answers), the check's run answered as an exec probe (exec_probe), a
running agent asked first (ask), and the agent's httpGet side (httpget). "Probe" in this package always means the
orchestrator's; the 1-token completion sent to an idle server is the idle completion (check_vllm.judge.idle_completion).
"""
