"""The runtime header's block arithmetic, compiled with the bundled mpicxx (no MPI run).

Scatter and gather send from and receive into the user's arrays and the local buffers in place
when a block is one contiguous run there; these check when that holds."""
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


def test_contiguous_blocks_are_sent_in_place(tmp_path):
    cxx = os.path.join(os.path.dirname(sys.executable), "mpicxx")
    if not os.path.exists(cxx):
        cxx = shutil.which("mpicxx")
    if cxx is None:
        pytest.skip("no mpicxx (the mpich wheel installs one next to python)")
    src, exe = tmp_path / "driver.cpp", tmp_path / "driver"
    src.write_text(DRIVER)
    subprocess.run([cxx, "-std=c++14", "-O1", f"-I{INCLUDE_DIR}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out == EXPECTED
