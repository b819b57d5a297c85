// distsdfg: force-included into every .cu file of a target="gpu" build (distsdfg/gpu.py).
// CUDA 13's CUB removed names that DaCe 1.0.2's runtime headers still use; define them on top of
// Thrust's iterators and CUDA's barrier. Nothing changes for CUDA 12 and older.
#pragma once
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#if CUDART_VERSION >= 13000
#include <cstddef>
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
namespace cub {
template <typename T, typename OffsetT = std::ptrdiff_t>
using CountingInputIterator = thrust::counting_iterator<T>;
template <typename ValueType, typename ConversionOp, typename InputIteratorT, typename OffsetT = std::ptrdiff_t>
using TransformInputIterator = thrust::transform_iterator<ConversionOp, InputIteratorT, ValueType, ValueType>;
}  // namespace cub
#ifndef CTA_SYNC
#define CTA_SYNC() __syncthreads()
#endif
#endif
#endif
