"""kernel-loop: a measured, one-change-at-a-time GPU kernel optimization loop."""

__version__ = "0.1.0"
