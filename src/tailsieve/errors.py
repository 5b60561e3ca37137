"""One exception hierarchy for the whole package.

Every error a user can cause (bad input, bad config, unreachable replica) is a
``TailSieveError`` subclass whose message names what is wrong; the CLI prints it
on one line and exits non-zero.
"""

from __future__ import annotations


class TailSieveError(Exception):
    """Base class of every error TailSieve raises on purpose."""


class ConfigError(TailSieveError, ValueError):
    """A configuration value is missing or out of range."""


class ProfileError(TailSieveError, ValueError):
    """A throughput profile is malformed (empty, NaN, non-positive, decreasing speed)."""


class TraceError(TailSieveError, ValueError):
    """A trace file or length list is malformed; the message names file, row and field."""


class ProtocolError(TailSieveError, RuntimeError):
    """A step-protocol invariant would be violated (lost or duplicated prompt)."""


class ReplicaError(TailSieveError, RuntimeError):
    """A replica is unreachable, failed, or answered with an error."""


class StepFailedError(TailSieveError, RuntimeError):
    """A live step could not complete (retries exhausted, no healthy replica)."""
