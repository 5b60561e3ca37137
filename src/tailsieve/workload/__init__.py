"""Workloads: length traces (schema, I/O, validation), workload models (replay, resampling,
calibrated synthetic presets), the tail-strength transform, analytics and capture rate; and
multi-turn trajectories (turn traces, calibrated agentic presets).

Typical use::

    from tailsieve.workload import load_workload, prompt_stream
    wl = load_workload("paper-math", num_prompts=1000, seed=0)   # or "aime-r1", "aime", a path
    prompts = prompt_stream(wl, 64, rng=np.random.default_rng(0))
    lengths = wl.group_lengths(prompts[0], step=0, n=8, rng=np.random.default_rng(1))
"""

from tailsieve.workload.agentic_presets import (
    AGENTIC_PRESETS,
    AgenticPreset,
    LogNormal,
    agentic_preset,
)
from tailsieve.workload.analytics import (
    VarianceDecomposition,
    auc,
    cross_checkpoint_auc,
    percentiles,
    split_half_auc,
    tail_auc,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.calibrate import CalibrationTargets, calibrate, fit_synthetic
from tailsieve.workload.capture import CaptureConfig, CaptureResult, capture_rates
from tailsieve.workload.io import read_trace, write_trace
from tailsieve.workload.presets import PRESETS, load_workload, preset
from tailsieve.workload.summary import trace_stats
from tailsieve.workload.synthetic import SyntheticParams, SyntheticWorkload
from tailsieve.workload.trace import Trace
from tailsieve.workload.transform import (
    TAIL_PRESETS,
    fit_tail_transform,
    transform_lengths,
    transform_trace,
)
from tailsieve.workload.turn_io import read_turn_trace, write_turn_trace
from tailsieve.workload.turn_stats import turn_trace_stats
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace
from tailsieve.workload.workload_model import (
    ReplayWorkload,
    ResampleWorkload,
    Workload,
    iter_prompts,
    prompt_stream,
)

__all__ = [
    "AGENTIC_PRESETS",
    "PRESETS",
    "TAIL_PRESETS",
    "AgenticPreset",
    "CalibrationTargets",
    "CaptureConfig",
    "CaptureResult",
    "LogNormal",
    "ReplayWorkload",
    "ResampleWorkload",
    "SyntheticParams",
    "SyntheticWorkload",
    "Trace",
    "Trajectory",
    "Turn",
    "TurnTrace",
    "VarianceDecomposition",
    "Workload",
    "agentic_preset",
    "auc",
    "calibrate",
    "capture_rates",
    "cross_checkpoint_auc",
    "fit_synthetic",
    "fit_tail_transform",
    "iter_prompts",
    "load_workload",
    "percentiles",
    "preset",
    "prompt_stream",
    "read_trace",
    "read_turn_trace",
    "split_half_auc",
    "tail_auc",
    "trace_stats",
    "transform_lengths",
    "transform_trace",
    "truncated_fraction",
    "turn_trace_stats",
    "variance_decomposition",
    "write_trace",
    "write_turn_trace",
]
