"""Per-request sampling seeds of a recording, derived from one run seed.

Every request of a recording carries its own seed, so no two responses share the sampler's
random numbers whatever the servers' own engine seeds are (vLLM starts every server with seed
0, so two unseeded servers draw the same numbers and a response can copy a sibling's). Sample
``i`` of prompt ``p`` in epoch ``e`` gets ``base(run_seed, p, e) + i``, where ``base`` is 62 bits
of a BLAKE2b hash of the three: it does not depend on file order, on how many prompts run or on
how the recording is split into parts, and it fits vLLM's and SGLang's 64-bit seed fields.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
from collections.abc import Iterable

from tailsieve.errors import ConfigError

MAX_SEED = 2**63 - 1
BASE_BITS = 62  # base seeds below 2**62: base + sample index stays below MAX_SEED
SEED_RULE = ("sample i of prompt p in epoch e: blake2b-64(f'{run_seed}/{p}/{e}') >> 2, plus i "
             "(tailsieve.record.seeds)")


def draw_run_seed() -> int:
    """A fresh run seed (62 random bits from the OS) for a recording without ``--seed``."""
    return secrets.randbits(BASE_BITS)


def group_seed(run_seed: int, prompt_id: str, epoch: int) -> int:
    """Seed of sample 0 of ``prompt_id``'s group in ``epoch`` (sample ``i`` adds ``i``)."""
    if not 0 <= run_seed <= MAX_SEED:
        raise ConfigError(f"run seed must be in [0, 2**63 - 1], got {run_seed}")
    if epoch < 0:
        raise ConfigError(f"epoch must be >= 0, got {epoch}")
    digest = hashlib.blake2b(f"{run_seed}/{prompt_id}/{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - BASE_BITS)


def check_distinct(bases: Iterable[int], group_size: int) -> None:
    """Raise ``ConfigError`` if two requests would share a seed (base ranges of ``group_size``
    overlap; with 62-bit bases this does not happen in practice, but it is checked)."""
    starts = sorted(bases)
    for a, b in itertools.pairwise(starts):
        if b - a < group_size:
            raise ConfigError(f"two groups' seed ranges overlap ({a} and {b}); choose another "
                              "run seed")
