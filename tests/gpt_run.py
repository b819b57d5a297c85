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


def lowered_on_rank0(prog, shardings, placement, comm, split_update=False):
    """(lowered SDFG, schedule): parsed, planned and lowered on rank 0 alone, the result sent to
    the other ranks (JSON and the plan record), which wait without busy-polling: four
    oversubscribed ranks each lowering a ~500-kernel step took most of a half-hour launch."""
    import time

    import distsdfg
    from distsdfg import dace_compat as dc
    from distsdfg.runtime.program import idle_bcast
    sent = None
    if comm.rank == 0:
        t0 = time.perf_counter()
        sdfg = prog.sdfg
        shardings = {k: v for k, v in shardings.items() if k in sdfg.arrays}
        if split_update:       # ZeRO-1: every update split by its first axis
            from distsdfg.frontend.torch_training import zero_shardings
            shardings = zero_shardings(sdfg, shardings, comm.size)
        sched = distsdfg.schedule_from_shardings(sdfg, shardings, nprocs=comm.size)
        distsdfg.lower(sdfg, sched, placement=placement)
        print(f"[gpt] lowered in {time.perf_counter() - t0:.1f}s", flush=True)
        sent = (dc.to_json(sdfg), sdfg._distsdfg, sched)
    text, low, sched = idle_bcast(comm, sent)
    if comm.rank == 0:
        return sdfg, sched
    sdfg = dc.from_json(text)
    sdfg._distsdfg = low
    return sdfg, sched


def run_case(case: str, comm) -> dict:
    import time

    import distsdfg
    from distsdfg.testing.mpirun import counted_call
    mode, shard, *rest = case.split(":")
    placement = rest[0] if rest else None
    if shard == "one" and comm.rank != 0:
        return {"case": case}
    model, idx, tgt = model_and_data(mode)
    t0 = time.perf_counter()
    if mode == "forward":
        prog = distsdfg.from_torch(model, (idx,))
    else:
        prog = distsdfg.from_torch_train_step(model, last_loss, model.optimizer(), (idx, tgt), tgt)
    sched = {}
    if shard in ("data", "zero"):
        shardings = {"idx": (comm.size, 1), "targets": (comm.size, 1)}
        sdfg, sched = lowered_on_rank0(prog, shardings, placement, comm, split_update=shard == "zero")
        report = distsdfg.comm_report(sdfg, nprocs=comm.size)
    else:
        sdfg = prog.sdfg
        report = []
    t1 = time.perf_counter()
    fn = distsdfg.compile(sdfg, comm=comm) if shard != "one" else sdfg.compile()
    result = {"case": case, "schedule": {k: list(v) for k, v in sched.items()}, "bytes": [],
              "collectives": sorted({s.collective for s in report}),
              "report_bytes": int(sum(sum(s.sent) * s.repeats for s in report)),
              # the loss's sums: one-element Allreduces (not part of DDP's gradient volume)
              "loss_bytes": int(sum(sum(s.sent) for s in report if s.collective == "Allreduce" and max(s.sent) <= 8)),
              "param_bytes": sum(int(p.numel()) * p.element_size() for p in model.parameters()),
              "seconds": {"trace_lower": t1 - t0, "compile": time.perf_counter() - t1}}
    result["packed"] = len(getattr(fn, "_packed", None) or ())

    def call(args):
        if shard == "one":
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
    if placement == "distributed":
        return train_distributed(prog, fn, args, call, result, model, idx, tgt, comm)
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


def train_distributed(prog, fn, args, call, result, model, idx, tgt, comm) -> dict:
    """Three AdamW steps in distributed placement: every rank passes its own blocks of the weights
    and both Adam moments and keeps them between calls; rank 0 assembles them after the last."""
    import time

    from distsdfg.testing.torch_run import assemble_placed
    rank = comm.rank
    lay = {a: fn.layout(a) for a, v in args.items() if isinstance(v, np.ndarray)}
    placed = {a for a in lay if lay[a].placement == "distributed"}
    mine = {a: (lay[a].block(v, rank) if a in placed else v) for a, v in args.items()}
    result["placed"] = sorted(placed)
    ref = copy.deepcopy(model)
    opt = ref.optimizer()
    losses, ref_losses, times = [], [], []
    for _ in range(3):
        t0 = time.perf_counter()
        loss = call(mine)
        times.append(time.perf_counter() - t0)
        opt.zero_grad()
        rl = ref(idx, tgt)[1]
        rl.backward()
        opt.step()
        if rank == 0:
            losses.append(float(np.asarray(loss).reshape(-1)[0]))
            ref_losses.append(float(rl.item()))
    result["seconds"]["calls"] = times
    got = assemble_placed(comm, args, mine, {a: lay[a] for a in placed})
    if rank == 0:
        sd = prog.state_dict(got)
        want = {k: v for k, v in ref.state_dict().items() if k in sd}
        result["missing"] = sorted(set(dict(ref.named_parameters())) - set(sd))
        result["loss_err"] = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        result["rel_err"] = max(_rel(sd[k].numpy(), v.detach().numpy()) for k, v in want.items())
        ostate = prog.optimizer_state(got)
        params = dict(ref.named_parameters())
        result["state_err"] = max(_rel(ostate[k][s].numpy(), opt.state[params[k]][s].numpy())
                                  for k in ostate if k in params for s in ("exp_avg", "exp_avg_sq"))
        result["losses"] = losses
    return result


def main(argv):
    from distsdfg.testing.mpirun import run_cases
    run_cases(argv[0], argv[1:], run_case, quiet=("trace", "schedule"))


if __name__ == "__main__":
    main(sys.argv[1:])
