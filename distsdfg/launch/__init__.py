"""The ``distsdfg`` command and launching: mpiexec and Slurm argv, what every rank runs, plots, info."""
