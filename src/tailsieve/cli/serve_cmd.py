"""``tailsieve serve``: the HTTP routing proxy in front of vLLM / SGLang servers."""

from __future__ import annotations

import typer

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.runtime import event_loop
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.execution.moves import PIECE_TOKENS
from tailsieve.runtime.execution.stall_watch import StallSettings
from tailsieve.runtime.proxy import ProxyConfig
from tailsieve.runtime.proxy.server import serve as serve_proxy
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.session.routers import SessionPolicy, parse_policy

ADMIN_TOKEN_ENV = "TAILSIEVE_ADMIN_TOKEN"
_STALL = StallSettings()  # the defaults the stall flags show
LIVE_POLICIES = ", ".join(p.value for p in SessionPolicy if p is not SessionPolicy.ORACLE)


def serve(
    endpoints: str = typer.Option(
        None, "--endpoints", help="The servers' base URLs, comma-separated "
        "(http://10.0.0.1:8000,...)."),
    num_workers: int = typer.Option(
        None, "--num-workers", help="Without --endpoints: wait for this many servers to "
        "register (POST /workers {\"url\"}, as slime's engines do; an admin call, so give "
        "--admin-port or --admin-token)."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind. Whoever reaches it can generate on "
        "the servers and read /metrics: bind a public address (0.0.0.0) only behind a "
        "firewall or an authenticating proxy."),
    port: int = typer.Option(8800, "--port", help="TCP port (0: a free one)."),
    admin_port: int = typer.Option(
        None, "--admin-port", help="Serve admin calls (POST/DELETE /workers, abort_all, "
        "weight reloads) and every other route on this port, without a token (default: no "
        "admin listener)."),
    admin_host: str = typer.Option(
        "127.0.0.1", "--admin-host", help="Address of the admin listener. Whoever reaches it "
        "can add and remove servers and abort every request."),
    admin_token: str = typer.Option(
        None, "--admin-token", envvar=ADMIN_TOKEN_ENV, show_envvar=True,
        help="Accept admin calls on the data port with this token (Authorization: Bearer "
        "TOKEN or X-Admin-Token)."),
    max_body_mb: float = typer.Option(
        64.0, "--max-body-mb", help="Refuse request bodies larger than this (413), MiB."),
    read_timeout: float = typer.Option(
        60.0, "--read-timeout", help="A request's headers, then its body, must arrive within "
        "this many seconds (else the connection is closed, or 408)."),
    max_concurrency: int = typer.Option(
        None, "--max-concurrency", help="Generation requests answered at once; more are "
        "refused with 429 (default: no limit)."),
    backend: str = typer.Option(
        "vllm", "--backend", help="What the servers speak: vllm (OpenAI API) or sglang."),
    model: str = typer.Option(None, "--model", help="Served model name (default: ask them)."),
    policy: str = typer.Option(
        SessionPolicy.TAILSIEVE.value, "--policy",
        help=f"Session routing: {LIVE_POLICIES}."),
    profile: str = typer.Option(
        "auto", "--profile", help="Cost model: auto (fitted from the servers' timings; "
        "--fallback-profile until then), a profile name or a JSON file."),
    fallback_profile: str = typer.Option(
        "cpu", "--fallback-profile", help="What --profile auto uses until it has a fit."),
    moves: bool = typer.Option(
        True, "--moves/--no-moves", help="Move turns (at turn boundaries and mid-turn, priced, "
        "behind the balance gate); --no-moves keeps sessions home."),
    piece_tokens: int = typer.Option(
        None, "--piece-tokens",
        help=f"Tokens per piece while turns may move (default {PIECE_TOKENS}; then, with "
        "--profile auto, a turn is cut only where a move may pay: no trusted fit yet, a slower "
        "server, one out of service or far ahead. Given, every movable turn is cut)."),
    stream_pieces: bool = typer.Option(
        False, "--stream-pieces/--no-stream-pieces", help="vLLM: stream each piece from its "
        "server, so that a move ends a running piece at once and keeps what it streamed "
        "(SGLang's pieces are ended by /abort_request without it). Off: a move of an "
        "unstreamed piece waits for its end; streaming costs the proxy CPU per token."),
    stream_interval: int = typer.Option(
        None, "--stream-interval", min=1, help="With --stream-pieces: tokens per chunk."),
    kv_admission: str = typer.Option(
        "auto", "--kv-admission", help="Admit new sessions by KV room (a session waits at "
        "the proxy until a server's resident sessions leave room for its context): auto "
        "(where the last step was KV-bound; the tailsieve policy), on, off."),
    stall_factor: float = typer.Option(
        _STALL.factor, "--stall-factor", help="A server whose running piece makes no "
        "progress for this many times its expected time (the cost model's) is probed, and "
        "taken out as hung when the probe does not answer."),
    stall_floor: float = typer.Option(
        _STALL.floor_s, "--stall-floor",
        help="... and never before this many seconds without progress."),
    text_prompts: bool = typer.Option(
        True, "--text-prompts/--tokenize-prompts", help="Send a plain-text completions "
        "prompt to its server as text (the server echoes its token ids) instead of asking a "
        "server's /tokenize first: one round trip less per request."),
    session_ttl: float = typer.Option(
        14400.0, "--session-ttl", help="Forget a session key idle this many seconds."),
    request_timeout: float = typer.Option(
        3600.0, "--request-timeout", help="A piece running longer is a server fault, s."),
    loop: str = typer.Option(
        "auto", "--loop", help="Event loop: auto (uvloop when installed), asyncio, uvloop."),
) -> None:
    """Serve vLLM's /v1/completions and /v1/chat/completions and SGLang's /generate over
    the servers, routing each client session (X-Session-ID, X-SMG-Routing-Key, the body's
    session_id or user) by TailSieve's priced session router and moving turns by
    continuation, invisibly to the client. Ctrl-C stops it."""
    if parse_policy(policy) is SessionPolicy.LENGTH_INFORMED:
        raise ConfigError("the length-informed policy knows future lengths: simulator only")
    for name, p in (("--port", port), ("--admin-port", admin_port)):
        if p is not None and not 0 <= p <= 65535:
            raise ConfigError(f"{name} must be in 0..65535, got {p}")
    if not max_body_mb > 0:
        raise ConfigError(f"--max-body-mb must be > 0, got {max_body_mb}")
    try:
        be = Backend(backend)
    except ValueError:
        raise ConfigError(f"--backend must be vllm or sglang, got {backend!r}") from None
    stall = StallSettings(factor=stall_factor, floor_s=stall_floor)
    gw = GatewayConfig(policy=parse_policy(policy), moves=moves, piece_tokens=piece_tokens,
                       profile=profile, fallback_profile=fallback_profile,
                       request_timeout_s=request_timeout, stall=stall,
                       kv_admission=kv_admission, stream=stream_pieces,
                       stream_interval=stream_interval)
    load_profile(fallback_profile if profile == "auto" else profile)  # a bad name fails now
    config = ProxyConfig(
        endpoints=tuple(e.strip() for e in (endpoints or "").split(",") if e.strip()),
        backend=be, model=model, num_workers=num_workers, gateway=gw,
        session_ttl_s=session_ttl, text_prompts=text_prompts, admin_token=admin_token or None,
        max_body_bytes=max(1, int(max_body_mb * (1 << 20))), read_timeout_s=read_timeout,
        max_concurrency=max_concurrency)
    event_loop.run(serve_proxy(config, host, port, announce=lambda s: typer.echo(s, err=True),
                               admin_host=admin_host, admin_port=admin_port), loop)
