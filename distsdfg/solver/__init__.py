"""Solving for concrete sizes and a rank count: homes, per-rank blocks, redistributions, data-bounded
blocks (the CSR inspector), and comm_report over the solved steps."""
