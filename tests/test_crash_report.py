"""A rank that crashes inside a compiled program names its rank, the program and the communication step
it was in or had last finished (``distsdfg.runtime.crash``): the header's handler compiled alone on
each kind of marker, and a 2-rank mpiexec job whose rank 1 segfaults in a map kernel."""
import os
import shutil
import signal
import subprocess
import sys

import pytest

from distsdfg.launch.mpiexec import mpiexec_argv
from distsdfg.mpi.environment import INCLUDE_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = r"""
#include "distsdfg_crash.h"
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
    static distsdfg_crash_marker m{3, -1, "heat\nscatter `T` for `heat_map` (heat.py:10)\ngather `T` for `heat_map` (heat.py:10)\n"};
    __distsdfg_crash_install(&m);
    const char* mode = argv[1];
    if (!std::strcmp(mode, "in-step")) m.step = 1;
    if (!std::strcmp(mode, "after-first")) m.step = -2 - 0;
    if (!std::strcmp(mode, "after-last")) m.step = -2 - 1;
    if (!std::strcmp(mode, "outside")) m.legend = nullptr;
    if (!std::strcmp(mode, "abort")) std::abort();
    volatile int* volatile p = nullptr;
    *p = 1;
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("crash")
    (folder / "driver.cpp").write_text(DRIVER)
    subprocess.run([cxx, "-std=c++14", "-O1", f"-I{INCLUDE_DIR}", str(folder / "driver.cpp"), "-o",
                    str(folder / "driver")], check=True)
    return str(folder / "driver")


@pytest.mark.parametrize("mode, says, sig", [
    ("in-step", "rank 3 crashed (SIGSEGV, address 0x0) in `heat`, in communication step 1 (gather `T` for "
                "`heat_map` (heat.py:10))\n", signal.SIGSEGV),
    ("before", "in `heat`, before its first communication step (step 0: scatter `T` for `heat_map` (heat.py:10)): "
               "in the kernels before it\n", signal.SIGSEGV),
    ("after-first", "in `heat`, after step 0 (scatter `T` for `heat_map` (heat.py:10)) and before step 1 (gather `T` "
                    "for `heat_map` (heat.py:10)): in the kernels between them\n", signal.SIGSEGV),
    ("after-last", "after step 1 (gather `T` for `heat_map` (heat.py:10)), its last: in the kernels after it\n",
     signal.SIGSEGV),
    ("outside", "rank 3 crashed (SIGSEGV, address 0x0) outside the distributed programs' calls\n", signal.SIGSEGV),
    ("abort", "rank 3 crashed (SIGABRT) in `heat`, before its first communication step", signal.SIGABRT),
])
def test_the_handler_names_the_step_and_passes_the_signal_on(driver, mode, says, sig):
    proc = subprocess.run([driver, mode], capture_output=True, text=True)
    assert proc.returncode == -sig, (proc.returncode, proc.stderr)       # the process ends as it would have
    assert proc.stderr.startswith("distsdfg: ") and says in proc.stderr, proc.stderr


def test_a_rank_crashing_in_a_kernel_names_itself_the_program_and_the_steps(tmp_path):
    script = os.path.join(ROOT, "tests", "data", "crashing.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("DISTSDFG_CRASH_REPORT", None)
    proc = subprocess.run(mpiexec_argv(2, [script, str(tmp_path)], timeout=600), cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    logs = [(tmp_path / f"rank{k}.txt").read_text() for k in range(2)]
    assert proc.returncode != 0 and "crashing call" in logs[1] and "not crashed" not in logs[1], (logs, proc.stderr)
    err = proc.stderr
    assert ("distsdfg: rank 1 crashed (SIGSEGV, address " in err and ") in `far_gather`, after step " in err
            and "in the kernels between them" in err), err[-3000:]
    line = next(ln for ln in err.splitlines() if ln.startswith("distsdfg: rank 1 crashed"))
    assert "for `far_gather_" in line and "crashing.py:20" in line, line       # the kernel and its source line
    assert "distsdfg: rank 0 crashed" not in err, err[-3000:]
    # then Python's faulthandler: the Python stack down to the user's call
    assert "Fatal Python error: Segmentation fault" in err and 'crashing.py", line 36 in main' in err, err[-3000:]
