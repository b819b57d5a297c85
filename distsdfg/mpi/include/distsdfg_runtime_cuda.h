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

namespace distsdfg {
namespace {

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
