"""``core.running_index`` under its former name."""

from tailsieve.core.running_index import Entry, Key, RunningIndex

__all__ = ["Entry", "Key", "RunningIndex"]
