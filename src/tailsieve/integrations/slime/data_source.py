"""``TailSieveDataSource`` for ``--data-source-path tailsieve.integrations.slime.TailSieveDataSource``.

It wraps slime's own data source (``RolloutDataSourceWithBuffer`` unless
``tailsieve_base_data_source`` names another class) and adds TailSieve's session: the prompts
TailSieve carries between steps and its controller state. Differences from the wrapped source:

- ``add_samples`` restarts every sample from scratch before buffering it (slime would continue
  an aborted sample; a TailSieve-routed prompt must be regenerated whole);
- ``save``/``load`` also write/read ``rollout/tailsieve_state_{rollout_id}.pkl`` holding slime's
  buffer (which slime's own ``save`` leaves out) and TailSieve's state.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
from typing import Any

from tailsieve.integrations.slime.samples import restart
from tailsieve.integrations.slime.session import TailSieveSlimSession

logger = logging.getLogger(__name__)
BASE = "slime.rollout.data_source.RolloutDataSourceWithBuffer"


def load_class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class TailSieveDataSource:
    """slime ``DataSource`` (get_samples/add_samples/save/load/__len__) plus TailSieve's state."""

    def __init__(self, args: Any, base: Any = None) -> None:
        self.args = args
        if base is None:
            base = load_class(getattr(args, "tailsieve_base_data_source", None) or BASE)(args)
        self.base = base
        self.tailsieve = TailSieveSlimSession(args)

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        return self.base.get_samples(num_samples)

    def add_samples(self, samples: list[list[Any]]) -> None:
        for group in samples:
            for s in group:
                restart(s)
        self.base.add_samples(samples)

    def __len__(self) -> int:
        return len(self.base)

    def __getattr__(self, name: str) -> Any:
        if name in ("base", "args", "tailsieve"):
            raise AttributeError(name)
        return getattr(self.base, name)

    def _path(self, root: str, rollout_id: Any) -> str:
        return os.path.join(root, f"rollout/tailsieve_state_{rollout_id}.pkl")

    def save(self, rollout_id: Any) -> None:
        self.base.save(rollout_id)
        if getattr(self.args, "save", None) is None:
            return
        path = self._path(self.args.save, rollout_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        state = {
            "buffer": list(getattr(self.base, "buffer", [])),
            "tailsieve": self.tailsieve.state_dict(),
        }
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, path)

    def load(self, rollout_id: Any = None) -> None:
        self.base.load(rollout_id)
        root = getattr(self.args, "load", None)
        if root is None:
            return
        path = self._path(root, rollout_id)
        if not os.path.exists(path):
            logger.info("no TailSieve state at %s: starting without carried prompts", path)
            return
        with open(path, "rb") as f:
            state = pickle.load(f)
        if hasattr(self.base, "buffer"):
            self.base.buffer[:] = state["buffer"]
        self.tailsieve.load_state_dict(state["tailsieve"])
