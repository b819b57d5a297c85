"""Box algebra on concrete index ranges, and an index of many boxes (no DaCe)."""
