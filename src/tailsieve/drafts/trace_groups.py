"""A recorded trace (with token ids) as draft-source groups, and the prompts' token ids.

The recorded trace keeps each response's token ids but only the prompt's length. The shipped
trace's prompt ids (its chat template applied by the model's tokenizer, each checked against the
trace's ``prompt_tokens``) ship beside it (``workload/data/smollm2-135m-math.prompt-ids.jsonl``;
``scripts/make_prompt_ids.py`` writes them). Another trace may name a file of the same form
(JSONL ``{"prompt_id", "prompt_token_ids"}`` per line, or one JSON object ``{prompt_id: ids}``),
or go without: prompt lookup and the own tree then see only the generated tokens.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from tailsieve.drafts.group import Group, Tokens
from tailsieve.errors import TraceError
from tailsieve.workload.io import read_trace
from tailsieve.workload.shipped import DATA_DIR, resolve_trace_path

SHIPPED_PROMPT_IDS: dict[str, Path] = {
    "smollm2-math": DATA_DIR / "smollm2-135m-math.prompt-ids.jsonl"}


def load_prompt_ids(path: str | Path) -> dict[str, Tokens]:
    """``{prompt_id: token ids}`` from a JSONL file (``{"prompt_id", "prompt_token_ids"}`` per
    line) or a JSON object (``{prompt_id: ids}``, or that under ``"prompt_token_ids"``)."""
    p = Path(path)
    try:
        text = p.read_text()
        if p.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            doc: object = {str(r["prompt_id"]): r["prompt_token_ids"] for r in rows}
        else:
            doc = json.loads(text)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"{p}: cannot read prompt ids ({exc})") from None
    table = doc.get("prompt_token_ids", doc) if isinstance(doc, dict) else None
    if not isinstance(table, dict) or not all(
            isinstance(v, list) and all(isinstance(t, int) for t in v) for v in table.values()):
        raise TraceError(f"{p}: expected {{prompt_id: [token ids]}}")
    return {str(k): tuple(v) for k, v in table.items()}


def seeded_recording(trace: str | Path) -> bool:
    """Whether the recording gave every request its own seed (its info file, beside the trace
    as ``<file>.info.json`` or ``<stem>.info.json``, names a ``run_seed``). Then every sibling
    was sampled independently; without one, responses recorded on different servers can be
    copies (two unseeded servers draw the same random numbers)."""
    p = resolve_trace_path(trace)
    for info in (p.with_name(p.name + ".info.json"),
                 p.with_name(p.name.split(".")[0] + ".info.json")):
        if info.is_file():
            try:
                doc = json.loads(info.read_text())
            except ValueError as exc:
                raise TraceError(f"{info}: cannot read the recording's info ({exc})") from None
            return isinstance(doc, dict) and doc.get("run_seed") is not None
    return False


def trace_groups(trace: str | Path, prompt_ids: str | Path | None = None,
                 max_prompts: int | None = None) -> list[Group]:
    """The trace's (prompt, epoch) groups, epoch by epoch, each with the previous epoch's
    responses to the same prompt; responses ordered by (recording server, sample), each
    group's recording servers kept for ``Group.independent`` unless the recording was seeded
    per request (``seeded_recording``: every sibling independent). ``prompt_ids``: a JSON
    file; default the shipped one for a shipped trace, else none. ``max_prompts`` keeps the
    first prompts only."""
    tr = read_trace(trace)
    if tr.token_ids is None:
        raise TraceError(f"{tr.source}: the trace has no token_ids column (record it with "
                         "`tailsieve record run`)")
    if prompt_ids is None and str(trace) in SHIPPED_PROMPT_IDS and not Path(trace).exists():
        prompt_ids = SHIPPED_PROMPT_IDS[str(trace)]
    prompts = load_prompt_ids(prompt_ids) if prompt_ids is not None else {}
    per_server = tr.replica is not None and not seeded_recording(trace)
    cells: dict[tuple[int, int], list[tuple[int, int, Tokens]]] = defaultdict(list)
    for i in range(tr.prompt_codes.size):
        rep = -1 if tr.replica is None else int(tr.replica[i])
        cells[(int(tr.prompt_codes[i]), int(tr.step[i]))].append(
            (rep, int(tr.sample[i]), tuple(int(t) for t in tr.token_ids[i])))
    keep = sorted({code for code, _ in cells})[:max_prompts] if max_prompts else None
    groups: list[Group] = []
    for (code, step) in sorted(cells, key=lambda cs: (cs[1], cs[0])):
        if keep is not None and code not in keep:
            continue
        name = tr.prompt_names[code]
        rows = sorted(cells[(code, step)])  # by (recording server, sample)
        responses = tuple(r for _, _, r in rows)
        replicas = tuple(rep for rep, _, _ in rows) if per_server else None
        earlier = [s for (c, s) in cells if c == code and s < step]
        previous = (tuple(r for _, _, r in sorted(cells[(code, max(earlier))]))
                    if earlier else None)
        if prompts and name not in prompts:
            raise TraceError(f"{prompt_ids}: no token ids for prompt {name!r}")
        groups.append(Group(name, step, prompts.get(name, ()), responses, previous, replicas))
    return groups
