// distsdfg runtime on a GPU program's device buffers (lower(..., target="gpu")).
//
// The ranks' local buffers live in GPU memory and the runtime never dereferences them: boxes are
// copied with cudaMemcpy2D and partial values combined on the host (see PlaneMem in
// distsdfg_runtime.h). Two policies:
// - StagedDeviceMem (the default lowering): MPI works on pinned host temporaries only; each box a
//   step sends is copied device-to-host into one, each box it receives host-to-device out of one,
//   so a halo exchange moves its halo rows across PCIe, not the whole block.
// - DeviceMem (cuda_aware_mpi=True): temporaries in device memory, and MPI is handed device
//   pointers, which needs a CUDA-aware MPI.
// Temporaries come from a per-process cache (Pool). A step waits for the GPU before it starts
// (the kernels that wrote its buffers run on DaCe's streams) and after its last copy.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "distsdfg_runtime.h"

// Defined by distsdfg_runtime_kernels.cuh in the program's CUDA source; weak, so that a program
// without one links and combines on the host; hidden, so that each program's library uses its own
// (never another loaded program's, which may be unloaded first).
extern "C" __attribute__((weak, visibility("hidden"))) int distsdfg_device_combine(
    int kind, int op, void* buf, long long pitch, const void* in, long long width, long long height);

namespace distsdfg {
namespace {

/// The element kind distsdfg_device_combine takes for T; -1 where it has none (complex numbers).
template <typename T> constexpr int device_kind() {
    return std::is_same<T, bool>::value ? 10
         : std::is_same<T, float>::value ? 0
         : std::is_same<T, double>::value ? 1
         : !std::is_integral<T>::value ? -1
         : sizeof(T) == 1 ? (std::is_signed<T>::value ? 2 : 3)
         : sizeof(T) == 2 ? (std::is_signed<T>::value ? 4 : 5)
         : sizeof(T) == 4 ? (std::is_signed<T>::value ? 6 : 7)
         : sizeof(T) == 8 ? (std::is_signed<T>::value ? 8 : 9) : -1;
}

/// Whether a kernel can use ``p`` as it is: device memory, or (unless ``device_only``) pinned host
/// memory mapped at the same address (unified addressing).
inline bool device_readable(const void* p, bool device_only) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();     // clear the error of a pointer CUDA does not know
        return false;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return true;
    return !device_only && a.type == cudaMemoryTypeHost && a.devicePointer == p;
}

inline void cuda_check(cudaError_t err, const char* what) {
    if (err != cudaSuccess)
        throw std::runtime_error(std::string("distsdfg: ") + what + " failed: " + cudaGetErrorString(err));
}

struct CudaPrim {
    static constexpr bool host = false;
    static void* alloc(size_t bytes) {
        void* p = nullptr;
        cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
        return p;
    }
    static void release(void* p) { cudaFree(p); }
    /// Either side may be host or device memory (unified addressing). Dense planes are one
    /// cudaMemcpy (pitches of cudaMemcpy2D are limited to cudaDevAttrMaxPitch, about 2 GiB).
    static void copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
        if (height == 1 || (dpitch == width && spitch == width))
            cuda_check(cudaMemcpy(dst, src, width * height, cudaMemcpyDefault), "cudaMemcpy");
        else
            cuda_check(cudaMemcpy2D(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault), "cudaMemcpy2D");
    }
    static void sync() { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
    /// Whether combine2d can combine into ``dst`` from ``in``: the program has the kernel, T a kind
    /// it takes, ``dst`` device memory and ``in`` memory the GPU reaches (a temporary in device or
    /// pinned host memory); else the host combines.
    template <typename T> static bool combines(int64_t op, const T* dst, const T* in) {
        return device_kind<T>() >= 0 && op >= OP_SUM && op <= OP_MIN && distsdfg_device_combine != nullptr &&
               device_readable(dst, true) && device_readable(in, false);
    }
    /// dst[plane] = dst[plane] op in by a kernel (on the default stream: the step's copies around it
    /// are ordered with it, and the step's end waits for it).
    template <typename T>
    static void combine2d(int64_t op, T* dst, int64_t pitch, const T* in, int64_t width, int64_t height) {
        const int err = distsdfg_device_combine(device_kind<T>(), int(op), dst, pitch, in, width, height);
        if (err < 0) throw std::runtime_error("distsdfg: distsdfg_device_combine refused its arguments");
        cuda_check(cudaError_t(err), "distsdfg_device_combine");
    }
};
using DeviceMem = PlaneMem<CudaPrim>;

/// Pinned host memory for StagedDeviceMem's temporaries (MPI's buffers, and the source or target
/// of the box copies, which run at full PCIe speed from pinned memory).
struct PinnedPrim {
    static constexpr bool host = true;
    static void* alloc(size_t bytes) {
        void* p = nullptr;
        cuda_check(cudaMallocHost(&p, bytes), "cudaMallocHost");
        return p;
    }
    static void release(void* p) { cudaFreeHost(p); }
};
using StagedDeviceMem = PlaneMem<CudaPrim, PinnedPrim>;

}  // namespace
}  // namespace distsdfg
