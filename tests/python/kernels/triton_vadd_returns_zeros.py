"""Broken: returns a fresh zeros tensor instead of computing."""
import torch


def run_kernel(x, y, out, N):
    return torch.zeros_like(x)
