"""The runtime header's block arithmetic, compiled with the bundled mpicxx (no MPI run).

Scatter and gather send from and receive into the user's arrays and the local buffers in place
when a block is one contiguous run there; these check when that holds. The device memory
policy's box copies (2-D planes, as cudaMemcpy2D takes them) must agree with the host policy's
element by element, and so must the host policy's direct box copy between two buffers (a rank's
message to itself); they are checked on host memory (EmulatedDeviceMem), and so is the cache
that keeps the device policy's temporaries from one step to the next (Pool)."""
import os
import shutil
import subprocess
import sys

import pytest

from distsdfg.mpi.environment import INCLUDE_DIR

DRIVER = r"""
#include "distsdfg_runtime.h"
#include <cstdio>
using namespace distsdfg;

// A scatter table of one rank-block per rank over a global array of (8, 6), dense strides.
std::vector<int64_t> table(std::vector<std::vector<int64_t>> blocks, std::vector<int64_t> gstrides) {
    std::vector<int64_t> t{SCATTER, 1, 0, 2, int64_t(blocks.size()), 0, 8, 6, 8, 6, gstrides[0], gstrides[1]};
    for (size_t q = 0; q < blocks.size(); ++q) {
        auto& b = blocks[q];   // start0, start1, size0, size1
        t.insert(t.end(), {0, 0, b[0], b[1], b[2], b[3], 0, int64_t(q), -1, 0});
    }
    return t;
}

int main() {
    int64_t shape[2] = {8, 6}, zero[2] = {0, 0}, local_origin[2] = {2, 0}, local_shape[2] = {3, 6};
    int64_t rows[2] = {2, 0}, rows_n[2] = {3, 6};          // rows 2..4
    int64_t part[2] = {2, 1}, part_n[2] = {1, 4};          // part of row 2
    int64_t cols[2] = {2, 1}, cols_n[2] = {2, 4};          // a 2x4 tile: not one run
    int64_t empty[2] = {0, 0}, empty_n[2] = {0, 6};
    std::printf("rows %ld\n", (long)dense_run(2, shape, zero, rows, rows_n));
    std::printf("part %ld\n", (long)dense_run(2, shape, zero, part, part_n));
    std::printf("tile %ld\n", (long)dense_run(2, shape, zero, cols, cols_n));
    std::printf("empty %ld\n", (long)dense_run(2, shape, zero, empty, empty_n));
    std::printf("local %ld\n", (long)dense_run(2, local_shape, local_origin, rows, rows_n));
    auto show = [](const char* what, std::vector<int64_t> t) {
        Step s{t.data()};
        std::vector<int64_t> mem;
        for (int64_t q = 0; q < s.nranks(); ++q) mem.push_back(q);
        auto d = global_displs(s, mem);
        std::printf("%s", what);
        if (d.empty()) std::printf(" packed");
        for (int x : d) std::printf(" %d", x);
        std::printf("\n");
    };
    show("row-split", table({{0, 0, 4, 6}, {4, 0, 4, 6}}, {6, 1}));
    show("col-split", table({{0, 0, 8, 3}, {0, 3, 8, 3}}, {6, 1}));
    show("overlap", table({{0, 0, 5, 6}, {4, 0, 4, 6}}, {6, 1}));
    show("transposed", table({{0, 0, 4, 6}, {4, 0, 4, 6}}, {1, 8}));
    return 0;
}
"""

EXPECTED = """rows 12
part 13
tile -1
empty 0
local 0
row-split 0 24
col-split packed
overlap packed
transposed packed
"""


