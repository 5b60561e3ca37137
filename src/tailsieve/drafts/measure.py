"""Measure acceptance per draft source and per ``k`` on a recorded trace.

``measure_acceptance("smollm2-math")`` replays every response of the shipped recorded trace
against each draft source (exact-match replay, see ``replay``) and returns an
``AcceptanceTable``: per source and per ``k`` (the group's responses co-located on one server)
the mean tokens per verify step ``tau`` (bonus token included), the acceptance rate per drafted
token, and both by position in the response. ``to_package_dict`` gives the form the throughput
model's acceptance presets are read in (``tailsieve/model/data/acceptance-*.json``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tailsieve.drafts.group import DraftConfig, DraftSource, Group
from tailsieve.drafts.ngram import NgramSource
from tailsieve.drafts.replay import POSITION_BUCKETS, ReplayStats, bucket_label
from tailsieve.drafts.rhymerl_epoch import RhymeRLEpochSource
from tailsieve.drafts.seer_group import SeerGroupSource
from tailsieve.drafts.suffix_finished import SuffixFinishedSource
from tailsieve.drafts.suffix_running import SuffixRunningSource
from tailsieve.drafts.suffix_siblings import SuffixSiblingsSource
from tailsieve.drafts.trace_groups import trace_groups

K_VALUES: tuple[int, ...] = (1, 2, 4, 8)
SOURCES: dict[str, Callable[[], DraftSource]] = {
    "ngram": NgramSource,
    "suffix-running": SuffixRunningSource,
    "suffix-finished": SuffixFinishedSource,
    "suffix-siblings": SuffixSiblingsSource,
    "seer-group": SeerGroupSource,
    "rhymerl-epoch": RhymeRLEpochSource,
}
SOURCE_HELP: dict[str, str] = {
    "ngram": "prompt lookup over the request's prompt and tokens (vLLM ngram)",
    "suffix-running": "lockstep replay: k co-located siblings decoding together, each one's "
                      "tokens in the server's tree as sampled (vLLM suffix as arctic-inference "
                      "codes it)",
    "suffix-finished": "lockstep replay: the same, a sibling entering the server's tree only "
                       "once finished (as arctic-inference's docs describe it)",
    "suffix-siblings": "vLLM suffix with k - 1 siblings finished on the server: own tree plus "
                       "their complete responses (the simulator's server tree)",
    "seer-group": "the other independently sampled siblings' complete responses (Seer's group "
                  "drafter, wherever they ran)",
    "rhymerl-epoch": "the same prompt's previous-epoch responses (RhymeRL)",
}
SIMULATOR_PLACEMENT: dict[str, str] = {  # what the throughput model reads (model.acceptance)
    "ngram": "none", "suffix-siblings": "server", "seer-group": "none", "rhymerl-epoch": "none"}


@dataclass(slots=True)
class AcceptanceTable:
    """Replay counts per source and ``k``; ``tau(source, k)`` is the headline figure."""

    name: str
    config: DraftConfig
    results: dict[str, dict[int, ReplayStats]]
    provenance: dict[str, object] = field(default_factory=dict)

    def tau(self, source: str, k: int) -> float:
        """Mean tokens per verify step of ``source`` with ``k`` siblings per server."""
        return self.results[source][k].total().tau

    def to_package_dict(self) -> dict[str, object]:
        """``{"name", "provenance", "max_spec_tokens", "sources": {source: {"k": tau}},
        "drafted": {source: {"k": mean drafted tokens per verify step}},
        "placement": {source: "none" | "server"}}``: the sources the simulator reads
        (``SIMULATOR_PLACEMENT``; a placement-free one at its smallest ``k``), cells with no
        verify step left out."""
        sim = {s: {k: st.total() for k, st in by_k.items() if st.total().steps}
               for s, by_k in self.results.items() if s in SIMULATOR_PLACEMENT}
        sim = {s: (cells if SIMULATOR_PLACEMENT[s] == "server" else dict(list(cells.items())[:1]))
               for s, cells in sim.items() if cells}
        return {"name": self.name, "provenance": self.provenance,
                "max_spec_tokens": self.config.max_spec_tokens,
                "sources": {s: {str(k): round(t.tau, 4) for k, t in cells.items()}
                            for s, cells in sim.items()},
                "drafted": {s: {str(k): round(t.drafted / t.steps, 4) for k, t in cells.items()}
                            for s, cells in sim.items()},
                "placement": {s: SIMULATOR_PLACEMENT[s] for s in sim}}

    def to_dict(self) -> dict[str, object]:
        """Everything: settings, provenance, and per source and ``k`` the counts by position."""
        return {"name": self.name, "provenance": self.provenance,
                "config": self.config.to_dict(),
                "results": {s: {str(k): st.to_dict() for k, st in by_k.items()}
                            for s, by_k in self.results.items()}}

    def to_markdown(self) -> str:
        """The table: tau and acceptance per source and ``k``, tau by position."""
        labels = [bucket_label(lo, hi) for lo, hi in POSITION_BUCKETS]
        head = ("| source | k | tau (tokens / verify step) | accepted / drafted | "
                "steps with a draft | " + " | ".join(f"tau at {b}" for b in labels) + " |")
        rows = [head, "|" + "---|" * (5 + len(labels))]
        for s, by_k in self.results.items():
            for k, st in by_k.items():
                tot = st.total()
                if not tot.steps:
                    rows.append(f"| {s} | {k} | - (no response has {k - 1} independent "
                                "siblings) |" + " |" * (2 + len(labels)))
                    continue
                rows.append(f"| {s} | {k} | {tot.tau:.3f} | {tot.acceptance_rate:.3f} | "
                            f"{tot.draft_rate:.3f} | "
                            + " | ".join(f"{b.tau:.3f}" for b in st.buckets) + " |")
        return "\n".join(rows) + "\n"


def measure_acceptance(
    trace: str | Path = "smollm2-math",
    *,
    config: DraftConfig | None = None,
    sources: Sequence[str] | None = None,
    k_values: Sequence[int] = K_VALUES,
    prompt_ids: str | Path | None = None,
    max_prompts: int | None = None,
    name: str | None = None,
    provenance: dict[str, object] | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
) -> AcceptanceTable:
    """Replay ``trace`` against each of ``sources`` (default all of ``SOURCES``) for each
    ``k``; a source that does not depend on ``k`` is replayed once and its counts repeated.

    ``prompt_ids``: JSON file of the prompts' token ids (default: the shipped one for a shipped
    trace). ``max_prompts``: replay the first prompts only (a quick look). ``workers`` > 1
    replays the (source, k) cells in that many processes."""
    cfg = config or DraftConfig()
    names = list(sources) if sources is not None else list(SOURCES)
    unknown = [s for s in names if s not in SOURCES]
    if unknown:
        raise ValueError(f"unknown draft source(s) {unknown}; known: {sorted(SOURCES)}")
    ks = sorted(set(k_values))
    if not ks or ks[0] < 1:
        raise ValueError(f"k values must be >= 1, got {list(k_values)}")
    groups = trace_groups(trace, prompt_ids, max_prompts)
    jobs = [(s, k) for s in names for k in (ks if SOURCES[s]().depends_on_k else ks[:1])]
    done: dict[tuple[str, int], ReplayStats] = {}
    if workers > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
            futures = {pool.submit(_replay_cell, s, groups, k, cfg): (s, k) for s, k in jobs}
            for fut in as_completed(futures):
                done[futures[fut]], secs = fut.result()
                _report(progress, futures[fut], done[futures[fut]], secs)
    else:
        for s, k in jobs:
            done[(s, k)], secs = _replay_cell(s, groups, k, cfg)
            _report(progress, (s, k), done[(s, k)], secs)
    results: dict[str, dict[int, ReplayStats]] = {
        s: {k: done[(s, k if SOURCES[s]().depends_on_k else ks[0])] for k in ks} for s in names}
    prov: dict[str, object] = {
        "trace": str(trace), "groups": len(groups),
        "responses": sum(len(g.responses) for g in groups),
        "prompt_ids": any(g.prompt_ids for g in groups),
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d"),
        "method": "exact-match replay of the recorded samples (one-hot drafts); "
                  "co-located siblings decode in lockstep from a common start "
                  "(suffix-running, suffix-finished)",
        "k": "suffix-running, suffix-finished: the group's responses co-located on one server "
             "(the response itself included); suffix-siblings: 1 + the siblings complete in "
             "the server's tree",
        "sources": {s: SOURCE_HELP[s] for s in names},
        "notes": "tau includes the bonus token; token 0 comes from prefill (no draft); suffix "
                 "sources draft from the request's own prompt and tokens too (arctic-inference's "
                 "per-request tree), best score wins; siblings are co-located in order of "
                 "(recording server, sample); seer-group and suffix-siblings draft only from "
                 "siblings sampled independently of the response (Group.independent)",
        **(provenance or {}),
    }
    return AcceptanceTable(name or Path(str(trace)).name.split(".")[0], cfg, results, prov)


def _replay_cell(source_name: str, groups: Sequence[Group], k: int,
                 config: DraftConfig) -> tuple[ReplayStats, float]:
    t0 = time.perf_counter()
    source = SOURCES[source_name]()
    total = ReplayStats()
    for g in groups:
        total.add(source.replay_group(g, k, config))
    return total, time.perf_counter() - t0


def _report(progress: Callable[[str], None] | None, cell: tuple[str, int],
            stats: ReplayStats, secs: float) -> None:
    if progress is not None:
        progress(f"{cell[0]} k={cell[1]}: tau {stats.total().tau:.3f} ({secs:.0f} s)")
