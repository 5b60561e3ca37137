"""Acceptance of speculative drafts: mean accepted tokens per verify step, by draft source.

``tau`` (mean tokens a request emits per verify step, the bonus token included, so
``tau >= 1``) depends on where the drafts come from. Only one kind of source depends on where
a response runs (``placement``):

- ``server``: a suffix tree kept by the server. vLLM's ``suffix`` method calls
  arctic-inference's ``SuffixDecodingCache`` (``vllm/v1/spec_decode/suffix_decoding.py``,
  vLLM 0.32): a tree per request over its prompt and generated tokens, plus one global tree
  per server over the responses it ran (FIFO, ``suffix_decoding_max_cached_requests`` = 10,000
  by default); each verify step keeps the higher-scoring of the two drafts. A sibling's tokens
  help only on the server where it ran. ``k`` = 1 + the group's siblings that have *finished*
  on the response's server. (``add_active_response`` also appends a running response's tokens
  to the global tree as they are sampled, but a sibling decoding in the same batch is never far
  ahead: replayed in lockstep it is worth < 1%, ``suffix-running`` in docs/speculation.md, so
  the model counts finished siblings only.)
- ``none``: everything else, one ``tau`` wherever the response runs: prompt lookup (the
  request's own context), a drafter model (EAGLE, MTP: no sibling enters), a group drafter that
  sees every sibling wherever it runs (Seer's grouped draft server), the previous epoch.

An ``AcceptanceCurve`` holds ``tau`` at a few ``k`` (``server``: interpolated linearly in
``log k``, clamped at the ends; ``none``: one point) and the mean number of drafted tokens each
step verifies (what the verify forward pays for). Curves are named presets:

- literature figures, cited (``seer``, ``tlt-eagle-tree``, ``rhymerl-epoch``, ``low``), none of
  them measured here and none placement-dependent;
- measured curves from package data files ``tailsieve/model/data/acceptance-<name>.json``
  (written by ``tailsieve acceptance measure``), named ``<name>:<source>``, e.g.
  ``smollm2-math:suffix-siblings``. ``load_acceptance_file`` reads any such file.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from tailsieve.errors import ConfigError

DEFAULT_DRAFT_YIELD = 0.5  # accepted / drafted tokens when a measurement gives no draft count
Placement = Literal["none", "server"]
PLACEMENTS: tuple[str, ...] = ("none", "server")
SERVER_SOURCES: frozenset[str] = frozenset({"suffix-siblings"})  # measured, k = 1 + finished
REPLAY_ONLY_SOURCES: frozenset[str] = frozenset({"suffix-running", "suffix-finished"})
# (lockstep replays: their k counts co-located siblings running together, a replay experiment,
# not the simulator's axis; the acceptance table shows them, the simulator does not read them)


@dataclass(frozen=True, slots=True)
class AcceptanceCurve:
    """Mean accepted tokens per verify step of one draft source (``server``: by the group's
    finished siblings on the response's server)."""

    name: str
    source: str  # draft source: ngram, suffix-siblings, seer-group, eagle-tree, ...
    tau_by_k: tuple[tuple[int, float], ...]  # (k, tau), k ascending, tau >= 1
    drafted_by_k: tuple[tuple[int, float], ...] = ()  # (k, drafted tokens per step); () = derived
    draft_cost: float = 0.0  # drafting, as a fraction of one target step (model drafters)
    max_spec_tokens: int = 8  # the most tokens drafted per step
    citation: str = ""  # where the numbers come from
    placement: Placement = "none"  # server: k = 1 + finished siblings on the server; none: any

    def __post_init__(self) -> None:
        if not self.tau_by_k:
            raise ConfigError(f"acceptance {self.name!r}: no (k, tau) points")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"acceptance {self.name!r}: placement must be one of "
                              f"{PLACEMENTS}, got {self.placement!r}")
        if self.placement == "none" and (len(self.tau_by_k) > 1 or len(self.drafted_by_k) > 1):
            raise ConfigError(
                f"acceptance {self.name!r}: a source whose drafts do not depend on where the "
                "response runs has one (k, tau) point; placement 'server' takes several")
        ks = [k for k, _ in self.tau_by_k]
        if ks != sorted(set(ks)) or ks[0] < 1:
            raise ConfigError(f"acceptance {self.name!r}: k must be ascending integers >= 1")
        if self.max_spec_tokens < 1:
            raise ConfigError(f"acceptance {self.name!r}: max_spec_tokens must be >= 1")
        for _, t in self.tau_by_k:
            if not (math.isfinite(t) and 1.0 <= t <= self.max_spec_tokens + 1):
                raise ConfigError(
                    f"acceptance {self.name!r}: tau must be in [1, max_spec_tokens + 1], got {t}")
        dk = [k for k, _ in self.drafted_by_k]
        if dk != sorted(set(dk)) or any(k < 1 for k in dk):
            raise ConfigError(f"acceptance {self.name!r}: drafted k must be ascending, >= 1")
        for _, d in self.drafted_by_k:
            if not (math.isfinite(d) and d >= 0.0):
                raise ConfigError(f"acceptance {self.name!r}: drafted tokens must be >= 0")
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0):
            raise ConfigError(f"acceptance {self.name!r}: draft_cost must be >= 0")

    @property
    def server_siblings(self) -> bool:
        """Whether acceptance grows with the group's finished siblings on the server."""
        return self.placement == "server" and len(self.tau_by_k) > 1

    def tau(self, k: float = 1.0) -> float:
        """Mean accepted tokens per verify step, ``k`` = 1 + the group's finished siblings on
        the server (ignored where placement is ``none``)."""
        return _interp_log(self.tau_by_k, k)

    def drafted(self, k: float = 1.0) -> float:
        """Mean drafted tokens each verify step checks: the measured count, else
        ``(tau - 1) / DEFAULT_DRAFT_YIELD`` capped at ``max_spec_tokens`` (and never below
        the accepted drafts ``tau - 1``)."""
        if self.drafted_by_k:
            return max(_interp_log(self.drafted_by_k, k), self.tau(k) - 1.0)
        t = self.tau(k)
        return max(t - 1.0, min(float(self.max_spec_tokens), (t - 1.0) / DEFAULT_DRAFT_YIELD))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "placement": self.placement,
                "tau_by_k": {str(k): t for k, t in self.tau_by_k},
                "drafted_by_k": {str(k): d for k, d in self.drafted_by_k},
                "draft_cost": self.draft_cost, "max_spec_tokens": self.max_spec_tokens,
                "citation": self.citation}


