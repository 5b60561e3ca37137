"""What a session router knows when a turn arrives (never a future length)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError

__all__ = ["TurnRequest"]


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn of a multi-turn session, as a router sees it when the turn arrives.

    It carries what is known at that moment: the prompt's size, how much of it is new since
    the previous turn, where the previous turn ran and where a prefix of the prompt is cached.
    It never carries the number of tokens the turn will generate (``max_tokens`` is the
    client's cap, not a length)."""

    session_id: Hashable  # trajectory key (verl request_id, the proxy's session key)
    group_id: Hashable | None  # its GRPO group (siblings share the prompt prefix) or None
    turn_index: int  # 0 = first turn
    context_tokens: int  # the turn's whole prompt (earlier context + new tokens)
    new_tokens: int  # tokens appended since the previous turn ended (= context at turn 0)
    home: int | None  # replica that served the previous turn (None: first turn / unknown)
    cached_tokens: Mapping[int, int] = field(default_factory=dict)  # replica -> prefix
    # tokens of this prompt cached there (the caller's estimate; replicas not listed: 0)
    max_tokens: int | None = None  # the client's cap on generated tokens (None: none)
    in_tool_wait: bool = True  # the session still counts in its home's tool waits (the
    # simulator's always do until the turn is placed; a live book's may have lapsed)

    def __post_init__(self) -> None:
        if self.turn_index < 0:
            raise ConfigError(f"turn {self.session_id!r}: turn_index must be >= 0, "
                              f"got {self.turn_index}")
        if self.context_tokens < 0:
            raise ConfigError(f"turn {self.session_id!r}: context_tokens must be >= 0, "
                              f"got {self.context_tokens}")
        if not 0 <= self.new_tokens <= self.context_tokens:
            raise ConfigError(f"turn {self.session_id!r}: new_tokens must be in "
                              f"[0, context_tokens={self.context_tokens}], got {self.new_tokens}")
        if self.home is not None and self.home < 0:
            raise ConfigError(f"turn {self.session_id!r}: home must be >= 0, got {self.home}")
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ConfigError(f"turn {self.session_id!r}: max_tokens must be >= 0, "
                              f"got {self.max_tokens}")
        for replica, n in self.cached_tokens.items():
            if not 0 <= n <= self.context_tokens:
                raise ConfigError(
                    f"turn {self.session_id!r}: cached_tokens[{replica}] must be in "
                    f"[0, context_tokens={self.context_tokens}], got {n}")

    def cached_on(self, replica: int) -> int:
        """Prefix tokens of this prompt cached on ``replica`` (0 where unknown)."""
        return self.cached_tokens.get(replica, 0)

    def uncached_on(self, replica: int) -> int:
        """Tokens of this prompt ``replica`` must prefill."""
        return self.context_tokens - self.cached_tokens.get(replica, 0)
