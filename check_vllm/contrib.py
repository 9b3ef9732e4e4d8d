"""`check_vllm_contrib list | show FILE | write DIR`: the shipped definitions, wherever the install put them.

A wheel installs contrib/ as data under `<prefix>/share/check_vllm/contrib/` (pip has no other place for
files that are not modules); a source checkout has it beside the package. Operators should not have to hunt
for it, so this finds whichever is there and lists, prints or copies its files (docs/install.md says where
each one goes). The Debian package installs them in place instead, and this says so.
"""

from __future__ import annotations

import argparse
import shutil
import site
import sys
from pathlib import Path

#: Where the .deb puts what is not installed in place (the Icinga 2 commands, the plugin, the health file are).
DEBIAN_EXAMPLES = Path("/usr/share/doc/check-vllm/examples")


def candidates() -> list[Path]:
    """Where contrib/ can be: beside this code in a source checkout (then it is the one that matches),
    this interpreter's prefix, the user's (pip --user)."""
    share = Path("share") / "check_vllm" / "contrib"
    return [Path(__file__).resolve().parent.parent / "contrib", Path(sys.prefix) / share,
            Path(site.getuserbase()) / share]


def find() -> Path | None:
    return next((d for d in candidates() if (d / "icinga2" / "vllm-commands.conf").is_file()), None)


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def write(root: Path, target: Path) -> list[str]:
    """Copy every file into target; an existing file is never overwritten (an operator may have edited it)."""
    kept = []
    for name in files(root):
        dest = target / name
        if dest.exists():
            kept.append(name)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, dest)
    return kept


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="check_vllm_contrib", description=__doc__.splitlines()[0].split(": ", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the directory, then each file's path relative to it")
    sub.add_parser("show", help="print one file").add_argument("file", help="a path as `list` prints it")
    sub.add_parser("write", help="copy every file into DIR (existing files are kept)").add_argument("dir")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = find()
    if root is None:
        where = ", ".join(map(str, candidates()))
        print(f"check_vllm_contrib: no contrib directory found (looked in {where}); the Debian package "
              f"installs the files in place and the examples in {DEBIAN_EXAMPLES}", file=sys.stderr)
        return 1
    if args.command == "list":
        print(root)
        print("\n".join(files(root)))
    elif args.command == "show":
        if args.file not in files(root):
            print(f"check_vllm_contrib: no such file {args.file!r} (see `check_vllm_contrib list`)", file=sys.stderr)
            return 1
        sys.stdout.write((root / args.file).read_text(encoding="utf-8"))
    else:
        try:
            kept = write(root, Path(args.dir))
        except OSError as err:
            print(f"check_vllm_contrib: cannot write {args.dir}: {err.strerror or err}", file=sys.stderr)
            return 1
        print(f"wrote {len(files(root)) - len(kept)} files from {root} to {args.dir}")
        for name in kept:
            print(f"kept existing {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
