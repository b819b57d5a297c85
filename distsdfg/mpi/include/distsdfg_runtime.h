// distsdfg runtime: executes one communication step of a distributed SDFG.
//
// A step is described by a table of int64 values that the Python side computes from the
// solved communication plan (distsdfg/mpi/encode.py, `encode_step`). The layout of a step is
//   [kind, dtype, op, ndim, nranks, flags, gshape[ndim], lshape[ndim], gstrides[ndim],
//    per rank: origin[ndim], start[ndim], size[ndim], pcolor, pkey, rcolor, rkey]
// (gstrides: the global array's element strides, so that strided views such as a transposed
// operand are read and written in place).
// `start`/`size` give the rank's block in global coordinates, `origin` the global index of
// the first element of its local buffer. The partition sub-communicator (pcolor/pkey)
// holds one rank per distinct block and always has rank 0 as key 0; the replicate
// sub-communicators (rcolor/rkey) hold the ranks that share a block, with key 0 the one
// that is also in the partition sub-communicator.
//
// Ranks are those of the caller's communicator (the one given to distsdfg.compile), which the
// generated code passes to every step as a Fortran handle; rank 0 of it is the root. The runtime
// talks on a private duplicate of it (see Context).
#pragma once
#ifndef DISTSDFG_RUNTIME_H
#define DISTSDFG_RUNTIME_H
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distsdfg_codes.h"
#include "distsdfg_crash.h"

