"""Chat prompts as token ids, so that a chat rollout can move its responses.

A move continues a response elsewhere as a token-id prompt (the prompt's ids plus the tokens
generated so far), which vLLM's chat API does not take. The chat endpoint itself only applies
the model's chat template and then generates as the completions endpoint does; so a chat
prompt is sent as the ids vLLM's ``POST /tokenize`` gives its messages (the same template, with
the generation prompt), on the completions API, where it can be continued. What is sampled is
the same; the responses come back in the completions form (``text``, token ids, logprobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tailsieve.errors import ReplicaError
from tailsieve.runtime.backends import PromptInput
from tailsieve.runtime.transport import ReplicaDownError, RequestError, Transport

TOKENIZE_TIMEOUT_S = 60.0


async def tokenize_messages(transport: Transport, base_url: str, model: str | None,
                            prompt: PromptInput) -> PromptInput:
    """``prompt`` (with ``messages``) as the token ids ``base_url``'s ``/tokenize`` gives it
    under the model's chat template; a prompt without messages is returned as it is."""
    if prompt.messages is None:
        return prompt
    body: dict[str, object] = {"messages": [dict(m) for m in prompt.messages],
                               "add_generation_prompt": True}
    if model is not None:
        body["model"] = model
    url = base_url.rstrip("/") + "/tokenize"
    try:
        out = await transport.post_json(url, body, TOKENIZE_TIMEOUT_S)
    except (RequestError, ReplicaDownError) as exc:
        raise ReplicaError(f"{url}: cannot tokenize chat prompt {prompt.prompt_id!r} ({exc}); "
                           "moves need the chat template applied by the server") from None
    tokens = out.get("tokens") if isinstance(out, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ReplicaError(f"{url}: /tokenize answered without a 'tokens' list for prompt "
                           f"{prompt.prompt_id!r}")
    return replace(prompt, messages=None, token_ids=tuple(tokens))


async def tokenize_all(transport: Transport, base_url: str, model: str | None,
                       prompts: Sequence[PromptInput]) -> list[PromptInput]:
    """``tokenize_messages`` for each prompt, in order."""
    import asyncio

    return list(await asyncio.gather(
        *(tokenize_messages(transport, base_url, model, p) for p in prompts)))