POLICIES = r"""
#include "distsdfg_runtime.h"
#include <cstdio>
#include <random>
using namespace distsdfg;

// Random boxes of random buffers (0 to 4 dimensions, whole and empty extents included): pack,
// unpack, combine and fill through HostMem and through EmulatedDeviceMem (and EmulatedStagedMem, whose
// temporaries are host memory) must give the same bytes.
int main() {
    std::mt19937_64 rng(7);
    auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
    int64_t checked = 0, planes_max = 0;
    for (int trial = 0; trial < 4000; ++trial) {
        const int64_t nd = pick(0, 4);
        int64_t shape[4], origin[4], start[4], size[4];
        for (int64_t d = 0; d < nd; ++d) {
            shape[d] = pick(1, 6);
            origin[d] = pick(0, 3);
            const int64_t kind = pick(0, 3);       // whole, part, single, empty
            if (kind == 0) { start[d] = origin[d]; size[d] = shape[d]; }
            else if (kind == 1) { start[d] = origin[d] + pick(0, shape[d] - 1); size[d] = pick(1, origin[d] + shape[d] - start[d]); }
            else if (kind == 2) { start[d] = origin[d] + pick(0, shape[d] - 1); size[d] = 1; }
            else { start[d] = origin[d]; size[d] = trial % 7 == 0 ? 0 : 1; }
        }
        const int64_t n = volume(nd, shape), m = volume(nd, size);
        std::vector<double> buf(n), in(m + 1), a(m + 1, -1), b(m + 1, -1);
        for (auto& x : buf) x = double(rng() % 1000);
        for (auto& x : in) x = double(rng() % 1000);
        HostMem::pack(nd, buf.data(), shape, origin, start, size, a.data());
        EmulatedDeviceMem::pack(nd, buf.data(), shape, origin, start, size, b.data());
        if (a != b) { std::printf("pack differs at trial %d\n", trial); return 1; }
        std::vector<double> u1(buf), u2(buf);
        HostMem::unpack(nd, u1.data(), shape, origin, start, size, in.data());
        EmulatedDeviceMem::unpack(nd, u2.data(), shape, origin, start, size, in.data());
        if (u1 != u2) { std::printf("unpack differs at trial %d\n", trial); return 1; }
        const int64_t op = pick(1, 4);
        std::vector<double> c1(buf), c2(buf);
        HostMem::combine(nd, op, c1.data(), shape, origin, start, size, in.data());
        EmulatedDeviceMem::combine(nd, op, c2.data(), shape, origin, start, size, in.data());
        if (c1 != c2) { std::printf("combine differs at trial %d\n", trial); return 1; }
        std::vector<double> c3(buf);
        EmulatedStagedMem::combine(nd, op, c3.data(), shape, origin, start, size, in.data());
        if (c1 != c3) { std::printf("staged combine differs at trial %d\n", trial); return 1; }
        // complex numbers: no kernel of theirs, the host combines (sum or product)
        std::vector<std::complex<double>> z(buf.begin(), buf.end()), zin(in.begin(), in.end()), z1, z2;
        for (size_t i = 0; i < z.size(); ++i) z[i] += std::complex<double>(0, double(i % 5));
        z1 = z, z2 = z;
        HostMem::combine(nd, 1 + op % 2, z1.data(), shape, origin, start, size, zin.data());
        EmulatedDeviceMem::combine(nd, 1 + op % 2, z2.data(), shape, origin, start, size, zin.data());
        if (z1 != z2) { std::printf("complex combine differs at trial %d\n", trial); return 1; }
        // HostMem::copy (a rank's message to itself, no staging buffer) into a larger buffer
        // around the box must equal packing the box and unpacking it there.
        int64_t dshape[4], dorigin[4];
        for (int64_t d = 0; d < nd; ++d) {
            const int64_t grow = pick(0, 2), before = pick(0, grow);
            dshape[d] = shape[d] + grow;
            dorigin[d] = origin[d] - before;
        }
        std::vector<double> d1(volume(nd, dshape)), d2;
        for (auto& x : d1) x = double(rng() % 1000);
        d2 = d1;
        std::vector<double> d3(d1);
        HostMem::copy(nd, buf.data(), shape, origin, d1.data(), dshape, dorigin, start, size);
        HostMem::unpack(nd, d2.data(), dshape, dorigin, start, size, a.data());
        if (d1 != d2) { std::printf("copy differs at trial %d\n", trial); return 1; }
        // the device policies' copy of a box between two local buffers (through a scratch buffer)
        copy_box<double, EmulatedStagedMem>(nd, buf.data(), shape, origin, d3.data(), dshape, dorigin, start, size);
        if (d1 != d3) { std::printf("staged copy differs at trial %d\n", trial); return 1; }
        bool whole = true;
        for (int64_t d = 0; d < nd; ++d) whole = whole && start[d] == origin[d] && size[d] == shape[d];
        if (covers(nd, shape, origin, start, size) != whole) { std::printf("covers differs at trial %d\n", trial); return 1; }
        int64_t planes = 0;
        for_planes(nd, shape, origin, start, size, [&](int64_t, int64_t, int64_t, int64_t, int64_t) { ++planes; });
        planes_max = std::max(planes_max, planes);
        checked += m;
    }
    std::vector<float> f1(37, 1.f), f2(37, 1.f);
    HostMem::fill(f1.data(), 37, -3.5f);
    EmulatedDeviceMem::fill(f2.data(), 37, -3.5f);
    for (int64_t n : {1, 4095, 4096, 4097, 8192, 12289, 70000}) {      // the doubling copies' edges
        std::vector<double> g1(n + 1, 2.0), g2(n + 1, 2.0);
        HostMem::fill(g1.data(), n, -1.25);
        EmulatedStagedMem::fill(g2.data(), n, -1.25);
        if (g1 != g2) { std::printf("fill of %ld differs\n", (long)n); return 1; }
    }
    EmulatedDeviceMem::Buffer<float> tmp(5), none(0);
    static_assert(HostMem::mpi_local && EmulatedDeviceMem::mpi_local && !EmulatedStagedMem::mpi_local, "mpi_local");
    static_assert(HostMem::tmp_host && !EmulatedDeviceMem::tmp_host && EmulatedStagedMem::tmp_host, "tmp_host");
    if (f1 != f2 || !tmp.data() || none.data() || tmp.size() != 5) { std::printf("fill or buffer differs\n"); return 1; }
    // One plane for a box that is one run of its buffer, one per row otherwise (3-D: rows of a plane).
    int64_t sh[3] = {4, 5, 6}, o[3] = {0, 0, 0}, rows_s[3] = {1, 0, 0}, rows_n[3] = {2, 5, 6};
    int64_t tile_s[3] = {1, 1, 2}, tile_n[3] = {2, 3, 4};
    int64_t p1 = 0, p2 = 0, h2 = 0;
    for_planes(3, sh, o, rows_s, rows_n, [&](int64_t, int64_t, int64_t, int64_t, int64_t) { ++p1; });
    for_planes(3, sh, o, tile_s, tile_n, [&](int64_t, int64_t, int64_t w, int64_t h, int64_t pitch) {
        ++p2; h2 = h * 100 + w * 10 + pitch / 6; });
    std::printf("ok %ld %ld %ld %ld\n", (long)(checked > 0), (long)p1, (long)p2, (long)h2);
    return 0;
}
"""


