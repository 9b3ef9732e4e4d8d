"""What the handler acts on, read from its command line once (main): below it the handler never sees the Namespace."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from check_vllm.cli import option_table
from check_vllm.cli.connection import Connection, connection_of
from check_vllm.cli.option_table import HANDLER
from check_vllm.contract.defaults import Options, Settings
from check_vllm.contract.instants import Instant
from check_vllm.machine import clock as clocks
from check_vllm.memory.door import Door
from check_vllm.memory.statefile import default_dir
from check_vllm.restart.fleet import ICINGA, PROMETHEUS, Budget
from check_vllm.restart.history import history_file
from check_vllm.restart.policy import Policy
from check_vllm.restart.post_mortem import Plan


class Config(NamedTuple):
    """What the handler acts on, taken from its command line once (main): never the argparse Namespace."""

    state_dir: Path
    url: str
    lock_timeout: float
    policy: Policy
    #: The check's settings and the host's witness, for its own look at the server's process before it acts.
    lifecycle: Settings
    process: Options
    command_timeout: float
    dry_run: bool = False
    post_mortem: Plan = Plan()
    #: The check's connection rows, read into an Endpoint only when a post-mortem reads the last page.
    connection: Connection | None = None
    #: The fleet restart budget (--fleet-*), asked once a restart is decided; None when off.
    fleet: Budget | None = None

    def door(self, clock: Callable[[], Instant] = clocks.now) -> Door:
        """The check's state store, locked on this server's restart history: its calls take turns."""
        return Door(self.state_dir, self.url, self.policy.proxy,
                    lock_on=history_file(self.state_dir, self.url, self.lock_timeout), now=clock)


def configured(args: argparse.Namespace) -> Config:
    """The Namespace read once, here: below main the handler sees only what it acts on."""
    return Config(
        state_dir=Path(args.state_dir) if args.state_dir else default_dir(),
        url=args.url.rstrip("/"),
        lock_timeout=args.lock_timeout,
        policy=Policy(cooldown=args.cooldown, max_per_hour=args.max_per_hour,
                      max_verdict_age=args.max_verdict_age, proxy=args.proxy),
        lifecycle=option_table.settings_from(args, HANDLER),
        process=option_table.options_from(args, HANDLER),
        command_timeout=args.command_timeout,
        dry_run=args.dry_run,
        post_mortem=Plan(not args.no_post_mortem, Path(args.post_mortem_dir) if args.post_mortem_dir else None,
                         args.post_mortem_budget, args.post_mortem_keep, args.post_mortem_max_mb << 20),
        connection=connection_of(args),
        fleet=_budget(args),
    )


def _budget(args: argparse.Namespace) -> Budget | None:
    """The fleet restart budget of one source (options checked they are not both given), or None when off."""
    icinga = getattr(args, "fleet_icinga", None)
    url = icinga or args.fleet_prometheus
    if not url:
        return None
    return Budget(url.rstrip("/"), args.fleet_group, args.fleet_max, args.fleet_unasked, args.fleet_timeout,
                  source=ICINGA if icinga else PROMETHEUS, login=getattr(args, "fleet_login", None),
                  ca_data=getattr(args, "fleet_ca_data", None))
