"""``scripts/amx_permission.py``: the start-up hook that asks the kernel for AMX tile
permission in every process of the vLLM venv (a fresh vLLM CPU worker on Intel AMX died with
SIGILL without it). It must install, import cleanly at interpreter start, and never raise
where there is no AMX (this machine, ARM, macOS)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "amx_permission.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("amx_permission_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_request_never_raises_and_says_whether_it_was_granted() -> None:
    mod = load()
    assert mod.SYS_ARCH_PRCTL == 158 and mod.ARCH_REQ_XCOMP_PERM == 0x1023
    assert mod.XFEATURE_XTILEDATA == 18
    assert isinstance(mod.request_amx(), bool)  # granted on AMX, False elsewhere


def test_not_x86_is_a_no_op(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    mod = load()
    monkeypatch.setattr(mod.platform, "machine", lambda: "aarch64")
    assert mod.request_amx() is False


def test_installed_it_runs_at_every_interpreter_start(tmp_path: Path) -> None:
    mod = load()
    pth = mod.install(str(tmp_path))
    assert pth.read_text() == f"import {mod.MODULE}\n"
    code = ("import site, sys; site.addsitedir(sys.argv[1]); "
            f"m = sys.modules['{mod.MODULE}']; print(isinstance(m.request_amx(), bool))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stdout.strip() == "True" and out.stderr == ""
    mod.install(str(tmp_path))  # idempotent
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".py", ".pth")) == [
        f"{mod.MODULE}.pth", f"{mod.MODULE}.py"]
