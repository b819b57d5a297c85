import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The planner's time model reads rates from a calibration file when there is one: the tests plan
# with the documented defaults (planner.timemodel.DEFAULTS) on every machine, in every rank.
os.environ["DISTSDFG_CALIBRATION"] = os.path.join(ROOT, "tests", "no-calibration-file.json")
# At the tests' small sizes the planner would run most programs whole on rank 0 (splitting them does
# not pay): the tests plan split schedules to test the distribution, and test the choice itself
# with the flag set (test_whole.py).
os.environ["DISTSDFG_WHOLE"] = "0"

#: The unit tier, ``pytest -m unit``: symbolic tests (schedules, constraints, the solver, the planner,
#: the rank-local optimisation, the package's shape) and the cache and progress tests; about three
#: minutes on two cores, no mpiexec. The other tests build programs, many under mpiexec.
UNIT_FILES = frozenset({
    "test_schedule.py", "test_constraints.py", "test_comm_report.py", "test_inspector.py", "test_redistribute.py",
    "test_planner.py", "test_scale.py", "test_optimize.py", "test_cache.py", "test_progress.py",
    "test_structure.py", "test_dace_slices.py", "test_notation.py", "test_npbench_report.py", "test_loopmaps.py",
    "test_parse_errors.py", "test_import_neutrality.py",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in UNIT_FILES:
            item.add_marker(pytest.mark.unit)


# The test programs are parsed, lowered and compiled with distsdfg's NumPy semantics (a slice of extent
# one keeps its dimension, Python's `//`, ...), as distsdfg's own entry points do; the programs a test
# parses itself with `prog.to_sdfg()` too. Importing distsdfg alone changes nothing in DaCe
# (test_import_neutrality.py runs DaCe in processes of its own).
import distsdfg  # noqa: E402

_SEMANTICS = distsdfg.numpy_semantics()


def pytest_configure(config):
    _SEMANTICS.__enter__()


def pytest_unconfigure(config):
    _SEMANTICS.__exit__(None, None, None)


@pytest.fixture(scope="session")
def programs():
    from distsdfg.testing import programs
    return programs
