"""A training step's checkpoint resumed on other rank counts, under mpiexec; rank 0 writes JSON.

    mpiexec -n 4 python -m mpi4py tests/checkpoint_run.py OUT.json CHECKPOINT_DIR

An MLP (float64, cross-entropy, AdamW with weight decay), a new batch every step:

- ``save:4``: the 4 ranks train 2 steps, ZeRO-1 (batch split, every update split by rows) in distributed
  placement, and save the checkpoint (every rank its blocks);
- ``load:2``: ranks 0-1 trace the model anew (another initialisation), lower it Megatron-style in
  distributed placement, load the checkpoint and train steps 3 and 4;
- ``load:3``: ranks 0-2 the same with the batch split 3 ways in root placement.

Rank 0 compares losses, weights, both Adam moments and the step counter with 4 steps of ``torch.optim.AdamW``;
``load:2`` also records what every rank raised loading the checkpoint for a mismatched tensor and with a read
that fails on rank 1 alone.
Ranks outside a phase wait for it asleep.
"""
import json
import os
import sys
import time
import traceback

import numpy as np

BATCH, N_IN, HIDDEN, CLASSES = 12, 8, 12, 4        # the batch and the hidden width divide 2, 3 and 4


def _torch():
    import torch
    return torch


def make_model(seed):
    torch = _torch()
    nn = torch.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(N_IN, HIDDEN), nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))
    torch.manual_seed(seed)
    model = MLP().double()
    return model, torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)


def batch(k):
    torch = _torch()
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(BATCH, N_IN, generator=g, dtype=torch.float64), torch.randint(0, CLASSES, (BATCH,), generator=g)


def reference(steps=4):
    """Losses and final state of ``steps`` uninterrupted PyTorch steps."""
    torch = _torch()
    model, opt = make_model(0)
    losses = []
    for k in range(steps):
        x, y = batch(k)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    moments = {f"{k}:{s}": opt.state[p][s].numpy() for k, p in model.named_parameters()
               for s in ("exp_avg", "exp_avg_sq")}
    return losses, state, moments


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def run_phase(comm, schedule: str, placement, first: int, steps: int, ckpt: str, load: bool) -> dict:
    import distsdfg
    from distsdfg.frontend.torch_training import zero_shardings
    torch = _torch()
    P, rank = comm.size, comm.rank
    model, opt = make_model(0 if not load else 99)        # resumed: the checkpoint must overwrite this
    x, y = batch(first)
    step = distsdfg.from_torch_train_step(model, torch.nn.CrossEntropyLoss(), opt, (x,), y)
    sdfg = step.sdfg
    shardings = {"x": (P, 1), "target": (P,)}
    if schedule == "zero":
        shardings = zero_shardings(sdfg, shardings, P)
    elif schedule == "megatron":
        shardings = {"fc1_weight": (P, 1), "fc2_weight": (1, P)}
    distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, shardings, nprocs=P), placement=placement)
    fn = distsdfg.compile(sdfg, comm=comm)
    lay = {a.name: fn.layout(a.name) for a in step.args}
    placed = {a for a, v in lay.items() if v.placement == "distributed"}

    def mine(args):
        return {a: lay[a].block(v, rank) if a in placed else v for a, v in args.items()}
    args = mine(step.arguments(x, y))
    if load:
        args.update(step.load_checkpoint(ckpt, fn))
        if P == 2:
            refused = refusals(comm, ckpt, step, fn)
    losses = []
    for k in range(first, first + steps):
        args.update(mine({a: v for a, v in step.arguments(*batch(k)).items() if a in step.inputs}))
        loss = fn(**args)
        if rank == 0:
            losses.append(float(np.asarray(loss).reshape(-1)[0]))
    result = {"ranks": P, "schedule": schedule, "placement": placement or "root", "losses": losses,
              "placed": sorted(placed)}
    if not load:
        index = step.save_checkpoint(ckpt, args, fn)
        result["tensors"] = len(index.tensors)
        result["files"] = sum(len(t.blocks) for t in index.tensors)
        result["bytes"] = sum(os.path.getsize(os.path.join(ckpt, b.file)) for t in index.tensors for b in t.blocks)
    got = {}
    for a in args:                    # rank 0 assembles every argument
        if a in placed:
            blocks = comm.gather(args[a], root=0)
            if rank == 0:
                got[a] = lay[a].assemble(blocks)
        else:
            got[a] = args[a]
    if load and P == 2:
        result["refusals"] = comm.gather(refused, root=0)
    if rank == 0:
        ref_losses, state, moments = reference(first + steps)
        result["loss_err"] = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses[first:]))
        sd = step.state_dict(got)
        result["rel_err"] = max(_rel(sd[k].numpy(), v) for k, v in state.items())
        ost = step.optimizer_state(got)
        result["state_err"] = max(_rel(ost[k.split(":")[0]][k.split(":")[1]].numpy(), v) for k, v in moments.items())
        result["step"] = float(got["optim_step"][0])
    return result


def refusals(comm, ckpt, step, fn):
    """What each rank raised loading ``ckpt`` for a wider ``fc1.weight`` (every rank), and with rank 1 alone
    asking for a block beyond ``fc1.weight``'s rows (a failure on one rank only)."""
    import dataclasses
    from distsdfg.errors import CheckpointError
    from distsdfg.frontend.torch_checkpoint import tensors_of
    from distsdfg.runtime import checkpoint as ck
    tensors = tensors_of(step)
    lays = ck.program_layouts(fn, [t.argument for t in tensors])
    w = lays["fc1_weight"]
    wider = {**lays, "fc1_weight": dataclasses.replace(w, shape=(HIDDEN + 4, N_IN))}
    beyond = dict(lays)
    if comm.rank == 1:
        blocks = list(w.blocks)
        blocks[1] = ((0, HIDDEN + 4), (0, N_IN))
        beyond["fc1_weight"] = dataclasses.replace(w, blocks=tuple(blocks))
    out = []
    for layouts in (wider, beyond):
        try:
            ck.load_checkpoint(ckpt, tensors, layouts, comm=comm)
            out.append("")
        except CheckpointError as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def wait_asleep(comm):
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.01)


def main(out_path: str, ckpt: str):
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    phases = [("save:4", 4, "zero", "distributed", 0, False), ("load:2", 2, "megatron", "distributed", 2, True),
              ("load:3", 3, "batch", None, 2, True)]
    results = []
    for name, ranks, schedule, placement, first, load in phases:
        comm = world.Split(0 if world.rank < ranks else MPI.UNDEFINED, world.rank)
        r = None
        if comm != MPI.COMM_NULL:
            t0 = time.time()
            try:
                r = run_phase(comm, schedule, placement, first, 2, ckpt, load)
            except Exception as exc:  # noqa: BLE001 (recorded; the test reports it)
                r = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
                print(f"rank {world.rank}: {name} failed: {exc}", file=sys.stderr, flush=True)
            if r is not None:
                r.update(phase=name, seconds=round(time.time() - t0, 1))
            comm.Free()
        wait_asleep(world)
        if world.rank == 0:
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "trace"})[:600], flush=True)
    if world.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
