// distsdfg runtime on device buffers (lower(..., target="gpu", cuda_aware_mpi=True)), and on the
// host staging buffers of GPU programs otherwise (StagedHostMem).
//
// The ranks' local buffers live in GPU memory and go to MPI as device pointers, which needs a
// CUDA-aware MPI. DeviceMem copies boxes with cudaMemcpy2D, allocates its temporaries with
// cudaMalloc and combines partial values on the host (see PlaneMem in distsdfg_runtime.h).
// A step waits for the GPU before it starts (the kernels that wrote its buffers run on DaCe's
// streams) and after its last copy.
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

/// Host staging buffers of a GPU program (lower(..., target="gpu") without CUDA-aware MPI): the
/// step works on pinned host copies of the device buffers, like HostMem, but first waits for the
/// GPU. DaCe issues the device-to-host copies that fill those host buffers asynchronously and, where
/// a step only follows such a copy in order (a step that keeps part of its buffer starts from a
/// copy of it), does not wait for them itself.
struct StagedHostMem : HostMem {
    static void begin() { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
};

}  // namespace
}  // namespace distsdfg
