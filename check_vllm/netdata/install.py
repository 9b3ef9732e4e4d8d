"""`python -m check_vllm.netdata.install [PLUGINS_DIR]`: write the vllm.plugin launcher for Netdata.

Netdata runs plugins with its own PATH and environment, so the launcher pins the interpreter that ran
this installer (the one that has check_vllm installed) in its shebang. From a source checkout the
launcher also puts the checkout on sys.path.
"""

from __future__ import annotations

import argparse
import os
import site
import sys
from pathlib import Path

import check_vllm

DEFAULT_DIR = "/usr/libexec/netdata/plugins.d"


def launcher(python: str = sys.executable) -> str:
    root = Path(check_vllm.__file__).resolve().parent.parent
    installed = any(str(root).startswith(p) for p in site.getsitepackages() + [site.getusersitepackages()])
    path_line = "" if installed else f"sys.path.insert(0, {str(root)!r})  # a source checkout\n"
    return (
        f"#!{python}\n"
        "# vllm.plugin: Netdata external plugin for LLM servers (vLLM, llama.cpp, SGLang) (check_vllm.netdata).\n"
        "# Written by `python -m check_vllm.netdata.install`; the interpreter above is pinned on purpose.\n"
        "import sys\n"
        f"{path_line}"
        "from check_vllm.netdata.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )


def install(directory: Path, python: str = sys.executable) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "vllm.plugin"
    tmp = target.with_name(".vllm.plugin.tmp")
    tmp.write_text(launcher(python), encoding="utf-8")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m check_vllm.netdata.install", description=__doc__.splitlines()[0])
    parser.add_argument("plugins_dir", nargs="?", default=DEFAULT_DIR,
                        help=f"Netdata plugins directory (default {DEFAULT_DIR}; Debian: /usr/lib/netdata/plugins.d)")
    args = parser.parse_args(argv)
    path = install(Path(args.plugins_dir))
    print(f"wrote {path} (interpreter {sys.executable})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
