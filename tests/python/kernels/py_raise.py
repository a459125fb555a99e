"""Broken: raises inside the kernel call."""


def run_kernel(x, y, out):
    raise RuntimeError("kernel exploded on purpose")
