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


@pytest.fixture(scope="session")
def programs():
    from distsdfg.testing import programs
    return programs
