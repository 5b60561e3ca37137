"""A pool's speculation as the engines take it at launch: vLLM and SGLang flags.

A pool spec is ``none`` or ``METHOD:DEPTH[:ACCEPTANCE][,KEY=VALUE...]``: the method, the draft
depth ``d`` (vLLM's ``num_speculative_tokens``), optionally the acceptance rate the throughput
model assumes (not an engine flag), and engine options. Methods:

===========  ======================================  =====================================
method       vLLM ``--speculative-config``           SGLang ``--speculative-algorithm``
===========  ======================================  =====================================
``ngram``    ``ngram`` (prompt lookup; window        ``NGRAM`` (one trie per worker, CUDA
             ``prompt_lookup_min`` 1 ..              only), a chain: BFS breadth 1,
             ``prompt_lookup_max`` 4 unless given)   ``d + 1`` draft tokens
``suffix``   ``suffix`` (one tree per server over    none (``NGRAM`` is the nearest)
             its responses; needs arctic-inference)
``mtp``      ``mtp``                                 ``NEXTN``
``eagle``    ``eagle`` (drafter ``model=PATH``)      ``EAGLE`` (``model=PATH``)
``eagle3``   ``eagle3`` (drafter ``model=PATH``)     ``EAGLE3`` (``model=PATH``)
``dflash``   ``dflash`` (drafter ``model=PATH``)     none
===========  ======================================  =====================================

Options (``KEY=VALUE``): ``model`` (drafter path); for vLLM ``ngram``: ``prompt_lookup_min``,
``prompt_lookup_max``; for vLLM ``suffix``: ``suffix_decoding_max_tree_depth``,
``suffix_decoding_max_cached_requests``, ``suffix_decoding_max_spec_factor``,
``suffix_decoding_min_token_prob`` (vLLM's ``SpeculativeConfig`` fields, checked against vLLM
0.32 by ``tests/runtime/test_spec_flags.py``); for SGLang ``NGRAM``:
``ngram_max_bfs_breadth``. vLLM's CPU backend refuses speculation, so these flags are for GPU
servers (docs/speculation.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tailsieve.errors import ConfigError
from tailsieve.model.speculative import SpecConfig, SpecMethod

METHODS: tuple[str, ...] = ("none", "ngram", "suffix", "mtp", "eagle", "eagle3", "dflash")
NEEDS_MODEL: frozenset[str] = frozenset({"eagle", "eagle3", "dflash"})
SGLANG_ALGORITHMS: dict[str, str] = {"ngram": "NGRAM", "mtp": "NEXTN", "eagle": "EAGLE",
                                     "eagle3": "EAGLE3"}
NGRAM_DEFAULT_WINDOW = (1, 4)  # the window the measured acceptance table used
_INT, _FLOAT = int, float
VLLM_OPTIONS: dict[str, dict[str, type]] = {
    "ngram": {"prompt_lookup_min": _INT, "prompt_lookup_max": _INT},
    "suffix": {"suffix_decoding_max_tree_depth": _INT,
               "suffix_decoding_max_cached_requests": _INT,
               "suffix_decoding_max_spec_factor": _FLOAT,
               "suffix_decoding_min_token_prob": _FLOAT},
}
SGLANG_OPTIONS: dict[str, dict[str, type]] = {"ngram": {"ngram_max_bfs_breadth": _INT}}
# throughput-model stand-ins for methods SpecConfig does not name
_MODEL_METHOD = {"suffix": SpecMethod.NGRAM, "eagle3": SpecMethod.EAGLE}


@dataclass(frozen=True, slots=True)
class PoolSpeculation:
    """One pool's speculation: method, draft depth, drafter model, engine options."""

    method: str = "none"
    num_speculative_tokens: int = 0
    acceptance_rate: float | None = None  # for the throughput model only
    model: str | None = None
    options: tuple[tuple[str, int | float], ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"unknown speculative method {self.method!r}; choose "
                              f"{', '.join(METHODS)}")
        if self.method == "none":
            if self.num_speculative_tokens or self.model or self.options:
                raise ConfigError("speculative method 'none' takes no depth or options")
            return
        if self.num_speculative_tokens < 1:
            raise ConfigError(f"method {self.method!r} needs a depth >= 1, e.g. "
                              f"{self.method}:4")
        allowed = {**VLLM_OPTIONS.get(self.method, {}), **SGLANG_OPTIONS.get(self.method, {})}
        for key, value in self.options:
            if key not in allowed:
                raise ConfigError(f"method {self.method!r} takes no option {key!r}"
                                  + (f"; it takes {', '.join(sorted(allowed))}"
                                     if allowed else ""))
            if value < 0:
                raise ConfigError(f"option {key}={value} must be >= 0")
        lo, hi = self._ngram_window()
        if self.method == "ngram" and not 1 <= lo <= hi:
            raise ConfigError(f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got {lo}, {hi}")

    @classmethod
    def parse(cls, text: str) -> PoolSpeculation:
        """``none`` or ``METHOD:DEPTH[:ACCEPTANCE][,KEY=VALUE...]``."""
        head, *opts = [p.strip() for p in text.strip().split(",")]
        parts = head.lower().split(":")
        method = parts[0]
        if method == "none":
            if (len(parts) > 1 and parts[1] not in ("", "0")) or opts:
                raise ConfigError("speculative method 'none' takes no depth or options")
            return cls()
        if method not in METHODS:
            raise ConfigError(f"unknown speculative method {method!r}; choose "
                              f"{', '.join(METHODS)}")
        if len(parts) < 2 or not parts[1]:
            raise ConfigError(f"speculative config {text!r} needs a depth, e.g. {method}:4")
        try:
            depth = int(parts[1])
            acc = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            raise ConfigError(f"speculative config {text!r}: depth must be an integer and "
                              "acceptance a number") from None
        model: str | None = None
        options: list[tuple[str, int | float]] = []
        types = {**VLLM_OPTIONS.get(method, {}), **SGLANG_OPTIONS.get(method, {})}
        for opt in opts:
            key, sep, value = opt.partition("=")
            key = key.strip()
            if not sep or not value:
                raise ConfigError(f"speculative option {opt!r}: expected KEY=VALUE")
            if key == "model":
                model = value
                continue
            kind = types.get(key)
            if kind is None:
                raise ConfigError(f"method {method!r} takes no option {key!r}"
                                  + (f"; it takes model, {', '.join(sorted(types))}"
                                     if types else "; it takes model"))
            try:
                options.append((key, kind(value)))
            except ValueError:
                raise ConfigError(f"speculative option {opt!r}: not a {kind.__name__}") from None
        return cls(method, depth, acc, model, tuple(options))

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def _require_model(self) -> None:
        """A real engine cannot start these methods without the drafter's weights (an
        emulated replica can: it only prices the method)."""
        if self.method in NEEDS_MODEL and not self.model:
            raise ConfigError(f"method {self.method!r} needs its drafter: "
                              f"{self.method}:{self.num_speculative_tokens},model=PATH")

    def _option(self, key: str) -> int | float | None:
        return next((v for k, v in self.options if k == key), None)

    def _ngram_window(self) -> tuple[int, int]:
        lo, hi = self._option("prompt_lookup_min"), self._option("prompt_lookup_max")
        if lo is None and hi is None:
            return NGRAM_DEFAULT_WINDOW
        lo = hi if lo is None else lo
        hi = lo if hi is None else hi
        return int(lo or 0), int(hi or 0)

    # ------------------------------------------------------------------ vLLM
    def vllm_config(self) -> dict[str, object] | None:
        """vLLM's ``SpeculativeConfig`` fields (None when disabled)."""
        if not self.enabled:
            return None
        self._require_model()
        cfg: dict[str, object] = {"method": self.method,
                                  "num_speculative_tokens": self.num_speculative_tokens}
        if self.model:
            cfg["model"] = self.model
        if self.method == "ngram":
            cfg["prompt_lookup_min"], cfg["prompt_lookup_max"] = self._ngram_window()
        for key, value in self.options:
            if key in VLLM_OPTIONS.get(self.method, {}) and key not in cfg:
                cfg[key] = value
        return cfg

    def vllm_args(self) -> list[str]:
        """``["--speculative-config", JSON]`` (empty when disabled)."""
        cfg = self.vllm_config()
        return [] if cfg is None else ["--speculative-config", json.dumps(cfg)]

    # ------------------------------------------------------------------ SGLang
    def sglang_args(self) -> list[str]:
        """SGLang's ``--speculative-*`` flags (empty when disabled). A chain of ``d`` drafted
        tokens is ``--speculative-num-steps d --speculative-eagle-topk 1
        --speculative-num-draft-tokens d+1`` (the verified tokens include the last one)."""
        if not self.enabled:
            return []
        algo = SGLANG_ALGORITHMS.get(self.method)
        if algo is None:
            hint = " (its NGRAM keeps one trie per worker: use ngram)" if \
                self.method == "suffix" else ""
            raise ConfigError(f"SGLang has no speculative method {self.method!r}{hint}")
        self._require_model()
        d = self.num_speculative_tokens
        argv = ["--speculative-algorithm", algo]
        if algo == "NGRAM":
            breadth = self._option("ngram_max_bfs_breadth")
            argv += ["--speculative-num-draft-tokens", str(d + 1),
                     "--speculative-ngram-max-bfs-breadth", str(int(breadth or 1))]
        else:
            argv += ["--speculative-num-steps", str(d), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(d + 1)]
        if self.model:
            argv += ["--speculative-draft-model-path", self.model]
        return argv

    # ------------------------------------------------------------------ model
    def spec_config(self) -> SpecConfig:
        """The throughput model's view (``suffix`` priced as ``ngram``, ``eagle3`` as
        ``eagle``, each with its default acceptance unless one is given)."""
        if not self.enabled:
            return SpecConfig()
        method = _MODEL_METHOD.get(self.method) or SpecMethod(self.method)
        return SpecConfig(method=method, num_speculative_tokens=self.num_speculative_tokens,
                          acceptance_rate=self.acceptance_rate, model=self.model)
