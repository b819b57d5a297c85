"""The C++ side of the step-table codes: ``distsdfg_codes.h``, generated from ``distsdfg.values.codes``.

``python -m distsdfg.mpi.codes_header`` writes the header into the runtime's include folder (it ships
with the package like the other headers, and builds are keyed by the folder's contents);
``python -m distsdfg.mpi.codes_header --check`` exits 1 while the file differs from ``render()``.
"""
import argparse
import os
import sys

from ..values.codes import CODE_ENUMS
from .environment import INCLUDE_DIR

__all__ = ["HEADER", "PATH", "render", "write", "stale"]

HEADER = "distsdfg_codes.h"
PATH = os.path.join(INCLUDE_DIR, HEADER)


def render() -> str:
    """The header's text: one ``enum Name : int64_t`` per class of ``CODE_ENUMS``."""
    lines = ["// Generated from distsdfg/values/codes.py by `python -m distsdfg.mpi.codes_header`: edit that",
             "// module, not this file. The codes of the step tables (distsdfg_runtime.h).",
             "#pragma once", "#ifndef DISTSDFG_CODES_H", "#define DISTSDFG_CODES_H", "#include <cstdint>", "",
             "namespace distsdfg {", "namespace {", ""]
    for cls, prefix in CODE_ENUMS.items():
        head = f"enum {cls.__name__} : int64_t {{"
        items = [f"{prefix}{m.name} = {int(m.value)}" for m in cls]
        line = head
        for i, item in enumerate(items):
            item += "," if i + 1 < len(items) else " };"
            if len(line) + 1 + len(item) > 110:       # wrapped under the first member
                lines.append(line)
                line = " " * len(head)
            line += " " + item
        lines.append(line)
    lines += ["", "}  // namespace", "}  // namespace distsdfg", "#endif  // DISTSDFG_CODES_H", ""]
    return "\n".join(lines)


def stale(path: str = PATH) -> bool:
    """Whether the header at ``path`` is missing or differs from ``render()``."""
    try:
        with open(path) as f:
            return f.read() != render()
    except OSError:
        return True


def write(path: str = PATH) -> None:
    with open(path, "w") as f:
        f.write(render())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distsdfg.mpi.codes_header", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the header differs from the codes, write nothing")
    args = ap.parse_args(argv)
    if args.check:
        if stale():
            print(f"{PATH} differs from distsdfg/values/codes.py: run python -m distsdfg.mpi.codes_header",
                  file=sys.stderr)
            return 1
        return 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
