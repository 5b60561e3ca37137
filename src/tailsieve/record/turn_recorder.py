"""Recording multi-turn rollouts: a pure accumulator of per-turn events that builds a turn
trace (``workload.turns``) with its provenance.

The caller (a live agent loop) reports every finished turn as a ``TurnEvent``: which
trajectory (prompt id, step, sample), which turn, the tokens generated, the tool call after it
(seconds, tokens appended) and the turn's whole prompt as the server saw it. Events of one
trajectory arrive in turn order; trajectories may interleave. Nothing here does I/O except
``TurnRecording.write``.

Checks, reported in the recording's ``info`` (never silently dropped):

* ``context_mismatches``: turns whose prompt is not the previous turn's prompt plus its output
  and tool output (tokens lost or doubled between turns); ``strict_context=True`` raises.
* ``sibling_copies``: trajectories whose generated token ids equal, turn by turn, those of an
  earlier sample of the same prompt and step (an exact copy: e.g. two servers drawing the same
  random numbers). Only checked when the events carry token ids.

Provenance holds package-relative paths only (``package_relative``): an absolute path is a
``ConfigError`` naming its key.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from tailsieve.errors import ConfigError, TraceError
from tailsieve.workload.turn_io import write_turn_trace
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../tailsieve
Key = tuple[str, int, int]  # (prompt_id, step, sample)


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """One finished turn of one trajectory."""

    prompt_id: str  # the group (prompt)
    sample: int  # index within the group
    turn_index: int  # 0 for the first turn
    output_tokens: int  # tokens generated in this turn (>= 1)
    tool_s: float = 0.0  # seconds of the tool call after it (0 after the last turn)
    tool_output_tokens: int = 0  # tokens the tool appended (0 after the last turn)
    prompt_tokens: int | None = None  # the turn's whole prompt as the server counted it
    finish_reason: str | None = None  # how this turn's generation ended
    step: int = 0  # rollout step
    token_ids: Sequence[int] | None = None  # the generated ids (for the sibling-copy check)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt_id, str) or not self.prompt_id:
            raise TraceError(f"TurnEvent: field 'prompt_id': expected a non-empty string, got "
                             f"{self.prompt_id!r}")
        for name in ("sample", "turn_index", "step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise TraceError(f"TurnEvent: field '{name}': expected an integer >= 0, got {v!r}")
        if self.prompt_tokens is not None and (
            isinstance(self.prompt_tokens, bool) or self.prompt_tokens < 0
        ):
            raise TraceError(f"TurnEvent: field 'prompt_tokens': must be >= 0, got "
                             f"{self.prompt_tokens!r}")
        if self.token_ids is not None and len(self.token_ids) != self.output_tokens:
            raise TraceError(f"TurnEvent: field 'token_ids': {len(self.token_ids)} ids for "
                             f"output_tokens {self.output_tokens}")

    @property
    def key(self) -> Key:
        return self.prompt_id, self.step, self.sample


@dataclass(slots=True)
class _Open:
    """A trajectory being recorded."""

    turns: list[Turn] = field(default_factory=list)
    prompts: list[int | None] = field(default_factory=list)
    finish: str | None = None
    digest: Any = None  # hashlib object over the token ids, or None when some turn had none


class TurnRecorder:
    """Accumulates ``TurnEvent``s (see the module doc); ``recording()`` builds the trace."""

    def __init__(self, strict_context: bool = False) -> None:
        self._open: dict[Key, _Open] = {}
        self._strict = strict_context
        self._mismatches: list[dict[str, Any]] = []

    def add(self, event: TurnEvent) -> None:
        """Record one turn. Raises ``TraceError`` for a turn out of order (a gap or a repeat),
        a bad value, or (``strict_context``) a prompt that does not continue the context."""
        rec = self._open.get(event.key) or _Open(digest=hashlib.sha256())
        if event.turn_index != len(rec.turns):
            raise TraceError(f"trajectory {event.key}: turn {event.turn_index} arrived after "
                             f"{len(rec.turns)} turn(s) (turns must arrive in order, once)")
        try:
            turn = Turn(event.output_tokens, event.tool_s, event.tool_output_tokens)
        except TraceError as exc:
            raise TraceError(f"trajectory {event.key}: turn {event.turn_index}: {exc}") from None
        self._check_context(event, rec)
        self._open.setdefault(event.key, rec)
        rec.turns.append(turn)
        rec.prompts.append(event.prompt_tokens)
        rec.finish = event.finish_reason
        if rec.digest is not None and event.token_ids is not None:
            rec.digest.update(json.dumps(list(event.token_ids)).encode() + b";")
        else:
            rec.digest = None

    def _check_context(self, event: TurnEvent, rec: _Open) -> None:
        t = event.turn_index
        if t == 0 or event.prompt_tokens is None or rec.prompts[-1] is None:
            return
        prev = rec.turns[-1]
        expected = rec.prompts[-1] + prev.output_tokens + prev.tool_output_tokens
        if event.prompt_tokens == expected:
            return
        miss = {"prompt_id": event.prompt_id, "step": event.step, "sample": event.sample,
                "turn": t, "expected_prompt_tokens": expected,
                "prompt_tokens": event.prompt_tokens}
        if self._strict:
            raise TraceError(f"trajectory {event.key}: turn {t}: field 'prompt_tokens': "
                             f"{event.prompt_tokens}, but the context is {expected} tokens")
        self._mismatches.append(miss)

    @property
    def num_turns(self) -> int:
        """Turns recorded so far."""
        return sum(len(r.turns) for r in self._open.values())

    def recording(self, provenance: Mapping[str, Any] | None = None) -> TurnRecording:
        """The turn trace of everything recorded (trajectories in order of their first turn)
        with ``info``: the given provenance (checked: package-relative paths only), counts,
        context mismatches and sibling copies. Raises ``TraceError`` when nothing was recorded
        or a trajectory's last turn still has a tool call (it did not finish)."""
        prov = dict(provenance or {})
        check_portable(prov)
        if not self._open:
            raise TraceError("nothing recorded: no turn events")
        trajs = []
        for key, rec in self._open.items():
            prompt = rec.prompts[0] if rec.prompts[0] is not None else 0
            try:
                trajs.append(Trajectory(key[0], key[2], prompt, tuple(rec.turns), key[1],
                                        rec.finish))
            except TraceError as exc:
                raise TraceError(f"trajectory {key}: {str(exc).split(': ', 1)[-1]}") from None
        copies = self._sibling_copies()
        info = {
            **prov,
            "num_trajectories": len(trajs),
            "num_turns": self.num_turns,
            "context_checked": all(p is not None for r in self._open.values() for p in r.prompts),
            "context_mismatches": list(self._mismatches),
            "copy_check": all(r.digest is not None for r in self._open.values()),
            "sibling_copies": copies,
        }
        return TurnRecording(TurnTrace(tuple(trajs)), info)

    def _sibling_copies(self) -> list[dict[str, Any]]:
        """Each trajectory whose token ids equal an earlier sample's of its prompt and step."""
        first: dict[tuple[str, int, str], int] = {}
        out: list[dict[str, Any]] = []
        for (pid, step, sample), rec in sorted(self._open.items()):
            if rec.digest is None:
                continue
            seen = first.setdefault((pid, step, rec.digest.hexdigest()), sample)
            if seen != sample:
                out.append({"prompt_id": pid, "step": step, "sample": sample, "copy_of": seen})
        return out


