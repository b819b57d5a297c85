"""The PyTorch frontend: torch.export graphs (forward and training steps) as DaCe programs."""
