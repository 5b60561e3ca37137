"""Named synthetic presets calibrated to published figures, and ``load_workload``.

=========== ============================================================== =====================
preset      calibrated to                                                  source
=========== ============================================================== =====================
paper-math  P50 1,160, P90 4,115 tokens; ~3% truncated at 16,384; prompt   paper §2.3, Table A.3,
            share of (log) length variance ~0.65; cross-checkpoint tail     docs: design,
            AUC > 0.95                                                     workloads
aime-r1     P50 7,598, P90 12,722; 2.2% truncated at 16,000; between-prompt ``aime-r1distill-1.5b-
            share of log-length variance 0.68                               lengths.csv``
=========== ============================================================== =====================

The parameters were produced by ``calibrate`` (see ``PRESET_TARGETS``) and are frozen here so a
preset never changes silently; tests check each preset still hits its targets.
"""

from __future__ import annotations

from pathlib import Path

from tailsieve.errors import ConfigError
from tailsieve.workload.calibrate import CalibrationTargets
from tailsieve.workload.io import read_trace, trace_suffix
from tailsieve.workload.shipped import AIME_TRACE_PATH, SHIPPED_MAX_TOKENS, SHIPPED_TRACES
from tailsieve.workload.synthetic import SyntheticParams, SyntheticWorkload
from tailsieve.workload.workload_model import ReplayWorkload, ResampleWorkload, Workload

PRESET_TARGETS: dict[str, CalibrationTargets] = {
    "paper-math": CalibrationTargets(
        1160,
        4115,
        0.03,
        0.70,
        16384,
        interaction_sigma_log=0.05,
        drift_sigma_log=0.03,
        runaway_prompt_coef=3.0,
    ),
    "aime-r1": CalibrationTargets(
        7598, 12721.7, 0.02223, 0.6789, 16000, interaction_sigma_log=0.05, drift_sigma_log=0.03
    ),
}

PRESETS: dict[str, SyntheticParams] = {
    "paper-math": SyntheticParams(
        median_tokens=1177.1,
        prompt_sigma_log=0.742,
        sample_sigma_log=0.5514,
        interaction_sigma_log=0.05,
        drift_sigma_log=0.03,
        runaway_prob=0.001402,
        runaway_prompt_coef=3.0,
        max_tokens=16384,
    ),
    "aime-r1": SyntheticParams(
        median_tokens=7673.8,
        prompt_sigma_log=0.3638,
        sample_sigma_log=0.2754,
        interaction_sigma_log=0.05,
        drift_sigma_log=0.03,
        upper_compression=0.2743,
        runaway_prompt_coef=1.5,
        max_tokens=16000,
    ),
}

# the AIME trace ships inside the package (workload/data, with its PROVENANCE.md)
AIME_TRACE_IN_REPO = AIME_TRACE_PATH


def aime_trace_path() -> Path:
    """The AIME trace shipped inside the package."""
    if not AIME_TRACE_PATH.is_file():
        raise ConfigError(f"AIME trace missing from the installed package: {AIME_TRACE_PATH}")
    return AIME_TRACE_PATH


DEFAULT_NUM_PROMPTS = 1000


def preset(name: str) -> SyntheticParams:
    """The frozen parameters of a preset (``paper-math`` or ``aime-r1``)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown workload preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def load_workload(
    name_or_path: str | Path,
    *,
    num_prompts: int = DEFAULT_NUM_PROMPTS,
    seed: int = 0,
    drift_sigma_log: float = 0.0,
    max_tokens: int | None = None,
) -> Workload:
    """A workload from a preset name or a trace file.

    * ``paper-math`` / ``aime-r1``: ``SyntheticWorkload`` with ``num_prompts`` prompts (``seed``);
    * ``aime``: the AIME trace shipped in the package (``workload/data``);
    * ``smollm2-math``: the shipped SmolLM2-135M-Instruct math trace (two epochs, so a
      ``ReplayWorkload``: step ``k`` replays epoch ``k mod 2``; ``max_tokens`` 1,024);
    * a ``.jsonl`` / ``.csv`` / ``.parquet`` path: one checkpoint => ``ResampleWorkload``
      (``drift_sigma_log``, drift seeded by ``seed``); several => ``ReplayWorkload``.
    """
    key = str(name_or_path)
    if key in PRESETS:
        return SyntheticWorkload(PRESETS[key], num_prompts=num_prompts, seed=seed)
    path = aime_trace_path() if key == "aime" else Path(key)
    if key in SHIPPED_TRACES and key != "aime" and not path.exists():
        path = SHIPPED_TRACES[key]
        if not path.is_file():
            raise ConfigError(f"shipped trace {key!r} missing from the installed package: {path}")
        max_tokens = SHIPPED_MAX_TOKENS.get(key) if max_tokens is None else max_tokens
    if not trace_suffix(path):
        raise ConfigError(
            f"unknown workload {key!r}: not a preset ({', '.join(PRESETS)}, "
            f"{', '.join(SHIPPED_TRACES)}) and not a .jsonl/.csv/.parquet trace path"
        )
    trace = read_trace(path)
    if trace.is_multi_checkpoint:
        return ReplayWorkload(trace, max_tokens=max_tokens)
    return ResampleWorkload(
        trace, drift_sigma_log=drift_sigma_log, drift_seed=seed, max_tokens=max_tokens
    )
