"""A train dataloader whose batch size follows ``num_fresh_needed()``.

TailSieve needs a different number of new prompts each step (``N`` minus the prompts it carries,
plus the extra groups it launches to find the tail). ``TailSieveDataLoader`` reads the dataset
one row at a time through a ``StatefulDataLoader`` (same sampler, so the same order and the same
checkpointable position as verl's loader) and collates as many rows as the manager asks for.
An epoch ends when the dataset cannot fill the next request (like verl's ``drop_last=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from tailsieve.errors import ConfigError


def _first(rows: list[Any]) -> Any:
    return rows[0]


class TailSieveDataLoader:
    """Yields collated batches of ``need()`` rows; ``state_dict``/``load_state_dict`` like
    ``StatefulDataLoader`` (verl saves it in ``data.pt``)."""

    def __init__(
        self,
        dataset: Any,
        collate_fn: Callable[[list[Any]], Any],
        sampler: Any,
        need: Callable[[], int],
        nominal_batch_size: int,
        num_workers: int = 0,
    ) -> None:
        self.dataset = dataset
        self._collate = collate_fn
        self._need = need
        self._nominal = nominal_batch_size
        self._rows = StatefulDataLoader(
            dataset=dataset,
            batch_size=1,
            sampler=sampler,
            num_workers=num_workers,
            collate_fn=_first,
        )

    def __len__(self) -> int:
        """Steps per epoch at the nominal batch size (``N`` groups delivered per step)."""
        return len(self.dataset) // self._nominal

    def __iter__(self) -> Iterator[Any]:
        rows = iter(self._rows)
        while True:
            take = max(1, self._need())
            batch = []
            for _ in range(take):
                try:
                    batch.append(next(rows))
                except StopIteration:
                    return
            yield self._collate(batch)

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self._rows.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "rows" not in state:
            raise ConfigError(
                "the checkpoint's dataloader state was not written by TailSieveDataLoader "
                "(resume a TailSieve run, or start this one with trainer.resume_mode=disable)"
            )
        self._rows.load_state_dict(state["rows"])
