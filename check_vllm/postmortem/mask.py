"""What no post-mortem file may hold (issue 51): the bundle is meant to be attached to a public issue, so an API key,
a Hugging Face token or a password in a URL is replaced by *** wherever it shows, in every file (tree.txt, py-spy's
header line, which is the whole command line, a gdb frame, the /metrics page, the README). Two nets, as either
alone misses: the values the server's processes were given (their argv, environment and --config file) and the
check's own key, masked wherever they appear; and the shapes a secret takes in text (`--api-key V`, `-hft V`,
`HF_TOKEN=V`, `api_key: V`, `scheme://user:pass@`), masked even where the value was never seen.
This module alone says what a secret option is (procs.masked is this one's `masked`)."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from check_vllm.server import serverargs

if TYPE_CHECKING:
    from check_vllm.postmortem.procs import Proc

MASK = "***"
#: The words of a name (an option without its dashes, a variable, a config key) whose value must not leave the
#: host: --api-key, --hf-token, HF_TOKEN, admin_api_key; never --tokenizer, --max-num-batched-tokens, --ssl-keyfile.
SECRET_WORDS = frozenset({"key", "token", "secret", "password", "passwd", "credential", "credentials", "auth"})
#: Short options no word can tell: llama.cpp's -hft (= --hf-token, common/arg.cpp; its only short secret option).
SHORT_SECRETS = frozenset({"-hft"})
#: A value shorter than this is never masked wherever it appears ("1", "on"): it would blank half the bundle.
MIN_LEN = 4
#: Nor a value this common (a boolean-looking variable named like a secret, VLLM_..._AUTH=true).
TRIVIAL = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off", MASK})


def secret_name(name: str) -> bool:
    """A name whose value is a secret: one of its dash/underscore/dot-separated words is a secret word."""
    return bool(SECRET_WORDS & set(re.split(r"[-_.]+", name.lower())))


def secret_option(arg: str) -> bool:
    """`--api-key`, `--hf-token=V`, `-hft`: an option (or `option=value`) whose value is a secret."""
    name = arg.partition("=")[0]
    return name in SHORT_SECRETS or (name.startswith("-") and secret_name(name.lstrip("-")))


def _option_like(arg: str) -> bool:
    """The next option, not a value: `--port` after a flag named like a secret (--return-tokens-as-token-ids)."""
    return bool(re.match(r"-{1,2}[A-Za-z]", arg))


def masked(argv: Sequence[str]) -> list[str]:
    """The command line with the values of secret options replaced by *** (every value up to the next option:
    vLLM's --api-key takes several)."""
    out: list[str] = []
    hide = False
    for arg in argv:
        if hide and not _option_like(arg):
            out.append(MASK)
            continue
        name, eq, _ = arg.partition("=")
        secret = secret_option(name)
        out.append(f"{name}={MASK}" if eq and secret else arg)
        hide = secret and not eq
    return out


#: `scheme://userinfo@`: the userinfo up to the last @ before the path (a password may hold an unescaped @).
#: Every pattern here starts only where its first run of characters starts (the look-behind), so a dump of any
#: shape is scanned in linear time: the masking is inside the collection's time budget.
_USERINFO = re.compile(rb"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]+@")


def _userinfo(text: str) -> list[str]:
    """The secrets in a URL's userinfo: the password (and the whole `user:password`), or a lone token."""
    found = []
    for m in _USERINFO.finditer(text.encode("utf-8", "replace")):
        info = m.group(0)[len(m.group(1)):-1].decode("utf-8", "replace")
        _, colon, password = info.partition(":")
        found += [info, password] if colon else [info]
    return found


def _values(value: str) -> list[str]:
    """A secret value, and each of its comma-separated parts (llama.cpp's LLAMA_API_KEY=k1,k2)."""
    return [value, *value.split(",")] if "," in value else [value]


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The values of a command line's secret options and the userinfo of any URL in it."""
    found: list[str] = []
    for arg, shown in zip(argv, masked(argv), strict=True):
        if shown != arg:
            found += _values(arg.partition("=")[2] if shown.endswith("=" + MASK) else arg)
        found += _userinfo(arg)
    return found


def environ_secrets(env: Mapping[str, str]) -> list[str]:
    """The values of secret-named variables (HF_TOKEN, VLLM_API_KEY, LLAMA_API_KEY) and any URL's userinfo."""
    found: list[str] = []
    for name, value in env.items():
        if secret_name(name):
            found += _values(value)
        found += _userinfo(value)
    return found


_YAML_KEY = re.compile(r"""^[ \t]*(?:-[ \t]+)?(["']?)([A-Za-z_][\w.-]*)\1[ \t]*:(?:[ \t]+(.*))?$""")
_YAML_ITEM = re.compile(r"^[ \t]*-[ \t]+(.*)$")


def _scalar(text: str) -> str:
    """A YAML scalar as written: its quotes off, a trailing comment off an unquoted one."""
    quoted = re.match(r"""(["'])(.*?)\1""", text.strip())
    return quoted.group(2) if quoted else re.sub(r"\s+#.*$", "", text.strip())


def config_secrets(raw: bytes) -> list[str]:
    """The values of secret-named keys of a --config YAML file (vLLM's and SGLang's keys are the long options,
    `api-key: sk-...`, `api_key: "sk-..."`), a list of them included (`[k1, k2]` or `- k1` lines)."""
    found: list[str] = []
    lines = raw.decode("utf-8-sig", "replace").splitlines()
    for i, line in enumerate(lines):
        m = _YAML_KEY.match(line)
        if not m or not secret_name(m.group(2)):
            continue
        value = (m.group(3) or "").strip()
        if value.startswith("[") and value.endswith("]"):
            found += [_scalar(v) for v in value[1:-1].split(",")]
        elif value:
            found += _values(_scalar(value))
        else:
            for item in map(_YAML_ITEM.match, itertools.islice(lines, i + 1, None)):
                if item is None:
                    break
                found.append(_scalar(item.group(1)))
    return found


def _config(p: Proc) -> bytes:
    """The process's --config file, when it is a regular file of its user or root (relative: to its cwd)."""
    path = serverargs.flag(p.argv, "--config")
    try:
        owner = os.stat(f"/proc/{p.pid}").st_uid
    except OSError:
        return b""
    raw = serverargs.regular_file(os.path.join(f"/proc/{p.pid}/cwd", path), {owner, 0}) if path else None
    return raw or b""


#: `--api-key V`, `--api-key=V`, `-hft V`: the one value after it, unless that is the next option (vLLM's further
#: --api-key values are known ones: its own command line's).
_OPTION = re.compile(rb"(?<![\w.-])(--?[A-Za-z][\w.-]*)(=\S*|[ \t]+(?!-[A-Za-z-])\S+)")
#: `api_key: V`, `"api_key": "V"` (YAML, JSON, a Python dict).
_NAMED = re.compile(rb"""(?<![\w.-])(["']?)([A-Za-z_][\w.-]*)(\1[ \t]*:[ \t]*)"""
                    rb"""("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,;}\]"']+)""")
#: `HF_TOKEN=V` (an environment dump): a variable's NAME only (a gdb frame's `token=42` is an argument).
_VARIABLE = re.compile(rb"(?<![\w-])([A-Z][A-Z0-9_]*)=(\S+)")
_BEARER = re.compile(rb"(?i)(\bbearer[ \t]+)[^\s\"',]+")
_MASK = MASK.encode()


def _option(m: re.Match[bytes]) -> bytes:
    name, rest = m.group(1), m.group(2)
    if not secret_option(name.decode("ascii")):
        return m.group(0)
    return name + (b"=" if rest.startswith(b"=") else rest[:len(rest) - len(rest.lstrip())]) + _MASK


def _named(m: re.Match[bytes]) -> bytes:
    """A secret key's value, its quotes kept (a JSON file stays JSON)."""
    if not secret_name(m.group(2).decode("ascii")):
        return m.group(0)
    value = m.group(4)
    quote = value[:1] if value[:1] in (b'"', b"'") else b'"' if m.group(1) == b'"' else b""  # JSON's 42: "***"
    return m.group(1) + m.group(2) + m.group(3) + quote + _MASK + quote


def _variable(m: re.Match[bytes]) -> bytes:
    return m.group(1) + b"=" + _MASK if secret_name(m.group(1).decode("ascii")) else m.group(0)


def by_pattern(data: bytes) -> bytes:
    """The shapes a secret takes in text, masked whatever its value: an option's, a variable's or a key's value,
    a URL's userinfo, an HTTP bearer token."""
    data = _USERINFO.sub(rb"\1" + _MASK + b"@", data)
    data = _OPTION.sub(_option, data)
    data = _NAMED.sub(_named, data)
    data = _VARIABLE.sub(_variable, data)
    return _BEARER.sub(rb"\1" + _MASK, data)


class Secrets:
    """The secret values known for one server: masked wherever they appear, longest first, then by_pattern."""

    def __init__(self, values: Iterable[str] = ()):
        kept = {v.strip() for v in values if v and v.strip()}
        kept = {v for v in kept if len(v) >= MIN_LEN and v.lower() not in TRIVIAL}
        kept |= {json.dumps(v, ensure_ascii=False)[1:-1] for v in kept}  # as evidence.json would hold it
        self.values = tuple(sorted(kept, key=lambda v: (-len(v), v)))
        alternatives = b"|".join(re.escape(v.encode("utf-8", "surrogateescape")) for v in self.values)
        self._literal = re.compile(alternatives) if self.values else None

    @classmethod
    def of(cls, procs: Sequence[Proc], known: Iterable[str] = ()) -> Secrets:
        """Gathered from a family of processes: each one's argv, environment (/proc/PID/environ, readable by its
        user and root) and --config file, with the `known` ones (the API key the check was given)."""
        found = list(known)
        for p in procs:
            found += argv_secrets(p.argv) + environ_secrets(serverargs.environ(p.pid) or {})
            found += config_secrets(_config(p))
        return cls(found)

    def scrub(self, data: bytes) -> bytes:
        """`data` with every known secret and every secret-shaped value replaced by ***; any bytes, UTF-8 or not."""
        if self._literal is not None:
            data = self._literal.sub(_MASK, data)
        return by_pattern(data)
