// distsdfg runtime: executes one communication step of a distributed SDFG.
//
// A step is described by a table of int64 values that the Python side computes from the
// solved communication plan (distsdfg/plan.py, `encode_step`). The layout of a step is
//   [kind, dtype, op, ndim, nranks, flags, gshape[ndim], lshape[ndim],
//    per rank: origin[ndim], start[ndim], size[ndim], pcolor, pkey, rcolor, rkey]
// `start`/`size` give the rank's block in global coordinates, `origin` the global index of
// the first element of its local buffer. The partition sub-communicator (pcolor/pkey)
// holds one rank per distinct block and always has world rank 0 as key 0; the replicate
// sub-communicators (rcolor/rkey) hold the ranks that share a block, with key 0 the one
// that is also in the partition sub-communicator.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

namespace distsdfg {

enum Kind : int64_t { SCATTER = 1, GATHER = 2, REDUCE = 3, FILL = 4 };
enum Op : int64_t { OP_NONE = 0, OP_SUM = 1, OP_PROD = 2, OP_MAX = 3, OP_MIN = 4 };
enum Flag : int64_t { F_ACC = 1, F_MERGE = 2, F_REPL = 4, F_MASK = 8 };

inline MPI_Comm world() { return MPI_COMM_WORLD; }

inline MPI_Datatype mpi_type(int64_t code) {
    switch (code) {
        case 0: return MPI_FLOAT;
        case 1: return MPI_DOUBLE;
        case 2: return MPI_INT32_T;
        case 3: return MPI_INT64_T;
        case 4: return MPI_UINT32_T;
        case 5: return MPI_UINT64_T;
        case 6: return MPI_INT8_T;
        case 7: return MPI_UINT8_T;
        case 8: return MPI_INT16_T;
        case 9: return MPI_UINT16_T;
        case 10: return MPI_C_FLOAT_COMPLEX;
        case 11: return MPI_C_DOUBLE_COMPLEX;
        case 12: return MPI_C_BOOL;
    }
    throw std::runtime_error("distsdfg: unknown dtype code");
}

inline MPI_Op mpi_op(int64_t op) {
    switch (op) {
        case OP_SUM: return MPI_SUM;
        case OP_PROD: return MPI_PROD;
        case OP_MAX: return MPI_MAX;
        case OP_MIN: return MPI_MIN;
    }
    throw std::runtime_error("distsdfg: unknown reduction operator");
}

template <typename T> struct Ops {
    static T identity(int64_t op) {
        switch (op) {
            case OP_SUM: return T(0);
            case OP_PROD: return T(1);
            case OP_MAX: return std::numeric_limits<T>::lowest();
            case OP_MIN: return std::numeric_limits<T>::max();
        }
        return T(0);
    }
    static T apply(int64_t op, T a, T b) {
        switch (op) {
            case OP_SUM: return a + b;
            case OP_PROD: return a * b;
            case OP_MAX: return a < b ? b : a;
            case OP_MIN: return b < a ? b : a;
        }
        return b;
    }
};
template <typename R> struct Ops<std::complex<R>> {
    static std::complex<R> identity(int64_t op) { return op == OP_PROD ? std::complex<R>(1) : std::complex<R>(0); }
    static std::complex<R> apply(int64_t op, std::complex<R> a, std::complex<R> b) {
        return op == OP_PROD ? a * b : a + b;
    }
};

/// A view of one step's table.
struct Step {
    const int64_t* t;
    int64_t kind() const { return t[0]; }
    int64_t dtype() const { return t[1]; }
    int64_t op() const { return t[2]; }
    int64_t ndim() const { return t[3]; }
    int64_t nranks() const { return t[4]; }
    int64_t flags() const { return t[5]; }
    const int64_t* gshape() const { return t + 6; }
    const int64_t* lshape() const { return t + 6 + ndim(); }
    int64_t rec() const { return 3 * ndim() + 4; }
    const int64_t* rank(int64_t q) const { return t + 6 + 2 * ndim() + q * rec(); }
    const int64_t* origin(int64_t q) const { return rank(q); }
    const int64_t* start(int64_t q) const { return rank(q) + ndim(); }
    const int64_t* size(int64_t q) const { return rank(q) + 2 * ndim(); }
    int64_t pcolor(int64_t q) const { return rank(q)[3 * ndim()]; }
    int64_t pkey(int64_t q) const { return rank(q)[3 * ndim() + 1]; }
    int64_t rcolor(int64_t q) const { return rank(q)[3 * ndim() + 2]; }
    int64_t rkey(int64_t q) const { return rank(q)[3 * ndim() + 3]; }
    int64_t count(int64_t q) const {
        int64_t c = 1;
        for (int64_t d = 0; d < ndim(); ++d) c *= size(q)[d];
        return c;
    }
};

/// Calls f(offset_in_buffer, offset_in_packed, run_length) for every contiguous run of the
/// box (start, size) of an array whose element [origin] is at the buffer's start.
template <typename F>
inline void for_runs(int64_t nd, const int64_t* shape, const int64_t* origin, const int64_t* start,
                     const int64_t* size, F f) {
    for (int64_t d = 0; d < nd; ++d)
        if (size[d] <= 0) return;
    if (nd == 0) { f(0, 0, 1); return; }
    std::vector<int64_t> stride(nd), idx(nd, 0);
    stride[nd - 1] = 1;
    for (int64_t d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
    int64_t packed = 0, run = size[nd - 1];
    while (true) {
        int64_t off = 0;
        for (int64_t d = 0; d < nd; ++d) off += (start[d] - origin[d] + idx[d]) * stride[d];
        f(off, packed, run);
        packed += run;
        int64_t d = nd - 2;
        for (; d >= 0; --d) {
            if (++idx[d] < size[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

template <typename T>
inline void pack(const Step& s, const T* buf, const int64_t* shape, const int64_t* origin, int64_t q, T* out) {
    for_runs(s.ndim(), shape, origin, s.start(q), s.size(q),
             [&](int64_t off, int64_t p, int64_t n) { std::memcpy(out + p, buf + off, n * sizeof(T)); });
}

template <typename T>
inline void unpack(const Step& s, T* buf, const int64_t* shape, const int64_t* origin, int64_t q, const T* in) {
    for_runs(s.ndim(), shape, origin, s.start(q), s.size(q),
             [&](int64_t off, int64_t p, int64_t n) { std::memcpy(buf + off, in + p, n * sizeof(T)); });
}

/// Sub-communicators are cached by the colour/key layout, which every rank sees alike.
inline MPI_Comm split(const Step& s, bool partition) {
    static std::map<std::vector<int64_t>, MPI_Comm> cache;
    std::vector<int64_t> sig;
    sig.push_back(partition ? 1 : 2);
    for (int64_t q = 0; q < s.nranks(); ++q) {
        sig.push_back(partition ? s.pcolor(q) : s.rcolor(q));
        sig.push_back(partition ? s.pkey(q) : s.rkey(q));
    }
    auto it = cache.find(sig);
    if (it != cache.end()) return it->second;
    int me;
    MPI_Comm_rank(world(), &me);
    int64_t color = partition ? s.pcolor(me) : s.rcolor(me);
    int64_t key = partition ? s.pkey(me) : s.rkey(me);
    MPI_Comm c;
    MPI_Comm_split(world(), color < 0 ? MPI_UNDEFINED : int(color), int(key), &c);
    cache[sig] = c;
    return c;
}

/// World ranks of the members of my sub-communicator, ordered by key.
inline std::vector<int64_t> members(const Step& s, bool partition, int64_t color) {
    std::vector<std::pair<int64_t, int64_t>> m;
    for (int64_t q = 0; q < s.nranks(); ++q) {
        int64_t c = partition ? s.pcolor(q) : s.rcolor(q);
        if (c == color && c >= 0) m.push_back({partition ? s.pkey(q) : s.rkey(q), q});
    }
    std::sort(m.begin(), m.end());
    std::vector<int64_t> out;
    for (auto& p : m) out.push_back(p.second);
    return out;
}

inline void check(int err, const char* what) {
    if (err != MPI_SUCCESS) throw std::runtime_error(std::string("distsdfg: MPI call failed: ") + what);
}

template <typename T>
void scatter(const Step& s, const T* global, T* local, int me) {
    static const int64_t zero[16] = {0};
    MPI_Datatype ty = mpi_type(s.dtype());
    std::vector<T> mine(s.count(me));
    // Comm_split is collective over the world: every rank splits, members or not.
    MPI_Comm pc = split(s, true);
    MPI_Comm rc = (s.flags() & F_REPL) ? split(s, false) : MPI_COMM_NULL;
    if (s.pcolor(me) >= 0) {
        auto mem = members(s, true, s.pcolor(me));
        std::vector<int> counts(mem.size()), displs(mem.size());
        std::vector<T> sendbuf;
        if (me == 0) {
            int64_t total = 0;
            for (size_t i = 0; i < mem.size(); ++i) {
                counts[i] = int(s.count(mem[i]));
                displs[i] = int(total);
                total += counts[i];
            }
            sendbuf.resize(total);
            for (size_t i = 0; i < mem.size(); ++i) pack(s, global, s.gshape(), zero, mem[i], sendbuf.data() + displs[i]);
        }
        check(MPI_Scatterv(sendbuf.data(), counts.data(), displs.data(), ty, mine.data(), int(mine.size()), ty, 0, pc),
              "Scatterv");
    }
    if ((s.flags() & F_REPL) && s.rcolor(me) >= 0) {
        check(MPI_Bcast(mine.data(), int(mine.size()), ty, 0, rc), "Bcast");
    }
    unpack(s, local, s.lshape(), s.origin(me), me, mine.data());
}

template <typename T>
void gather(const Step& s, const T* local, T* global, int me, bool reduce) {
    static const int64_t zero[16] = {0};
    MPI_Datatype ty = mpi_type(s.dtype());
    int64_t n = s.count(me);
    std::vector<T> mine(n);
    pack(s, local, s.lshape(), s.origin(me), me, mine.data());
    MPI_Comm pc = split(s, true);
    MPI_Comm rc = (s.flags() & F_REPL) ? split(s, false) : MPI_COMM_NULL;
    if (reduce && (s.flags() & F_REPL) && s.rcolor(me) >= 0) {
        std::vector<T> red(s.rkey(me) == 0 ? n : 0);
        check(MPI_Reduce(mine.data(), red.data(), int(n), ty, mpi_op(s.op()), 0, rc), "Reduce");
        if (s.rkey(me) == 0) mine.swap(red);
    }
    if (s.pcolor(me) < 0) return;
    auto mem = members(s, true, s.pcolor(me));
    std::vector<int> counts(mem.size()), displs(mem.size());
    std::vector<T> recvbuf;
    int64_t total = 0;
    for (size_t i = 0; i < mem.size(); ++i) {
        counts[i] = int(s.count(mem[i]));
        displs[i] = int(total);
        total += counts[i];
    }
    if (me == 0) recvbuf.resize(total);
    check(MPI_Gatherv(mine.data(), int(n), ty, recvbuf.data(), counts.data(), displs.data(), ty, 0, pc), "Gatherv");
    if (me != 0) return;
    const int64_t nd = s.ndim();
    int64_t gsize = 1;
    for (int64_t d = 0; d < nd; ++d) gsize *= s.gshape()[d];
    const bool acc = s.flags() & F_ACC, merge = s.flags() & F_MERGE, mask = s.flags() & F_MASK;
    std::vector<T> snapshot;
    std::vector<char> seen;
    if (merge) snapshot.assign(global, global + gsize);
    if (mask) seen.assign(gsize, 0);
    for (size_t i = 0; i < mem.size(); ++i) {
        const T* src = recvbuf.data() + displs[i];
        int64_t q = mem[i];
        for_runs(nd, s.gshape(), zero, s.start(q), s.size(q), [&](int64_t off, int64_t p, int64_t len) {
            for (int64_t j = 0; j < len; ++j) {
                T v = src[p + j];
                T& g = global[off + j];
                if (reduce && acc) {
                    g = Ops<T>::apply(s.op(), g, v);
                } else if (reduce && mask) {
                    g = seen[off + j] ? Ops<T>::apply(s.op(), g, v) : v;
                    seen[off + j] = 1;
                } else if (merge) {
                    if (std::memcmp(&v, &snapshot[off + j], sizeof(T)) != 0) g = v;
                } else {
                    g = v;
                }
            }
        });
    }
}

template <typename T>
void fill(const Step& s, T* local) {
    int64_t n = 1;
    for (int64_t d = 0; d < s.ndim(); ++d) n *= s.lshape()[d];
    T v = Ops<T>::identity(s.op());
    for (int64_t i = 0; i < n; ++i) local[i] = v;
}

/// Runs step ``index`` of ``plan`` (``plan[0]`` steps, ``plan[1 + i]`` the offset of step i).
template <typename T>
void run_step(const int64_t* plan, int64_t index, const T* src, T* dst) {
    Step s{plan + plan[1 + index]};
    int me;
    MPI_Comm_rank(world(), &me);
    if (me >= s.nranks()) throw std::runtime_error("distsdfg: the plan was made for fewer ranks");
    switch (s.kind()) {
        case SCATTER: scatter<T>(s, src, dst, me); break;
        case GATHER: gather<T>(s, src, dst, me, false); break;
        case REDUCE: gather<T>(s, src, dst, me, true); break;
        case FILL: fill<T>(s, dst); break;
        default: throw std::runtime_error("distsdfg: unknown step kind");
    }
}

}  // namespace distsdfg
