"""The GPT fixture of ``gpt_model.py`` under mpiexec: rank 0 compares with PyTorch, writes JSON.

    mpiexec -n 4 python -m mpi4py tests/gpt_run.py OUT.json forward:one forward:data train:one train:zero:distributed

Cases: ``forward`` (last-token logits, float32) or ``train`` (3 AdamW steps with two
parameter groups, float64, so that the comparison is not dominated by Adam normalising
float32 rounding of near-zero gradients), each ``:data`` (the batch split over the ranks,
``distsdfg.schedule_from_shardings``), ``:zero`` (the batch split and every AdamW update
split by its first axis, ``torch_training.zero_shardings``) or ``:one`` (no schedule: the
program as one process runs it); ``:distributed`` lowers in distributed placement. The
model is the mixed tiny GPT (both attention forms, biases and none).

Each mode is traced once per rank and parsed once, on rank 0, for all its cases: every
case lowers (or compiles) its own copy of the parsed SDFG. A ``:one`` case runs on rank
``ONE_RANK`` (1, or 0 alone), which gets the parsed SDFG from rank 0 and builds and runs it
while rank 0 lowers the next case: the two phases overlap on two cores. Its result is sent
to rank 0 at the end.
"""
from __future__ import annotations

import copy
import os
import sys
import traceback

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


ONE_RANK = 1          # the rank that builds and runs the `:one` cases (0 on a single rank)
_traced: dict = {}    # mode -> (model, idx, tgt, TorchProgram): traced once per rank
_parsed: dict = {}    # mode -> the parsed SDFG as JSON (rank 0): every case lowers a copy


def idle_barrier(comm, poll: float = 0.005) -> None:
    """A barrier where every rank, the root too, sleeps between tests: a rank that waits while
    another builds (a `:one` case) leaves the core to it instead of spinning in MPI."""
    import time
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


def traced(mode: str):
    """(model, idx, tgt, program) of ``mode``, traced on the first call and reused by every case."""
    if mode not in _traced:
        import time

        import distsdfg
        model, idx, tgt = model_and_data(mode)
        t0 = time.perf_counter()
        if mode == "forward":
            prog = distsdfg.from_torch(model, (idx,))
        else:
            prog = distsdfg.from_torch_train_step(model, last_loss, model.optimizer(), (idx, tgt), tgt)
        _traced[mode] = (model, idx, tgt, prog, time.perf_counter() - t0)
    return _traced[mode]


def parsed_copy(mode: str, prog, seconds: dict):
    """A fresh SDFG of ``mode``'s program: parsed on the first call (``prog.sdfg``), then copies
    of that parse (JSON round trip): lowering changes the SDFG it is given."""
    import time

    from distsdfg import dace_compat as dc
    t0 = time.perf_counter()
    if mode not in _parsed:
        _parsed[mode] = dc.to_json(prog.sdfg)
        seconds["parse"] = time.perf_counter() - t0
        t0 = time.perf_counter()
    sdfg = dc.from_json(_parsed[mode])
    seconds["copy"] = time.perf_counter() - t0
    return sdfg


