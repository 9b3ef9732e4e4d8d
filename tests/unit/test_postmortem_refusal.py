"""Why a dumper was refused (issue 51), in words per cause, from probes given as values: the kernel's checks
(kernel/ptrace.c, security/commoncap.c, Yama) for another user's process, a scope of 1, 2 or 3, a target with
capabilities the handler lacks, a capability held and refused anyway, another tracer; and the README that says
each reason once. The real refusal (root without CAP_SYS_PTRACE) is tests/host/test_postmortem_refused.py."""

from __future__ import annotations

import os

import pytest

from check_vllm.postmortem import readme
from check_vllm.postmortem.refusal import MARK, Probes, explain, pid_of, probe, refused, why

PTRACE = 1 << 19
ALL_CAPS = 0x1FFFFFFFFFF
ROOT_NO_PTRACE = ALL_CAPS & ~PTRACE
NOBODY = 65534
GRANTS = ('securityContext.capabilities.add: ["SYS_PTRACE"]', "`--cap-add SYS_PTRACE` for docker run",
          "`cap_add: [SYS_PTRACE]` in compose")

PY_SPY = b"Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\n"
PY_SPY_EPERM = b"Error: Operation not permitted (os error 1)\n"
PY_SPY_EACCES = (b"Error: Failed to get process executable name. Check that the process is running.\n\nCaused by:\n"
                 b"    0: Permission denied (os error 13)\n")
GDB = (b"Could not attach to process.  If your uid matches the uid of the target\nprocess, check the setting of "
       b"/proc/sys/kernel/yama/ptrace_scope, or try\nagain as the root user.\nptrace: Operation not permitted.\n"
       b"No threads.\n")


@pytest.mark.parametrize("output", [PY_SPY, PY_SPY_EPERM, PY_SPY_EACCES, GDB])
def test_the_dumpers_words_for_a_refusal_are_a_refusal(output):
    assert refused(output)


@pytest.mark.parametrize("output", [
    b"Error: Failed to get stack traces\n2: Bad address (os error 14)\n",  # a racy read: run again, not refused
    b"warning: process 42 is already traced by process 7\nptrace: Operation not permitted.\n",  # another tracer
    b"Process 42: python3\nThread 42 (idle): \"MainThread\"\n", b""])
def test_other_failures_are_not(output):
    assert not refused(output) and explain(output, os.getpid()) == ""


def test_the_target_is_told_by_the_dumpers_command_line():
    assert pid_of(("/bin/py-spy", "dump", "--pid", "101", "--nonblocking")) == 101
    assert pid_of(("/usr/bin/gdb", "-nx", "-batch", "-p", "200", "-ex", "bt")) == 200
    assert pid_of(("/usr/bin/nvidia-smi", "-q")) is None and pid_of(None) is None


def test_root_without_the_capability_and_another_users_process_names_the_three_settings():
    said = why(Probes(euid=0, caps=ROOT_NO_PTRACE, scope=None, uids=(NOBODY,) * 3))
    assert said.startswith(f"{MARK}: another user's process (uid {NOBODY}) and no CAP_SYS_PTRACE here (root); ")
    assert all(g in said for g in GRANTS) and "CapabilityBoundingSet=" in said


def test_a_pod_that_drops_all_capabilities_and_runs_as_its_servers_user_is_held_by_yama_1():
    """KServe-style: runAsUser 1000 for the server and the preStop hook alike, drop ALL, an Ubuntu node (scope 1):
    the same user, not an ancestor. A capability added to a non-root container reaches no process: root or 0."""
    said = why(Probes(euid=1000, caps=0, scope=1, uids=(1000,) * 3))
    assert "kernel.yama.ptrace_scope is 1: a process of the same user may be attached only by its ancestors" in said
    assert "run the handler as root" in said and "a non-root container user gets no added capability" in said
    assert "set kernel.yama.ptrace_scope=0 on the host" in said
    root = why(Probes(euid=0, caps=0, scope=1, uids=(0,) * 3))  # root in a pod that drops ALL: add it back
    assert "ptrace_scope is 1" in root and all(g in root for g in GRANTS)


