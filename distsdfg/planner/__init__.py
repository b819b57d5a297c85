"""EinDecomp's planner: cost models, the search over grids, pruning, shardings, time prediction."""
