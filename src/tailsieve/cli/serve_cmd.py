"""``tailsieve serve``: the HTTP routing proxy in front of vLLM / SGLang servers."""

from __future__ import annotations

import typer

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.runtime import event_loop
from tailsieve.runtime.backends import Backend
from tailsieve.runtime.proxy import ProxyConfig
from tailsieve.runtime.proxy.server import serve as serve_proxy
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.session.routers import SessionPolicy, parse_policy

LIVE_POLICIES = ", ".join(p.value for p in SessionPolicy if p is not SessionPolicy.ORACLE)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    endpoints: str = typer.Option(
        None, "--endpoints", help="The servers' base URLs, comma-separated "
        "(http://10.0.0.1:8000,...)."),
    num_workers: int = typer.Option(
        None, "--num-workers", help="Without --endpoints: wait for this many servers to "
        "register (POST /workers {\"url\"}, as slime's engines do)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8800, "--port", help="TCP port (0: a free one)."),
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
        None, "--piece-tokens", help="Tokens per piece while turns may move (default 512)."),
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
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {port}")
    try:
        be = Backend(backend)
    except ValueError:
        raise ConfigError(f"--backend must be vllm or sglang, got {backend!r}") from None
    gw = GatewayConfig(policy=parse_policy(policy), moves=moves, piece_tokens=piece_tokens, profile=profile,
                       fallback_profile=fallback_profile, request_timeout_s=request_timeout)
    load_profile(fallback_profile if profile == "auto" else profile)  # a bad name fails now
    config = ProxyConfig(
        endpoints=tuple(e.strip() for e in (endpoints or "").split(",") if e.strip()),
        backend=be, model=model, num_workers=num_workers, gateway=gw,
        session_ttl_s=session_ttl)
    event_loop.run(serve_proxy(config, host, port, announce=lambda s: typer.echo(s, err=True)),
                   loop)
