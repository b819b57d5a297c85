"""Compile time of a tiny GPT (2 layers, 4 heads, width 32, sequence 16, batch 2) from PyTorch.

    python benchmarks/torch_compile_time.py [--train] [--profile OUT.prof [--profile-phase PHASE]]
        [--no-batched-renames]

Phases, in seconds: ``trace`` (torch.export / make_fx and emitting the NumPy program),
``parse`` (DaCe's Python frontend and simplify: ``TorchProgram.sdfg``), ``lower`` (a
data-parallel schedule from ``schedule_from_shardings`` over 2 ranks, ``distsdfg.lower``) and
``compile`` (code generation and the C++ build, ``sdfg.compile()`` of the lowered SDFG in one
process). ``--no-batched-renames`` parses without ``dace_compat_parse.batched_renames`` (DaCe's
per-variable renames), for comparison. ``--profile`` writes a cProfile of one phase
(``--profile-phase``, default ``parse``). Record the figures in docs/torch.md.
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
    a = ap.parse_args(argv)
    import torch
    import distsdfg
    from distsdfg import dace_compat_parse
    from gpt_model import tiny
    if a.no_batched_renames:
        dace_compat_parse.batched_renames = contextlib.nullcontext
    model = tiny(mixed=True)
    idx = torch.randint(0, model.cfg.vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    times = {}

    @contextlib.contextmanager
    def phase(name):
        prof = None
        if a.profile and a.profile_phase == name:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t = time.perf_counter()
        yield
        times[name] = time.perf_counter() - t
        if prof is not None:
            prof.disable()
            prof.dump_stats(a.profile)

    with phase("trace"):
        if a.train:
            model.train()
            prog = distsdfg.from_torch_train_step(model, lambda out, y: out[1], model.optimizer(), (idx, idx), idx)
        else:
            prog = distsdfg.from_torch(model.eval(), (idx,))
    with phase("parse"):
        sdfg = prog.sdfg
    with phase("lower"):
        shard = {k: v for k, v in {"idx": (2, 1), "targets": (2, 1)}.items() if k in sdfg.arrays}
        distsdfg.lower(sdfg, distsdfg.schedule_from_shardings(sdfg, shard, nprocs=2))
    with phase("compile"):
        sdfg.compile()
    print(f"{'training step' if a.train else 'forward'}: {len(prog.kernels)} kernels, "
          + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()) + f", total {sum(times.values()):.1f} s")


if __name__ == "__main__":
    main()
