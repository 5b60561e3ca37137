"""TailSieve inside slime; see docs/integrations-slime.md.

    --rollout-function-path tailsieve.integrations.slime.generate_rollout
    --data-source-path tailsieve.integrations.slime.TailSieveDataSource

slime is imported only when its own pieces are needed (the wrapped data source, ``rm_hub``,
``RolloutFnTrainOutput``, evaluation); importing this package does not import slime.
"""

from tailsieve.integrations.slime.data_source import TailSieveDataSource
from tailsieve.integrations.slime.rollout import generate_rollout
from tailsieve.integrations.slime.session import TailSieveSlimSession
from tailsieve.integrations.slime.settings import SlimeSettings

__all__ = ["SlimeSettings", "TailSieveDataSource", "TailSieveSlimSession", "generate_rollout"]
