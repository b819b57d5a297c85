"""Train a PyTorch MLP on P ranks — `distsdfg launch -n 4 examples/torch_train.py` (any -n; needs `pip install -e '.[torch]'`).

The whole training step (forward, cross-entropy loss, PyTorch's backward, SGD with momentum)
becomes one DaCe program with ``distsdfg.from_torch_train_step``. Two schedules from array
shardings (``distsdfg.schedule_from_shardings``): data-parallel (the batch split P ways)
and Megatron-style (``fc1`` split by output features, ``fc2`` by input features). Each is
lowered, compiled once, and trained for a few steps; rank 0 prints the loss next to
``torch.optim.SGD`` on the same data and checks the weights at the end.
"""
import copy
import warnings

import numpy as np
from mpi4py import MPI

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import distsdfg  # noqa: E402
from distsdfg.solver.report import format_report  # noqa: E402

STEPS = 5


def shardings(P):
    """Ways each array is split on ``P`` ranks, per schedule."""
    return {"data-parallel": {"x": (P, 1), "target": (P,)},
            "Megatron": {"fc1_weight": (P, 1), "fc2_weight": (1, P)}}


class MLP(nn.Module):
    def __init__(self, n_in=64, hidden=128, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)


def train(name, shardings, comm):
    torch.manual_seed(0)
    model = MLP()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    step = distsdfg.from_torch_train_step(model, nn.CrossEntropyLoss(), optimizer(model), (x,), y)
    sdfg = step.sdfg
    distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, shardings, nprocs=comm.size))
    if comm.rank == 0:
        print(f"\n== {name} on {comm.size} ranks: {step}")
        print(format_report(distsdfg.comm_report(sdfg, nprocs=comm.size)))
    fn = distsdfg.compile(sdfg)

    args = step.arguments(x, y)          # the arrays rank 0 holds: weights, momenta, the batch
    ref = copy.deepcopy(model)
    ref_opt = optimizer(ref)
    for it in range(STEPS):
        loss = fn(**args)                # every rank calls; weights are updated in place on rank 0
        ref_opt.zero_grad()
        ref_loss = nn.CrossEntropyLoss()(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        if comm.rank == 0:
            print(f"  step {it}: loss {float(np.asarray(loss).reshape(-1)[0]):.6f}   torch.optim.SGD {ref_loss.item():.6f}")
    ok = True
    if comm.rank == 0:
        got = step.state_dict(args)
        err = max(float((got[k] - v).abs().max() / v.abs().max()) for k, v in ref.state_dict().items())
        ok = err <= 1e-5
        print(f"  weights after {STEPS} steps vs PyTorch: max relative error {err:.1e} -> {'OK' if ok else 'WRONG'}")
    if not comm.bcast(ok, root=0):
        raise SystemExit(1)


def main():
    comm = MPI.COMM_WORLD
    for name, ways in shardings(comm.size).items():
        train(name, ways, comm)


if __name__ == "__main__":
    main()