def lowered_on_rank0(mode, prog, shardings, placement, comm, seconds, split_update=False):
    """(lowered SDFG, schedule): planned and lowered on rank 0 alone (a copy of the one parse),
    the result sent to the other ranks (JSON and the plan record), which wait without
    busy-polling: four oversubscribed ranks each lowering a ~500-kernel step took most of a
    half-hour launch."""
    import time

    import distsdfg
    from distsdfg import dace_compat as dc
    from distsdfg.runtime.program import idle_bcast
    sent = None
    if comm.rank == 0:
        try:
            sdfg = parsed_copy(mode, prog, seconds)
            t0 = time.perf_counter()
            shardings = {k: v for k, v in shardings.items() if k in sdfg.arrays}
            if split_update:       # ZeRO-1: every update split by its first axis
                from distsdfg.frontend.torch_training import zero_shardings
                shardings = zero_shardings(sdfg, shardings, comm.size)
            sched = distsdfg.schedule_from_shardings(sdfg, shardings, nprocs=comm.size)
            distsdfg.lower(sdfg, sched, placement=placement)
            seconds["lower"] = time.perf_counter() - t0
            print(f"[gpt] {mode}: lowered in {seconds['lower']:.1f}s", flush=True)
            sent = (dc.to_json(sdfg), sdfg._distsdfg, sched)
        except Exception as exc:   # every rank raises, none is left waiting in the broadcast
            sent = (None, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    idle_barrier(comm)         # rank ONE_RANK may still be building a `:one` case
    text, low, sched = idle_bcast(comm, sent)
    if text is None:
        raise RuntimeError(f"lowering on rank 0 failed: {low}\n{sched}")
    if comm.rank == 0:
        return sdfg, sched
    sdfg = dc.from_json(text)
    sdfg._distsdfg = low
    return sdfg, sched


def run_one(mode: str, case: str, comm) -> dict:
    """``mode:one``: rank 0 parses (once per mode) and sends the SDFG to ``ONE_RANK``, which
    builds it as one process (DaCe's own build, under its own name: rank 0 builds the lowered
    cases in the program's folder meanwhile) and runs it; other ranks go on."""
    import time

    from distsdfg import dace_compat as dc
    one = ONE_RANK if comm.size > ONE_RANK else 0
    model, idx, tgt, prog, t_trace = traced(mode)
    seconds = {"trace": t_trace}
    if comm.rank == 0:
        try:
            parsed_copy(mode, prog, seconds)
        finally:             # None: the parse failed (raised here), rank `one` goes on
            if one != 0:
                comm.send(_parsed.get(mode), dest=one, tag=24)
        if one != 0:
            return {"case": case, "ran_on": one}
    if comm.rank != one:
        return {"case": case}
    if one != 0:
        while not comm.iprobe(source=0, tag=24):    # sleeping; irecv() would truncate a large message
            time.sleep(0.005)
        text = comm.recv(source=0, tag=24)
        if text is None:
            return {"case": case}
        t0 = time.perf_counter()
        sdfg = dc.from_json(text)
        seconds["copy"] = time.perf_counter() - t0
    else:
        sdfg = dc.from_json(_parsed[mode])
    sdfg.name = sdfg.name + "_one"        # its own build folder
    t0 = time.perf_counter()
    fn = sdfg.compile()
    seconds["compile"] = time.perf_counter() - t0
    result = {"case": case, "schedule": {}, "bytes": [], "seconds": seconds, "rank": comm.rank}
    if mode == "forward":
        result["rel_err"] = _rel(fn(**prog.arguments(idx)), model(idx).detach().numpy())
        return result
    return train_root(prog, lambda args: fn(**args), prog.arguments(idx, tgt, tgt), result, model, idx, tgt, True)


def run_case(case: str, comm) -> dict:
    import time

    import distsdfg
    from distsdfg.testing.mpirun import counted_call
    mode, shard, *rest = case.split(":")
    placement = rest[0] if rest else None
    if shard == "one":
        return run_one(mode, case, comm)
    model, idx, tgt, prog, t_trace = traced(mode)
    seconds = {"trace": t_trace}
    shardings = {"idx": (comm.size, 1), "targets": (comm.size, 1)}
    sdfg, sched = lowered_on_rank0(mode, prog, shardings, placement, comm, seconds, split_update=shard == "zero")
    report = distsdfg.comm_report(sdfg, nprocs=comm.size)
    t1 = time.perf_counter()
    fn = distsdfg.compile(sdfg, comm=comm)
    seconds["compile"] = time.perf_counter() - t1
    result = {"case": case, "schedule": {k: list(v) for k, v in sched.items()}, "bytes": [],
              "collectives": sorted({s.collective for s in report}),
              "report_bytes": int(sum(sum(s.sent) * s.repeats for s in report)),
              # the loss's sums: Allreduces of one or two float64 elements, 2 (P-1) x 8 B each by
              # comm_report's convention (not part of DDP's gradient volume)
              "loss_bytes": int(sum(sum(s.sent) for s in report
                                    if s.collective == "Allreduce" and sum(s.sent) <= 2 * (comm.size - 1) * 16)),
              "param_bytes": sum(int(p.numel()) * p.element_size() for p in model.parameters()),
              "seconds": seconds}
    result["packed"] = len(getattr(fn, "_packed", None) or ())

    def call(args):
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
    return train_root(prog, call, args, result, model, idx, tgt, comm.rank == 0)


def train_root(prog, call, args, result, model, idx, tgt, compare: bool) -> dict:
    """Three AdamW steps with every array whole on the calling rank; ``compare``: this rank
    checks the losses, weights and Adam moments against PyTorch's."""
    import time
    ref = copy.deepcopy(model)
    opt = ref.optimizer()
    losses, ref_losses, times = [], [], []
    for _ in range(3):
        t0 = time.perf_counter()
        loss = call(args)
        times.append(time.perf_counter() - t0)
        opt.zero_grad()
        rl = ref(idx, tgt)[1]
        rl.backward()
        opt.step()
        if compare:
            losses.append(float(np.asarray(loss).reshape(-1)[0]))
            ref_losses.append(float(rl.item()))
    result["seconds"]["calls"] = times
    if compare:
        got = prog.state_dict(args)
        want = {k: v for k, v in ref.state_dict().items() if k in got}
        result["missing"] = sorted(set(dict(ref.named_parameters())) - set(got))
        result["loss_err"] = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        result["rel_err"] = max(_rel(got[k].numpy(), v.detach().numpy()) for k, v in want.items())
        result["state_err"] = _state_err(prog, args, ref, opt)
        result["losses"] = losses
    return result


def _state_err(prog, arrays, ref, opt) -> float:
    """The largest relative error of the Adam moments (``exp_avg``, ``exp_avg_sq``) against ``opt``'s."""
    ostate = prog.optimizer_state(arrays)
    params = dict(ref.named_parameters())
    return max(_rel(ostate[k][s].numpy(), opt.state[params[k]][s].numpy())
               for k in ostate if k in params for s in ("exp_avg", "exp_avg_sq"))


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
        result["state_err"] = _state_err(prog, got, ref, opt)
        result["losses"] = losses
    return result


def main(argv):
    """Every case on every rank in order (a failing case is recorded and the rest go on); the
    `:one` results come to rank 0 from the rank that ran them; rank 0 writes the JSON."""
    import json
    import time

    from mpi4py import MPI

    from distsdfg.testing import pmpi
    comm = MPI.COMM_WORLD.Dup()         # the byte counter counts its calls apart
    counters = pmpi.counters()
    if counters is not None:
        counters.set_control(comm)
    t0 = time.perf_counter()
    results = []
    for c in argv[1:]:
        try:
            r = run_case(c, comm)
        except Exception as exc:  # report and continue with the other cases
            r = {"case": c, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(),
                 "rank": comm.rank}
            print(f"rank {comm.rank}: case {c} failed: {exc}", file=sys.stderr, flush=True)
        r["done_at"] = time.perf_counter() - t0      # seconds into the launch
        results.append(r)
        if comm.rank == 0:
            if "ran_on" not in r:
                print(json.dumps({k: v for k, v in r.items() if k not in ("trace", "schedule", "bytes")})[:600],
                      flush=True)
            with open(argv[0], "w") as f:      # so far (a launch cut short still tells)
                json.dump(results, f, indent=1)
    idle_barrier(comm)
    mine = [r for r in results if r.get("rank") == comm.rank and comm.rank != 0]
    gathered = comm.gather(mine, root=0)
    if comm.rank == 0:
        others = {r["case"]: r for rs in gathered for r in rs}
        results = [others.get(r["case"], r) if "ran_on" in r else r for r in results]
        for r in others.values():
            print(json.dumps({k: v for k, v in r.items() if k not in ("trace", "schedule", "bytes")})[:600], flush=True)
        print(f"[gpt] launch: {time.perf_counter() - t0:.1f}s", flush=True)
        with open(argv[0], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
