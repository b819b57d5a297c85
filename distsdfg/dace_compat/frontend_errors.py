"""DaCe's parse failures of a ``@dace.program`` as one ``ProgramParseError`` naming the user's line and a fix.

``parse(prog)`` is ``prog.to_sdfg()``; when DaCe 1.0.2's frontend fails, the exception (a SymPy,
syntax or descriptor error from deep inside the frontend) becomes a ``ProgramParseError`` whose
message quotes the file, line and source of the statement being parsed and, for the failures
users meet most, what to write instead:

* a name that is also a SymPy function (``diff``, ``limit``, ``gamma``, ``beta``, ...) in a loop or
  branch condition: DaCe reads the condition symbolically and gets the function (``SympifyError:
  cannot sympify object of type NotImplementedType``): rename the variable;
* a scalar argument in a ``while`` condition (``Cannot create symbol "tol", the name is used by
  a data descriptor``): loop ``for step in range(max_steps):`` and ``break`` when done, or keep a
  local flag (``go = delta > tol and steps < max_steps`` at the end of the body, ``while go:``);
* a NumPy function DaCe does not translate used as an operand (``np.sort(X) * 2.0``: ``Operand has
  no return value``): compute it outside the program and pass the result in.

Example: ``while diff > tol and steps < max_steps:`` on line 9 of ``prog.py`` gives
``ProgramParseError: DaCe cannot parse `relax` (prog.py, line 13: `steps += 1`): ... `diff` (in the
condition on line 9) is also a SymPy function's name ...; rename it``.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from typing import List, Optional, Tuple

from ..errors import ProgramParseError
from .semantics import with_numpy_semantics

__all__ = ["parse"]


def _where(exc: BaseException) -> Tuple[Optional[str], Optional[int]]:
    """The file and line DaCe's frontend was parsing when ``exc`` was raised."""
    node, visitor = getattr(exc, "node", None), getattr(exc, "visitor", None)
    if node is not None and getattr(node, "lineno", None) and visitor is not None:
        return getattr(visitor, "filename", None), node.lineno
    found = (None, None)
    tb = exc.__traceback__
    while tb is not None:        # innermost frame of the frontend's visitor that knows its line
        info = getattr(tb.tb_frame.f_locals.get("self"), "current_lineinfo", None)
        if info is not None and getattr(info, "start_line", None):
            found = (info.filename, info.start_line)
        tb = tb.tb_next
    return found


def _function_ast(prog) -> Tuple[Optional[ast.FunctionDef], int, str]:
    try:
        f = prog.f
        lines, start = inspect.getsourcelines(f)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        return tree.body[0], start - 1, inspect.getsourcefile(f) or ""
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        return None, 0, ""


def _condition_names(fn: ast.FunctionDef, offset: int) -> List[Tuple[str, int, str]]:
    """(name, line, kind) of every variable read in a ``while``/``if`` condition."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, (ast.While, ast.If)):
            kind = "while" if isinstance(node, ast.While) else "if"
            for n in ast.walk(node.test):
                if isinstance(n, ast.Name):
                    out.append((n.id, node.lineno + offset, kind))
    return out


def _sympy_names(names) -> List[Tuple[str, int, str]]:
    import sympy
    return [(n, line, k) for n, line, k in names
            if hasattr(sympy, n) and not isinstance(getattr(sympy, n), sympy.Symbol)]


def _clash_line(exc: BaseException, prog) -> Tuple[Optional[str], Optional[int]]:
    """Where DaCe failed after parsing (DaCe 2.0 simplifies first, with no line at hand) on a condition
    naming a SymPy function: that condition's file and line."""
    text = f"{type(exc).__name__}: {exc}"
    if "NotImplementedType" not in text and "SympifyError" not in text:
        return None, None
    fn, offset, source = _function_ast(prog)
    clash = _sympy_names(_condition_names(fn, offset)) if fn is not None else []
    return (source, clash[0][1]) if clash and source else (None, None)


def _hint(exc: BaseException, prog, line_src: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    fn, offset, _ = _function_ast(prog)
    conds = _condition_names(fn, offset) if fn is not None else []
    if "NotImplementedType" in text or "SympifyError" in text:
        clash = _sympy_names(conds)
        if clash:
            name, line, kind = clash[0]
            return (f"`{name}` (in the `{kind}` condition on line {line}) is also a SymPy function's name, and DaCe "
                    f"reads the condition symbolically, as that function; rename the variable (e.g. `{name}_`)")
    if "name is used by a data descriptor" in text:
        name = str(exc).split('"')[1] if '"' in str(exc) else "?"
        lines = sorted({line for n, line, k in conds if n == name and k == "while"})
        where = f" on line {lines[0]}" if lines else ""
        return (f"the `while` condition{where} reads the argument `{name}`, which DaCe 1.0.2 cannot use in a "
                f"`while` condition; loop `for step in range(max_steps):` and `break` when done (`if delta <= "
                f"tol: break`), or keep a local flag updated at the end of the body (`go = delta > tol and steps < "
                f"max_steps`) and write `while go:`")
    if "has no return value" in text or "callback return value" in text:
        calls = []
        try:
            for n in ast.walk(ast.parse(line_src.strip())):
                if isinstance(n, ast.Call):
                    calls.append(ast.unparse(n.func))
        except SyntaxError:
            pass
        what = f"`{calls[0]}`" if calls else "a call"
        return (f"{what} is a function DaCe does not translate (it becomes a call back into Python with no value "
                f"inside the program); compute it outside the program and pass the result in as an argument")
    return ("rewrite that statement in a form DaCe parses (docs/writing-programs.md), and check with "
            "`prog.to_sdfg()`")


@with_numpy_semantics
def parse(prog):
    """``prog.to_sdfg()``, with DaCe's parse failures re-raised as ``ProgramParseError``."""
    try:
        return prog.to_sdfg()
    except Exception as exc:  # noqa: BLE001 - every frontend failure gets the user's line
        from ..errors import DistributedLoweringError
        if isinstance(exc, DistributedLoweringError):
            raise
        filename, line = _where(exc)
        if not line:
            filename, line = _clash_line(exc, prog)
        src = linecache.getline(filename, line).strip() if filename and line else ""
        name = getattr(getattr(prog, "f", None), "__name__", getattr(prog, "name", "program"))
        at = f" ({filename}, line {line}: `{src}`)" if line else ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        first = first.split(": ", 1)[1] if first.startswith(type(exc).__name__ + ":") else first
        raise ProgramParseError(f"DaCe cannot parse `{name}`{at}: {type(exc).__name__}: {first.rstrip('.')}. "
                                f"{_hint(exc, prog, src)}") from exc
