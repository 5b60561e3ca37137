"""The one test fake of the engine seam: in-memory replicas that answer as vLLM servers do.

``StubTransport`` (``stub.transport``) is a ``Transport`` whose requests take a scripted length
(``length_of``) and scripted faults (``StubFault``); with a ``model`` (``StubModel``,
``stub.model``) its replicas generate by a deterministic greedy model instead, with prefix
caches, speeds, ``kill`` / ``revive`` and a call log. ``StubPieceRunner`` (``stub.runner``) is
the engine client (``HttpPieceRunner``, its wire code run) over such replicas.
"""

from tailsieve.runtime.stub.model import VOCAB, VOCAB_BASE, StubCall, StubModel
from tailsieve.runtime.stub.runner import StubPieceRunner
from tailsieve.runtime.stub.transport import (
    PROMPT_BASE,
    StubFault,
    StubLog,
    StubTransport,
    prompt_ids,
    token_at,
)

__all__ = ["PROMPT_BASE", "VOCAB", "VOCAB_BASE", "StubCall", "StubFault", "StubLog", "StubModel",
           "StubPieceRunner", "StubTransport", "prompt_ids", "token_at"]
