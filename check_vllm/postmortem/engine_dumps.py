"""The engine's own stack dumps, taken into the bundle (issue 51): what the engine wrote of itself when it stalled,
there even where ptrace is refused. vLLM 0.33+ (vllm/utils/watch_dog.py ThreadedWatchDog) appends an all-thread
faulthandler dump to `VLLM_STACK_DUMP_for_{engine_N|worker_N}_{pid}.log` in its `--watchdog-config` dump_dir at
each stall past the watchdog's timeout and at EngineCore's SIGTERM. SGLang 0.5.x (srt/utils/watchdog.py,
srt/utils/cudacore_pyspy_dump_utils.py) runs `py-spy dump` on a stalled scheduler and logs its output with
logging's default handler, stderr: there is no log-file option, so its log is what its stderr is, when that is
a file. Read as root from places the server's user writes: only regular files opened without following a link,
with one link, owned by the server's user or root, named as the engine names them, newest first, bounded."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Sequence

from check_vllm.contract.engines import SGLANG, VLLM
from check_vllm.contract.safe_text import one_line
from check_vllm.postmortem.procs import Proc
from check_vllm.server.processes import engine_of

#: vLLM's option (vllm/engine/arg_utils.py): a WatchdogConfig as JSON, or its keys one by one
#: (`--watchdog-config.dump_dir DIR`), with `_` and `-` alike before the dot (vllm/utils/argparse_utils.py).
OPTION = "--watchdog-config"
KEY = "dump_dir"
#: vLLM's dump files (ThreadedWatchDog.dump_file) and the pid that ends their names.
VLLM_FILE = re.compile(r"VLLM_STACK_DUMP_for_(?:engine|worker)_[\w.-]*", re.ASCII)
NAMED_PID = re.compile(r"_(\d+)\.log$")
#: What SGLang's watchdog logs: the dump (pyspy_dump_schedulers), a failed one, the timeout (_watchdog_once).
SGLANG_WORDS = (b"Pyspy dump for PID", b"Pyspy failed (", b"watchdog timeout (")
#: Lines kept before the first of them: the watchdog logs the scheduler's debug info first.
CONTEXT_LINES = 40
#: Bounds: files taken, bytes kept of each (its end: the newest dump is last), of all, of a log read.
MAX_FILES = 8
FILE_MAX = 1 << 20
TOTAL_MAX = 4 << 20
LOG_TAIL = 1 << 20
#: Entries of a dump directory looked at (one shared with much else is not listed whole).
SCAN_MAX = 10000
HINT = "vLLM 0.33+ writes its own stack dumps with --watchdog-config '{\"dump_dir\": DIR}'"

Files = list[tuple[str, bytes]]


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def dump_dir(argv: Sequence[str]) -> str | None:
    """The watchdog's dump_dir on a command line, as vLLM's parser reads it: the last JSON value wins, and any
    dotted key replaces it whole (vLLM passes the dotted keys after it, as one more JSON value)."""
    whole: object = None
    dotted: dict[str, object] | None = None
    args = list(argv)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        head, dot, key = name.partition(".")
        if not arg.startswith("--") or head.replace("_", "-") != OPTION:
            continue
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        if dot:
            dotted = {**(dotted or {}), key.replace("-", "_"): _value(value)}
        else:
            whole = _value(value)
    config = dotted if dotted is not None else whole
    found = config.get(KEY) if isinstance(config, dict) else None
    return found if isinstance(found, str) and found else None


def _seen_by(p: Proc, path: str) -> str:
    """`path` as process `p` sees it: relative to its working directory, in its root (a container's); its root
    when that cannot be told (not ours to look into: the same name here may be another server's directory)."""
    if not os.path.isabs(path):
        return f"/proc/{p.pid}/cwd/{path}"
    try:
        theirs, ours = os.stat(f"/proc/{p.pid}/root"), os.stat("/")
    except OSError:
        return f"/proc/{p.pid}/root{path}"
    return f"/proc/{p.pid}/root{path}" if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino) else path


def _tail(fd: int, size: int, cap: int) -> bytes:
    """The file's last `cap` bytes from a line's start, saying what was left out."""
    start = max(size - cap, 0)
    raw = os.pread(fd, cap, start)
    if not start:
        return raw
    raw = raw[raw.find(b"\n") + 1:]
    return f"[check_vllm: its first {size - len(raw)} bytes left out, the last {len(raw)} kept]\n".encode() + raw


def _vetted(fd: int, owners: set[int]) -> str:
    """Why an opened file is not taken ("": it is)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in owners:
        return f"owned by uid {st.st_uid}, not the server's user or root"
    return f"{st.st_nlink} hard links" if st.st_nlink != 1 else ""


def _read(dfd: int, name: str, owners: set[int]) -> tuple[bytes | None, str]:
    """A dump file's end, or why not: never through a link, never a FIFO's open that waits."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        return None, "a symlink, not followed" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
    try:
        why = _vetted(fd, owners)
        return (None, why) if why else (_tail(fd, os.fstat(fd).st_size, FILE_MAX), "")
    finally:
        os.close(fd)


def _listed(dfd: int, pids: set[int]) -> list[str]:
    """The dump files' names: the family's own first, then the newest (an earlier server's SIGTERM dump)."""
    found: list[tuple[bool, float, str]] = []
    with os.scandir(dfd) as entries:
        for n, entry in enumerate(entries):
            if n >= SCAN_MAX:
                break
            if not VLLM_FILE.fullmatch(entry.name):
                continue
            named = NAMED_PID.search(entry.name)
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:  # gone since
                continue
            found.append((not (named and int(named.group(1)) in pids), -mtime, entry.name))
    return [name for *_, name in sorted(found)]


def read_dumps(directory: str, owners: set[int], pids: set[int]) -> tuple[Files, list[str]]:
    """vLLM's dump files in `directory`, bounded, and what was not taken and why."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # O_DIRECTORY's ENOTDIR comes before O_NOFOLLOW's ELOOP
        link = exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(directory)
        return [], [f"not read: {'a symlink, not followed' if link else exc.strerror or exc}"]
    files: Files = []
    notes: list[str] = []
    try:
        names = _listed(dfd, pids)
        for i, name in enumerate(names):
            if len(files) >= MAX_FILES or sum(len(d) for _, d in files) >= TOTAL_MAX or i >= 4 * MAX_FILES:
                notes.append(f"{len(names) - i} older left")
                break
            data, why = _read(dfd, name, owners)
            files += [(name, data)] if data is not None else []
            notes += [f"refused {name}: {why}"] if why else []
    finally:
        os.close(dfd)
    return files, notes


def sglang_dump(tail: bytes) -> bytes | None:
    """The part of SGLang's log from its watchdog's first dump line (and the lines before it) on; None: none."""
    lines = tail.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if any(w in line for w in SGLANG_WORDS)), None)
    return None if first is None else b"".join(lines[max(first - CONTEXT_LINES, 0):])


def _sglang(family: Sequence[Proc], owners: set[int]) -> tuple[Files, list[str]]:
    """Each distinct log file an SGLang process writes to (its stderr, then stdout): its watchdog's dump."""
    files: Files = []
    notes: list[str] = []
    seen: set[tuple[int, int]] = set()
    for p in family:
        if engine_of(p.argv) is not SGLANG and not (p.argv and p.argv[0].startswith("sglang::")):
            continue
        for n in (2, 1):
            link = f"/proc/{p.pid}/fd/{n}"
            try:
                st, where = os.stat(link), os.readlink(link)
            except OSError as exc:
                notes += [f"SGLang's log (process {p.pid}'s stderr) not read: {exc.strerror}"] if n == 2 else []
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            if not stat.S_ISREG(st.st_mode):
                notes += [f"SGLang logs to {where} (process {p.pid}'s stderr: journald, docker logs): its "
                          "watchdog's py-spy dump is there, not here"] if n == 2 else []
                continue
            taken, said = _sglang_log(p, link, where, owners)
            files += taken
            notes.append(said)
    return files, notes


def _sglang_log(p: Proc, link: str, where: str, owners: set[int]) -> tuple[Files, str]:
    try:
        fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return [], f"SGLang's log {where} not read: {exc.strerror}"
    try:
        why = _vetted(fd, owners)
        tail = None if why else _tail(fd, os.fstat(fd).st_size, LOG_TAIL)
    finally:
        os.close(fd)
    if tail is None:
        return [], f"SGLang's log {where} refused: {why}"
    dump = sglang_dump(tail)
    if dump is None:
        return [], f"SGLang's log {where} (process {p.pid}'s stderr): no watchdog dump in its last {len(tail)} bytes"
    return [(f"sglang-log-{p.pid}.txt", dump)], f"SGLang's log {where}: its watchdog's dump taken"


def _owners(family: Sequence[Proc]) -> set[int]:
    owners = {0}
    for p in family:
        try:
            owners.add(os.stat(f"/proc/{p.pid}").st_uid)
        except OSError:
            pass
    return owners


def collect(family: Sequence[Proc]) -> tuple[Files, str]:
    """The engine's own dumps of the family (name in the bundle, content), and the step's outcome."""
    if not family:
        return [], "ok: nothing to take (no process here)"
    owners, files, notes = _owners(family), [], []
    found = next(((p, d) for p in family if (d := dump_dir(p.argv))), None)
    if found:
        p, directory = found
        taken, said = read_dumps(_seen_by(p, directory), owners, {q.pid for q in family})
        files += taken
        head = [] if said[:1] and said[0].startswith("not read") else [f"{len(taken)} taken" if taken else
                                                                        "no dump in it yet"]
        notes.append(f"vLLM's watchdog dump_dir {directory}: " + "; ".join([*head, *said]))
    elif any(engine_of(p.argv) is VLLM for p in family):
        notes.append(f"vLLM without a watchdog dump_dir on its command line ({HINT})")
    taken, said = _sglang(family, owners)
    files += taken
    notes += said
    if not notes:
        return [], "ok: nothing to take (this engine writes no stack dumps of its own)"
    return files, one_line(("ok: " if files else "none: ") + "; ".join(notes), pipe=False)
