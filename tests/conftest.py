import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The planner's time model reads rates from a calibration file when there is one: the tests plan
# with the documented defaults (planner.timemodel.DEFAULTS) on every machine, in every rank.
os.environ["DISTSDFG_CALIBRATION"] = os.path.join(ROOT, "tests", "no-calibration-file.json")


@pytest.fixture(scope="session")
def programs():
    from distsdfg.testing import programs
    return programs
