"""``StubPieceRunner``: the engine client over stub replicas with a deterministic model."""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.stub.model import StubModel
from tailsieve.runtime.stub.transport import StubTransport


class StubPieceRunner(HttpPieceRunner):
    """``num_replicas`` stub replicas (``http://stub-<i>``) under the engine client: a
    ``StubTransport`` with a ``model`` (``stub``); ``interrupts``: pieces are streamed, so a
    move ends one at once; ``kill`` / ``revive`` replica ``i``."""

    def __init__(
        self,
        num_replicas: int,
        model: StubModel | None = None,
        seconds_per_token: float | Sequence[float] = 0.0,
        batch_slowdown: float = 0.0,
        interrupts: bool = False,
    ) -> None:
        spt = ([float(seconds_per_token)] * num_replicas
               if isinstance(seconds_per_token, int | float) else list(seconds_per_token))
        if len(spt) != num_replicas or min(spt) < 0 or batch_slowdown < 0:
            raise ConfigError("seconds_per_token: one value >= 0 (or one per replica); "
                              "batch_slowdown >= 0")
        urls = [f"http://stub-{i}" for i in range(num_replicas)]
        self.stub = StubTransport(lambda p, s: 0, batch_slowdown=batch_slowdown,
                                  model=model or StubModel(),
                                  replica_speeds=dict(zip(urls, spt, strict=True)))
        super().__init__(urls, model="stub", transport=self.stub, stream=interrupts,
                         max_retries=0)
        self.calls, self.replicas = self.stub.calls, list(self.stub.replicas.values())
        self.kill, self.revive = self.stub.kill, self.stub.revive

    @property
    def streams_sinks(self) -> bool:
        return False

    @property
    def num_interrupts(self) -> int:
        return self.stub.num_interrupts