def _interp_log(points: tuple[tuple[int, float], ...], k: float) -> float:
    if k < 1:
        raise ConfigError(f"k (1 + finished siblings on the server) must be >= 1, got {k}")
    if len(points) == 1 or k <= points[0][0]:
        return float(points[0][1])
    if k >= points[-1][0]:
        return float(points[-1][1])
    for (k0, t0), (k1, t1) in itertools.pairwise(points):
        if k0 <= k <= k1:
            w = (math.log(k) - math.log(k0)) / (math.log(k1) - math.log(k0))
            return float(t0 + w * (t1 - t0))
    return float(points[-1][1])  # unreachable


LITERATURE: dict[str, AcceptanceCurve] = {
    "seer": AcceptanceCurve(
        "seer", "seer-group", ((1, 2.85),),
        citation="Seer (arXiv 2511.14617): mean accepted length 2.85 with its grouped draft "
                 "server, which drafts from every sibling of the group wherever it runs (1.70 "
                 "without the group); second-hand figures, not measured here. Independent of "
                 "placement: the baseline drafts as well"),
    "tlt-eagle-tree": AcceptanceCurve(
        "tlt-eagle-tree", "eagle-tree", ((1, 4.16),), drafted_by_k=((1, 15.0),),
        draft_cost=0.15, max_spec_tokens=16,
        citation="TLT (arXiv 2511.16665): per-batch speedup 3.62x at batch 1 falling to 1.70x "
                 "at batch 32; tau 4.16 with a 15-token tree and drafting at 15% of a step "
                 "reproduce both on the qwen3-4b-h100 profile (zero context); a drafter model, "
                 "independent of siblings"),
    "rhymerl-epoch": AcceptanceCurve(
        "rhymerl-epoch", "previous-epoch", ((1, 3.0),), drafted_by_k=((1, 8.0),),
        citation="RhymeRL (arXiv 2508.18588): ~93% of tokens recur between adjacent epochs; "
                 "taken as 3.0 accepted per step at 8 drafted (the geometric bound at 0.93 per "
                 "token would be 6.2); its history server sees every previous response"),
    "low": AcceptanceCurve(
        "low", "ngram", ((1, 1.15),), drafted_by_k=((1, 1.0),),
        citation="prompt lookup (n-gram) level: 1.15 accepted per step, one drafted token"),
}


