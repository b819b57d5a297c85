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
def test_parse_failure_names_the_line_and_the_fix(name, pattern):
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
    r = subprocess.run([sys.executable, "-m", "distsdfg", "maps", FILE + ":converge_diff"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "distsdfg maps: ProgramParseError: DaCe cannot parse `converge_diff`" in r.stderr, r.stderr[-2000:]
