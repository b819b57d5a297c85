"""Every rank compiles the plan rank 0 compiles: the lowering's fingerprint, compared before the build, names
the first difference; a torch model lowers to the same plan whatever Python's hash seed. (The 2-rank job
with one rank lowering another schedule is in test_call_agreement.py.)"""
import os
import subprocess
import sys

import dace
import pytest

import distsdfg
from distsdfg.errors import PlanMismatchError
from distsdfg.runtime.fingerprint import PARTS, check_same_plan, digests, first_difference, fingerprint, plan_parts
from distsdfg.solver.solve import lowered_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = dace.symbol("N")


@dace.program
def two_kernels(A: dace.float64[N, N], B: dace.float64[N, N]):
    return (A + 1.0) @ B


def _lowered(grid):
    sdfg = two_kernels.to_sdfg()
    distsdfg.lower(sdfg, {m.key: grid[:len(m.params)] for m in distsdfg.maps(sdfg)})
    return sdfg, lowered_of(sdfg)


class _TwoRanks:
    """Rank 0 of a 2-rank communicator whose rank 1 lowered ``theirs`` (``plan_parts``): the digests first,
    then the part that differs, as ``check_same_plan`` exchanges them."""
    rank, size = 0, 2

    def __init__(self, theirs):
        self.theirs, self.calls = theirs, 0

    def Ibarrier(self):
        return type("Done", (), {"Test": lambda _self: True})()

    def allgather(self, obj):
        self.calls += 1
        if self.calls == 1:
            return [obj, digests(self.theirs)]
        part = next(p for p in PARTS if self.theirs[p] != obj and len(self.theirs[p]) and len(obj)
                    and self.theirs[p][0][:8] == obj[0][:8])
        return [obj, self.theirs[part]]


def test_same_lowering_same_fingerprint_and_no_error():
    a, low_a = _lowered((2, 1, 1))
    b, low_b = _lowered((2, 1, 1))
    assert fingerprint(a, low_a) == fingerprint(b, low_b)
    assert first_difference(plan_parts(a, low_a), plan_parts(b, low_b)) is None
    check_same_plan(_TwoRanks(plan_parts(b, low_b)), a, low_a)


def test_a_rank_with_another_plan_gets_an_error_naming_the_difference():
    a, low_a = _lowered((2, 1, 1))
    b, low_b = _lowered((1, 2, 1))
    ours, theirs = plan_parts(a, low_a), plan_parts(b, low_b)
    assert fingerprint(a, low_a) != fingerprint(b, low_b)
    assert first_difference(ours, theirs) == "schedule"
    theirs["schedule"] = ours["schedule"]         # the same schedule, other steps (another order of rewrites)
    assert first_difference(ours, theirs) == "kernels"
    theirs["kernels"] = ours["kernels"]
    with pytest.raises(PlanMismatchError) as exc:
        check_same_plan(_TwoRanks(theirs), a, low_a)
    msg = str(exc.value)
    assert "rank 1 lowered `test_plan_agreement_two_kernels` differently from rank 0 (steps, entry 0" in msg, msg
    assert "rank 0: StepSpec(" in msg and "rank 1: StepSpec(" in msg and "PYTHONHASHSEED" in msg, msg


def test_transients_inside_the_binary_do_not_count_but_arguments_and_symbols_do():
    """Every rank runs rank 0's binary: a transient no step touches (shaped by DaCe's map fusion, which
    may differ from one process to the next) changes nothing a rank does; an argument or a symbol does."""
    a, low_a = _lowered((2, 1, 1))
    b, low_b = _lowered((2, 1, 1))
    b.add_transient("__inner_tmp", [1, 1, 1], dace.float64)
    assert first_difference(plan_parts(a, low_a), plan_parts(b, low_b)) is None
    c, low_c = _lowered((2, 1, 1))
    c.add_array("__extra_arg", [N], dace.float64)
    assert first_difference(plan_parts(a, low_a), plan_parts(c, low_c)) == "arrays"
    d, low_d = _lowered((2, 1, 1))
    d.add_transient("__sized_tmp", [dace.symbol("__other_size")], dace.float64)
    assert first_difference(plan_parts(a, low_a), plan_parts(d, low_d)) == "arrays"


_FINGERPRINT = """
import torch, distsdfg
from distsdfg.runtime.fingerprint import fingerprint
from distsdfg.solver.solve import lowered_of
torch.manual_seed(0)

class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        B, S, E = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, 2, 8).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return o.transpose(1, 2).reshape(B, S, E)

m = Attention()
step = distsdfg.from_torch_train_step(m, lambda o, y: ((o - y) ** 2).mean(), torch.optim.SGD(m.parameters(), lr=0.1),
                                      (torch.randn(2, 4, 16),), torch.randn(2, 4, 16))
sdfg = step.sdfg
distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, {"x": (2, 1, 1)}, nprocs=2))
print("FINGERPRINT", fingerprint(sdfg, lowered_of(sdfg)))
"""


def test_torch_lowering_is_the_same_whatever_the_hash_seed(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "fingerprint.py"
    script.write_text(_FINGERPRINT)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # Seeds under which DaCe's simplify, without the sorted array elimination (dace_compat.ordered), gave three plans.
    jobs = [subprocess.Popen([sys.executable, str(script)], env=dict(env, PYTHONHASHSEED=seed), cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in ("1", "2")]
    outs = [j.communicate(timeout=600) for j in jobs]
    prints = [next((ln for ln in out.splitlines() if ln.startswith("FINGERPRINT")), err[-2000:]) for out, err in outs]
    assert prints[0].startswith("FINGERPRINT") and prints[0] == prints[1], prints
