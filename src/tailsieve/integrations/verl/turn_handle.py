"""What ``acquire_server`` hands verl for a turn, and which turns are cut into pieces.

``TurnHandle`` stands where verl expects a server actor handle: verl calls
``handle.generate.remote(request_id=..., prompt_ids=..., sampling_params=..., ...)`` and awaits
the result. The call goes to the router actor's ``generate_turn`` with the trajectory's sticky
id (verl sends each turn to the server under a fresh id, so the handle carries the sticky one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GATEWAY_ID = "tailsieve"  # the server id acquire_server returns for TailSieve's turns
POSITIONAL = ("prompt_ids", "sampling_params", "request_id")  # verl servers' generate order
MULTIMODAL = ("image_data", "video_data", "audio_data", "mm_processor_kwargs",
              "mm_processor_output")


@dataclass(frozen=True, slots=True)
class _Generate:
    router: Any  # the router's Ray actor handle
    session: str

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """``router.generate_turn.remote(session, **verl's keywords)``: an awaitable ref."""
        kwargs.update(zip(POSITIONAL, args, strict=False))
        return self.router.generate_turn.remote(self.session, **kwargs)


@dataclass(frozen=True, slots=True)
class TurnHandle:
    """A server handle for one trajectory's turns, run by the router (picklable)."""

    router: Any  # the router's Ray actor handle
    session: str  # verl's sticky request id of the trajectory

    @property
    def generate(self) -> _Generate:
        return _Generate(self.router, self.session)


def whole_reason(call: Mapping[str, Any], sampling: Mapping[str, Any],
                 budget: int | None) -> str | None:
    """Why this turn runs whole on one server instead of as a chain of pieces (None: pieces
    are fine)."""
    if any(_present(call.get(k)) for k in MULTIMODAL):
        return "multimodal inputs (a continuation cannot carry them)"
    if sampling.get("prompt_logprobs") is not None:
        return "prompt_logprobs (a distillation teacher scores the whole prompt once)"
    if _present(sampling.get("stop")):
        return "stop strings (verl's servers return no text to cut them across a seam)"
    if int(sampling.get("n", 1) or 1) > 1:
        return "n > 1 in one request"
    if budget is None:
        return ("max_tokens unknown: the servers report no rollout config (SGLang); set "
                "response_length and prompt_length in the router YAML")
    return None


def _present(value: Any) -> bool:
    if value is None:
        return False
    try:
        return len(value) > 0
    except TypeError:
        return True
