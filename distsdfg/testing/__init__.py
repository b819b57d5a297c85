"""Test helpers: sample programs and a runner for real mpiexec cases."""
