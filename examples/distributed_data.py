"""Distributed data: blocks in, blocks out, nothing through rank 0 — `distsdfg launch -n 4 examples/distributed_data.py`.

1. A NumPy SGD step of a 2-layer MLP, compiled with ``placement="distributed"``: every rank
   passes only its block of the data and of the weights (``distsdfg.layout`` says which), and a
   Python loop of 5 calls updates the weight blocks in place on their owners. The result is
   checked against 5 NumPy steps.
2. Block-wise file I/O: each rank reads its block of a ``.npy`` input through a memory map
   (no rank reads the whole file), the program runs on the blocks, and each rank writes its
   block of the ``.npy`` output. Rank 0 checks the output file chunk by chunk.
"""
import os
import tempfile
import warnings

import dace
import numpy as np
from mpi4py import MPI

warnings.filterwarnings("ignore", category=UserWarning)

import distsdfg  # noqa: E402
from distsdfg.solver.report import format_report  # noqa: E402

NB, NI, NH, NO, N = (dace.symbol(s) for s in ("NB", "NI", "NH", "NO", "N"))


@dace.program
def sgd_step(x: dace.float64[NB, NI], y: dace.float64[NB, NO], W1: dace.float64[NI, NH], W2: dace.float64[NH, NO],
             lr: dace.float64):
    h = x @ W1
    a = np.maximum(h, 0.0)
    d = (a @ W2 - y) * (2.0 / (NB * NO))       # gradient of the mean squared error
    gW2 = np.transpose(a) @ d
    gW1 = np.transpose(x) @ ((d @ np.transpose(W2)) * (h > 0.0))
    W1 -= lr * gW1
    W2 -= lr * gW2


def sgd_reference(x, y, W1, W2, lr):
    h = x @ W1
    a = np.maximum(h, 0.0)
    d = (a @ W2 - y) * (2.0 / y.size)
    gW1 = x.T @ ((d @ W2.T) * (h > 0.0))
    W2 -= lr * (a.T @ d)
    W1 -= lr * gW1


@dace.program
def normalise(A: dace.float64[N, N], B: dace.float64[N, N]):
    for i, j in dace.map[0:N, 0:N]:
        B[i, j] = (A[i, j] - 0.5) * 2.0


def train(comm, steps=5):
    sizes = dict(NB=256, NI=64, NH=96, NO=16)
    sdfg = sgd_step.to_sdfg()
    distsdfg.lower(sdfg, "auto", nprocs=comm.size, placement="distributed", plan_options=sizes)
    fn = distsdfg.compile(sdfg)
    rng = np.random.default_rng(0)        # every rank makes the same data here; real code loads its block
    x, y = rng.random((256, 64)) - 0.5, rng.random((256, 16))
    W1, W2 = (rng.random((64, 96)) - 0.5) * 0.3, (rng.random((96, 16)) - 0.5) * 0.3
    lay = {a: fn.layout(a, **sizes) for a in ("x", "y", "W1", "W2")}
    blocks = {a: lay[a].block(v, comm.rank) for a, v in dict(x=x, y=y, W1=W1, W2=W2).items()}
    if comm.rank == 0:
        print(f"== SGD step, schedule {fn.lowered.schedule}")
        for a in ("x", "W1"):
            print(lay[a])
        print(format_report(distsdfg.comm_report(fn.sdfg, nprocs=comm.size, **sizes)))
    for _ in range(steps):
        fn(**blocks, lr=0.05, **sizes)      # W1 and W2 blocks are updated in place
        sgd_reference(x, y, W1, W2, 0.05)
    gathered = {a: comm.gather(blocks[a]) for a in ("W1", "W2")}      # collective: every rank calls it
    got = {a: lay[a].assemble(g) for a, g in gathered.items()} if comm.rank == 0 else {}
    ok = True
    if comm.rank == 0:
        err = max(np.abs(got["W1"] - W1).max() / np.abs(W1).max(), np.abs(got["W2"] - W2).max() / np.abs(W2).max())
        ok = err <= 1e-10
        print(f"{steps} distributed steps vs NumPy: max relative error {err:.1e} -> {'OK' if ok else 'WRONG'}")
    return comm.bcast(ok, root=0)


def file_io(comm, n=2048):
    folder = comm.bcast(tempfile.mkdtemp(prefix="distsdfg_io_") if comm.rank == 0 else None, root=0)
    src, dst = os.path.join(folder, "A.npy"), os.path.join(folder, "B.npy")
    if comm.rank == 0:                   # an input file, written in row chunks
        mm = np.lib.format.open_memmap(src, mode="w+", dtype=np.float64, shape=(n, n))
        for r in range(0, n, 256):
            mm[r:r + 256] = np.random.default_rng(r).random((256, n))
        mm.flush()
        del mm
    sdfg = normalise.to_sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (comm.size, 1)}), placement="distributed")
    fn = distsdfg.compile(sdfg)
    la, lb = fn.layout("A", N=n), fn.layout("B", N=n)
    comm.Barrier()
    a = la.load(src, comm.rank)          # memory-mapped: only this rank's rows are read
    b = lb.empty(comm.rank)
    fn(A=a, B=b, N=n)
    lb.save(dst, b, comm.rank, comm)     # every rank writes its rows of B.npy
    ok = True
    if comm.rank == 0:
        A, B = np.load(src, mmap_mode="r"), np.load(dst, mmap_mode="r")
        err = max(float(np.abs(np.asarray(B[r:r + 256]) - (np.asarray(A[r:r + 256]) - 0.5) * 2.0).max())
                  for r in range(0, n, 256))
        ok = err <= 1e-12
        print(f"\n== {n}x{n} .npy read and written block-wise ({a.nbytes:,} bytes per rank of "
              f"{n * n * 8:,}); communication: {distsdfg.comm_report(fn.sdfg, nprocs=comm.size, N=n) or 'none'}")
        print(f"output file vs NumPy: max error {err:.1e} -> {'OK' if ok else 'WRONG'}")
        del A, B
        for f in (src, dst):
            os.remove(f)
        os.rmdir(folder)
    return comm.bcast(ok, root=0)


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    if not (train(comm) and file_io(comm)):
        raise SystemExit(1)