namespace distsdfg {
// Internal linkage: every generated program gets its own copy, including the communicator
// caches. (Function-local statics of ordinary inline functions become process-wide unique
// symbols that outlive an unloaded program library.)
namespace {

// The codes of a step table (Kind, Mode, Op, Flag, Dtype) are in distsdfg_codes.h, generated from
// distsdfg/values/codes.py.

inline MPI_Datatype mpi_type(int64_t code) {
    switch (code) {
        case DT_FLOAT32: return MPI_FLOAT;
        case DT_FLOAT64: return MPI_DOUBLE;
        case DT_INT32: return MPI_INT32_T;
        case DT_INT64: return MPI_INT64_T;
        case DT_UINT32: return MPI_UINT32_T;
        case DT_UINT64: return MPI_UINT64_T;
        case DT_INT8: return MPI_INT8_T;
        case DT_UINT8: return MPI_UINT8_T;
        case DT_INT16: return MPI_INT16_T;
        case DT_UINT16: return MPI_UINT16_T;
        case DT_COMPLEX64: return MPI_C_FLOAT_COMPLEX;
        case DT_COMPLEX128: return MPI_C_DOUBLE_COMPLEX;
        case DT_BOOL: return MPI_C_BOOL;
    }
    throw std::runtime_error("distsdfg: unknown dtype code");
}

inline MPI_Op mpi_op(int64_t op, MPI_Datatype ty) {
    if (ty == MPI_C_BOOL) {   // MPI defines only the logical operators on bool: + and max are or, * and min and
        switch (op) {
            case OP_SUM: case OP_MAX: return MPI_LOR;
            case OP_PROD: case OP_MIN: return MPI_LAND;
        }
    }
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

/// A host array of T with the few std::vector operations used here; unlike std::vector<bool>
/// it keeps bool elements addressable (data()), so boolean arrays are sent like any other.
/// Its elements start uninitialised (staging buffers are always written whole before they are
/// read; zero-filling megabytes per step cost as much as the copy): ``Array(n, v)`` fills.
template <typename T> class Array {
    std::unique_ptr<T[]> p_;
    size_t n_ = 0;
public:
    Array() = default;
    explicit Array(size_t n) : p_(n ? new T[n] : nullptr), n_(n) {}
    Array(size_t n, T v) : Array(n) { std::fill(p_.get(), p_.get() + n, v); }
    T* data() { return p_.get(); }
    const T* data() const { return p_.get(); }
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    T& operator[](size_t i) { return p_[i]; }
    const T& operator[](size_t i) const { return p_[i]; }
    /// n uninitialised elements (the old ones are dropped).
    void reset(size_t n) { Array(n).swap(*this); }
    void assign(const T* first, const T* last) {
        reset(size_t(last - first));
        std::copy(first, last, p_.get());
    }
    void swap(Array& o) noexcept { std::swap(p_, o.p_); std::swap(n_, o.n_); }
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
    const int64_t* gstrides() const { return t + 6 + 2 * ndim(); }
    int64_t rec() const { return 3 * ndim() + 4; }
    const int64_t* rank(int64_t q) const { return t + 6 + 3 * ndim() + q * rec(); }
    /// One past the largest element offset of the global array.
    int64_t gextent() const {
        int64_t e = 1;
        for (int64_t d = 0; d < ndim(); ++d) e += (gshape()[d] - 1) * gstrides()[d];
        return e;
    }
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

/// Advances the index ``idx`` over dimensions [0, n) of extents ``size``, the last fastest; false
/// once every index has been visited.
template <typename Sizes>
inline bool next_index(std::vector<int64_t>& idx, const Sizes& size, int64_t n) {
    for (int64_t d = n - 1; d >= 0; --d) {
        if (++idx[d] < size[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/// Calls f(offset_in_buffer, offset_in_packed, run_length) for every run of the box
/// (start, size) of an array with element strides ``strides`` (runs are contiguous only
/// when the last stride is 1; global arrays may be strided views).
template <typename F>
inline void for_runs_strided(int64_t nd, const int64_t* strides, const int64_t* start, const int64_t* size, F f) {
    for (int64_t d = 0; d < nd; ++d)
        if (size[d] <= 0) return;
    if (nd == 0) { f(0, 0, 1); return; }
    const bool contiguous = strides[nd - 1] == 1;
    const int64_t outer = contiguous ? nd - 1 : nd;
    const int64_t run = contiguous ? size[nd - 1] : 1;
    std::vector<int64_t> idx(nd, 0);
    int64_t packed = 0;
    while (true) {
        int64_t off = 0;
        for (int64_t d = 0; d < nd; ++d) off += (start[d] + idx[d]) * strides[d];
        f(off, packed, run);
        packed += run;
        if (!next_index(idx, size, outer)) return;
    }
}

template <typename T>
inline void pack_global(const Step& s, const T* global, int64_t q, T* out) {
    for_runs_strided(s.ndim(), s.gstrides(), s.start(q), s.size(q),
                     [&](int64_t off, int64_t p, int64_t n) { std::memcpy(out + p, global + off, n * sizeof(T)); });
}

/// Calls f(offset_in_array, offset_in_packed, width, height, pitch) for the planes of the box
/// (start, size) of an array with element strides ``strides`` (a strided view): ``height`` rows of
/// ``width`` elements, ``pitch`` elements apart, packed one after another in row-major order. A row
/// is a run along the last dimension where its stride is 1, else one element (then the rows run
/// along the last dimension). A plane whose rows would overlap (pitch < width) is given row by row.
template <typename F>
inline void for_planes_strided(int64_t nd, const int64_t* strides, const int64_t* start, const int64_t* size, F f) {
    for (int64_t d = 0; d < nd; ++d)
        if (size[d] <= 0) return;
    if (nd == 0) { f(0, 0, 1, 1, 1); return; }
    const bool contiguous = strides[nd - 1] == 1;
    const int64_t r = contiguous ? nd - 2 : nd - 1;     // the rows' dimension (-1: a single run)
    const int64_t width = contiguous ? size[nd - 1] : 1;
    const int64_t height = r >= 0 ? size[r] : 1;
    const int64_t pitch = r >= 0 ? strides[r] : width;
    const int64_t outer = r >= 0 ? r : 0;
    int64_t base = 0;
    for (int64_t d = outer; d < nd; ++d) base += start[d] * strides[d];
    std::vector<int64_t> idx(outer, 0);
    int64_t packed = 0;
    while (true) {
        int64_t off = base;
        for (int64_t d = 0; d < outer; ++d) off += (start[d] + idx[d]) * strides[d];
        if (height > 1 && pitch < width) {
            for (int64_t h = 0; h < height; ++h) f(off + h * pitch, packed + h * width, width, int64_t(1), width);
        } else {
            f(off, packed, width, height, pitch);
        }
        packed += width * height;
        if (!next_index(idx, size, outer)) return;
    }
}

/// The same for a row-major buffer of ``shape`` whose element [origin] is at its start.
template <typename F>
inline void for_runs(int64_t nd, const int64_t* shape, const int64_t* origin, const int64_t* start,
                     const int64_t* size, F f) {
    std::vector<int64_t> stride(nd), rel(nd);
    for (int64_t d = nd - 1, acc = 1; d >= 0; --d) {
        stride[d] = acc;
        acc *= shape[d];
        rel[d] = start[d] - origin[d];
    }
    for_runs_strided(nd, stride.data(), rel.data(), size, f);
}

inline int64_t volume(int64_t nd, const int64_t* shape) {
    int64_t n = 1;
    for (int64_t d = 0; d < nd; ++d) n *= shape[d];
    return n;
}

// ---------------------------------------------------------------------------------------------
// Memory policies: how the runtime touches the ranks' local buffers (the user's arrays on rank 0
// are always host memory). HostMem reads and writes them directly. PlaneMem<Prim, Tmp> never
// dereferences them: it copies boxes as 2-D planes through Prim (cudaMemcpy2D for device
// buffers, see distsdfg_runtime_cuda.h), keeps its temporaries where Tmp allocates and combines
// partial values on the host. Where Tmp is Prim (DeviceMem: temporaries in device memory) MPI
// is handed the local buffers too, which needs a CUDA-aware MPI; where Tmp allocates pinned host
// memory (StagedDeviceMem) MPI never sees a local buffer: every message is packed into a host
// temporary, so only the boxes a step moves cross between device and host. EmulatedDeviceMem
// and EmulatedStagedMem are the two over host memory; the test suite runs every communication
// pattern through them to check the device code paths without a GPU.
//
// A policy's traits: ``mpi_local`` (MPI may take pointers into the local buffers) and
// ``tmp_host`` (its temporaries, Buffer<T>, are host memory the runtime may read and write).

struct HostMem {
    static constexpr bool mpi_local = true;
    static constexpr bool tmp_host = true;
    template <typename T> using Buffer = Array<T>;
    template <typename T> using Scratch = Array<T>;
    static void begin() {}
    static void end() {}
    template <typename T>
    static void pack(int64_t nd, const T* buf, const int64_t* shape, const int64_t* origin, const int64_t* start,
                     const int64_t* size, T* out) {
        for_runs(nd, shape, origin, start, size,
                 [&](int64_t off, int64_t p, int64_t n) { std::memcpy(out + p, buf + off, n * sizeof(T)); });
    }
    template <typename T>
    static void unpack(int64_t nd, T* buf, const int64_t* shape, const int64_t* origin, const int64_t* start,
                       const int64_t* size, const T* in) {
        for_runs(nd, shape, origin, start, size,
                 [&](int64_t off, int64_t p, int64_t n) { std::memcpy(buf + off, in + p, n * sizeof(T)); });
    }
    /// buf[box] = buf[box] op in (packed).
    template <typename T>
    static void combine(int64_t nd, int64_t op, T* buf, const int64_t* shape, const int64_t* origin,
                        const int64_t* start, const int64_t* size, const T* in) {
        for_runs(nd, shape, origin, start, size, [&](int64_t off, int64_t p, int64_t n) {
            for (int64_t j = 0; j < n; ++j) buf[off + j] = Ops<T>::apply(op, buf[off + j], in[p + j]);
        });
    }
    template <typename T> static void fill(T* p, int64_t n, T v) { std::fill(p, p + n, v); }
    /// Rank q's box of rank 0's global array, packed (out) or written from packed values (in).
    template <typename T> static void pack_global(const Step& s, const T* global, int64_t q, T* out) {
        distsdfg::pack_global(s, global, q, out);
    }
    template <typename T> static void unpack_global(const Step& s, T* global, int64_t q, const T* in) {
        for_runs_strided(s.ndim(), s.gstrides(), s.start(q), s.size(q),
                         [&](int64_t off, int64_t p, int64_t n) { std::memcpy(global + off, in + p, n * sizeof(T)); });
    }
    template <typename T> static void copy_flat(T* dst, const T* src, int64_t n) { std::memcpy(dst, src, n * sizeof(T)); }
    /// dst[box] = src[box] between two row-major buffers, run by run (no staging buffer).
    template <typename T>
    static void copy(int64_t nd, const T* src, const int64_t* sshape, const int64_t* sorigin, T* dst,
                     const int64_t* dshape, const int64_t* dorigin, const int64_t* start, const int64_t* size) {
        std::vector<int64_t> from;
        for_runs(nd, sshape, sorigin, start, size, [&](int64_t off, int64_t, int64_t) { from.push_back(off); });
        size_t i = 0;
        for_runs(nd, dshape, dorigin, start, size, [&](int64_t off, int64_t, int64_t n) {
            std::memmove(dst + off, src + from[i++], n * sizeof(T));
        });
    }
};

/// dst[box] = src[box] for a message a rank sends itself: directly on host memory, else through
/// a scratch buffer where the local buffers are (device to device for a GPU's buffers).
template <typename T, typename Mem>
void copy_box(int64_t nd, const T* src, const int64_t* sshape, const int64_t* sorigin, T* dst, const int64_t* dshape,
              const int64_t* dorigin, const int64_t* start, const int64_t* size) {
    if (std::is_base_of<HostMem, Mem>::value) {
        HostMem::copy(nd, src, sshape, sorigin, dst, dshape, dorigin, start, size);
        return;
    }
    typename Mem::template Scratch<T> tmp(volume(nd, size));
    Mem::pack(nd, src, sshape, sorigin, start, size, tmp.data());
    Mem::unpack(nd, dst, dshape, dorigin, start, size, tmp.data());
}

/// Calls f(offset_in_buffer, offset_in_packed, width, height, pitch) for every plane of the box
/// (start, size) of a row-major buffer of ``shape`` whose element [origin] comes first: ``height``
/// runs of ``width`` elements, ``pitch`` elements apart in the buffer, packed one after another.
/// Trailing dimensions the box covers whole are merged first, so a box that is one run of the
/// buffer is one plane of height 1.
template <typename F>
inline void for_planes(int64_t nd, const int64_t* shape, const int64_t* origin, const int64_t* start,
                       const int64_t* size, F f) {
    for (int64_t d = 0; d < nd; ++d)
        if (size[d] <= 0) return;
    if (nd == 0) { f(0, 0, 1, 1, 1); return; }
    std::vector<int64_t> sh(shape, shape + nd), rel(nd), sz(size, size + nd);
    for (int64_t d = 0; d < nd; ++d) rel[d] = start[d] - origin[d];
    int64_t n = nd;
    while (n >= 2 && rel[n - 1] == 0 && sz[n - 1] == sh[n - 1]) {
        rel[n - 2] *= sh[n - 1];
        sz[n - 2] *= sh[n - 1];
        sh[n - 2] *= sh[n - 1];
        --n;
    }
    if (n == 1) { f(rel[0], 0, sz[0], 1, sh[0]); return; }
    std::vector<int64_t> stride(n);
    for (int64_t d = n - 1, acc = 1; d >= 0; --d) { stride[d] = acc; acc *= sh[d]; }
    const int64_t width = sz[n - 1], height = sz[n - 2], outer = n - 2;
    std::vector<int64_t> idx(outer, 0);
    int64_t packed = 0;
    while (true) {
        int64_t off = rel[n - 1] + rel[n - 2] * stride[n - 2];
        for (int64_t d = 0; d < outer; ++d) off += (rel[d] + idx[d]) * stride[d];
        f(off, packed, width, height, sh[n - 1]);
        packed += width * height;
        if (!next_index(idx, sz, outer)) return;
    }
}

/// PlaneMem's temporaries, cached for the process by size class: a step takes a block from the
/// cache and gives it back when done, so a program calling the same steps again (every iteration
/// of a loop, every call) allocates nothing after its first pass (cudaMalloc and cudaFree cost tens
/// of microseconds and cudaFree waits for the whole device). A class is the request rounded up to
/// 1, 1.25, 1.5 or 1.75 times a power of two (at most a quarter more than asked). Blocks stay
/// cached until the program's library is unloaded or the process ends; when Prim cannot allocate,
/// the cache is given back first.
template <typename Prim>
struct Pool {
    static size_t size_class(size_t bytes) {
        if (bytes <= 16) return 16;
        if (bytes > (SIZE_MAX >> 2)) return bytes;
        size_t p = 16;
        while (p < bytes) p <<= 1;                  // p / 2 < bytes <= p
        const size_t quarter = p >> 3;              // a quarter of p / 2
        for (size_t q = 5; q <= 7; ++q)
            if (quarter * q >= bytes) return quarter * q;
        return p;
    }
    static void* take(size_t cls) {
        {
            std::lock_guard<std::mutex> lock(mutex());
            auto& list = free_lists()[cls];
            if (!list.empty()) {
                void* p = list.back();
                list.pop_back();
                return p;
            }
        }
        try {
            return Prim::alloc(cls);
        } catch (const std::exception&) {
            trim();
            return Prim::alloc(cls);
        }
    }
    static void give(void* p, size_t cls) {
        std::lock_guard<std::mutex> lock(mutex());
        free_lists()[cls].push_back(p);
    }
    /// Releases every cached block.
    static void trim() {
        std::lock_guard<std::mutex> lock(mutex());
        for (auto& kv : free_lists())
            for (void* p : kv.second) Prim::release(p);
        free_lists().clear();
    }
    static size_t cached() {
        std::lock_guard<std::mutex> lock(mutex());
        size_t n = 0;
        for (auto& kv : free_lists()) n += kv.second.size();
        return n;
    }
private:
    /// The cached blocks by class; given back when the program's library is unloaded or the process ends.
    struct Lists : std::map<size_t, std::vector<void*>> {
        ~Lists() {
            for (auto& kv : *this)
                for (void* p : kv.second) Prim::release(p);
        }
    };
    static Lists& free_lists() {
        static Lists lists;
        return lists;
    }
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
};

/// A temporary buffer of n elements where Prim allocates, from Pool<Prim>.
template <typename Prim, typename T> class PoolBuffer {
    T* p_ = nullptr;
    size_t n_ = 0;
    size_t cls_ = 0;
public:
    explicit PoolBuffer(size_t n = 0) : n_(n) {
        if (n) {
            cls_ = Pool<Prim>::size_class(n * sizeof(T));
            p_ = static_cast<T*>(Pool<Prim>::take(cls_));
        }
    }
    ~PoolBuffer() { if (p_) Pool<Prim>::give(p_, cls_); }
    PoolBuffer(const PoolBuffer&) = delete;
    PoolBuffer& operator=(const PoolBuffer&) = delete;
    T* data() { return p_; }
    const T* data() const { return p_; }
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    void swap(PoolBuffer& o) { std::swap(p_, o.p_); std::swap(n_, o.n_); std::swap(cls_, o.cls_); }
    /// n elements, uninitialised (the old block goes back to the pool).
    void reset(size_t n) { PoolBuffer(n).swap(*this); }
};

template <typename Prim, typename Tmp = Prim>
struct PlaneMem {
    static constexpr bool mpi_local = std::is_same<Prim, Tmp>::value;
    static constexpr bool tmp_host = Tmp::host;
    /// A temporary for MPI (device memory for DeviceMem, pinned host memory for StagedDeviceMem).
    template <typename T> using Buffer = PoolBuffer<Tmp, T>;
    /// A temporary where the local buffers are (a copy between two of them).
    template <typename T> using Scratch = PoolBuffer<Prim, T>;
    /// Before and after a step: the GPU's kernels are done with the buffers, and the step's copies are done.
    static void begin() { Prim::sync(); }
    static void end() { Prim::sync(); }
    template <typename T>
    static void pack(int64_t nd, const T* buf, const int64_t* shape, const int64_t* origin, const int64_t* start,
                     const int64_t* size, T* out) {
        for_planes(nd, shape, origin, start, size, [&](int64_t off, int64_t p, int64_t w, int64_t h, int64_t pitch) {
            Prim::copy2d(out + p, w * sizeof(T), buf + off, pitch * sizeof(T), w * sizeof(T), h);
        });
    }
    template <typename T>
    static void unpack(int64_t nd, T* buf, const int64_t* shape, const int64_t* origin, const int64_t* start,
                       const int64_t* size, const T* in) {
        for_planes(nd, shape, origin, start, size, [&](int64_t off, int64_t p, int64_t w, int64_t h, int64_t pitch) {
            Prim::copy2d(buf + off, pitch * sizeof(T), in + p, w * sizeof(T), w * sizeof(T), h);
        });
    }
    /// Plane by plane where Prim combines in place (a kernel on the GPU: CudaPrim::combine2d), else
    /// on the host: the box (and the contribution, where it is not host memory already) come over,
    /// the result goes back.
    template <typename T>
    static void combine(int64_t nd, int64_t op, T* buf, const int64_t* shape, const int64_t* origin,
                        const int64_t* start, const int64_t* size, const T* in) {
        const int64_t n = volume(nd, size);
        if (n == 0) return;
        if (Prim::combines(op, static_cast<const T*>(buf), in)) {
            for_planes(nd, shape, origin, start, size, [&](int64_t off, int64_t p, int64_t w, int64_t h, int64_t pitch) {
                Prim::combine2d(op, buf + off, pitch, in + p, w, h);
            });
            return;
        }
        Array<T> cur(n), add(tmp_host ? 0 : n);
        pack(nd, static_cast<const T*>(buf), shape, origin, start, size, cur.data());
        if (!tmp_host) Prim::copy2d(add.data(), n * sizeof(T), in, n * sizeof(T), n * sizeof(T), 1);
        const T* from = tmp_host ? in : add.data();
        for (int64_t j = 0; j < n; ++j) cur[j] = Ops<T>::apply(op, cur[j], from[j]);
        unpack(nd, buf, shape, origin, start, size, static_cast<const T*>(cur.data()));
    }
    /// A short run of ``v`` goes over from the host, then the filled part is copied onto the rest,
    /// doubling it each time (copies within the buffer's memory: no host array of the buffer's size).
    template <typename T> static void fill(T* p, int64_t n, T v) {
        if (n == 0) return;
        const int64_t first = std::min<int64_t>(n, 4096);
        Array<T> h(first, v);
        Prim::copy2d(p, first * sizeof(T), h.data(), first * sizeof(T), first * sizeof(T), 1);
        for (int64_t done = first; done < n;) {
            const int64_t k = std::min(done, n - done);
            Prim::copy2d(p + done, k * sizeof(T), p, k * sizeof(T), k * sizeof(T), 1);
            done += k;
        }
    }
    /// Rank q's box of rank 0's global array where that is in Prim's memory (a device-argument
    /// variant's CuPy array), packed into ``out`` or written from ``in`` (either in any memory Prim
    /// copies between), plane by plane.
    template <typename T> static void pack_global(const Step& s, const T* global, int64_t q, T* out) {
        for_planes_strided(s.ndim(), s.gstrides(), s.start(q), s.size(q),
                           [&](int64_t off, int64_t p, int64_t w, int64_t h, int64_t pitch) {
            Prim::copy2d(out + p, w * sizeof(T), global + off, pitch * sizeof(T), w * sizeof(T), h);
        });
    }
    template <typename T> static void unpack_global(const Step& s, T* global, int64_t q, const T* in) {
        for_planes_strided(s.ndim(), s.gstrides(), s.start(q), s.size(q),
                           [&](int64_t off, int64_t p, int64_t w, int64_t h, int64_t pitch) {
            Prim::copy2d(global + off, pitch * sizeof(T), in + p, w * sizeof(T), w * sizeof(T), h);
        });
    }
    template <typename T> static void copy_flat(T* dst, const T* src, int64_t n) {
        if (n > 0) Prim::copy2d(dst, n * sizeof(T), src, n * sizeof(T), n * sizeof(T), 1);
    }
};

/// PlaneMem's primitives on host memory (tests of the device code path without a GPU).
struct EmulatedPrim {
    static constexpr bool host = false;     // stands for device memory: the runtime never reads it
    /// How many blocks alloc has made (tests of Pool).
    static size_t& allocations() {
        static size_t n = 0;
        return n;
    }
    static void* alloc(size_t bytes) {
        void* p = std::malloc(bytes);
        if (!p) throw std::bad_alloc();
        ++allocations();
        return p;
    }
    static void release(void* p) { std::free(p); }
    static void copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
        for (size_t r = 0; r < height; ++r)
            std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    }
    static void sync() {}
    /// A kernel's combine of one plane, on the host (not for complex numbers, as on a GPU).
    template <typename T> static bool combines(int64_t, const T*, const T*) { return std::is_arithmetic<T>::value; }
    template <typename T>
    static void combine2d(int64_t op, T* dst, int64_t pitch, const T* in, int64_t width, int64_t height) {
        for (int64_t r = 0; r < height; ++r)
            for (int64_t c = 0; c < width; ++c) dst[r * pitch + c] = Ops<T>::apply(op, dst[r * pitch + c], in[r * width + c]);
    }
};
using EmulatedDeviceMem = PlaneMem<EmulatedPrim>;

/// Host temporaries beside EmulatedPrim's stand-in device memory (as pinned memory beside a GPU's).
struct EmulatedPinnedPrim : EmulatedPrim {
    static constexpr bool host = true;
};
using EmulatedStagedMem = PlaneMem<EmulatedPrim, EmulatedPinnedPrim>;

inline void check(int err, const char* what) {
    if (err == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) len = 0;
    throw std::runtime_error(std::string("distsdfg: MPI call failed: ") + what + (len ? ": " + std::string(text, len) : ""));
}

/// The runtime's communicators for one caller's communicator: a private duplicate (the runtime's
/// messages never match the caller's own) and the sub-communicators split from it, cached by
/// their colour/key layout, which every rank sees alike. A Context is an attribute of the
/// caller's communicator, so two communicators never share one, and a communicator created after
/// another was freed (possibly with the same handle) starts afresh. No delete callback: the
/// program's library may be unloaded before the communicator goes, so the few handles are left
/// to MPI_Finalize (a program keeps one Context per communicator it is called on).
struct Context {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0, size = 0;
    std::map<std::vector<int64_t>, MPI_Comm> subs;

    /// The sub-communicator of colour ``color`` (negative: none) and key ``key``; ``sig`` names the
    /// whole layout. Comm_split is collective over ``comm``: every rank calls it, members or not.
    MPI_Comm sub(const std::vector<int64_t>& sig, int64_t color, int64_t key) {
        auto it = subs.find(sig);
        if (it != subs.end()) return it->second;
        MPI_Comm c;
        check(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : int(color), int(key), &c), "Comm_split");
        subs[sig] = c;
        return c;
    }
};

/// The Context of the caller's communicator ``parent`` (collective on its first use).
inline Context& context(MPI_Comm parent) {
    static int keyval = MPI_KEYVAL_INVALID;
    if (keyval == MPI_KEYVAL_INVALID)
        check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &keyval, nullptr),
              "Comm_create_keyval");
    void* attr = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(parent, keyval, &attr, &found), "Comm_get_attr");
    if (found) return *static_cast<Context*>(attr);
    auto ctx = std::unique_ptr<Context>(new Context);
    check(MPI_Comm_dup(parent, &ctx->comm), "Comm_dup");
    MPI_Comm_rank(ctx->comm, &ctx->rank);
    MPI_Comm_size(ctx->comm, &ctx->size);
    check(MPI_Comm_set_attr(parent, keyval, ctx.get()), "Comm_set_attr");
    return *ctx.release();
}

/// A step's partition or replicate sub-communicator.
inline MPI_Comm split(const Step& s, bool partition, Context& ctx) {
    std::vector<int64_t> sig;
    sig.push_back(partition ? 1 : 2);
    for (int64_t q = 0; q < s.nranks(); ++q) {
        sig.push_back(partition ? s.pcolor(q) : s.rcolor(q));
        sig.push_back(partition ? s.pkey(q) : s.rkey(q));
    }
    const int me = ctx.rank;
    return ctx.sub(sig, partition ? s.pcolor(me) : s.rcolor(me), partition ? s.pkey(me) : s.rkey(me));
}

/// Ranks of the members of my sub-communicator, ordered by key.
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

/// Where the box (start, size) of a row-major array of ``shape``, whose element [origin] comes
/// first, lies when its elements form one contiguous run in order: the run's first element;
/// -1 when they do not (then the box is packed).
inline int64_t dense_run(int64_t nd, const int64_t* shape, const int64_t* origin, const int64_t* start,
                         const int64_t* size) {
    if (volume(nd, size) == 0) return 0;
    int64_t k = nd - 1;     // the dimensions right of k are whole
    while (k >= 0 && start[k] == origin[k] && size[k] == shape[k]) --k;
    for (int64_t d = 0; d < k; ++d)
        if (size[d] != 1) return -1;
    int64_t off = 0;
    for (int64_t d = nd - 1, stride = 1; d >= 0; --d) {
        off += (start[d] - origin[d]) * stride;
        stride *= shape[d];
    }
    return off;
}

/// The run of rank q's block in the global array (-1: not one run, or the global array is a
/// strided view).
inline int64_t global_run(const Step& s, int64_t q) {
    const int64_t nd = s.ndim();
    for (int64_t d = nd - 1, stride = 1; d >= 0; --d) {
        if (s.gshape()[d] > 1 && s.gstrides()[d] != stride) return -1;
        stride *= s.gshape()[d];
    }
    static const int64_t zero[16] = {0};
    return dense_run(nd, s.gshape(), zero, s.start(q), s.size(q));
}

/// Displacements that let Scatterv/Gatherv use the global array itself: every member's block
/// is one run there, the runs are disjoint and int-addressable. Empty when not.
inline std::vector<int> global_displs(const Step& s, const std::vector<int64_t>& mem) {
    std::vector<std::pair<int64_t, int64_t>> runs;
    std::vector<int> displs;
    for (int64_t q : mem) {
        int64_t off = global_run(s, q), n = s.count(q);
        if (off < 0 || off + n > std::numeric_limits<int>::max()) return {};
        if (n > 0) runs.push_back({off, n});
        displs.push_back(int(off));
    }
    std::sort(runs.begin(), runs.end());
    for (size_t i = 1; i < runs.size(); ++i)
        if (runs[i - 1].first + runs[i - 1].second > runs[i].first) return {};
    return displs;
}

/// Whether [a, a + na) and [b, b + nb) share memory (MPI forbids aliased send and receive buffers).
template <typename T>
inline bool overlaps(const T* a, int64_t na, const T* b, int64_t nb) {
    auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + nb * sizeof(T) && y < x + na * sizeof(T);
}

/// Rank 0's scatter on host memory when its own block is one run of its local buffer (and
/// that buffer is not the global array's memory): the other ranks' blocks leave first,
/// nonblocking, and rank 0 copies its own block from the global array into its buffer while
/// they travel (MPI moves large messages between processes of a node without the sender's
/// help). The blocks go straight from the global array when they are runs of it (else packed,
/// rank 0's own left out), and rank 0's replicate group gets its block by an Ibcast from the
/// global array too. The same calls and counts as the other path, so the same bytes; both are
/// nonblocking (MPI matches a nonblocking collective only with nonblocking ones, and the other
/// ranks cannot tell which path rank 0 takes).
template <typename T>
void scatter_root(const Step& s, const T* global, T* local, int64_t loff, MPI_Comm pc, MPI_Comm rc) {
    MPI_Datatype ty = mpi_type(s.dtype());
    const int64_t n = s.count(0);
    T* mine = local + loff;
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool copied = false;
    if ((s.flags() & F_REPL) && s.rcolor(0) >= 0) {
        const int64_t run = global_run(s, 0);
        const T* from = global + run;
        if (run < 0) {          // not one run of the global array: packed into place first
            pack_global(s, global, 0, mine);
            copied = true;
            from = mine;
        }
        check(MPI_Ibcast(const_cast<T*>(from), int(n), ty, 0, rc, &reqs[0]), "Ibcast");
    }
    auto mem = members(s, true, s.pcolor(0));
    std::vector<int> counts(mem.size());
    for (size_t i = 0; i < mem.size(); ++i) counts[i] = int(s.count(mem[i]));
    std::vector<int> displs = global_displs(s, mem);
    Array<T> sendbuf;
    const T* send = global;
    if (displs.empty()) {       // pack the others' blocks one after another
        int64_t total = 0;
        displs.resize(mem.size());
        for (size_t i = 0; i < mem.size(); ++i) {
            displs[i] = int(mem[i] == 0 ? 0 : total);
            if (mem[i] != 0) total += counts[i];
        }
        sendbuf.reset(total);
        for (size_t i = 0; i < mem.size(); ++i)
            if (mem[i] != 0) pack_global(s, global, mem[i], sendbuf.data() + displs[i]);
        // MPI refuses a null send buffer where the root's own count (in place) is not zero.
        send = total > 0 ? sendbuf.data() : global;
    }
    check(MPI_Iscatterv(send, counts.data(), displs.data(), ty, MPI_IN_PLACE, int(n), ty, 0, pc, &reqs[1]),
          "Iscatterv");
    if (!copied) pack_global(s, global, 0, mine);
    check(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE), "Waitall");
}

/// The global array's side of a step: rank 0's array in host memory (GD false), or in the memory of
/// Mem's local buffers (GD true: a device-argument variant's CuPy array), which only Mem's copies
/// touch and MPI sees only where it may see local buffers (Mem::mpi_local).
template <typename Mem, bool GD> struct Global {
    static_assert(!GD || !std::is_base_of<HostMem, Mem>::value, "a global array in device memory needs a device policy");
    /// Whether MPI may send from or receive into the global array itself.
    static constexpr bool mpi = !GD || Mem::mpi_local;
    template <typename T> static void pack(const Step& s, const T* global, int64_t q, T* out) {
        if (GD) Mem::pack_global(s, global, q, out); else HostMem::pack_global(s, global, q, out);
    }
    template <typename T> static void unpack(const Step& s, T* global, int64_t q, const T* in) {
        if (GD) Mem::unpack_global(s, global, q, in); else HostMem::unpack_global(s, global, q, in);
    }
    /// Rank q's box from the global array into its local buffer, directly (a device-to-device copy
    /// through a scratch block for a device global; never across the bus).
    template <typename T>
    static void to_local(const Step& s, const T* global, int64_t q, T* local) {
        typename Mem::template Scratch<T> tmp(s.count(q));
        pack(s, global, q, tmp.data());
        Mem::unpack(s.ndim(), local, s.lshape(), s.origin(q), s.start(q), s.size(q), static_cast<const T*>(tmp.data()));
    }
    template <typename T>
    static void from_local(const Step& s, const T* local, int64_t q, T* global) {
        typename Mem::template Scratch<T> tmp(s.count(q));
        Mem::pack(s.ndim(), local, s.lshape(), s.origin(q), s.start(q), s.size(q), tmp.data());
        unpack(s, global, q, static_cast<const T*>(tmp.data()));
    }
};

template <typename T, typename Mem, bool GD = false>
void scatter(const Step& s, const T* global, T* local, Context& ctx) {
    using G = Global<Mem, GD>;
    const int me = ctx.rank;
    MPI_Datatype ty = mpi_type(s.dtype());
    const int64_t n = s.count(me);
    // Receive straight into the local buffer when my block is one run of it (and MPI may use it).
    int64_t loff = Mem::mpi_local ? dense_run(s.ndim(), s.lshape(), s.origin(me), s.start(me), s.size(me)) : -1;
    if (me == 0 && loff >= 0 && overlaps(local, volume(s.ndim(), s.lshape()), global, s.gextent())) loff = -1;
    // Comm_split is collective: every rank splits, members or not.
    MPI_Comm pc = split(s, true, ctx);
    MPI_Comm rc = (s.flags() & F_REPL) ? split(s, false, ctx) : MPI_COMM_NULL;
    if (std::is_base_of<HostMem, Mem>::value && me == 0 && loff >= 0 && s.pcolor(0) >= 0 &&
        (!(s.flags() & F_REPL) || s.rcolor(0) < 0 || s.rkey(0) == 0)) {
        scatter_root(s, global, local, loff, pc, rc);
        return;
    }
    // Rank 0's block of a device global goes straight into its device buffer when MPI must not see
    // either and no replica waits for it.
    const bool own_direct = GD && !Mem::mpi_local && me == 0 && s.pcolor(me) >= 0 &&
                            !((s.flags() & F_REPL) && s.rcolor(me) >= 0);
    typename Mem::template Buffer<T> mine(loff < 0 && !own_direct ? n : 0);
    T* recv = loff < 0 ? mine.data() : local + loff;
    // Whether the runtime may write ``recv`` itself (host memory; any memory for a device global,
    // whose copies go through Mem).
    const bool recv_host = GD || (loff < 0 ? Mem::tmp_host : std::is_base_of<HostMem, Mem>::value);
    if (s.pcolor(me) >= 0) {
        auto mem = members(s, true, s.pcolor(me));
        std::vector<int> counts(mem.size()), displs;
        // the blocks packed for MPI: in host memory from a host global, in Mem's temporaries from a device one
        typename std::conditional<GD, typename Mem::template Buffer<T>, Array<T>>::type sendbuf;
        const T* send = global;
        bool in_place = false;
        if (me == 0) {
            for (size_t i = 0; i < mem.size(); ++i) counts[i] = int(s.count(mem[i]));
            if (G::mpi) displs = global_displs(s, mem);     // send from the global array itself
            if (displs.empty()) {               // else pack the blocks one after another
                // (all but mine where it can go straight where it belongs)
                in_place = recv_host || own_direct;
                int64_t total = 0;
                displs.resize(mem.size());
                for (size_t i = 0; i < mem.size(); ++i) {
                    const bool skip = in_place && mem[i] == me;
                    displs[i] = int(skip ? 0 : total);
                    if (!skip) total += counts[i];
                }
                sendbuf.reset(total);
                for (size_t i = 0; i < mem.size(); ++i)
                    if (!(in_place && mem[i] == me)) G::pack(s, global, mem[i], sendbuf.data() + displs[i]);
                if (own_direct) G::to_local(s, global, int64_t(me), local);
                else if (in_place) G::pack(s, global, int64_t(me), recv);
                send = total > 0 ? sendbuf.data() : global;     // never null (see scatter_root)
            }
        }
        MPI_Request req;
        check(MPI_Iscatterv(send, counts.data(), displs.data(), ty, in_place ? MPI_IN_PLACE : static_cast<void*>(recv),
                            int(n), ty, 0, pc, &req), "Iscatterv");
        check(MPI_Wait(&req, MPI_STATUS_IGNORE), "Wait");
    }
    if ((s.flags() & F_REPL) && s.rcolor(me) >= 0) {
        MPI_Request req;
        check(MPI_Ibcast(recv, int(n), ty, 0, rc, &req), "Ibcast");
        check(MPI_Wait(&req, MPI_STATUS_IGNORE), "Wait");
    }
    if (loff < 0 && !own_direct) Mem::unpack(s.ndim(), local, s.lshape(), s.origin(me), s.start(me), s.size(me), mine.data());
}

/// Rank 0's receipt of a gather or reduce into its host global array: member i's block (rank
/// mem[i]) at ``recvbuf + displs[i]``, rank 0's own from ``send`` where ``own``; combined with what
/// the array holds for an accumulation (F_ACC), the first writer taking a masked element (F_MASK),
/// or written only where it changed (F_MERGE, against the array as it was).
template <typename T>
void receive_global(const Step& s, const std::vector<int64_t>& mem, const std::vector<int>& displs, const T* recvbuf,
                    bool own, const T* send, T* global, bool reduce) {
    const int me = 0;
    const bool acc = s.flags() & F_ACC, merge = s.flags() & F_MERGE, mask = s.flags() & F_MASK;
    const int64_t nd = s.ndim();
    const int64_t gsize = s.gextent();
    Array<T> snapshot;
    std::vector<char> seen;
    if (merge) snapshot.assign(global, global + gsize);
    if (mask) seen.assign(gsize, 0);
    for (size_t i = 0; i < mem.size(); ++i) {
        int64_t q = mem[i];
        const T* src = own && q == me ? send : recvbuf + displs[i];
        for_runs_strided(nd, s.gstrides(), s.start(q), s.size(q), [&](int64_t off, int64_t p, int64_t len) {
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

template <typename T, typename Mem, bool GD = false>
void gather(const Step& s, const T* local, T* global, Context& ctx, bool reduce) {
    using G = Global<Mem, GD>;
    const int me = ctx.rank;
    MPI_Datatype ty = mpi_type(s.dtype());
    const int64_t n = s.count(me);
    const bool acc = s.flags() & F_ACC, merge = s.flags() & F_MERGE, mask = s.flags() & F_MASK;
    const bool plain = !merge && !(reduce && (acc || mask));
    MPI_Comm pc = split(s, true, ctx);
    MPI_Comm rc = (s.flags() & F_REPL) ? split(s, false, ctx) : MPI_COMM_NULL;
    int rsize = 0;
    if (reduce && (s.flags() & F_REPL) && s.rcolor(me) >= 0) check(MPI_Comm_size(rc, &rsize), "Comm_size");
    // Rank 0's block goes straight from its device buffer into a device global when MPI must not
    // see either and nothing is combined with it first.
    const bool own_direct = GD && !Mem::mpi_local && me == 0 && s.pcolor(me) >= 0 && plain && rsize <= 1;
    // Send straight from the local buffer when my block is one run of it (and MPI may use it).
    const int64_t loff = Mem::mpi_local ? dense_run(s.ndim(), s.lshape(), s.origin(me), s.start(me), s.size(me)) : -1;
    typename Mem::template Buffer<T> mine(loff < 0 && !own_direct ? n : 0);
    if (loff < 0 && !own_direct) Mem::pack(s.ndim(), local, s.lshape(), s.origin(me), s.start(me), s.size(me), mine.data());
    const T* send = loff < 0 ? mine.data() : local + loff;
    if (rsize > 1) {        // (a group of one has nothing to combine: no copy)
        typename Mem::template Buffer<T> red(s.rkey(me) == 0 ? n : 0);
        check(MPI_Reduce(send, red.data(), int(n), ty, mpi_op(s.op(), ty), 0, rc), "Reduce");
        if (s.rkey(me) == 0) {
            mine.swap(red);
            send = mine.data();
        }
    }
    if (s.pcolor(me) < 0) return;
    auto mem = members(s, true, s.pcolor(me));
    std::vector<int> counts(mem.size()), displs(mem.size());
    int64_t total = 0;
    for (size_t i = 0; i < mem.size(); ++i) {
        counts[i] = int(s.count(mem[i]));
        displs[i] = int(total);
        total += counts[i];
    }
    if (me == 0 && plain && G::mpi) {     // a plain copy: receive in place if we can
        std::vector<int> direct = global_displs(s, mem);
        if (!direct.empty() && !overlaps(send, n, static_cast<const T*>(global), s.gextent())) {
            check(MPI_Gatherv(send, int(n), ty, global, counts.data(), direct.data(), ty, 0, pc), "Gatherv");
            return;
        }
    }
    // A plain copy keeps rank 0's own block out of the receive buffer: it is unpacked from ``send``
    // (where that is host memory: the local buffer on the host, or a host temporary; any memory
    // for a device global, which Mem's copies write), or straight from the local buffer.
    const bool send_host = GD || (loff < 0 ? Mem::tmp_host : std::is_base_of<HostMem, Mem>::value);
    const bool own = own_direct || (send_host && me == 0 && plain &&
                                    !overlaps(send, n, static_cast<const T*>(global), s.gextent()));
    if (own) {
        // Rank 0's own block takes no room in the receive buffer (MPI_IN_PLACE, a count of 0): when
        // the others send nothing (blocks that are empty, uneven splits), the buffer is empty and
        // MPI would refuse a receive count without a buffer.
        total = 0;
        for (size_t i = 0; i < mem.size(); ++i) {
            displs[i] = int(mem[i] == me ? 0 : total);
            if (mem[i] != me) total += counts[i];
            else counts[i] = 0;
        }
    }
    // (a device global's blocks arrive in Mem's temporaries, a host global's in host memory)
    typename std::conditional<GD, typename Mem::template Buffer<T>, Array<T>>::type recvbuf;
    if (me == 0) recvbuf.reset(total);
    check(MPI_Gatherv(own ? MPI_IN_PLACE : static_cast<const void*>(send), int(n), ty, recvbuf.data(), counts.data(),
                      displs.data(), ty, 0, pc), "Gatherv");
    if (me != 0) return;
    if (!GD) {
        receive_global(s, mem, displs, static_cast<const T*>(recvbuf.data()), own, send, global, reduce);
    } else if (plain) {     // each block copied into the device global
        for (size_t i = 0; i < mem.size(); ++i) {
            if (mem[i] == me && own_direct) G::from_local(s, local, int64_t(me), global);
            else G::unpack(s, global, mem[i], own && mem[i] == me ? send : recvbuf.data() + displs[i]);
        }
    } else {        // combined on the host: the global's extent comes over and goes back
        const int64_t gsize = s.gextent();
        Array<T> host(gsize), blocks(total);
        Mem::copy_flat(host.data(), static_cast<const T*>(global), gsize);
        Mem::copy_flat(blocks.data(), static_cast<const T*>(recvbuf.data()), total);
        receive_global(s, mem, displs, static_cast<const T*>(blocks.data()), false, send, host.data(), reduce);
        Mem::copy_flat(global, static_cast<const T*>(host.data()), gsize);
    }
}

// ---------------------------------------------------------------------------------------------
// Grid-to-grid redistribution (distsdfg/solver/redistribute.py). Table layout:
//   [kind, dtype, op, ndim, nranks, mode, gshape[nd], src_lshape[nd], dst_lshape[nd],
//    per rank: src_origin[nd], dst_origin[nd], S(start, size), D(start, size), piece(start, size),
//              color, key,
//    nmsg, per message: from, to, start[nd], size[nd]]
// S is the block a rank holds in the source buffer, D the block it needs in the destination
// buffer; colour/key give the sub-communicator of the group collectives.
struct Redist {
    const int64_t* t;
    int64_t op() const { return t[2]; }
    int64_t dtype() const { return t[1]; }
    int64_t nd() const { return t[3]; }
    int64_t nranks() const { return t[4]; }
    int64_t mode() const { return t[5]; }
    const int64_t* gshape() const { return t + 6; }
    const int64_t* sshape() const { return t + 6 + nd(); }
    const int64_t* dshape() const { return t + 6 + 2 * nd(); }
    int64_t rec() const { return 8 * nd() + 2; }
    const int64_t* rank(int64_t q) const { return t + 6 + 3 * nd() + q * rec(); }
    const int64_t* sorigin(int64_t q) const { return rank(q); }
    const int64_t* dorigin(int64_t q) const { return rank(q) + nd(); }
    const int64_t* sblock(int64_t q) const { return rank(q) + 2 * nd(); }   // start, then size
    const int64_t* dblock(int64_t q) const { return rank(q) + 4 * nd(); }
    const int64_t* piece(int64_t q) const { return rank(q) + 6 * nd(); }
    int64_t color(int64_t q) const { return rank(q)[8 * nd()]; }
    int64_t key(int64_t q) const { return rank(q)[8 * nd() + 1]; }
    const int64_t* msgs() const { return t + 6 + 3 * nd() + nranks() * rec(); }
    int64_t nmsg() const { return msgs()[0]; }
    const int64_t* msg(int64_t i) const { return msgs() + 1 + i * (2 + 2 * nd()); }
    int64_t volume(const int64_t* box) const {
        int64_t c = 1;
        for (int64_t d = 0; d < nd(); ++d) c *= box[nd() + d];
        return c;
    }
};

/// Sub-communicator of a redistribution's groups (every rank calls it).
inline MPI_Comm group_comm(const Redist& r, Context& ctx) {
    std::vector<int64_t> sig{3};
    for (int64_t q = 0; q < r.nranks(); ++q) { sig.push_back(r.color(q)); sig.push_back(r.key(q)); }
    return ctx.sub(sig, r.color(ctx.rank), r.key(ctx.rank));
}

inline std::vector<int64_t> group_members(const Redist& r, int64_t color) {
    std::vector<std::pair<int64_t, int64_t>> m;
    for (int64_t q = 0; q < r.nranks(); ++q)
        if (r.color(q) == color) m.push_back({r.key(q), q});
    std::sort(m.begin(), m.end());
    std::vector<int64_t> out;
    for (auto& p : m) out.push_back(p.second);
    return out;
}

/// An MPI datatype for the boxes ``boxes`` of a buffer (exact subarrays, no packing).
inline MPI_Datatype box_type(const Redist& r, const std::vector<const int64_t*>& boxes, const int64_t* shape,
                             const int64_t* origin, MPI_Datatype base) {
    const int nd = int(r.nd());
    std::vector<MPI_Datatype> parts;
    for (const int64_t* b : boxes) {
        std::vector<int> sizes(nd), sub(nd), starts(nd);
        for (int d = 0; d < nd; ++d) {
            sizes[d] = int(shape[d]);
            sub[d] = int(b[nd + d]);
            starts[d] = int(b[d] - origin[d]);
        }
        MPI_Datatype t;
        check(MPI_Type_create_subarray(nd, sizes.data(), sub.data(), starts.data(), MPI_ORDER_C, base, &t),
              "Type_create_subarray");
        parts.push_back(t);
    }
    MPI_Datatype out;
    if (parts.size() == 1) {
        out = parts[0];
    } else {
        std::vector<int> lens(parts.size(), 1);
        std::vector<MPI_Aint> displs(parts.size(), 0);
        check(MPI_Type_create_struct(int(parts.size()), lens.data(), displs.data(), parts.data(), &out),
              "Type_create_struct");
        for (auto& p : parts) MPI_Type_free(&p);
    }
    check(MPI_Type_commit(&out), "Type_commit");
    return out;
}

/// Contiguous runs shorter than this many bytes are packed by the runtime rather than described to
/// MPI as a subarray: MPICH walks a datatype at roughly 100-250 ns per run (100,000 runs of 32 bytes,
/// an N x 8 array moving from column to row blocks: 24 ms for 3.2 MB, against ~1 ms packed).
constexpr int64_t kShortRunBytes = 512;

/// Whether some box of ``boxes`` (of a row-major buffer of ``shape``) is many short runs.
template <typename T>
inline bool short_runs(const Redist& r, const std::vector<std::vector<const int64_t*>>& boxes, const int64_t* shape) {
    const int64_t nd = r.nd();
    for (auto& list : boxes)
        for (const int64_t* b : list) {
            int64_t run = 1, d = nd - 1;
            for (; d >= 0; --d) {           // a box spanning the trailing dimensions is one longer run
                run *= b[nd + d];
                if (b[nd + d] != shape[d]) break;
            }
            const int64_t vol = r.volume(b);
            if (run > 0 && run * int64_t(sizeof(T)) < kShortRunBytes && vol / run > 16) return true;
        }
    return false;
}

/// Every member's piece (``counts[i]`` elements at ``displs[i]`` of ``out``) to every member; ``in``
/// is my piece or MPI_IN_PLACE (it lies in ``out`` already). Pieces of one size, one after another,
/// go by MPI_Allgather: MPICH 5 sends a large Allgatherv around a ring in 32 KiB rounds (2 ranks,
/// 1 MiB: 4-11 ms against Allgather's 0.1-0.9 ms on a loaded 2-core machine), the same bytes.
inline void allgather(const void* in, const std::vector<int>& counts, const std::vector<int>& displs, void* out,
                      MPI_Datatype ty, MPI_Comm gc) {
    bool even = !counts.empty();
    for (size_t i = 0; even && i < counts.size(); ++i)
        even = counts[i] == counts[0] && displs[i] == int(i) * counts[0];
    if (even) {
        check(MPI_Allgather(in, counts[0], ty, out, counts[0], ty, gc), "Allgather");
        return;
    }
    int at = 0;
    MPI_Comm_rank(gc, &at);
    check(MPI_Allgatherv(in, in == MPI_IN_PLACE ? 0 : counts[at], ty, out, counts.data(), displs.data(), ty, gc),
          "Allgatherv");
}

/// The boxes a rank exchanges with each peer (``boxes[p]``, in message order) packed one after
/// another in one temporary of Mem's: peer p's at ``at[p]``, ``count[p]`` elements. For policies
/// whose local buffers MPI must not see; the same messages, in the same order, as box_type's.
template <typename T, typename Mem>
struct Packed {
    const Redist& r;
    const std::vector<std::vector<const int64_t*>>& boxes;
    const int64_t* shape;
    const int64_t* origin;
    std::vector<int64_t> at, count;
    typename Mem::template Buffer<T> buf;

    static int64_t total(const Redist& r, const std::vector<std::vector<const int64_t*>>& boxes) {
        int64_t n = 0;
        for (auto& list : boxes)
            for (const int64_t* b : list) n += r.volume(b);
        return n;
    }
    Packed(const Redist& r_, const std::vector<std::vector<const int64_t*>>& boxes_, const int64_t* shape_,
           const int64_t* origin_)
        : r(r_), boxes(boxes_), shape(shape_), origin(origin_), at(boxes_.size(), 0), count(boxes_.size(), 0),
          buf(size_t(total(r_, boxes_))) {
        int64_t pos = 0;
        for (size_t p = 0; p < boxes.size(); ++p) {
            at[p] = pos;
            for (const int64_t* b : boxes[p]) count[p] += r.volume(b);
            pos += count[p];
        }
    }
    template <typename F> void each(F f) {
        const int64_t nd = r.nd();
        for (size_t p = 0; p < boxes.size(); ++p) {
            int64_t pos = at[p];
            for (const int64_t* b : boxes[p]) {
                f(b, b + nd, buf.data() + pos);
                pos += r.volume(b);
            }
        }
    }
    void pack(const T* src) {
        each([&](const int64_t* start, const int64_t* size, T* at_) { Mem::pack(r.nd(), src, shape, origin, start, size, at_); });
    }
    void unpack(T* dst) {
        each([&](const int64_t* start, const int64_t* size, T* at_) {
            Mem::unpack(r.nd(), dst, shape, origin, start, size, static_cast<const T*>(at_));
        });
    }
};

template <typename T, typename Mem>
void redist(const Redist& r, const T* src, T* dst, Context& ctx) {
    const int me = ctx.rank;
    const int64_t nd = r.nd();
    MPI_Datatype ty = mpi_type(r.dtype());
    const int64_t mode = r.mode();
    if (mode == M_LOCAL) {
        for (int64_t i = 0; i < r.nmsg(); ++i) {
            const int64_t* m = r.msg(i);
            if (m[0] != me || m[1] != me) continue;
            copy_box<T, Mem>(nd, src, r.sshape(), r.sorigin(me), dst, r.dshape(), r.dorigin(me), m + 2, m + 2 + nd);
        }
        return;
    }
    if (mode == M_ALLTOALLW) {
        const int P = int(r.nranks());
        std::vector<std::vector<const int64_t*>> sendb(P), recvb(P);
        for (int64_t i = 0; i < r.nmsg(); ++i) {
            const int64_t* m = r.msg(i);
            if (m[0] == me && m[1] == me) {
                copy_box<T, Mem>(nd, src, r.sshape(), r.sorigin(me), dst, r.dshape(), r.dorigin(me), m + 2, m + 2 + nd);
            } else if (m[0] == me) {
                sendb[m[1]].push_back(m + 2);
            } else if (m[1] == me) {
                recvb[m[0]].push_back(m + 2);
            }
        }
        std::vector<int> sc(P, 0), rc(P, 0), sd(P, 0), rd(P, 0);
        std::vector<MPI_Datatype> st(P, ty), rt(P, ty);
        const bool pack = !Mem::mpi_local || (Mem::tmp_host && (short_runs<T>(r, sendb, r.sshape()) ||
                                                                short_runs<T>(r, recvb, r.dshape())));
        if (pack) {      // the boxes packed into temporaries: the same messages and bytes
            Packed<T, Mem> out(r, sendb, r.sshape(), r.sorigin(me)), in(r, recvb, r.dshape(), r.dorigin(me));
            out.pack(src);
            for (int p = 0; p < P; ++p) {
                sc[p] = int(out.count[p]), sd[p] = int(out.at[p] * int64_t(sizeof(T)));
                rc[p] = int(in.count[p]), rd[p] = int(in.at[p] * int64_t(sizeof(T)));
            }
            check(MPI_Alltoallw(out.buf.data(), sc.data(), sd.data(), st.data(), in.buf.data(), rc.data(), rd.data(),
                                rt.data(), ctx.comm), "Alltoallw");
            in.unpack(dst);
            return;
        }
        for (int p = 0; p < P; ++p) {
            if (!sendb[p].empty()) { st[p] = box_type(r, sendb[p], r.sshape(), r.sorigin(me), ty); sc[p] = 1; }
            if (!recvb[p].empty()) { rt[p] = box_type(r, recvb[p], r.dshape(), r.dorigin(me), ty); rc[p] = 1; }
        }
        check(MPI_Alltoallw(src, sc.data(), sd.data(), st.data(), dst, rc.data(), rd.data(), rt.data(), ctx.comm),
              "Alltoallw");
        for (int p = 0; p < P; ++p) {
            if (sc[p]) MPI_Type_free(&st[p]);
            if (rc[p]) MPI_Type_free(&rt[p]);
        }
        return;
    }
    if (mode == M_P2P) {   // in place (src and dst are one buffer): point-to-point subarrays only
        const int P = int(r.nranks());
        const int tag = 0x5d5;
        std::vector<std::vector<const int64_t*>> sendb(P), recvb(P);
        for (int64_t i = 0; i < r.nmsg(); ++i) {
            const int64_t* m = r.msg(i);
            if (m[0] == me && m[1] != me) sendb[m[1]].push_back(m + 2);
            if (m[1] == me && m[0] != me) recvb[m[0]].push_back(m + 2);
        }
        std::vector<MPI_Request> reqs;
        const bool pack = !Mem::mpi_local || (Mem::tmp_host && (short_runs<T>(r, sendb, r.sshape()) ||
                                                                short_runs<T>(r, recvb, r.dshape())));
        if (pack) {      // the boxes packed into temporaries: the same messages and bytes
            Packed<T, Mem> out(r, sendb, r.sshape(), r.sorigin(me)), in(r, recvb, r.dshape(), r.dorigin(me));
            out.pack(src);
            for (int p = 0; p < P; ++p) {
                if (recvb[p].empty()) continue;
                reqs.emplace_back();
                check(MPI_Irecv(in.buf.data() + in.at[p], int(in.count[p]), ty, p, tag, ctx.comm, &reqs.back()), "Irecv");
            }
            for (int p = 0; p < P; ++p) {
                if (sendb[p].empty()) continue;
                reqs.emplace_back();
                check(MPI_Isend(out.buf.data() + out.at[p], int(out.count[p]), ty, p, tag, ctx.comm, &reqs.back()),
                      "Isend");
            }
            if (!reqs.empty())
                check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "Waitall");
            in.unpack(dst);
            return;
        }
        std::vector<MPI_Datatype> types;
        for (int p = 0; p < P; ++p) {
            if (recvb[p].empty()) continue;
            types.push_back(box_type(r, recvb[p], r.dshape(), r.dorigin(me), ty));
            reqs.emplace_back();
            check(MPI_Irecv(dst, 1, types.back(), p, tag, ctx.comm, &reqs.back()), "Irecv");
        }
        for (int p = 0; p < P; ++p) {
            if (sendb[p].empty()) continue;
            types.push_back(box_type(r, sendb[p], r.sshape(), r.sorigin(me), ty));
            reqs.emplace_back();
            check(MPI_Isend(const_cast<T*>(src), 1, types.back(), p, tag, ctx.comm, &reqs.back()), "Isend");
        }
        if (!reqs.empty())
            check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "Waitall");
        for (auto& t : types) MPI_Type_free(&t);
        return;
    }
    if (mode == M_ALLTOALLV) {   // partial contributions, combined on arrival in rank order
        const int P = int(r.nranks());
        std::vector<int> sc(P, 0), rc(P, 0), sd(P, 0), rd(P, 0);
        std::vector<std::vector<const int64_t*>> sendb(P), recvb(P);
        for (int64_t i = 0; i < r.nmsg(); ++i) {
            const int64_t* m = r.msg(i);
            if (m[0] == me) { sendb[m[1]].push_back(m + 2); sc[m[1]] += int(r.volume(m + 2)); }
            if (m[1] == me) { recvb[m[0]].push_back(m + 2); rc[m[0]] += int(r.volume(m + 2)); }
        }
        int stot = 0, rtot = 0;
        for (int p = 0; p < P; ++p) { sd[p] = stot; stot += sc[p]; rd[p] = rtot; rtot += rc[p]; }
        typename Mem::template Buffer<T> sbuf(stot), rbuf(rtot);
        for (int p = 0; p < P; ++p) {
            int64_t pos = sd[p];
            for (const int64_t* b : sendb[p]) {
                Mem::pack(nd, src, r.sshape(), r.sorigin(me), b, b + nd, sbuf.data() + pos);
                pos += r.volume(b);
            }
        }
        check(MPI_Alltoallv(sbuf.data(), sc.data(), sd.data(), ty, rbuf.data(), rc.data(), rd.data(), ty, ctx.comm),
              "Alltoallv");
        const int64_t* need = r.dblock(me);
        if (r.volume(need) > 0) {
            typename Mem::template Buffer<T> id(r.volume(need));
            Mem::fill(id.data(), r.volume(need), Ops<T>::identity(r.op()));
            Mem::unpack(nd, dst, r.dshape(), r.dorigin(me), need, need + nd, id.data());
        }
        for (int p = 0; p < P; ++p) {
            int64_t pos = rd[p];
            for (const int64_t* b : recvb[p]) {
                Mem::combine(nd, r.op(), dst, r.dshape(), r.dorigin(me), b, b + nd, rbuf.data() + pos);
                pos += r.volume(b);
            }
        }
        return;
    }
    // Group collectives: the sub-communicator is split collectively by every rank.
    MPI_Comm gc = group_comm(r, ctx);
    if (r.color(me) < 0) return;
    auto mem = group_members(r, r.color(me));
    const int64_t* S = r.sblock(me);
    const int64_t* D = r.dblock(me);
    // Host buffers whose blocks are one run each go to MPI as they are, without staging copies.
    constexpr bool host = std::is_base_of<HostMem, Mem>::value;
    if (mode == M_ALLREDUCE) {
        const int64_t n = r.volume(S);
        const int64_t so = host ? dense_run(nd, r.sshape(), r.sorigin(me), S, S + nd) : -1;
        const int64_t dof = host ? dense_run(nd, r.dshape(), r.dorigin(me), D, D + nd) : -1;
        if (so >= 0 && dof >= 0 && r.volume(D) == n) {
            if (src + so == dst + dof) {
                check(MPI_Allreduce(MPI_IN_PLACE, dst + dof, int(n), ty, mpi_op(r.op(), ty), gc), "Allreduce");
                return;
            }
            if (!overlaps(src + so, n, static_cast<const T*>(dst + dof), n)) {
                check(MPI_Allreduce(src + so, dst + dof, int(n), ty, mpi_op(r.op(), ty), gc), "Allreduce");
                return;
            }
        }
        typename Mem::template Buffer<T> buf(n);
        Mem::pack(nd, src, r.sshape(), r.sorigin(me), S, S + nd, buf.data());
        check(MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), ty, mpi_op(r.op(), ty), gc), "Allreduce");
        Mem::unpack(nd, dst, r.dshape(), r.dorigin(me), D, D + nd, buf.data());
    } else if (mode == M_REDUCE_SCATTER) {
        std::vector<int> counts(mem.size());
        int64_t total = 0;
        for (size_t i = 0; i < mem.size(); ++i) { counts[i] = int(r.volume(r.dblock(mem[i]))); total += counts[i]; }
        // Send straight from src when the members' blocks are consecutive runs of it in member
        // order; receive straight into dst when my block is one run of it.
        int64_t first = -1;
        bool direct = host && total > 0;
        for (size_t i = 0, pos = 0; direct && i < mem.size(); pos += counts[i], ++i) {
            if (counts[i] == 0) continue;
            const int64_t* B = r.dblock(mem[i]);
            const int64_t off = dense_run(nd, r.sshape(), r.sorigin(me), B, B + nd);
            if (first < 0 && off >= 0) first = off - int64_t(pos);
            direct = off >= 0 && first >= 0 && off == first + int64_t(pos);
        }
        const int64_t dof = host ? dense_run(nd, r.dshape(), r.dorigin(me), D, D + nd) : -1;
        if (direct && dof >= 0 && !overlaps(src + first, total, static_cast<const T*>(dst + dof), r.volume(D))) {
            check(MPI_Reduce_scatter(src + first, dst + dof, counts.data(), ty, mpi_op(r.op(), ty), gc), "Reduce_scatter");
            return;
        }
        typename Mem::template Buffer<T> sbuf(total), rbuf(r.volume(D));
        int64_t pos = 0;
        for (size_t i = 0; i < mem.size(); ++i) {
            const int64_t* B = r.dblock(mem[i]);
            if (counts[i]) Mem::pack(nd, src, r.sshape(), r.sorigin(me), B, B + nd, sbuf.data() + pos);
            pos += counts[i];
        }
        check(MPI_Reduce_scatter(sbuf.data(), rbuf.data(), counts.data(), ty, mpi_op(r.op(), ty), gc), "Reduce_scatter");
        if (!rbuf.empty()) Mem::unpack(nd, dst, r.dshape(), r.dorigin(me), D, D + nd, rbuf.data());
    } else if (mode == M_REDUCE) {
        int root = 0;
        for (size_t i = 0; i < mem.size(); ++i)
            if (r.volume(r.dblock(mem[i])) > 0) root = int(i);
        const int64_t* RD = r.dblock(mem[root]);
        const int64_t n = r.volume(RD);
        const bool at_root = int64_t(mem[root]) == me;
        const int64_t so = host ? dense_run(nd, r.sshape(), r.sorigin(me), RD, RD + nd) : -1;
        const int64_t dof = host && at_root ? dense_run(nd, r.dshape(), r.dorigin(me), D, D + nd) : -1;
        if (so >= 0 && (!at_root || (dof >= 0 && r.volume(D) == n &&
                                     !overlaps(src + so, n, static_cast<const T*>(dst + dof), n)))) {
            check(MPI_Reduce(src + so, at_root ? static_cast<void*>(dst + dof) : nullptr, int(n), ty, mpi_op(r.op(), ty),
                             root, gc), "Reduce");
            return;
        }
        typename Mem::template Buffer<T> sbuf(n), rbuf(at_root ? n : 0);
        Mem::pack(nd, src, r.sshape(), r.sorigin(me), RD, RD + nd, sbuf.data());
        check(MPI_Reduce(sbuf.data(), rbuf.data(), int(sbuf.size()), ty, mpi_op(r.op(), ty), root, gc), "Reduce");
        if (int64_t(mem[root]) == me) Mem::unpack(nd, dst, r.dshape(), r.dorigin(me), D, D + nd, rbuf.data());
    } else if (mode == M_ALLGATHERV) {
        std::vector<int> counts(mem.size()), displs(mem.size());
        int64_t total = 0;
        for (size_t i = 0; i < mem.size(); ++i) {
            counts[i] = int(r.volume(r.piece(mem[i])));
            displs[i] = int(total);
            total += counts[i];
        }
        const int64_t* mine_box = r.piece(me);
        size_t at = 0;      // my place among the members
        while (at < mem.size() && mem[at] != me) ++at;
        // Straight from src into dst when my piece is one run of src and the members' pieces are
        // consecutive runs of dst in member order (a split parameter gathered whole: no staging).
        int64_t first = -1;
        bool direct = host && total > 0;
        for (size_t i = 0; direct && i < mem.size(); ++i) {
            if (counts[i] == 0) continue;
            const int64_t* B = r.piece(mem[i]);
            const int64_t off = dense_run(nd, r.dshape(), r.dorigin(me), B, B + nd);
            if (first < 0 && off >= 0) first = off - displs[i];
            direct = off >= 0 && first >= 0 && off == first + displs[i];
        }
        const int64_t so = host ? dense_run(nd, r.sshape(), r.sorigin(me), mine_box, mine_box + nd) : -1;
        if (direct && so >= 0) {
            T* out = dst + first;
            const T* in = src + so;
            const bool in_place = counts[at] == 0 || in == out + displs[at];
            if (in_place || !overlaps(in, counts[at], static_cast<const T*>(out), total)) {
                allgather(in_place ? MPI_IN_PLACE : in, counts, displs, out, ty, gc);
                return;
            }
        }
        typename Mem::template Buffer<T> mine(r.volume(mine_box)), all(total);
        Mem::pack(nd, src, r.sshape(), r.sorigin(me), mine_box, mine_box + nd, mine.data());
        allgather(mine.data(), counts, displs, all.data(), ty, gc);
        for (size_t i = 0; i < mem.size(); ++i)
            Mem::unpack(nd, dst, r.dshape(), r.dorigin(me), r.piece(mem[i]), r.piece(mem[i]) + nd,
                        all.data() + displs[i]);
    } else {
        throw std::runtime_error("distsdfg: unknown redistribution mode");
    }
}

/// Whether the box (start, size) is the whole row-major buffer of ``shape`` whose element [origin] comes first.
inline bool covers(int64_t nd, const int64_t* shape, const int64_t* origin, const int64_t* start, const int64_t* size) {
    for (int64_t d = 0; d < nd; ++d)
        if (start[d] != origin[d] || size[d] != shape[d]) return false;
    return true;
}

template <typename T, typename Mem>
void fill(const Step& s, T* local, int me) {
    // F_ACC: the block holds a value to accumulate into; its first holder keeps it.
    if ((s.flags() & F_ACC) && s.pcolor(me) == 0) return;
    // F_PAD: the identity is for the padding of a padded input, whose block the next step writes;
    // a block that covers the whole buffer (an even split) leaves no padding to fill.
    if ((s.flags() & F_PAD) && covers(s.ndim(), s.lshape(), s.origin(me), s.start(me), s.size(me))) return;
    const int64_t n = volume(s.ndim(), s.lshape());
    Mem::fill(local, n, Ops<T>::identity(s.op()));
}

/// Whether $DISTSDFG_STEP_TIMES asks every step to print its wall time on stderr (read once).
inline bool step_times() {
    static const bool on = [] {
        const char* v = std::getenv("DISTSDFG_STEP_TIMES");
        return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
    }();
    return on;
}

inline const char* kind_name(int64_t kind) {
    switch (kind) {
        case SCATTER: return "scatter";
        case GATHER: return "gather";
        case REDUCE: return "reduce";
        case FILL: return "fill";
        case REDIST: return "redistribute";
        default: return "?";
    }
}

/// Runs step ``index`` of ``plan`` on local buffers that ``Mem`` can touch; ``GD``: rank 0's global
/// array is in the local buffers' memory too (see Global). (A class, so that a program can replace
/// the host steps of an element type by a prebuilt library's: distsdfg_host_steps.h.)
template <typename T, typename Mem, bool GD = false>
struct StepRunner {
    static void run(const int64_t* plan, int64_t index, const T* src, T* dst, MPI_Comm comm) {
        Step s{plan + plan[1 + index]};
        Context& ctx = context(comm);
        if (ctx.size != s.nranks())
            throw std::runtime_error("distsdfg: the plan was made for " + std::to_string(s.nranks()) +
                                     " ranks but the communicator has " + std::to_string(ctx.size));
        const bool timed = step_times();
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        Mem::begin();
        switch (s.kind()) {
            case SCATTER: scatter<T, Mem, GD>(s, src, dst, ctx); break;
            case GATHER: gather<T, Mem, GD>(s, src, dst, ctx, false); break;
            case REDUCE: gather<T, Mem, GD>(s, src, dst, ctx, true); break;
            case FILL: fill<T, Mem>(s, dst, ctx.rank); break;
            case REDIST: redist<T, Mem>(Redist{s.t}, src, dst, ctx); break;
            default: throw std::runtime_error("distsdfg: unknown step kind");
        }
        Mem::end();
        if (timed) {
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            const double at = std::chrono::duration<double, std::milli>(t0.time_since_epoch()).count();
            std::fprintf(stderr, "[distsdfg] rank %d step %lld (%s): %.3f ms (from %.3f)\n", ctx.rank,
                         static_cast<long long>(index), kind_name(s.kind()), ms, at);
        }
    }
};

/// Runs step ``index`` of ``plan`` (``plan[0]`` steps, ``plan[1 + i]`` the offset of step i) on
/// local buffers that ``Mem`` can touch (HostMem: host memory; DeviceMem: device memory), over
/// the caller's communicator ``comm``; ``GD``: rank 0's global array is device memory too.
template <typename T, typename Mem = HostMem, bool GD = false>
void run_step(const int64_t* plan, int64_t index, const T* src, T* dst, MPI_Comm comm) {
    distsdfg_crash_marker* const marker = __distsdfg_crash_marker;      // what a crash reports (distsdfg_crash.h)
    if (marker != nullptr) marker->step = index;
    StepRunner<T, Mem, GD>::run(plan, index, src, dst, comm);
    if (marker != nullptr) marker->step = -2 - index;
}

}  // namespace
}  // namespace distsdfg
#endif  // DISTSDFG_RUNTIME_H