def load_acceptance_file(path: str | Path | None = None, *, text: str | None = None,
                         ) -> dict[str, AcceptanceCurve]:
    """The curves of one measured file (``{"name", "provenance", "max_spec_tokens",
    "sources": {source: {k: tau}}, "drafted": {source: {k: tokens}} (optional),
    "placement": {source: "none" | "server"} (optional)}``), named ``<name>:<source>``.

    A source's placement is the file's, else ``server`` for ``SERVER_SOURCES`` and ``none``
    otherwise; a ``none`` source keeps its smallest ``k`` (its values must not differ).
    Lockstep replays (``REPLAY_ONLY_SOURCES``) are not read: their ``k`` is not the
    simulator's."""
    where = str(path) if path is not None else "acceptance data"
    try:
        data = json.loads(text if text is not None else Path(str(path)).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read acceptance data: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise ConfigError(f"{where}: needs an object with 'sources'")
    name = str(data.get("name") or Path(where).stem.removeprefix("acceptance-"))
    max_spec = int(data.get("max_spec_tokens", 8))
    drafted = data.get("drafted") or {}
    placements = data.get("placement") or {}
    prov = data.get("provenance")
    out: dict[str, AcceptanceCurve] = {}
    for source, by_k in data["sources"].items():
        if source in REPLAY_ONLY_SOURCES:
            continue
        place = placements.get(source, "server" if source in SERVER_SOURCES else "none")
        taus = _points(by_k, where)
        drafts = _points(drafted.get(source, {}), where) if isinstance(drafted, dict) else ()
        if place == "none":
            if len({round(t, 9) for _, t in taus}) > 1:
                raise ConfigError(f"{where}: source {source!r} varies with k; give it "
                                  "placement 'server' or one value")
            taus, drafts = taus[:1], drafts[:1]
        out[f"{name}:{source}"] = AcceptanceCurve(
            f"{name}:{source}", str(source), taus, drafts, max_spec_tokens=max_spec,
            citation=f"measured ({where}): {json.dumps(prov)[:200]}" if prov else
                     f"measured ({where})", placement=place)
    return out


def _points(by_k: Any, where: str) -> tuple[tuple[int, float], ...]:
    if not isinstance(by_k, dict):
        raise ConfigError(f"{where}: each source maps k to tau, got {by_k!r}")
    try:
        pts = sorted((int(k), float(v)) for k, v in by_k.items() if v is not None)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: bad (k, value) entry: {exc}") from exc
    return tuple(pts)


def measured_presets() -> dict[str, AcceptanceCurve]:
    """The measured curves shipped as package data (none until a measurement is committed)."""
    out: dict[str, AcceptanceCurve] = {}
    folder = resources.files("tailsieve.model").joinpath("data")
    if not folder.is_dir():
        return out
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith("acceptance-") and entry.name.endswith(".json"):
            out.update(load_acceptance_file(entry.name, text=entry.read_text()))
    return out


def acceptance_presets() -> dict[str, AcceptanceCurve]:
    """Every named curve: the literature's and the measured ones."""
    return {**LITERATURE, **measured_presets()}


def get_acceptance(name: str) -> AcceptanceCurve:
    """A preset by name, or every source of a measured file given as ``PATH.json:SOURCE``."""
    presets = acceptance_presets()
    if name in presets:
        return presets[name]
    path, _, source = name.rpartition(":")
    if path.endswith(".json") and Path(path).is_file():
        curves = load_acceptance_file(path)
        for curve in curves.values():
            if curve.source == source:
                return curve
        if source in REPLAY_ONLY_SOURCES:
            raise ConfigError(f"{path}: {source!r} is a lockstep replay, not a simulator "
                              "source; the server tree is 'suffix-siblings'")
        raise ConfigError(f"{path} has no source {source!r}")
    raise ConfigError(f"unknown acceptance preset {name!r}; choose from {', '.join(presets)}")