@dataclass(frozen=True, slots=True)
class TurnRecording:
    """A recorded turn trace and how it was made (``info``: JSON-safe)."""

    turns: TurnTrace
    info: dict[str, Any]

    def write(self, path: str | Path) -> Path:
        """Write the trace (format by suffix) and ``<path>.info.json`` beside it; returns the
        info file's path."""
        write_turn_trace(self.turns, path)
        return write_info(path, self.info)


def write_info(path: str | Path, info: dict[str, Any]) -> Path:
    """Write ``info`` as ``<path>.info.json`` beside the trace at ``path``; returns its path."""
    p = Path(path)
    info_path = p.with_name(p.name + ".info.json")
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return info_path


def package_relative(path: str | Path) -> str:
    """``path`` as provenance may hold it: relative to the ``tailsieve`` package
    (``tailsieve/...``) when inside it, else its file name alone."""
    p = Path(path).resolve()
    try:
        return str(PurePosixPath("tailsieve") / p.relative_to(PACKAGE_DIR).as_posix())
    except ValueError:
        return p.name


def _absolute(text: str) -> bool:
    return text.startswith("~") or PurePosixPath(text).is_absolute() or \
        PureWindowsPath(text).is_absolute()


def check_portable(value: Any, where: str = "provenance") -> None:
    """Raise ``ConfigError`` naming the key of an absolute path anywhere in ``value``
    (mappings, lists, strings) or of a value JSON cannot hold."""
    if isinstance(value, str):
        if _absolute(value):
            raise ConfigError(f"{where}: absolute path {value!r}; record it with "
                              "package_relative() (provenance holds package-relative paths)")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            check_portable(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_portable(v, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {value} is not JSON")
    elif value is not None and not isinstance(value, bool | int | float):
        raise ConfigError(f"{where}: {type(value).__name__} is not JSON-safe")
