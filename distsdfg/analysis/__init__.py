"""Analysis of an SDFG before lowering: kernels, memlet indices, loop trip counts, block arithmetic,
the per-rank blocks each kernel reads and writes (constraints), and the planner's EinGraph."""
