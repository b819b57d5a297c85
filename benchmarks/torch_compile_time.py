"""Compile time of a tiny GPT (2 layers, 4 heads, width 32, sequence 16, batch 2) from PyTorch.

    python benchmarks/torch_compile_time.py [--train] [--profile OUT.prof [--profile-phase PHASE]]
        [--no-batched-renames] [--cpu] [--save-parsed F.sdfg | --from-parsed F.sdfg] [--skip-compile]
        [--zero] [--plain-parse]

Phases, in seconds: ``trace`` (torch.export / make_fx and emitting the NumPy program),
``parse`` (DaCe's Python frontend and simplify: ``TorchProgram.sdfg``), ``lower`` (a
data-parallel schedule from ``schedule_from_shardings`` over 2 ranks, ``distsdfg.lower``) and
``compile`` (code generation and the C++ build of the lowered SDFG in one process: what
``distsdfg.compile`` does on rank 0, ``program.build``; ``--dace-build``: DaCe's own CMake build,
``sdfg.compile()``, with DaCe's default build type, as measured before). ``--no-batched-renames`` parses without ``dace_compat.parse.batched_renames`` (DaCe's
per-variable renames), ``--plain-parse`` without any of ``dace_compat.parse.fast_parse``, for comparison. ``--profile`` writes a cProfile of one phase
(``--profile-phase``, default ``parse``; with ``--cpu`` it counts CPU time, which a shared, loaded
machine distorts less than wall time). Every phase is reported in wall time and in CPU time
(this process and the compiler processes it waited for). ``--save-parsed`` writes the parsed
SDFG to a file and ``--from-parsed`` starts from one (no trace, no parse), to iterate on the
lowering quickly; ``--skip-compile`` stops after the lowering. ``--zero`` lowers the ZeRO-1
form instead of the data-parallel one: the batch split plus every optimizer update split by its
first axis (``torch_training.zero_shardings``), in distributed placement, as
``benchmarks/torch_ddp.py --variants zero`` and ``tests/gpt_run.py``'s ``train:zero:distributed``
lower it. Record the figures in docs/torch.md.
"""
import argparse
import contextlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="store_true", help="the AdamW training step instead of the forward")
    ap.add_argument("--profile", help="write a cProfile of one phase (--profile-phase) here")
    ap.add_argument("--profile-phase", default="parse", choices=("trace", "parse", "lower", "compile"))
    ap.add_argument("--no-batched-renames", action="store_true")
    ap.add_argument("--plain-parse", action="store_true", help="DaCe's own parse (no dace_compat.parse.fast_parse)")
    ap.add_argument("--save-parsed", help="write the parsed SDFG to this JSON file")
    ap.add_argument("--from-parsed", help="skip trace and parse: load the parsed SDFG from this JSON file")
    ap.add_argument("--cpu", action="store_true", help="report process CPU time instead of wall time")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--zero", action="store_true",
                    help="lower ZeRO-1 (zero_shardings, placement='distributed') instead of data-parallel")
    ap.add_argument("--dace-build", action="store_true",
                    help="compile with DaCe's own CMake build (sdfg.compile()) instead of distsdfg's")
    a = ap.parse_args(argv)
    import torch
    import distsdfg
    from distsdfg.dace_compat import parse as dace_compat_parse
    from gpt_model import tiny
    if a.no_batched_renames:
        dace_compat_parse.batched_renames = contextlib.nullcontext
    if a.plain_parse:
        dace_compat_parse.fast_parse = contextlib.nullcontext
    model = tiny(mixed=True)
    idx = torch.randint(0, model.cfg.vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    times, cpu = {}, {}

    def cpu_now():
        t = os.times()  # this process and its waited-for children (the C++ compiler)
        return t.user + t.system + t.children_user + t.children_system

    @contextlib.contextmanager
    def phase(name):
        prof = None
        if a.profile and a.profile_phase == name:
            import cProfile
            prof = cProfile.Profile(time.process_time) if a.cpu else cProfile.Profile()
            prof.enable()
        t, c = time.perf_counter(), cpu_now()
        yield
        times[name], cpu[name] = time.perf_counter() - t, cpu_now() - c
        if prof is not None:
            prof.disable()
            prof.dump_stats(a.profile)

    nkernels = "?"
    if a.from_parsed:
        import dace
        sdfg = dace.SDFG.from_file(a.from_parsed)
    else:
        with phase("trace"):
            if a.train:
                model.train()
                prog = distsdfg.from_torch_train_step(model, lambda out, y: out[1], model.optimizer(), (idx, idx), idx)
            else:
                prog = distsdfg.from_torch(model.eval(), (idx,))
        with phase("parse"):
            sdfg = prog.sdfg
        nkernels = len(prog.kernels)
        if a.save_parsed:
            sdfg.save(a.save_parsed)
    with phase("lower"):
        shard = {k: v for k, v in {"idx": (2, 1), "targets": (2, 1)}.items() if k in sdfg.arrays}
        if a.zero:
            from distsdfg.frontend.torch_training import zero_shardings
            sched = distsdfg.schedule_from_shardings(sdfg, zero_shardings(sdfg, shard, 2), nprocs=2)
            distsdfg.lower(sdfg, sched, placement="distributed")
        else:
            distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, shard, nprocs=2))
    if not a.skip_compile:
        with phase("compile"):
            if a.dace_build:
                sdfg.compile()
            else:       # what distsdfg.compile does on rank 0, without MPI
                from distsdfg.lowering import blas
                from distsdfg.runtime import program as runtime
                from distsdfg import dace_compat as dc
                blas.configure()
                dc.ensure_mpi_on_path()
                runtime.build(sdfg, rebuild=True)
    form = " (ZeRO-1, distributed)" if a.zero else ""
    print(f"{'training step' if a.train else 'forward'}{form}: {nkernels} kernels, wall: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()) + f", total {sum(times.values()):.1f} s; CPU: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in cpu.items()) + f", total {sum(cpu.values()):.1f} s; "
          + f"load average {os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
    main()
