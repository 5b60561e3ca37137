"""The slime adapter against emulated SGLang workers, through slime's interface (duck-typed
``Sample`` and buffered data source in ``slime_like``): exactly N groups of n per step, carried
prompts regenerated from scratch one step later, rewards from each prompt's own label,
save/load resuming with nothing lost or duplicated."""

from __future__ import annotations

from argparse import Namespace
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from slime_like import BufferedSource, Sample

from tailsieve.errors import ConfigError
from tailsieve.integrations.slime import TailSieveDataSource, generate_rollout
from tailsieve.integrations.slime.samples import restart
from tailsieve.integrations.slime.settings import SlimeSettings

N, n = 4, 2


def make_args(workers: list[str], tmp: Path | None = None, **kw: Any) -> Namespace:
    args = Namespace(
        rollout_batch_size=N,
        n_samples_per_prompt=n,
        rollout_max_response_len=48,
        rollout_temperature=1.0,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_stop=None,
        tailsieve_endpoints=list(workers),
        tailsieve_profile="cpu",
        tailsieve_controller={"m0": 1},  # a tail pool and a cutoff (carry) from step 0
        custom_rm_path="slime_like.label_reward",
        group_rm=False,
        num_prompts=64,
        save=str(tmp) if tmp else None,
        load=None,
    )
    for k, v in kw.items():
        setattr(args, k, v)
    return args


class Ledger:
    def __init__(self) -> None:
        self.drawn: list[int] = []
        self.delivered: list[int] = []
        self.carried = 0
        self.last_metrics: dict[str, Any] = {}

    def track(self, ds: TailSieveDataSource) -> None:
        get = ds.base.get_samples

        def spy(k: int) -> list[list[Sample]]:
            groups = get(k)  # buffered groups come back: counted once, when first drawn
            self.drawn.extend(
                g[0].group_index for g in groups if g[0].group_index not in self.drawn
            )
            return groups

        ds.base.get_samples = spy  # type: ignore[method-assign]

    def step(self, args: Namespace, ds: TailSieveDataSource, rollout_id: int) -> list[list[Sample]]:
        out = generate_rollout(args, rollout_id, ds)
        self.last_metrics = out.metrics
        groups = out.samples
        assert len(groups) == N and all(len(g) == n for g in groups)
        assert out.metrics["tailsieve/q"] >= 0
        for g in groups:
            gi = {s.group_index for s in g}
            assert len(gi) == 1
            self.delivered.append(g[0].group_index)
            prompt = ds.base.prompts[int(g[0].label)].tokens
            for s in g:
                k = s.response_length
                assert k >= 1 and s.tokens == prompt + s.tokens[len(prompt) :]
                assert len(s.tokens) == len(prompt) + k  # a whole fresh attempt, nothing older
                assert len(s.rollout_log_probs) == k == len(s.loss_mask) == sum(s.loss_mask)
                assert s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
                assert s.reward == float(s.label)  # scored with its own label
                assert s.metadata["tailsieve"]["rollout_id"] == rollout_id
                if s.metadata["tailsieve"]["step"] != rollout_id:
                    pytest.fail("step counter and rollout id diverged")
        return groups

    def check(self, ds: TailSieveDataSource) -> None:
        held = [int(pid[1:]) for pid in ds.tailsieve.held]
        assert not [k for k, c in Counter(self.delivered).items() if c > 1]
        assert sorted(self.delivered + held) == sorted(self.drawn)


def make_source(args: Namespace) -> TailSieveDataSource:
    return TailSieveDataSource(args, base=BufferedSource(args))


def test_step0_n_groups_and_carry_then_regenerate(sglang_workers: list[str]) -> None:
    args = make_args(sglang_workers)
    ds = make_source(args)
    ledger = Ledger()
    ledger.track(ds)
    try:
        first = ledger.step(args, ds, 0)
        carried = set(ds.tailsieve.held)
        assert carried and ds.tailsieve.num_carried == len(carried)
        for pid in carried:  # held pristine: nothing of the aborted attempt is kept
            for s in ds.tailsieve.held[pid].samples:
                assert s.response == "" and s.response_length == 0 and s.rollout_log_probs is None
        second = ledger.step(args, ds, 1)
        got = {f"g{g[0].group_index}" for g in second}
        assert carried <= got  # carried prompts come back in the next step
        assert not {f"g{g[0].group_index}" for g in first} & got
        ledger.step(args, ds, 2)
        ledger.check(ds)
    finally:
        ds.tailsieve.close()


