"""A training step through distsdfg next to PyTorch DDP (gloo, CPU): time and bytes per step.

    distsdfg launch -n 2 benchmarks/torch_ddp.py [--model mlp|gpt] [--steps 10] [--json OUT]

Both sides train the same model from the same initial weights on the same batch:

- **DDP**: ``torch.nn.parallel.DistributedDataParallel`` over ``torch.distributed`` with the
  gloo backend; each rank runs forward and backward on its rows of the batch, DDP all-reduces
  the gradients (averaged) and every rank applies the optimizer step.
- **distsdfg, root placement**: ``from_torch_train_step`` of the whole step, lowered with the
  data-parallel schedule (``schedule_from_shardings`` splitting the batch over the ranks),
  compiled once and called with the root placement's call form (rank 0 holds the weights and
  optimizer state; ``examples/torch_train.py`` does the same).
- **distsdfg, ZeRO-1 in distributed placement** (``zero``): the same step with every optimizer
  update kernel also split by its first axis (``torch_training.zero_shardings``) and
  ``placement="distributed"``: each rank keeps its rows of the parameters and of the optimizer
  state between steps, the gradients' partial sums over the batch meet in one
  ``Reduce_scatter`` per gradient (each rank gets the sum of the rows it updates) and the updated
  parameters in one ``Allgatherv`` each: DDP's all-reduce volume.

Time per step: the median over ``--steps`` steps after two warm-up steps, each step timed
between two barriers (the slowest rank); the variants' steps are interleaved (one step of each
in turn), so that the machine's load moves all of them alike. Bytes per step, by the convention of
``distsdfg.comm_report`` (the sum over ranks of the bytes each rank sends; an Allreduce of
``n`` bytes is a reduce-scatter plus an allgather, ``2 (P-1)/P n`` sent per rank): for DDP
counted from the gradient buckets a communication hook hands to ``all_reduce``, plus the
buffers DDP broadcasts from rank 0 before every forward in training mode (its default
``broadcast_buffers=True``: a GPT's causal-mask buffer), ``(P-1) n`` sent for ``n`` bytes, both
printed; for distsdfg ``comm_report``'s total. At the end both sides' weights are compared (relative error), so
the two columns time the same computation. One thread per process (``torch.set_num_threads(1)``).
Record the figures in docs/torch.md.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np
from mpi4py import MPI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
warnings.filterwarnings("ignore")


def mlp_case(args, torch, nn):
    """An MLP classifier with SGD and momentum, cross-entropy loss."""
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(args.width, args.hidden)
            self.fc2 = nn.Linear(args.hidden, args.classes)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))
    torch.manual_seed(0)
    model = MLP()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, args.classes, (args.batch,), generator=g)
    ce = nn.CrossEntropyLoss()
    return {"model": model, "inputs": (x,), "target": y, "loss": lambda out, t: ce(out, t),
            "optimizer": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
            "local_loss": lambda m, xs, t: ce(m(*xs), t),
            "shardings": {"x": (None, 1), "target": (None,)}}


def gpt_case(args, torch, nn):
    """tests/gpt_model.py's mixed tiny GPT (2 layers, 4 heads, width 32, context 16) with AdamW."""
    from gpt_model import tiny
    torch.manual_seed(0)
    model = tiny(mixed=True)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, model.cfg.vocab, (args.batch, model.cfg.context), generator=g)
    tgt = torch.randint(0, model.cfg.vocab, (args.batch, model.cfg.context), generator=g)
    return {"model": model.train(), "inputs": (idx, tgt), "target": tgt, "loss": lambda out, t: out[1],
            "optimizer": lambda m: (m.module if hasattr(m, "module") else m).optimizer(),
            "local_loss": lambda m, xs, t: m(*xs)[1],
            "shardings": {"idx": (None, 1), "targets": (None, 1)}}


