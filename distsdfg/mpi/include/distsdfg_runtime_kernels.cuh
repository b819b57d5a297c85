// distsdfg runtime: device code, included into a GPU program's CUDA source (the environment
// DistSDFGRuntimeCUDA's 'cuda' header). The host side (distsdfg_runtime_cuda.h) declares what this
// defines weakly, so a program without a CUDA source falls back to the host; the symbol is hidden
// (each program's library binds its own).
//
// distsdfg_device_combine: buf[plane] = buf[plane] op in, where the plane is ``height`` runs of
// ``width`` elements ``pitch`` elements apart in ``buf`` and ``in`` holds them one after another
// (PlaneMem::combine's planes). ``buf`` is device memory; ``in`` device or pinned host memory
// (mapped: a staged step's receive buffer is read over the bus once, not copied there and back).
// ``kind`` names the element type (DeviceKind in distsdfg_runtime_cuda.h), ``op`` the operator
// (the runtime's Op). The operators are those of Ops<T>::apply. Returns a cudaError_t, or -1 for a
// kind or operator it does not handle (then the host combines).
#pragma once
#ifndef DISTSDFG_RUNTIME_KERNELS_CUH
#define DISTSDFG_RUNTIME_KERNELS_CUH
#include <cuda_runtime.h>

#include <cstdint>

template <typename T>
__global__ void distsdfg_combine_kernel(int op, T* buf, long long pitch, const T* in, long long width,
                                        long long n) {
    const long long step = (long long)blockDim.x * gridDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const long long r = i / width, c = i - r * width;
        T& g = buf[r * pitch + c];
        const T v = in[i];
        switch (op) {
            case 1: g = T(g + v); break;
            case 2: g = T(g * v); break;
            case 3: g = g < v ? v : g; break;
            case 4: g = v < g ? v : g; break;
        }
    }
}

template <typename T>
static int distsdfg_launch_combine(int op, void* buf, long long pitch, const void* in, long long width,
                                   long long height) {
    const long long n = width * height;
    if (n <= 0) return 0;
    long long blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    distsdfg_combine_kernel<T><<<(unsigned)blocks, 256>>>(op, static_cast<T*>(buf), pitch, static_cast<const T*>(in),
                                                          width, n);
    return int(cudaGetLastError());
}

extern "C" __attribute__((visibility("hidden"))) int distsdfg_device_combine(int kind, int op, void* buf,
                                                                           long long pitch, const void* in,
                                                                           long long width, long long height) {
    if (op < 1 || op > 4) return -1;
    switch (kind) {
        case 0: return distsdfg_launch_combine<float>(op, buf, pitch, in, width, height);
        case 1: return distsdfg_launch_combine<double>(op, buf, pitch, in, width, height);
        case 2: return distsdfg_launch_combine<int8_t>(op, buf, pitch, in, width, height);
        case 3: return distsdfg_launch_combine<uint8_t>(op, buf, pitch, in, width, height);
        case 4: return distsdfg_launch_combine<int16_t>(op, buf, pitch, in, width, height);
        case 5: return distsdfg_launch_combine<uint16_t>(op, buf, pitch, in, width, height);
        case 6: return distsdfg_launch_combine<int32_t>(op, buf, pitch, in, width, height);
        case 7: return distsdfg_launch_combine<uint32_t>(op, buf, pitch, in, width, height);
        case 8: return distsdfg_launch_combine<int64_t>(op, buf, pitch, in, width, height);
        case 9: return distsdfg_launch_combine<uint64_t>(op, buf, pitch, in, width, height);
        case 10: return distsdfg_launch_combine<bool>(op, buf, pitch, in, width, height);
    }
    return -1;
}

#endif  // DISTSDFG_RUNTIME_KERNELS_CUH
