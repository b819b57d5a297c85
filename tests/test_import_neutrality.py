"""Importing distsdfg leaves DaCe as it is: a sample of DaCe programs (a few written here with `//`, `%`,
slices of extent one, a sum of booleans, `isnan`, a matrix product; NPBench's DaCe kernels where a checkout
is found) parse to the same generated code and compute the same values with and without distsdfg
imported, each side in a process of its own (``tests/data/dace_alone.py``). distsdfg's NumPy semantics
apply inside ``distsdfg.numpy_semantics()`` only, and DaCe is as before once the block ends."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "data", "dace_alone.py")
#: An NPBench checkout (https://github.com/spcl/npbench); its kernels join the sample where it is found.
NPBENCH = os.environ.get("DISTSDFG_NPBENCH_DIR", os.path.join(os.path.dirname(os.path.dirname(HERE)), "npbench"))


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTSDFG_")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    procs, outs = {}, {}
    for side in ("without", "with"):
        folder = tmp_path_factory.mktemp(side)
        outs[side] = folder / "out.json"
        procs[side] = subprocess.Popen([sys.executable, SCRIPT, side, str(outs[side]), NPBENCH], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for side, p in procs.items():
        log, _ = p.communicate(timeout=900)
        assert p.returncode == 0, f"{side} distsdfg: {log[-3000:]}"
    return {side: json.loads(out.read_text()) for side, out in outs.items()}


def test_dace_settings_and_registries_unchanged_by_the_import(sides):
    assert sides["with"]["state"] == sides["without"]["state"]
    assert sides["with"]["state_after"] == sides["without"]["state_after"]


def test_same_generated_code(sides):
    without, with_ = sides["without"]["code"], sides["with"]["code"]
    assert sorted(with_) == sorted(without) and len(without) >= 4
    differ = [name for name in without if with_[name] != without[name]]
    assert not differ, f"generated code differs with distsdfg imported: {differ}"


def test_same_values(sides):
    assert sides["with"]["values"] == sides["without"]["values"]


def test_numpy_semantics_apply_inside_the_block_only(sides):
    without, with_ = sides["without"], sides["with"]
    for name in ("signs", "slices"):
        assert with_["inside"]["code"][name] != without["code"][name], name
        assert with_["after_block"]["code"][name] == without["code"][name], name
    assert with_["inside"]["state"] != without["state"]
    assert with_["after_block"]["state"] == without["state"]
