"""The live runtime: TailSieve steps against real (or emulated) inference servers.

- ``rollout``: the trainer-facing API (``TailSieveRollout``, ``RolloutConfig``).
- ``executor``: ``LiveExecutor`` runs one ``StepPlan`` over HTTP (cutoff, aborts, faults).
- ``attempt`` / ``backends`` / ``transport``: requests, server dialects, the HTTP seam.
- ``launcher``: start/stop local vLLM replicas. ``replay``: forced lengths from a trace.
- ``observe``: step metrics, Prometheus, progress. ``stub``: in-memory fake replicas.
"""
