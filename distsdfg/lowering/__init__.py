"""The lowering of an SDFG for a schedule: rank-tiled kernels, local buffers, DistributedMemlet nodes,
loops with distributed homes, boundary placement, rank-local optimisation, BLAS and GPU set-up."""
