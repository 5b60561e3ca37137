"""Values of the verl and slime settings sections, read as a YAML file or a command line leaves
them (``true``/``"false"``, ``null``/``"None"``), each with a one-line error naming its key;
and what the two integrations share: the policies they run and the sampling they ask for."""

from __future__ import annotations

from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import SamplingParams

POLICIES = ("tailsieve", "tailsieve-fixed", "uniform", "uniform-requests")  # what they can run

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def flag(value: Any, key: str) -> bool:
    """A boolean setting (``key`` names it in the error)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{key} must be true or false, got {value!r}")


def optional(value: Any, kind: type, key: str) -> Any:
    """``None`` for null (or an empty or ``null``/``none`` string), else ``value`` as ``kind``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none")):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a {kind.__name__} or null, got {value!r}") from None


def with_seam(controller: dict[str, Any], seam_s: float | None, key: str) -> dict[str, Any]:
    """``controller`` overrides with ``seam_s`` (the section's ``key``) set; given in both
    places, the two must agree."""
    if seam_s is None:
        return controller
    if "seam_s" in controller and float(controller["seam_s"]) != seam_s:
        raise ConfigError(f"{key}={seam_s} and the controller's seam_s={controller['seam_s']} "
                          "disagree; set one")
    return {**controller, "seam_s": seam_s}


def sampling(max_tokens: int, temperature: float, top_p: float, top_k: int,
             **more: Any) -> SamplingParams:
    """Every request's sampling in the trainers' conventions (``top_p`` 1 and ``top_k`` -1 are
    off), with the sampled tokens' log-probabilities."""
    return SamplingParams(max_tokens=max_tokens, temperature=temperature,
                          top_p=top_p if 0.0 < top_p < 1.0 else None,
                          top_k=top_k if top_k > 0 else None, logprobs=0, **more)
