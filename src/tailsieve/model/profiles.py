"""Named throughput profiles shipped with the package, and loading by name or file."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tailsieve.errors import ProfileError
from tailsieve.model.throughput import ThroughputModel

# Derived GPU profiles: name -> (shipped model config, gpu, tensor parallelism). Each file is
# exactly what `tailsieve profile --model MODEL --gpu GPU [--tp N]` writes (a test checks it).
DERIVED_PROFILES: dict[str, tuple[str, str, int]] = {
    "qwen3-4b-h100": ("qwen3-4b", "h100", 1),
    "qwen3-30b-a3b-h100-tp2": ("qwen3-30b-a3b", "h100", 2),
    "qwen3.5-4b-h100": ("qwen3.5-4b", "h100", 1),
    "qwen3.5-35b-a3b-h100-tp2": ("qwen3.5-35b-a3b", "h100", 2),
    "qwen3-4b-h200": ("qwen3-4b", "h200", 1),
}
DEFAULT_PROFILE = "qwen3-4b-h100"  # default of simulate, demo, oracle and the benchmarks
# "cpu" is measured on this project's CI machine (vLLM CPU build); "illustrative-flat" is the
# hand-drawn GPU-shaped curve of earlier versions (no context term, never a default).
PROFILE_NAMES: tuple[str, ...] = (*DERIVED_PROFILES, "cpu", "illustrative-flat")
AUTO = "auto"  # the live runtime's default: fit the decode curve online (model.online_profile)
RETIRED: dict[str, str] = {
    "gpu": "the hand-drawn 'gpu' curve was retired: use qwen3-4b-h100 (derived from the model "
           "and the GPU) or, for the old curve, illustrative-flat",
}


def builtin_profile(name: str) -> ThroughputModel:
    """A shipped profile by name (see ``PROFILE_NAMES``)."""
    if name in RETIRED:
        raise ProfileError(RETIRED[name])
    if name not in PROFILE_NAMES:
        raise ProfileError(f"unknown profile {name!r}; choose one of {', '.join(PROFILE_NAMES)}")
    text = resources.files("tailsieve.model").joinpath("profiles", f"{name}.json").read_text()
    return ThroughputModel.from_dict(json.loads(text), where=f"builtin profile {name}")


def load_profile(name_or_path: str | Path) -> ThroughputModel:
    """A shipped profile name (see ``PROFILE_NAMES``) or a path to a profile JSON file."""
    key = str(name_or_path)
    if (key == AUTO or key.startswith(AUTO + ":")) and not Path(key).exists():
        raise ProfileError(
            f"profile {key!r} is fitted online from a live rollout's timings (the runtime's "
            "default); here give a named profile or a file (tailsieve profiles)")
    if key in RETIRED and not Path(key).exists():
        raise ProfileError(RETIRED[key])
    if key in PROFILE_NAMES:
        return builtin_profile(key)
    path = Path(key)
    if path.suffix == "" and not path.exists():
        raise ProfileError(
            f"unknown profile {key!r}: not a shipped profile ({', '.join(PROFILE_NAMES)}) "
            "and no such file"
        )
    return ThroughputModel.load(path)


def list_profiles() -> list[ThroughputModel]:
    """Every shipped profile."""
    return [builtin_profile(n) for n in PROFILE_NAMES]


def parse_profile(spec: str) -> tuple[bool, str | None]:
    """``"auto"`` -> (True, None): fit online, a short probe until then; ``"auto:NAME"`` ->
    (True, NAME): fit online, the named profile (or file) until then; anything else ->
    (False, spec): that profile, fixed."""
    if spec == AUTO:
        return True, None
    if spec.startswith(AUTO + ":"):
        fallback = spec[len(AUTO) + 1:]
        if not fallback or fallback.startswith(AUTO):
            raise ProfileError(f"profile {spec!r}: after 'auto:' name a profile or a file "
                               "(e.g. auto:qwen3-4b-h100)")
        return True, fallback
    return False, spec


def check_profile(spec: str) -> None:
    """Raise ``ProfileError`` unless ``spec`` is ``auto``, ``auto:NAME`` with a loadable
    NAME, or a loadable profile (checked before any replica is contacted)."""
    _, fixed = parse_profile(spec)
    if fixed is not None:
        load_profile(fixed)
