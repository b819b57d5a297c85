"""Compile once on rank 0, load everywhere, check arguments, solve the plan per size set, call."""
