"""Slightly off: adds 1e-3 to every element (fails fp32 defaults, passes a loose ref.py tolerance)."""
import torch


def run_kernel(x, y, out):
    torch.add(x, y, out=out)
    out.add_(1e-3)
