"""``python -m tailsieve.runtime.emulator [options]``: run one emulated replica."""

import sys

from tailsieve.runtime.emulator.runner import main

sys.exit(main())
