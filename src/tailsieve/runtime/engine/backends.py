"""The request's data types, shared by every execution path and front door: the server
dialect (``Backend``: vLLM completions, vLLM chat, SGLang ``/generate``), the sampling
parameters (``SamplingParams``), a prompt (``PromptInput``; token ids JSON-encoded once,
``EncodedIds``) and one generated response (``Response``).

How they go on the wire (a request's body, a server's answer) is ``wire_bodies``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from tailsieve.errors import ConfigError


class Backend(str, Enum):
    VLLM = "vllm"
    VLLM_CHAT = "vllm-chat"
    SGLANG = "sglang"

    @property
    def path(self) -> str:
        return {
            Backend.VLLM: "/v1/completions",
            Backend.VLLM_CHAT: "/v1/chat/completions",
            Backend.SGLANG: "/generate",
        }[self]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling parameters passed through to the server (None = server default)."""

    max_tokens: int = 256  # generated-token cap per response
    temperature: float | None = 1.0
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    seed: int | None = None  # per request; sample i of a split group gets seed + i
    stop: tuple[str, ...] | None = None
    logprobs: int | None = None  # return logprobs of the sampled tokens (top-k alternatives)
    extra: dict[str, Any] = field(default_factory=dict)  # passed verbatim (vLLM extra_body)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")


def encode_ids(ids: tuple[int, ...]) -> str:
    """Token ids as compact JSON (``[1,2,3]``)."""
    return "[" + ",".join(map(str, ids)) + "]"


class EncodedIds(tuple[int, ...]):
    """Token ids with their compact JSON encoding cached (``json``): a continued piece's prompt,
    encoded once per piece by appending to the previous piece's encoding. ``LeanTransport``
    splices ``json`` into the request instead of encoding the ids again, and does not parse
    the prompt ids the server echoes back. ``encoded``: the JSON, or a function of the ids
    that gives it, called the first time ``json`` is read (a runner that sends no JSON, as
    verl's Ray handles, never pays for it). Pickled with its JSON, as a string."""

    _encoded: str | Callable[[tuple[int, ...]], str]

    def __new__(cls, ids: Iterable[int],
                encoded: str | Callable[[tuple[int, ...]], str] = encode_ids) -> EncodedIds:
        obj = super().__new__(cls, ids)
        obj._encoded = encoded
        return obj

    @property
    def json(self) -> str:
        enc = self._encoded
        if not isinstance(enc, str):
            enc = self._encoded = enc(self)
        return enc

    def __reduce__(self) -> tuple[Any, ...]:
        return EncodedIds, (tuple(self), self.json)


@dataclass(frozen=True, slots=True)
class PromptInput:
    """One prompt: exactly one of ``text``, ``token_ids`` or ``messages``."""

    prompt_id: str
    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    messages: tuple[dict[str, str], ...] | None = None  # chat format (vllm-chat backend)
    seed: int | None = None  # base sampling seed of this prompt's requests (sample i: seed + i);
    # None: the run's ``SamplingParams.seed``

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.text, self.token_ids, self.messages)]
        if sum(given) != 1:
            raise ConfigError(
                f"prompt {self.prompt_id!r}: give exactly one of text, token_ids, messages"
            )

    @classmethod
    def from_dict(cls, row: dict[str, Any], where: str = "") -> PromptInput:
        """From ``{prompt_id, prompt | prompt_token_ids | messages[, seed]}`` (JSONL prompt
        files)."""
        if "prompt_id" not in row:
            raise ConfigError(f"{where}: missing field 'prompt_id'")
        keys = ("prompt", "prompt_token_ids", "messages")
        if sum(row.get(k) is not None for k in keys) != 1:
            others = sorted(k for k in row if k != "prompt_id")
            raise ConfigError(
                f"{where}: prompt {row['prompt_id']!r}: give exactly one of 'prompt', "
                f"'prompt_token_ids', 'messages' (the line has {others or 'no other field'})"
            )
        ids = row.get("prompt_token_ids")
        msgs = row.get("messages")
        seed = row.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"{where}: prompt {row['prompt_id']!r}: seed must be an integer")
        return cls(
            prompt_id=str(row["prompt_id"]),
            text=row.get("prompt"),
            token_ids=tuple(int(t) for t in ids) if ids is not None else None,
            messages=tuple(dict(m) for m in msgs) if msgs is not None else None,
            seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``from_dict`` form (JSON-safe; a checkpoint's prompts): its content and seed."""
        d: dict[str, Any] = {"prompt_id": self.prompt_id}
        if self.text is not None:
            d["prompt"] = self.text
        if self.token_ids is not None:
            d["prompt_token_ids"] = list(self.token_ids)
        if self.messages is not None:
            d["messages"] = [dict(m) for m in self.messages]
        if self.seed is not None:
            d["seed"] = self.seed
        return d


PromptLike = PromptInput | dict[str, Any]  # a prompt, or its ``PromptInput.from_dict`` form


def with_encoded_ids(prompt: PromptInput) -> PromptInput:
    """``prompt`` with its token ids (when it has them) as ``EncodedIds``: JSON-encoded once,
    so that every request of its group (one per sample when split, and the first piece of each
    chain) splices the same text instead of encoding the ids again."""
    ids = prompt.token_ids
    if ids is None or isinstance(ids, EncodedIds):
        return prompt
    return replace(prompt, token_ids=EncodedIds(ids))


@dataclass(frozen=True, slots=True)
class Response:
    """One generated response."""

    text: str
    num_tokens: int  # generated tokens
    finish_reason: str  # "stop" | "length" | server-specific
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None  # logprob of each sampled token, when asked
    text_offsets: tuple[int, ...] | None = None  # start of each token's text (vLLM logprobs)
    prompt_token_ids: tuple[int, ...] | None = None  # the prompt as the server tokenized it
    chunk_times_s: tuple[float, ...] | None = None  # streamed: arrival of each chunk, seconds
    # after the request was sent (its last try)
    chunk_tokens: tuple[int, ...] | None = None  # streamed: generated tokens after each chunk
    token_texts: tuple[str, ...] | None = None  # each token's text (vLLM ``logprobs.tokens``)
    top_logprobs: tuple[Any, ...] | None = None  # each token's alternatives, as the server
    # gave them (vLLM ``logprobs.top_logprobs``)
    stop_reason: int | str | None = None  # the stop string or token id that ended it (vLLM
    # ``stop_reason``, SGLang ``finish_reason.matched``; None: EOS, length, not said)
