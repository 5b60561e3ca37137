"""Prompt files for the recorder (read in ``runtime.prompt_file``, below the runtime that the
real-model demo runs; named here too, where the recorder reads them)."""

from tailsieve.runtime.prompt_file import (
    SHIPPED_PROMPT_SETS,
    PromptSet,
    read_prompt_set,
    resolve_prompt_path,
)

__all__ = ["SHIPPED_PROMPT_SETS", "PromptSet", "read_prompt_set", "resolve_prompt_path"]
