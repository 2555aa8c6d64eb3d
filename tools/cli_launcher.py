"""Write the Personas' fast launcher for `huginn-chat search` and `huginn-chat window`.

Owns: one small script, made by `make setup` as ``.venv/bin/huginn-chat-fast``, whose shebang runs
the venv's python with ``-I -S``: no ``site`` (no site-packages scan, no ``.pth`` files, no
editable-install import finder, which alone costs ~9 ms a start). ``search`` and ``window`` need
only the standard library and this checkout, so they run from the checkout directly; every other
command is handed, unchanged, to the installed ``huginn-chat`` console script (which needs the
venv's packages).

Must not: import anything beyond the standard library (it runs at build time), or change what a
command does: the launcher only chooses how the interpreter starts.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

TEMPLATE = """#!{python} -IS
# Made by tools/cli_launcher.py (make setup). search/window: standard library only, no site.
import sys
if sys.argv[1:2] in (["search"], ["window"]):
    sys.path.insert(0, {root!r})
    from daemon.cli.main import main
    sys.exit(main())
import os
os.execv({console!r}, [{console!r}, *sys.argv[1:]])
"""


def write_launcher(python: Path, root: Path, console: Path, out: Path) -> Path:
    for name, path in (("python", python), ("root", root), ("console", console)):
        if not path.is_absolute():
            raise ValueError(f"{name}: expected an absolute path, got {str(path)!r}")
        if any(c.isspace() for c in str(path)):
            raise ValueError(f"{name}: a shebang cannot hold whitespace, got {str(path)!r}")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(TEMPLATE.format(python=python, root=str(root), console=str(console)))
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="the virtual environment (e.g. .venv)")
    parser.add_argument("--root", type=Path, required=True, help="the checkout holding daemon/")
    args = parser.parse_args()
    # Not resolved: the venv's python is a symlink whose own path is what puts the venv on sys.path.
    venv = Path(os.path.abspath(args.venv))
    out = write_launcher(
        venv / "bin" / "python", args.root.resolve(), venv / "bin" / "huginn-chat", venv / "bin" / "huginn-chat-fast"
    )
    print(f"cli_launcher: wrote {out}")


if __name__ == "__main__":
    main()
