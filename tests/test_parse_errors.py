"""DaCe's parse failures of programs as users write them: one ProgramParseError with the line and a fix."""
import os
import subprocess
import sys

import pytest

from distsdfg.dace_compat.dace2 import DACE_MAJOR
from distsdfg.dace_compat.frontend_errors import parse
from distsdfg.errors import DistributedLoweringError, ProgramParseError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import parse_forms  # noqa: E402

FILE = os.path.join(ROOT, "tests", "data", "parse_forms.py")


@pytest.mark.parametrize("name,pattern", [
    ("converge_diff", r"`diff` \(in the `while` condition on line 12\) is also a SymPy function's name.*rename"),
    ("converge_tol", r"the `while` condition on line 24 reads the argument `(tol|max_steps)`.*for step in range\(max_steps\).*"
                     r"break.*while go:"),
    ("sorted_twice", r"line 47: `return np.sort\(X\) \* 2.0`\): DaceSyntaxError: (Operand has no return value|"
                     r"Trying to operate on a callback return value).*"
                     r"`np.sort` is a function DaCe does not translate.*pass the result in"),
])
def test_parse_failure_names_the_line_and_the_fix(name, pattern, monkeypatch):
    monkeypatch.setenv("DISTSDFG_WHILE_FLAGS", "0")     # the loops as DaCe alone parses them (refused)
    if name == "converge_tol" and DACE_MAJOR >= 2:
        assert parse(parse_forms.converge_tol) is not None      # DaCe 2.0 reads an argument in a `while` condition
        return
    with pytest.raises(ProgramParseError, match=pattern) as e:
        parse(getattr(parse_forms, name))
    assert isinstance(e.value, DistributedLoweringError) and FILE in str(e.value)


def test_the_recommended_form_parses():
    sdfg = parse(parse_forms.converge_break)
    assert "max_steps" in sdfg.arrays or "max_steps" in sdfg.symbols


def test_the_command_prints_the_refusal_as_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "distsdfg", "maps", FILE + ":sorted_twice"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "distsdfg maps: ProgramParseError: DaCe cannot parse `sorted_twice`" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("name", ["converge_diff", "converge_tol", "converge_break_in_while"])
def test_convergence_loops_as_users_write_them_parse(name, capsys):
    """``while diff > tol and steps < max_steps:`` with a Python int counter (and an early ``break``):
    parsed once more with the condition kept in a flag; DaCe's line about the first failure is not shown."""
    sdfg = parse(getattr(parse_forms, name))
    assert "max_steps" in sdfg.arrays or "max_steps" in sdfg.symbols
    assert "raised while parsing" not in capsys.readouterr().out


def test_a_failure_the_rewrite_cannot_help_shows_daces_line_once(capsys):
    with pytest.raises(ProgramParseError):
        parse(parse_forms.sorted_twice)
    assert capsys.readouterr().out.count("raised while parsing DaCe program") <= 1


def _rewritten(src):
    import ast
    import textwrap
    from distsdfg.dace_compat.whiles import rewrite
    return ast.unparse(rewrite(ast.parse(textwrap.dedent(src))))


def test_while_conditions_become_flags_and_sympy_names_are_renamed():
    out = _rewritten("""
        def f(A, tol, diff_arg):
            diff = 1.0
            steps = 0
            while diff > tol and steps < 10:
                diff = g(A)
                steps += 1
                if diff < 0:
                    break
            return diff
        """)
    assert out.splitlines() == [
        "def f(A, tol, diff_arg):",
        "    _dsdfg_diff = 1.0",
        "    steps = 0",
        "    _dsdfg_go1 = _dsdfg_diff > tol and steps < 10",
        "    while _dsdfg_go1:",
        "        _dsdfg_diff = g(A)",
        "        steps += 1",
        "        if _dsdfg_diff < 0:",
        "            break",
        "        _dsdfg_go1 = _dsdfg_diff > tol and steps < 10",
        "    return _dsdfg_diff"]


@pytest.mark.parametrize("src", [
    "def f(x, diff):\n    while x > 0:\n        x -= 1\n        if x == 3:\n            continue\n",   # continue
    "def f(x):\n    while x > 0:\n        x -= 1\n    else:\n        x = 5\n",                       # while-else
    "def f(go):\n    while go:\n        go = False\n",                                             # a flag already
])
def test_loops_a_flag_would_change_are_left_as_written(src):
    import ast
    assert _rewritten(src) == ast.unparse(ast.parse(src))
