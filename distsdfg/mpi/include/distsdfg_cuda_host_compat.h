// distsdfg: force-included into the host (.cpp) sources of target="gpu" builds.
// DaCe 1.0.2 allocates a persistent pinned host buffer with `cudaMallocHost(&member, bytes)`,
// where the member is declared `T * __restrict__`: no overload of the CUDA runtime takes a
// `T * __restrict__ *`, so give it one that forwards to the `void **` version.
#pragma once
#include <cstddef>
#include <cuda_runtime_api.h>

template <typename T>
inline cudaError_t cudaMallocHost(T* __restrict__* ptr, size_t size) {
    return cudaMallocHost((void**)ptr, size);
}
