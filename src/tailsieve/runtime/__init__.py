"""The live runtime: TailSieve against real (or emulated) inference servers, one room a concept.

- ``engine``: the engine client (the ``PieceRunner`` seam, vLLM and SGLang over HTTP, faults).
- ``execution``: what every front door runs on (chains of pieces, the piece loop, health,
  stalls, move settings, the ``auto`` profile).
- ``step``: the single-turn front door (``TailSieveRollout``, ``LiveExecutor``, its rebalancer).
- ``sessions``: the multi-turn front door (``SessionGateway``, agentic rollouts).
- ``proxy``: the HTTP proxy. ``cluster``, ``emulator``, ``stub``: fleets, the emulated replica,
  the test fake. ``launcher``, ``profiler`` (measuring) and ``profile_fit`` (fitting), ``demo``:
  local servers, profiles, the demo.
"""
