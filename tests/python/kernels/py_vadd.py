"""A pure-torch 'kernel' (harness tests): correct vector add, written in place."""
import torch


def run_kernel(x, y, out):
    torch.add(x, y, out=out)
