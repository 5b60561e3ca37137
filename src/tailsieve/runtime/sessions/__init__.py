"""The live session gateway: multi-turn sessions over live replicas (see ``gateway``)."""

from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import (
    HealthProbe,
    PieceOutput,
    PieceRequest,
    PieceRunner,
    sampling_dict,
    sampling_from_dict,
)
from tailsieve.runtime.execution.model_clock import ModelClock
from tailsieve.runtime.execution.result import GatewayStats, PieceSpan, ReplicaStat, TurnResult
from tailsieve.runtime.sessions.agentic import AgenticConfig, AgenticRollout, ToolFn
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.gateway import SessionGateway
from tailsieve.runtime.sessions.trajectory import (
    AgentGroup,
    AgenticBatch,
    AgentTrajectory,
    ToolCall,
    ToolResult,
    TurnRecord,
)

__all__ = [
    "AgentGroup",
    "AgentTrajectory",
    "AgenticBatch",
    "AgenticConfig",
    "AgenticRollout",
    "GatewayConfig",
    "GatewayStats",
    "HealthProbe",
    "HttpPieceRunner",
    "ModelClock",
    "PieceOutput",
    "PieceRequest",
    "PieceRunner",
    "PieceSpan",
    "ReplicaStat",
    "SessionGateway",
    "ToolCall",
    "ToolFn",
    "ToolResult",
    "TurnRecord",
    "TurnResult",
    "sampling_dict",
    "sampling_from_dict",
]
