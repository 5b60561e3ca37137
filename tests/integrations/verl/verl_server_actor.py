"""A verl rollout server actor without a GPU: verl's server-actor interface over HTTP.

verl's ``vLLMHttpServer`` runs the engine in-process on a GPU. This actor keeps the same
interface (``generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput``,
``get_rollout_config``, ``get_server_address``, ``set_global_steps``, ``abort_all_requests``,
``resume_generation``) and the same semantics (the default ``max_tokens``, clamping to the
model's length, ``logprobs`` as a flag, ``stop`` and ``length`` both reported as
``completed``, an abort as ``aborted``, requests parked while generation is paused, the prefix
hit in ``num_cached_tokens``), and sends each request to a vLLM-compatible HTTP server: the
emulator or a real vLLM CPU server. For a distillation teacher (``prompt_logprobs``) it
returns per-token prompt log-probs in verl's layout.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

import aiohttp
from verl.workers.rollout.replica import TokenOutput

HTTP_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "ignore_eos",
               "stop_token_ids", "min_tokens", "seed", "stop")


def teacher_logprob(token: int) -> float:
    """The emulated teacher's log-prob of a prompt token (deterministic)."""
    return -0.1 * (1 + int(token) % 7)


class HttpServerActor:
    """verl's server-actor interface over ``base_url`` (``/v1/completions``); calls are
    recorded in ``log`` (a ``CallLog`` actor) under ``name``."""

    def __init__(self, base_url: str, rollout: dict[str, Any], model: str, name: str,
                 log: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.rollout = dict(rollout)
        self.model = model
        self.name = name
        self.log = log
        self.global_steps: int | None = None
        self._paused = False
        self._resume = asyncio.Event()
        self._resume.set()
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._session: aiohttp.ClientSession | None = None

    def get_rollout_config(self) -> dict[str, Any]:
        return dict(self.rollout)

    def get_server_address(self) -> tuple[str, int]:
        u = urlparse(self.base_url)
        return str(u.hostname), int(u.port or 80)

    def set_global_steps(self, steps: int) -> None:
        self.global_steps = steps

    def num_running(self) -> int:
        """Requests generating now (sent to the server, not yet answered)."""
        return len(self._running)

    async def abort_all_requests(self, reset_prefix_cache: bool = True) -> dict[str, Any]:
        """Pause admission and abort what runs (as verl does around a weight sync)."""
        self._paused = True
        self._resume.clear()
        ids = list(self._running)
        for task in self._running.values():
            task.cancel()
        return {"aborted_count": len(ids), "request_ids": ids}

    async def resume_generation(self) -> None:
        self._paused = False
        self._resume.set()

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str, image_data: Any = None, video_data: Any = None,
                       audio_data: Any = None, mm_processor_kwargs: Any = None,
                       priority: int = 0) -> TokenOutput:
        prompt = [int(t) for t in prompt_ids]
        sp = dict(sampling_params)
        if self.log is not None:
            await self.log.start.remote(self.name, request_id, {
                "prompt_ids": prompt, "sampling": dict(sp), "priority": priority,
                "image_data": image_data is not None})
        while self._paused:
            await self._resume.wait()
        body = self._body(prompt, sp)
        task = asyncio.ensure_future(self._post(body))
        self._running[request_id] = task
        try:
            data = await task
        except asyncio.CancelledError:
            if task.cancelled() and not _current_cancelled():
                out = TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted",
                                  extra_fields={"global_steps": self.global_steps})
                await self._finish(request_id, out)
                return out
            raise
        finally:
            self._running.pop(request_id, None)
        out = self._output(prompt, sp, body, data)
        await self._finish(request_id, out)
        return out

    async def _finish(self, request_id: str, out: TokenOutput) -> None:
        if self.log is not None:
            await self.log.finish.remote(self.name, request_id, list(out.token_ids),
                                         out.stop_reason)

    def _body(self, prompt: list[int], sp: dict[str, Any]) -> dict[str, Any]:
        r = self.rollout
        if "max_tokens" in sp:
            max_tokens = int(sp.pop("max_tokens"))
        elif "max_new_tokens" in sp:
            max_tokens = int(sp.pop("max_new_tokens"))
        else:
            max_tokens = min(r["response_length"],
                             r["prompt_length"] + r["response_length"] - len(prompt))
        room = r["max_model_len"] - len(prompt)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt)} tokens leaves no room")
        max_tokens = max(1, min(max_tokens, room))
        sp.setdefault("repetition_penalty", r.get("repetition_penalty", 1.0))
        sp.setdefault("ignore_eos", r.get("ignore_eos", False))
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "return_token_ids": True}
        body.update({k: sp[k] for k in HTTP_FIELDS if sp.get(k) is not None})
        if sp.get("logprobs"):
            body["logprobs"] = 0
        return body

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        async with self._session.post(self.base_url + "/v1/completions", json=body) as resp:
            data = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data}")
            return dict(data)

    def _output(self, prompt: list[int], sp: dict[str, Any], body: dict[str, Any],
                data: dict[str, Any]) -> TokenOutput:
        choice = data["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        lps = None
        if body.get("logprobs") is not None:
            lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        finish = choice.get("finish_reason")
        stop = "aborted" if finish == "abort" else (
            "completed" if finish in ("stop", "length") else finish)
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        extra: dict[str, Any] = {"global_steps": self.global_steps,
                                 "num_cached_tokens": details.get("cached_tokens")}
        if sp.get("prompt_logprobs") is not None:
            extra["prompt_ids"] = [[t] for t in prompt[1:]] + [[0]]
            extra["prompt_logprobs"] = [[teacher_logprob(t)] for t in prompt[1:]] + [[0.0]]
        return TokenOutput(token_ids=ids, log_probs=lps, stop_reason=stop, num_preempted=0,
                           extra_fields=extra)


def _current_cancelled() -> bool:
    task = asyncio.current_task()
    return bool(task is not None and task.cancelling())
