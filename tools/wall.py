"""Assemble T2 Linux's Landlock wall and keep its bytes in the package in step.

    python tools/wall.py --check   # exit 1 when wall.py's bytes are not the assembled source
    python tools/wall.py --write   # rewrite them from the source

The source, ``packages/tier_linux/src/panday_tier_linux/wall_x86_64.S``, is the whole
executable (its ELF headers are data in it), so GNU as and objcopy make it byte for byte
the same on every host: what the package runs is what a reviewer reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "packages/tier_linux/src/panday_tier_linux"
SOURCE = PACKAGE / "wall_x86_64.S"
MODULE = PACKAGE / "wall.py"
BLOCK = re.compile(r"(WALL_X86_64 = bytes\.fromhex\(\n)(.*?)(\n\))", re.DOTALL)


def assemble(source: Path = SOURCE) -> bytes:
    """The flat executable `source` assembles to (x86-64 GNU as, then its .text alone)."""
    assembler, objcopy = shutil.which("as"), shutil.which("objcopy")
    if assembler is None or objcopy is None:
        raise SystemExit("tools/wall.py: GNU as and objcopy are needed (binutils)")
    with tempfile.TemporaryDirectory() as scratch:
        obj, flat = Path(scratch, "wall.o"), Path(scratch, "wall.bin")
        subprocess.run([assembler, "--64", "-o", obj, source], check=True)
        subprocess.run([objcopy, "-O", "binary", "-j", ".text", obj, flat], check=True)
        return flat.read_bytes()


def embedded() -> bytes:
    found = BLOCK.search(MODULE.read_text())
    if found is None:
        raise SystemExit(f"tools/wall.py: no WALL_X86_64 block in {MODULE}")
    return bytes.fromhex("".join(re.findall(r'"([0-9a-f]*)"', found.group(2))))


def rendered(code: bytes) -> str:
    text = code.hex()
    return "\n".join(f'    "{text[i : i + 64]}"' for i in range(0, len(text), 64))


def main(argv: list[str]) -> int:
    if argv not in (["--check"], ["--write"]):
        print("usage: tools/wall.py --check | --write", file=sys.stderr)
        return 2
    code = assemble()
    if argv == ["--write"]:
        text = MODULE.read_text()
        found = BLOCK.search(text)
        if found is None:
            raise SystemExit(f"tools/wall.py: no WALL_X86_64 block in {MODULE}")
        MODULE.write_text(text[: found.start(2)] + rendered(code) + text[found.end(2) :])
        return 0
    if embedded() != code:
        print(
            f"tools/wall.py: {MODULE.name}'s bytes are not {SOURCE.name} assembled", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
