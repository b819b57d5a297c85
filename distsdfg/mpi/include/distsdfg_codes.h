// Generated from distsdfg/values/codes.py by `python -m distsdfg.mpi.codes_header`: edit that
// module, not this file. The codes of the step tables (distsdfg_runtime.h).
#pragma once
#ifndef DISTSDFG_CODES_H
#define DISTSDFG_CODES_H
#include <cstdint>

namespace distsdfg {
namespace {

enum Kind : int64_t { SCATTER = 1, GATHER = 2, REDUCE = 3, FILL = 4, REDIST = 5 };
enum Mode : int64_t { M_LOCAL = 0, M_ALLREDUCE = 1, M_REDUCE_SCATTER = 2, M_ALLGATHERV = 3, M_ALLTOALLW = 4,
                      M_ALLTOALLV = 5, M_REDUCE = 6, M_P2P = 7 };
enum Op : int64_t { OP_NONE = 0, OP_SUM = 1, OP_PROD = 2, OP_MAX = 3, OP_MIN = 4 };
enum Flag : int64_t { F_ACC = 1, F_MERGE = 2, F_REPL = 4, F_MASK = 8, F_PAD = 16 };
enum Dtype : int64_t { DT_FLOAT32 = 0, DT_FLOAT64 = 1, DT_INT32 = 2, DT_INT64 = 3, DT_UINT32 = 4,
                       DT_UINT64 = 5, DT_INT8 = 6, DT_UINT8 = 7, DT_INT16 = 8, DT_UINT16 = 9,
                       DT_COMPLEX64 = 10, DT_COMPLEX128 = 11, DT_BOOL = 12 };

}  // namespace
}  // namespace distsdfg
#endif  // DISTSDFG_CODES_H
