"""Ask the Linux kernel for AMX tile permission in every Python process of a vLLM venv.

On Intel Xeon with AMX, vLLM's CPU attention kernels use AMX tile instructions; a process must
first ask the kernel for the tile data state (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``, Linux >= 5.16), else its first tile instruction dies with SIGILL (seen:
``VllmWorker-0 died unexpectedly (exit code: -4)`` on a fresh tiny-model server's first forward
pass). PyTorch asks only on some paths, so this module asks at interpreter start:

    python scripts/amx_permission.py --install   # into this interpreter's site-packages

copies itself there as ``tailsieve_amx_permission.py`` with a ``.pth`` file that imports it, so
every process of that venv (the API server, EngineCore and the spawned workers) asks before
anything else runs. Elsewhere (AMD, ARM, macOS, an old kernel) the request is a harmless no-op
and every error is ignored. ``scripts/setup_vllm.sh`` and ``scripts/start_vllm_servers.sh``
install it (idempotent).
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import sys
import sysconfig
from pathlib import Path

SYS_ARCH_PRCTL = 158  # x86_64 syscall number of arch_prctl
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
MODULE = "tailsieve_amx_permission"


def request_amx() -> bool:
    """Ask for AMX tile data permission; True when the kernel granted it (False on any other
    machine or kernel, or on any error: never raises)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                          ctypes.c_long(XFEATURE_XTILEDATA))
    except Exception:  # a start-up hook must never break the interpreter
        return False
    return rc == 0


def install(site_packages: str | None = None) -> Path:
    """Copy this module into ``site_packages`` (default: this interpreter's) with the ``.pth``
    that imports it at start-up; returns the ``.pth`` path."""
    dest = Path(site_packages or sysconfig.get_paths()["purelib"])
    shutil.copyfile(Path(__file__), dest / f"{MODULE}.py")
    pth = dest / f"{MODULE}.pth"
    pth.write_text(f"import {MODULE}\n")
    return pth


if __name__ == "__main__":
    if sys.argv[1:] == ["--install"]:
        print(f"amx_permission: installed {install()} (granted here: {request_amx()})")
    else:
        print(f"AMX tile permission granted: {request_amx()}")
elif __name__ == MODULE:
    request_amx()  # at interpreter start, through the .pth file