GATHER_ALONE = r"""
#include "distsdfg_runtime.h"
#include <cstdio>
using namespace distsdfg;

// Rank 0 gathers a block that is not one run of the global array (8 x 3 of 8 x 6) while no other
// rank sends anything (here: there is no other rank): its own block is unpacked from its buffer,
// and MPI_Gatherv gets a receive count of 0 for it, not one without a receive buffer (hN's sweep:
// an uneven data-parallel split on 3 ranks aborted with "Null buffer pointer").
int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::vector<int64_t> t{GATHER, 0, 0, 2, 1, 0, 8, 6, 8, 3, 6, 1, 0, 0, 0, 0, 8, 3, 0, 0, -1, 0};
    std::vector<float> local(24), global(48, -1.f);
    for (int i = 0; i < 24; ++i) local[i] = float(i);
    int bad = 0;
    try {
        gather<float, HostMem>(Step{t.data()}, local.data(), global.data(), context(MPI_COMM_WORLD), false);
        for (int r = 0; r < 8; ++r)
            for (int c = 0; c < 6; ++c)
                bad += global[r * 6 + c] != (c < 3 ? float(r * 3 + c) : -1.f);
        std::printf("gathered, %d wrong\n", bad);
    } catch (const std::exception& e) {
        std::printf("%s\n", e.what());
    }
    MPI_Finalize();
    return 0;
}
"""


def test_gather_with_nothing_from_the_other_ranks(tmp_path):
    assert _run_driver(tmp_path, GATHER_ALONE) == "gathered, 0 wrong\n"


def _mpicxx():
    cxx = os.path.join(os.path.dirname(sys.executable), "mpicxx")
    if not os.path.exists(cxx):
        cxx = shutil.which("mpicxx")
    if cxx is None:
        pytest.skip("no mpicxx (the mpich wheel installs one next to python)")
    return cxx