def test_scope_2_needs_the_capability_and_scope_3_allows_nothing_until_reboot():
    two = why(Probes(euid=0, caps=ROOT_NO_PTRACE, scope=2, uids=(0,) * 3))
    assert "ptrace_scope is 2: only CAP_SYS_PTRACE may attach" in two and GRANTS[1] in two
    for caps in (0, ALL_CAPS):  # the capability does not help
        three = why(Probes(euid=0, caps=caps, scope=3, uids=(0,) * 3))
        assert "ptrace_scope is 3" in three and "until the host reboots" in three and "can only be raised" in three
        assert "SYS_PTRACE" not in three


def test_a_non_root_handler_and_another_users_server():
    assert why(Probes(euid=1000, caps=0, scope=0, uids=(2000,) * 3)).endswith(
        "(uid 2000; the handler runs as uid 1000, without CAP_SYS_PTRACE): run the handler as root, or as uid 2000")
    scoped = why(Probes(euid=1000, caps=0, scope=1, uids=(2000,) * 3))  # its own user would not do either
    assert "or as uid 2000" not in scoped and "run the handler as root" in scoped
    mixed = why(Probes(euid=1000, caps=0, scope=0, uids=(1000, 0, 0)))  # a setuid program: not the same user
    assert "another user's process (uid 0;" in mixed


def test_a_target_with_capabilities_the_handler_lacks():
    """Root without CAP_SYS_PTRACE and a root server with all its capabilities (commoncap: a subset, or ptrace)."""
    said = why(Probes(euid=0, caps=ROOT_NO_PTRACE, scope=0, uids=(0,) * 3, target_caps=ALL_CAPS))
    assert "holds capabilities this one lacks" in said and GRANTS[0] in said


def test_refused_with_the_capability_or_by_another_tracer():
    held = why(Probes(euid=0, caps=ALL_CAPS, scope=1, uids=(NOBODY,) * 3))
    assert "although CAP_SYS_PTRACE is held here" in held and "seccomp" in held and "AppArmor" in held
    traced = why(Probes(euid=0, caps=ALL_CAPS, scope=0, uids=(0,) * 3, tracer=777))
    assert "process 777 (a debugger, strace) already traces it" in traced
    plain = why(Probes(euid=0, caps=ROOT_NO_PTRACE, scope=0, uids=(0,) * 3))
    assert "no CAP_SYS_PTRACE here" in plain and GRANTS[2] in plain


def test_the_probes_of_this_process():
    got = probe(os.getpid())
    assert got.euid == os.geteuid() and got.uids[:2] == (os.getuid(), os.geteuid()) and got.tracer in (0, os.getppid())


def test_the_readme_says_each_reason_once():
    reason = why(Probes(euid=0, caps=ROOT_NO_PTRACE, scope=None, uids=(NOBODY,) * 3))
    steps = [("py-spy 100 (python3)", f"failed (exit 1) in 0.0 s: Permission Denied; {reason}"),
             ("py-spy 101 (VLLM::EngineCor)", f"failed (exit 1) in 0.0 s: Permission Denied; {reason}"),
             ("gdb 200 (llama-server)", f"failed in 0.1 s: ptrace: Operation not permitted.; {reason}"),
             ("nvidia-smi -q", "no nvidia-smi on this host")]
    text = readme.text("b", "now", "host", [], steps, 1.0, 20.0)
    assert text.count(reason) == 1 and text.count(f"; {MARK} (why: below)") == 3
    assert "  gdb 200 (llama-server): failed in 0.1 s: ptrace: Operation not permitted.; " in text
    assert text.index("Why the kernel refused") > text.index("nvidia-smi -q: no nvidia-smi")
    assert "Why the kernel refused" not in readme.text("b", "now", "host", [], steps[3:], 1.0, 20.0)
