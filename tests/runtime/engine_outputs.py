"""Engine outputs compared with vLLM's semantics: ``check_logprobs_close``.

Greedy decoding on vLLM is not batch-invariant: another batch, or a prefill where the
reference decoded step by step, changes the low bits of the logits (other kernels, other
summation orders: AMX bf16 on an Intel Xeon, AVX-512 on AMD), and a near-tie flips the argmax.
So two correct runs may diverge at some token and differ after it. vLLM's own tests
(``tests/models/utils.py::check_logprobs_close``) accept that and check what must hold:

* the tokens are equal up to the first divergence;
* at the divergence, each side's token is among the other side's top-k logprobs (a near-tie,
  not a wrong token);
* here also: the logprobs of the common prefix agree within ``atol`` nats, a tolerance that
  holds across CPU kernels (bf16 weights; 0.5 nat: a real difference in the prefix is a
  wrong context, which moves a logprob by whole nats).

After the divergence nothing is compared: the contexts differ. The router's own guarantees
(the splice, exactly-once) are checked exactly on the wire (``vllm_wire``), not here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TOP_K = 5
LOGPROB_ATOL = 0.5


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """One response: token ids, their text pieces (the keys of ``top``), the sampled tokens'
    logprobs and the top-k logprobs at each position (text piece -> logprob)."""

    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    top: tuple[Mapping[str, float], ...]

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if not (len(self.tokens) == len(self.logprobs) == len(self.top) == n):
            raise ValueError(
                f"ragged output: {n} ids, {len(self.tokens)} tokens, {len(self.logprobs)} "
                f"logprobs, {len(self.top)} top-k maps (were logprobs requested?)")

    @classmethod
    def of_completion(cls, choice: Mapping[str, object]) -> EngineOutput:
        """From a vLLM completions choice asked with ``logprobs=k`` and ``return_token_ids``."""
        lp = choice["logprobs"]
        assert isinstance(lp, Mapping)
        ids = choice["token_ids"]
        assert isinstance(ids, list)
        return cls(tuple(ids), tuple(lp["tokens"]),
                   tuple(float(x) for x in lp["token_logprobs"]),
                   tuple(dict(t) for t in lp["top_logprobs"]))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Closeness:
    """What ``check_logprobs_close`` found: where the outputs diverge (None: never, within
    the shorter one) and the largest logprob difference over the common prefix."""

    divergence: int | None
    common: int
    max_logprob_diff: float


def check_logprobs_close(
    a: EngineOutput, b: EngineOutput, name_a: str = "a", name_b: str = "b",
    top_k: int = TOP_K, atol: float = LOGPROB_ATOL,
) -> Closeness:
    """Assert ``a`` and ``b`` are the same up to a near-tie (see the module docstring)."""
    n = min(len(a.token_ids), len(b.token_ids))
    div = next((i for i in range(n) if a.token_ids[i] != b.token_ids[i]), None)
    common = n if div is None else div
    diffs = [abs(a.logprobs[i] - b.logprobs[i]) for i in range(common)]
    worst = max(diffs, default=0.0)
    if worst > atol:
        i = diffs.index(worst)
        raise AssertionError(
            f"logprob of token {i} ({a.tokens[i]!r}) differs by {worst:.3f} > {atol} nats "
            f"between {name_a} ({a.logprobs[i]:.4f}) and {name_b} ({b.logprobs[i]:.4f}) "
            "before any divergence: a different context, not a kernel's rounding")
    if div is not None:
        for x, y, nx, ny in ((a, b, name_a, name_b), (b, a, name_b, name_a)):
            alts = _top(y.top[div], top_k)
            if x.tokens[div] not in alts:
                raise AssertionError(
                    f"at the first divergence (token {div}) {nx} chose {x.tokens[div]!r}, "
                    f"not in {ny}'s top-{top_k} {sorted(alts, key=alts.__getitem__)[::-1]}: "
                    f"{nx} {_show(x, div)} vs {ny} {_show(y, div)}")
    return Closeness(div, common, worst)


def _top(m: Mapping[str, float], k: int) -> dict[str, float]:
    return dict(sorted(m.items(), key=lambda kv: -kv[1])[:k])


def _show(o: EngineOutput, i: int) -> str:
    return repr("".join(o.tokens[max(0, i - 5) : i + 1]))


def check_all_close(
    got: Sequence[EngineOutput], want: Sequence[EngineOutput], name_a: str, name_b: str,
    **kw: float,
) -> list[Closeness]:
    """``check_logprobs_close`` pairwise."""
    assert len(got) == len(want)
    return [check_logprobs_close(g, w, name_a, name_b, **kw)  # type: ignore[arg-type]
            for g, w in zip(got, want, strict=True)]