def _run_driver(tmp_path, text):
    src, exe = tmp_path / "driver.cpp", tmp_path / "driver"
    src.write_text(text)
    subprocess.run([_mpicxx(), "-std=c++14", "-O1", f"-I{INCLUDE_DIR}", str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True).stdout


def test_contiguous_blocks_are_sent_in_place(tmp_path):
    assert _run_driver(tmp_path, DRIVER) == EXPECTED


def test_device_policy_copies_boxes_like_the_host_policy(tmp_path):
    # 2 planes for the tile (one per row of its 2 planes of 3 rows: height 3, width 4, pitch 6)
    assert _run_driver(tmp_path, POLICIES) == "ok 1 1 2 341\n"


POOL = r"""
#include "distsdfg_runtime.h"
#include <cstdio>
using namespace distsdfg;

// A step's temporaries come from the cache: after the first of 50 passes over the same steps
// nothing is allocated; blocks live at the same time are distinct; a class is at most a quarter
// more than the request.
int main() {
    using P = Pool<EmulatedPrim>;
    for (size_t b = 1; b < 200000; b += 1 + b / 64) {
        const size_t c = P::size_class(b);
        if (c < b || (b > 16 && c * 4 > b * 5)) { std::printf("class %zu of %zu\n", c, b); return 1; }
    }
    size_t after_first = 0;
    for (int pass = 0; pass < 50; ++pass) {
        {   // one step: a send and a receive buffer of one class, two others
            EmulatedDeviceMem::Buffer<double> sbuf(1000), rbuf(1000), small(37);
            EmulatedDeviceMem::Buffer<float> other(500), none(0);
            if (sbuf.data() == rbuf.data() || none.data() || sbuf.size() != 1000) { std::printf("shared\n"); return 1; }
            for (int i = 0; i < 1000; ++i) { sbuf.data()[i] = pass + i; rbuf.data()[i] = -i; }
            for (int i = 0; i < 1000; ++i)
                if (sbuf.data()[i] != pass + i || rbuf.data()[i] != -i) { std::printf("overlap\n"); return 1; }
        }
        {   // the next step: a buffer of the same class as the first, swapped
            EmulatedDeviceMem::Buffer<double> a(990), b(0);
            a.swap(b);
            if (a.data() || !b.data()) { std::printf("swap\n"); return 1; }
        }
        if (pass == 0) after_first = EmulatedPrim::allocations();
    }
    const size_t cached = P::cached();
    P::trim();
    std::printf("ok %zu %zu %zu %zu\n", after_first, EmulatedPrim::allocations(), cached, P::cached());
    return 0;
}
"""


def test_device_policy_reuses_its_temporaries(tmp_path):
    # 4 blocks (2 of one class, 2 others) made in the first pass and none later; all 4 cached, then released
    assert _run_driver(tmp_path, POOL) == "ok 4 4 4 0\n"


CUDA_POLICIES = r"""
#include "distsdfg_runtime.h"
#include "distsdfg_runtime_cuda.h"
using namespace distsdfg;

// Every step of every element type through both CUDA policies, with the global array on the host
// and in device memory (a device-argument variant): what a GPU program's steps instantiate.
template <typename T> void all(const int64_t* plan, T* a, MPI_Comm c) {
    run_step<T, StagedDeviceMem>(plan, 0, a, a, c);
    run_step<T, StagedDeviceMem, true>(plan, 0, a, a, c);
    run_step<T, DeviceMem>(plan, 0, a, a, c);
    run_step<T, DeviceMem, true>(plan, 0, a, a, c);
}
int main() {
    static_assert(!StagedDeviceMem::mpi_local && StagedDeviceMem::tmp_host, "staged: MPI on host temporaries");
    static_assert(DeviceMem::mpi_local && !DeviceMem::tmp_host, "CUDA-aware: MPI on device buffers");
    static_assert(device_kind<double>() == 1 && device_kind<bool>() == 10 && device_kind<int64_t>() == 8 &&
                  device_kind<uint8_t>() == 3 && device_kind<std::complex<float>>() == -1, "kinds");
    int64_t plan[1] = {0};
    all<float>(plan, nullptr, MPI_COMM_WORLD);
    all<double>(plan, nullptr, MPI_COMM_WORLD);
    all<int32_t>(plan, nullptr, MPI_COMM_WORLD);
    all<int64_t>(plan, nullptr, MPI_COMM_WORLD);
    all<bool>(plan, nullptr, MPI_COMM_WORLD);
    all<std::complex<double>>(plan, nullptr, MPI_COMM_WORLD);
    return 0;
}
"""


def test_cuda_policies_compile_for_every_step_and_element_type(tmp_path):
    """The CUDA header's policies (host-compiled, as in a GPU program's C++ source) with the CUDA
    runtime's header: syntax and types only, no GPU needed (skipped without the CUDA headers)."""
    from distsdfg.lowering.gpu import _cuda_include_dirs
    dirs = [d for d in _cuda_include_dirs() if os.path.exists(os.path.join(d, "cuda_runtime.h"))]
    if not dirs:
        pytest.skip("no cuda_runtime.h (CUDA toolkit) here")
    src = tmp_path / "cuda_policies.cpp"
    src.write_text(CUDA_POLICIES)
    proc = subprocess.run([_mpicxx(), "-std=c++17", "-fsyntax-only", f"-I{INCLUDE_DIR}", f"-I{dirs[0]}", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
