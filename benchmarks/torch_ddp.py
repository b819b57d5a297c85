"""A training step through distsdfg next to PyTorch DDP (gloo, CPU): time and bytes per step.

    distsdfg launch -n 2 benchmarks/torch_ddp.py [--model mlp|gpt] [--steps 10] [--json OUT]

Both sides train the same model from the same initial weights on the same batch:

- **DDP**: ``torch.nn.parallel.DistributedDataParallel`` over ``torch.distributed`` with the
  gloo backend; each rank runs forward and backward on its rows of the batch, DDP all-reduces
  the gradients (averaged) and every rank applies the optimizer step.
- **distsdfg**: ``from_torch_train_step`` of the whole step, lowered with the data-parallel
  schedule (``schedule_from_shardings`` splitting the batch over the ranks), compiled once
  and called with the root placement's call form (rank 0 holds the weights and optimizer
  state; ``examples/torch_train.py`` does the same).

Time per step: the median over ``--steps`` steps after two warm-up steps, each step timed
between two barriers (the slowest rank). Bytes per step, by the convention of
``distsdfg.comm_report`` (the sum over ranks of the bytes each rank sends; an Allreduce of
``n`` bytes is a reduce-scatter plus an allgather, ``2 (P-1)/P n`` sent per rank): for DDP
counted from the gradient buckets a communication hook hands to ``all_reduce``; for distsdfg
``comm_report``'s total. At the end both sides' weights are compared (relative error), so
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


def timed(comm, fn, steps):
    """Median over ``steps`` calls of the slowest rank's time, after two warm-up calls."""
    times = []
    for it in range(steps + 2):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        comm.Barrier()
        if it >= 2:
            times.append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
    return statistics.median(times), times


def run_ddp(case, comm, steps):
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

    def step():
        opt.zero_grad()
        case["local_loss"](model, xs, t_).backward()
        opt.step()
    med, times = timed(comm, step, steps)
    per_step = counted["bytes"] / (steps + 2)
    sent = 2 * (comm.size - 1) * per_step     # P ranks, each sending 2 (P-1)/P of every bucket
    dist.destroy_process_group()
    return med, times, int(sent), model.module.state_dict()


def run_distsdfg(case, comm, steps):
    import distsdfg
    t0 = time.perf_counter()
    step = distsdfg.from_torch_train_step(case["model"], case["loss"], case["optimizer"](case["model"]),
                                          case["inputs"], case["target"])
    sdfg = step.sdfg
    ways = {k: tuple(comm.size if w is None else w for w in v) for k, v in case["shardings"].items()
            if k in sdfg.arrays}
    distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, ways, nprocs=comm.size))
    report = distsdfg.comm_report(sdfg, nprocs=comm.size) if comm.rank == 0 else None
    fn = distsdfg.compile(sdfg, comm=comm)
    build = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    args = step.arguments(*case["inputs"], case["target"])
    med, times = timed(comm, lambda: fn(**args), steps)
    state = step.state_dict(args) if comm.rank == 0 else None
    total = sum(sum(s.total_sent) for s in report) if report is not None else None
    return med, times, total, state, build, len(step.kernels)


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
    ours = run_distsdfg(case, comm, a.steps)
    ddp = run_ddp(case, comm, a.steps)
    if comm.rank != 0:
        return
    # Both trained steps + 2 times from the same start: compare the final weights.
    got, want = ours[3], ddp[3]
    err = max(float((got[k] - v).abs().max() / max(v.abs().max(), 1e-30)) for k, v in want.items() if k in got)
    row = {"model": a.model, "ranks": comm.size, "batch": a.batch, "kernels": ours[5],
           "distsdfg_step_s": ours[0], "ddp_step_s": ddp[0], "ratio": ours[0] / ddp[0],
           "distsdfg_bytes": ours[2], "ddp_bytes": ddp[2], "build_s": ours[4], "weights_rel_err": err,
           "distsdfg_times": ours[1], "ddp_times": ddp[1]}
    print(f"{a.model}, {comm.size} ranks, batch {a.batch} ({ours[5]} kernels, built in {ours[4]:.1f} s):")
    print(f"  distsdfg (data-parallel, root placement): {1e3 * ours[0]:9.2f} ms/step  {ours[2]:>12,} B/step")
    print(f"  PyTorch DDP (gloo):                       {1e3 * ddp[0]:9.2f} ms/step  {ddp[2]:>12,} B/step")
    print(f"  ratio {row['ratio']:.2f}x time, {ours[2] / max(ddp[2], 1):.2f}x bytes; "
          f"weights after {a.steps + 2} steps differ by {err:.1e} (relative)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
