"""A Netdata external plugin (plugins.d protocol) that charts vLLM servers with check_vllm's verdicts.

Netdata's generic Prometheus collector can chart vLLM's counters, but it cannot tell busy from stuck
from restarted. This plugin reads the same /metrics, hands it to the same pure decision engine as the
check (check_vllm.judge.assess), and charts the verdict next to the raw signals, so Netdata and Nagios agree.

Modules: `config` (vllm.conf -> jobs), `charts` (the declarative chart table and protocol text), `alarms`
(which verdict raises which alarm, and the health.d text), `collector` (one job's tick, and the threads that run
many), `install` (writes vllm.plugin).
"""