def test_group_rm(sglang_workers: list[str]) -> None:
    async def group_reward(args: Namespace, samples: list[Sample]) -> list[float]:
        return [float(s.label) + 0.5 for s in samples]

    import slime_like

    slime_like.group_reward = group_reward  # type: ignore[attr-defined]
    args = make_args(sglang_workers, custom_rm_path="slime_like.group_reward", group_rm=True)
    ds = make_source(args)
    try:
        out = generate_rollout(args, 0, ds)
        assert all(s.reward == float(s.label) + 0.5 for g in out.samples for s in g)
    finally:
        ds.tailsieve.close()


def test_save_load_resume(sglang_workers: list[str], tmp_path: Path) -> None:
    args = make_args(sglang_workers, tmp_path)
    ds = make_source(args)
    ledger = Ledger()
    ledger.track(ds)
    ledger.step(args, ds, 0)
    partial = ds.base.get_samples(1)  # slime's partial-rollout buffer, half generated
    for s in partial[0]:
        s.tokens = [*s.tokens, 9, 9, 9]
        s.response, s.response_length, s.rollout_log_probs = "x y z", 3, [-1.0] * 3
        s.status = Sample.Status.ABORTED
    ds.add_samples(partial)
    held_before = set(ds.tailsieve.held)
    ds.save(0)
    ds.tailsieve.close()

    args2 = make_args(sglang_workers, tmp_path, load=str(tmp_path))
    ds2 = make_source(args2)
    ds2.load(0)
    assert set(ds2.tailsieve.held) == held_before and ds2.tailsieve.num_carried > 0
    assert len(ds2.base.buffer) == 1 and ds2.base.buffer[0][0].response_length == 0
    ledger.track(ds2)
    try:
        ledger.step(args2, ds2, 1)
        ledger.step(args2, ds2, 2)
        ledger.check(ds2)
        assert partial[0][0].group_index in ledger.delivered  # the buffered group, from scratch
    finally:
        ds2.tailsieve.close()


def test_restart_clears_a_partial_sample() -> None:
    s = Sample(
        tokens=[1, 2, 3, 7, 8],
        response="ab",
        response_length=2,
        loss_mask=[1, 1],
        rollout_log_probs=[-0.1, -0.2],
        reward=1.0,
        status=Sample.Status.ABORTED,
        metadata={"start_rollout_id": 3},
    )
    restart(s)
    assert s.tokens == [1, 2, 3] and s.response == "" and s.response_length == 0
    assert s.rollout_log_probs is None and s.loss_mask is None and s.reward is None
    assert s.status is Sample.Status.PENDING and "start_rollout_id" not in s.metadata


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    base = make_args([])
    with pytest.raises(ConfigError, match="no SGLang workers"):
        SlimeSettings.from_args(base)
    monkeypatch.setenv("TAILSIEVE_ENDPOINTS", "http://a:1,http://b:2/")
    assert SlimeSettings.from_args(make_args([], tailsieve_endpoints=None)).endpoints == (
        "http://a:1",
        "http://b:2",
    )
    routed = make_args(
        [], tailsieve_endpoints=None, sglang_router_ip="10.0.0.1", sglang_router_port=3000
    )
    monkeypatch.delenv("TAILSIEVE_ENDPOINTS")
    assert SlimeSettings.from_args(routed).router_url == "http://10.0.0.1:3000"
    with pytest.raises(ConfigError, match="tailsieve_policy"):
        SlimeSettings.from_args(make_args(["http://a:1"], tailsieve_policy="nope"))


