"""The GPT fixture of ``gpt_model.py`` under mpiexec: rank 0 compares with PyTorch, writes JSON.

    mpiexec -n 4 python -m mpi4py tests/gpt_run.py OUT.json forward:data train:data

Cases: ``forward`` (last-token logits, float32) or ``train`` (3 AdamW steps with two
parameter groups, float64, so that the comparison is not dominated by Adam normalising
float32 rounding of near-zero gradients), each ``:data`` (the batch split over the ranks,
``distsdfg.schedule_from_shardings``) or ``:one`` (no schedule: the program as one process
runs it, on rank 0). The model is the mixed tiny GPT (both attention forms, biases and none).
"""
from __future__ import annotations

import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH, SEQ = 4, 16


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def model_and_data(mode: str):
    import torch
    from gpt_model import tiny
    model = tiny(mixed=True)
    gen = torch.Generator().manual_seed(7)
    idx = torch.randint(0, model.cfg.vocab, (BATCH, SEQ), generator=gen)
    tgt = torch.randint(0, model.cfg.vocab, (BATCH, SEQ), generator=gen)
    if mode == "train":
        model = model.double().train()
    else:
        model = model.eval()
    return model, idx, tgt


def last_loss(out, target):
    """The model computes its own loss from the targets it is given: use it."""
    return out[1]


def run_case(case: str, comm) -> dict:
    import distsdfg
    from distsdfg.testing.mpirun import counted_call
    mode, shard = case.split(":")
    if shard == "one" and comm.rank != 0:
        return {"case": case}
    model, idx, tgt = model_and_data(mode)
    if mode == "forward":
        prog = distsdfg.from_torch(model, (idx,))
    else:
        prog = distsdfg.from_torch_train_step(model, last_loss, model.optimizer(), (idx, tgt), tgt)
    sdfg = prog.sdfg
    sched = {}
    if shard == "data":
        shardings = {"idx": (comm.size, 1), "targets": (comm.size, 1)}
        sched = distsdfg.schedule_from_shardings(sdfg, {k: v for k, v in shardings.items() if k in sdfg.arrays},
                                                 nprocs=comm.size)
        distsdfg.lower(sdfg, sched)
        report = distsdfg.comm_report(sdfg, nprocs=comm.size)
    else:
        report = []
    fn = distsdfg.compile(sdfg, comm=comm) if shard == "data" else sdfg.compile()
    result = {"case": case, "schedule": {k: list(v) for k, v in sched.items()}, "bytes": [],
              "collectives": sorted({s.collective for s in report})}

    def call(args):
        if shard != "data":
            return fn(**args)
        out, measured = counted_call(comm, lambda: fn(**args), report)
        result["bytes"].append(measured)
        return out
    if mode == "forward":
        out = call(prog.arguments(idx))
        if comm.rank == 0:
            result["rel_err"] = _rel(out, model(idx).detach().numpy())
        return result
    args = prog.arguments(idx, tgt, tgt)
    ref = copy.deepcopy(model)
    opt = ref.optimizer()
    losses, ref_losses = [], []
    for _ in range(3):
        loss = call(args)
        opt.zero_grad()
        rl = ref(idx, tgt)[1]
        rl.backward()
        opt.step()
        if comm.rank == 0:
            losses.append(float(np.asarray(loss).reshape(-1)[0]))
            ref_losses.append(float(rl.item()))
    if comm.rank == 0:
        got = prog.state_dict(args)
        want = {k: v for k, v in ref.state_dict().items() if k in got}
        result["missing"] = sorted(set(dict(ref.named_parameters())) - set(got))
        result["loss_err"] = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        result["rel_err"] = max(_rel(got[k].numpy(), v.detach().numpy()) for k, v in want.items())
        result["losses"] = losses
    return result


def main(argv):
    from distsdfg.testing.mpirun import run_cases
    run_cases(argv[0], argv[1:], run_case, quiet=("trace", "schedule"))


if __name__ == "__main__":
    main(sys.argv[1:])