def setup_ddp(case, comm):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    port = comm.bcast(_free_port() if comm.rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank, world_size=comm.size)
    model = DDP(copy.deepcopy(case["model"]))
    opt = case["optimizer"](model)
    rows = case["target"].shape[0] // comm.size
    mine = slice(comm.rank * rows, (comm.rank + 1) * rows)
    xs = tuple(t[mine] for t in case["inputs"])
    t_ = case["target"][mine]
    counted = {"bytes": 0}

    def allreduce_hook(state, bucket):
        buf = bucket.buffer()
        counted["bytes"] += buf.numel() * buf.element_size()
        buf.div_(comm.size)
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
    model.register_comm_hook(None, allreduce_hook)
    counted["buffers"] = 0
    broadcast = model._distributed_broadcast_coalesced      # DDP's buffer sync (after construction)

    def counted_broadcast(tensors, buffer_size, authoritative_rank=0):
        counted["buffers"] += sum(t.numel() * t.element_size() for t in tensors)
        return broadcast(tensors, buffer_size, authoritative_rank)
    model._distributed_broadcast_coalesced = counted_broadcast

    def step():
        opt.zero_grad()
        case["local_loss"](model, xs, t_).backward()
        opt.step()

    def finish(calls):
        sent = 2 * (comm.size - 1) * counted["bytes"] / calls   # P ranks, each sending 2 (P-1)/P of every bucket
        buffers = (comm.size - 1) * counted["buffers"] / calls   # rank 0 sends each buffer to the others
        dist.destroy_process_group()
        return (int(sent), int(buffers)), model.module.state_dict()
    return step, finish


def setup_distsdfg(case, comm, variants):
    """Per variant (``root``, ``zero``): the step to time and what to read after the steps."""
    import distsdfg
    t0 = time.perf_counter()
    step = distsdfg.from_torch_train_step(case["model"], case["loss"], case["optimizer"](case["model"]),
                                          case["inputs"], case["target"])
    traced = step.sdfg if comm.rank == 0 else None      # parsed on rank 0 only
    t_trace = time.perf_counter() - t0
    out = {}
    for v in variants:
        t1 = time.perf_counter()
        sdfg = lowered_on_rank0(comm, lambda: lower_variant(distsdfg, case, traced, v, comm.size,
                                                            last=v == variants[-1]))
        report = distsdfg.comm_report(sdfg, nprocs=comm.size) if comm.rank == 0 else None
        fn = distsdfg.compile(sdfg, comm=comm)
        build = comm.allreduce(t_trace + time.perf_counter() - t1, op=MPI.MAX)
        args = step.arguments(*case["inputs"], case["target"])
        total = sum(sum(s.total_sent) for s in report) if report is not None else None
        if v == "zero":       # every rank passes and keeps its own blocks of the placed arrays
            lay = {a: fn.layout(a) for a, x in args.items() if isinstance(x, np.ndarray)}
            placed = {a: lay[a] for a in lay if lay[a].placement == "distributed"}
            mine = {a: (placed[a].block(x, comm.rank) if a in placed else x) for a, x in args.items()}

            def state(mine=mine, placed=placed, args=args):
                from distsdfg.testing.torch_run import assemble_placed
                got = assemble_placed(comm, args, mine, placed)
                return step.state_dict(got) if comm.rank == 0 else None
            out[v] = (lambda fn=fn, mine=mine: fn(**mine), state, total, build)
        else:
            out[v] = (lambda fn=fn, args=args: fn(**args),
                      lambda args=args: step.state_dict(args) if comm.rank == 0 else None, total, build)
    return out, len(step.kernels)


def lower_variant(distsdfg, case, traced, variant, nprocs, last):
    """The traced step lowered data-parallel: in root placement, or ZeRO-1 in distributed placement."""
    from distsdfg.frontend.torch_training import zero_shardings
    sdfg = traced if last else copy.deepcopy(traced)
    ways = {k: tuple(nprocs if w is None else w for w in v) for k, v in case["shardings"].items() if k in sdfg.arrays}
    if variant == "zero":
        sched = distsdfg.schedule_from_shardings(sdfg, zero_shardings(sdfg, ways, nprocs), nprocs=nprocs)
        distsdfg.lower(sdfg, sched, placement="distributed")
    else:
        distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, ways, nprocs=nprocs))
    return sdfg