def test_moves_on_by_default_and_the_move_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No move key: the SGLang rollout moves (continuation, one piece until moved);
    ``tailsieve_moves: false`` (or ``TAILSIEVE_MOVES=0``) gives plans without moves."""
    for key in ("TAILSIEVE_MOVES", "TAILSIEVE_PIECE_TOKENS", "TAILSIEVE_SEAM_S",
                "TAILSIEVE_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    rc = SlimeSettings.from_args(make_args(["http://a:1"])).rollout_config()
    assert rc.moves_active and rc.continuation and rc.piece_tokens is None
    default = SlimeSettings.from_args(make_args(["http://a:1"], tailsieve_profile=None))
    assert default.profile == "auto" and default.rollout_config().fits_profile
    off = SlimeSettings.from_args(make_args(["http://a:1"], tailsieve_moves=False))
    assert not off.rollout_config().moves_active
    monkeypatch.setenv("TAILSIEVE_MOVES", "0")
    assert not SlimeSettings.from_args(make_args(["http://a:1"])).rollout_config().moves_active
    monkeypatch.setenv("TAILSIEVE_MOVES", "1")
    monkeypatch.setenv("TAILSIEVE_PIECE_TOKENS", "128")
    monkeypatch.setenv("TAILSIEVE_SEAM_S", "0.02")
    rc = SlimeSettings.from_args(make_args(["http://a:1"])).rollout_config()
    assert rc.piece_tokens == 128 and rc.controller["seam_s"] == 0.02 and rc.moves_active
    rr = SlimeSettings.from_args(make_args(["http://a:1"], tailsieve_policy="uniform-requests"))
    assert not rr.rollout_config().moves_active and rr.rollout_config().piece_tokens is None
    # a stop string on SGLang cannot be cut across a seam: moves stay off, and say why
    stop = SlimeSettings.from_args(make_args(["http://a:1"], rollout_stop=["</answer>"]))
    with pytest.raises(ConfigError, match="moves are off: stop strings on SGLang"):
        stop.rollout_config()  # pieces were asked for, moves cannot run
    monkeypatch.delenv("TAILSIEVE_PIECE_TOKENS")
    stop = SlimeSettings.from_args(make_args(["http://a:1"], rollout_stop=["</answer>"]))
    assert "stop strings on SGLang" in (stop.rollout_config().moves_off_reason or "")
    with pytest.raises(ConfigError, match="tailsieve_moves must be true or false"):
        SlimeSettings.from_args(make_args(["http://a:1"], tailsieve_moves="perhaps"))
    monkeypatch.setenv("TAILSIEVE_PIECE_TOKENS", "0")
    with pytest.raises(ConfigError, match="tailsieve_piece_tokens"):
        SlimeSettings.from_args(make_args(["http://a:1"]))


def test_rollouts_move_with_the_default_settings(slow_sglang_workers: list[str]) -> None:
    """Three rollouts with slime's interface, no move key and the default profile (``auto``:
    probed, then fitted online): moves happen, and every group is N x n samples of whole
    fresh attempts (``Ledger.step``)."""
    args = make_args(slow_sglang_workers, tailsieve_controller={"seam_s": 0.0},
                     rollout_max_response_len=64, tailsieve_profile=None)
    ds = make_source(args)
    ledger = Ledger()
    ledger.track(ds)
    moves = 0
    try:
        for rid in range(4):
            ledger.step(args, ds, rid)
            moves += int(ledger.last_metrics["tailsieve/num_moves"])
            assert ledger.last_metrics["tailsieve/moves_active"] == 1
        ledger.check(ds)
    finally:
        ds.tailsieve.close()
    assert moves > 0


def test_needs_the_tailsieve_data_source(sglang_workers: list[str]) -> None:
    args = make_args(sglang_workers)
    with pytest.raises(ConfigError, match="data-source-path"):
        generate_rollout(args, 0, BufferedSource(args))


def test_workers_from_slime_router(sglang_workers: list[str]) -> None:
    """No tailsieve_endpoints: the workers come from the router's GET /workers (slime's shape)."""
    from aiohttp import web

    from tailsieve.integrations.loop_thread import LoopThread

    async def workers(request: web.Request) -> web.Response:
        return web.json_response({"workers": [{"url": u} for u in sglang_workers]})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/workers", workers)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    loop = LoopThread("router")
    runner = loop.run(start())
    port = runner.addresses[0][1]
    args = make_args([], tailsieve_endpoints=None, sglang_router_ip="127.0.0.1",
                     sglang_router_port=port)
    ds = make_source(args)
    try:
        out = generate_rollout(args, 0, ds)
        assert len(out.samples) == N
        assert ds.tailsieve._ro is not None
        assert list(ds.tailsieve._ro.executor.replicas[i].url for i in range(2)) == sglang_workers
    finally:
        ds.tailsieve.close()
        loop.run(runner.cleanup())
        loop.close()
