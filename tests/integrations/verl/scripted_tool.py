"""A tool of the tests' own for verl's ``tool_agent`` loop, and a tool parser that calls it.

The tiny test models (and the emulator's filler tokens) never write a real tool call, so the
parser ``tailsieve_scripted`` decides: a trajectory calls the ``lookup`` tool after each of
its first ``K`` turns, where ``K = 1 + (length of its first response) % 3``, then stops. The
tool waits a little (a tool call) and appends an observation naming the call. Loaded by
verl's own ``multi_turn.function_tool_path``; the parser registers on import.
"""

from __future__ import annotations

import asyncio
import json

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.function_tool import function_tool

TOOL_S = 0.02  # seconds a lookup takes
PARSER = "tailsieve_scripted"


@function_tool
async def lookup(query: str) -> str:
    """Look a query up.

    Args:
        query: What to look up.
    """
    await asyncio.sleep(TOOL_S)
    return f"observation for {query}"


@ToolParser.register(PARSER)
class ScriptedToolParser(ToolParser):
    """Calls ``lookup`` after the first ``K`` turns of a trajectory (module docstring); one
    parser per agent loop, so per trajectory."""

    def __init__(self, tokenizer: object) -> None:
        super().__init__(tokenizer)
        self.num_calls = 0
        self.budget: int | None = None

    async def extract_tool_calls(self, responses_ids: list[int], tools: object = None,
                                 ) -> tuple[str, list[FunctionCall]]:
        if self.budget is None:
            self.budget = 1 + len(responses_ids) % 3
        if self.num_calls >= self.budget:
            return "done", []
        self.num_calls += 1
        args = json.dumps({"query": f"q{self.num_calls}"})
        return "", [FunctionCall(name="lookup", arguments=args)]