def lowered_on_rank0(comm, make):
    """``make()`` (a lowered SDFG) on rank 0 alone, sent to the other ranks, which wait without
    busy-polling (tests/gpt_run.py does the same: ranks lowering the GPT step side by side on this
    2-core machine took twice as long)."""
    from distsdfg import dace_compat as dc
    from distsdfg.runtime.program import idle_bcast
    sdfg = make() if comm.rank == 0 else None
    text, low = idle_bcast(comm, (dc.to_json(sdfg), sdfg._distsdfg) if comm.rank == 0 else None)
    if comm.rank == 0:
        return sdfg
    sdfg = dc.from_json(text)
    sdfg._distsdfg = low
    return sdfg


def interleaved(comm, fns, steps):
    """Each of ``fns`` called ``steps + 2`` times, one call of each in turn; per function the
    median of the slowest rank's time over the calls after the first two, and all times."""
    times = {k: [] for k in fns}
    for it in range(steps + 2):
        for k, fn in fns.items():
            comm.Barrier()
            t = time.perf_counter()
            fn()
            comm.Barrier()
            if it >= 2:
                times[k].append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
    return {k: statistics.median(v) for k, v in times.items()}, times


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=None, help="default: 512 (mlp), 8 (gpt)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--variants", default="root,zero", help="distsdfg variants, comma-separated: root, zero")
    ap.add_argument("--json", help="write the figures here (rank 0)")
    a = ap.parse_args(argv)
    a.batch = a.batch or (512 if a.model == "mlp" else 8)
    import torch
    from torch import nn
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    if a.batch % comm.size:
        raise SystemExit(f"--batch {a.batch} must be a multiple of the {comm.size} ranks")
    case = (mlp_case if a.model == "mlp" else gpt_case)(a, torch, nn)
    variants = [v for v in a.variants.split(",") if v]
    ours, kernels = setup_distsdfg(case, comm, variants)
    ddp_step, ddp_finish = setup_ddp(case, comm)
    fns = {v: ours[v][0] for v in variants}
    fns["ddp"] = ddp_step
    med, times = interleaved(comm, fns, a.steps)
    (ddp_grads, ddp_buffers), want = ddp_finish(a.steps + 2)
    ddp_bytes = ddp_grads + ddp_buffers
    states = {v: ours[v][1]() for v in variants}        # collective: every rank takes part
    if comm.rank != 0:
        return
    # All sides trained steps + 2 times from the same start: compare the final weights.
    row = {"model": a.model, "ranks": comm.size, "batch": a.batch, "kernels": kernels, "ddp_step_s": med["ddp"],
           "ddp_bytes": ddp_bytes, "ddp_gradient_bytes": ddp_grads, "ddp_buffer_bytes": ddp_buffers,
           "ddp_times": times["ddp"], "variants": {}}
    print(f"{a.model}, {comm.size} ranks, batch {a.batch} ({kernels} kernels), {a.steps} steps after 2 warm-up, "
          f"interleaved:")
    names = {"root": "distsdfg (data-parallel, root placement)", "zero": "distsdfg (ZeRO-1, distributed)"}
    for v in variants:
        got = states[v]
        err = max(float((got[k] - w).abs().max() / max(w.abs().max(), 1e-30)) for k, w in want.items() if k in got)
        row["variants"][v] = {"step_s": med[v], "ratio": med[v] / med["ddp"], "bytes": ours[v][2],
                              "bytes_ratio": ours[v][2] / max(ddp_bytes, 1), "build_s": ours[v][3],
                              "weights_rel_err": err, "times": times[v]}
        print(f"  {names[v]:<42} {1e3 * med[v]:9.2f} ms/step  {ours[v][2]:>12,} B/step  "
              f"{med[v] / med['ddp']:.2f}x time  {ours[v][2] / max(ddp_bytes, 1):.3f}x bytes  weights {err:.1e}  "
              f"(built in {ours[v][3]:.0f} s)")
    print(f"  {'PyTorch DDP (gloo)':<42} {1e3 * med['ddp']:9.2f} ms/step  {ddp_bytes:>12,} B/step  "
          f"(gradients {ddp_grads:,} B, buffers broadcast before each forward {ddp_buffers:,} B)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
