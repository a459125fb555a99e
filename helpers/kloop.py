#!/usr/bin/env python3
"""Run kernel-loop from the skill folder without installing it: python3 helpers/kloop.py --help"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel_loop.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
