"""The hierarchical controller: inner loop on q, outer loop on m (docs/design.md, "Controller")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tailsieve.control.balance_gate import BalanceGate, GateState
from tailsieve.control.config import ControllerConfig
from tailsieve.control.inner_loop import InnerDecision, InnerLoop
from tailsieve.control.outer_loop import OuterLoop
from tailsieve.control.predictor import PoolPrediction, PoolTimePredictor, StepWork
from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.controller import Controller, ControlTargets
from tailsieve.core.diagnostics import PredictedPoolTimes
from tailsieve.core.drain import DrainSettings
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel


@dataclass(slots=True)
class ControllerState:
    """Everything the controller remembers between steps (saved with the checkpoint)."""

    q: int  # target tail groups
    m: int  # target tail replicas
    hold_q: int = 0  # observations left before the next q decision
    hold_m: int = 0  # observations left before the next m decision
    k_tail: float = 1.0  # observed/predicted tail time (EMA)
    k_bulk: float = 1.0  # observed/predicted bulk time (EMA)
    num_observed: int = 0  # steps observed
    m_votes: int = 0  # consecutive outer decisions for the same move (+ up, - down)
    history: list[StepWork] = field(default_factory=list)  # recent delivered response work
    last_event: str = ""  # human-readable note on the last decision
    k_uniform: float = 1.0  # observed/predicted step time of balanced m = 0 steps (EMA; moves)
    step_ema_s: float = 0.0  # observed step time (EMA): the balancer's horizon
    gate: GateState = field(default_factory=GateState)  # the balance gate's measurements


class HierarchicalController(Controller):
    """TailSieve's controller. With ``outer_enabled=False`` it is the fixed-allocation variant."""

    def __init__(
        self,
        config: ControllerConfig,
        tail_model: ThroughputModel,
        bulk_model: ThroughputModel | None = None,
        name: str = "tailsieve",
    ) -> None:
        self.name = name
        self.config = config
        m0 = config.m_start
        self.state = ControllerState(q=config.q_start if m0 > 0 else 0, m=m0)
        self.inner = InnerLoop(config)
        self.predictor = PoolTimePredictor(
            config.num_groups, config.num_replicas, tail_model, bulk_model or tail_model,
            spread=config.spread,
        )
        self.outer = OuterLoop(config, self.predictor)
        # one tiny prediction at construction: numpy's first-call costs (~10 ms) are paid here,
        # not inside the first step's decision
        self.predictor.predict([StepWork([[1, 2], [3, 4], [5, 6]], 1)], 1, 1)
        self._samples: list[Any] = []
        self._cache: dict[tuple[int, int], PoolPrediction] = {}
        self._m_wanted = m0  # the fixed variant's split, restored when replicas come back
        self.gate = BalanceGate(config.gate, self.state.gate)

    def targets(self) -> ControlTargets:
        st = self.state
        spread = self.config.spread
        if st.m <= 0:
            gated = self.config.gate is not None and not self.gate.balances_next()
            return ControlTargets(q=0, m=0, num_extra=0, spread=spread,
                                  balance=None if gated else self.balance_settings())
        q = min(max(st.q, self.config.q_floor(st.m)), self.config.num_groups - 1)
        return ControlTargets(q=q, m=st.m, num_extra=q, spread=spread)

    def balance_settings(self) -> BalanceSettings | None:
        """How a balance step (m = 0) re-balances (None when balancing is off; steps with a
        tail pool run as the paper's protocol, so the outer loop compares the split's
        predicted time against m = 0 corrected by what moves gained there). From measurements:
        the horizon is the observed step time (EMA) and the interval is that time over
        ``checks_per_step`` (the gain measured flat from 16 to 256 checks per step on the 4B
        and 30B-A3B profiles), so it scales with the step, not with one configuration; a
        completion also triggers a check. Before any step was observed: one check per 40 seams
        (a check's moves each cost at least one)."""
        cfg, st = self.config, self.state
        if not cfg.balance:
            return None
        seam = cfg.seam_s
        interval = st.step_ema_s / cfg.checks_per_step if st.step_ema_s > 0 else 40.0 * seam
        return BalanceSettings(interval_s=max(interval, 1e-3), horizon_s=st.step_ema_s,
                               seam_s=seam, expected_step_s=st.step_ema_s,
                               drain=self._drain_settings())

    def _drain_settings(self) -> DrainSettings | None:
        """The drain's levers (``core.drain``) with the remembered steps' finished response
        lengths as the evidence of expected remaining work (None: both levers off)."""
        cfg = self.config
        if not (cfg.drain_lpt or cfg.drain_priority):
            return None
        lengths = tuple(n for h in self.state.history for g in h.groups for n in g)
        return DrainSettings(lpt=cfg.drain_lpt, priority=cfg.drain_priority,
                             start_fraction=cfg.drain_start_fraction, lengths=lengths)

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        cfg, st = self.config, self.state
        st.num_observed += 1
        rank = {pid: i for i, pid in enumerate(plan.tail_ids)}
        tail = sorted(
            (g for g in outcome.delivered if g.prompt_id in rank), key=lambda g: rank[g.prompt_id]
        )
        bulk = [g for g in outcome.delivered if g.prompt_id not in rank]
        ordered = (*tail, *bulk)
        prompts = [g.prompt_tokens for g in ordered]
        work = StepWork(
            [list(g.response_tokens) for g in ordered], len(tail),
            prompts if any(prompts) else None,
            [(a.num_finished, a.finished_tokens) for a in outcome.aborted],
        )
        st.history.append(work)
        keep = self._history_len()
        del st.history[: max(0, len(st.history) - keep)]
        if len(self._samples) + 1 >= len(st.history) > 0:
            # one new pre-processed sample; the older ones are reused
            self._samples = [*self._samples, *self.predictor.samples([work])][-keep:]
        else:
            self._samples = self.predictor.samples(st.history)
        self._cache = {}
        clean = not plan.carried_in_bulk_ids and not plan.is_flush
        gate_note = self._update_corrections(plan, outcome, work, clean)
        if not plan.is_flush and outcome.makespan_s > 0:
            a = cfg.correction_smoothing
            st.step_ema_s = outcome.makespan_s if st.step_ema_s <= 0 else (
                (1 - a) * st.step_ema_s + a * outcome.makespan_s)
        st.last_event = gate_note
        if st.hold_q > 0:
            st.hold_q -= 1
            st.last_event = "hold q"
        elif (
            cfg.inner_enabled and clean and plan.m > 0 and plan.q > 0 and plan.q == self.targets().q
        ):
            d = self._inner_decision(plan, outcome)
            new_q = max(d.new_q, cfg.q_floor(st.m))
            if new_q != plan.q:
                up = new_q > plan.q
                st.hold_q = cfg.hold_after_increase if up else cfg.hold_after_decrease
                st.last_event = f"q {plan.q}->{new_q} (q*={d.q_star:.1f})"
                st.q = new_q
        if st.hold_m > 0:
            st.hold_m -= 1
            return
        if not cfg.outer_enabled or st.hold_q > 0 or not clean:
            return
        if st.m > 0 and plan.m != st.m:
            return
        # between splits only once q has settled; leaving isolation for balance (m = 0) needs
        # no q, so that move is open while the inner loop is still moving
        settled = st.m == 0 or self.inner.state.settled
        od = self.outer.decide(
            st.history, st.m, st.q, st.k_tail, st.k_bulk, self._samples, self._cache,
            self._m0_correction(),
        )
        if od.new_m == st.m or not (settled or od.new_m == 0):
            st.m_votes = 0
            return
        up = od.new_m > st.m
        st.m_votes = (max(st.m_votes, 0) + 1) if up else (min(st.m_votes, 0) - 1)
        if abs(st.m_votes) < cfg.m_confirmations:
            st.last_event = f"m {st.m}->{od.new_m}? (gain {od.predicted_gain:.1%}, unconfirmed)"
            return
        st.m_votes = 0
        st.last_event = f"m {st.m}->{od.new_m} (gain {od.predicted_gain:.1%})"
        old_q = st.q
        st.m, st.q = od.new_m, od.new_q if od.new_m > 0 else 0
        st.hold_m = cfg.m_hold_steps
        st.hold_q = cfg.hold_after_increase if st.q >= old_q else cfg.hold_after_decrease
        self.inner.reset()

    def resize(self, num_replicas: int) -> None:
        """Re-plan m for a new replica count: the outer loop's best split within its radius
        (from the remembered steps), or m capped at R - 1 when it is off or has no history."""
        cfg, st = self.config, self.state
        if num_replicas == cfg.num_replicas:
            return
        if num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
        old_r, old_m = cfg.num_replicas, st.m
        m0 = None if cfg.m0 is None else min(cfg.m0, num_replicas - 1)
        self.config = cfg = replace(cfg, num_replicas=num_replicas, m0=m0)
        self.predictor.num_replicas = num_replicas
        self.outer.config = self.inner.config = cfg
        self._cache = {}
        if not cfg.outer_enabled:
            m = min(self._m_wanted, num_replicas - 1)
            q = st.q if m > 0 else 0
        elif st.history:
            m, q = self.outer.best_split(
                st.history, min(st.m, num_replicas - 1), st.q, st.k_tail, st.k_bulk,
                self._m0_correction(),
            )
        else:
            m = min(st.m, num_replicas - 1)
            q = st.q if m > 0 else 0
        if m > 0 and old_m == 0 and q == 0:
            q = cfg.q_floor(m)
        st.m, st.q = m, q
        st.m_votes = 0
        st.hold_m = cfg.m_hold_steps if m != old_m else st.hold_m
        st.last_event = f"R {old_r}->{num_replicas}: m {old_m}->{m}"
        self.inner.reset()

    def set_throughput(self, model: ThroughputModel) -> None:
        """Predict both pools with ``model`` from now on. What was measured against the old
        model keeps its meaning: the observed/predicted corrections and the balance gate's
        ratios are rescaled by how much the prediction of the remembered steps changes (the
        m = 0 step time: old over new)."""
        p, st = self.predictor, self.state
        before = p.predict_samples(self._samples, 0, 0).bulk_s if self._samples else 0.0
        p.tail_model = p.bulk_model = model
        self._cache = {}
        after = p.predict_samples(self._samples, 0, 0).bulk_s if self._samples else 0.0
        if before <= 0 or after <= 0:
            return
        f = before / after
        st.k_tail *= f
        st.k_bulk *= f
        st.k_uniform *= f
        st.gate.balanced[:] = [r * f for r in st.gate.balanced]
        st.gate.round_robin[:] = [r * f for r in st.gate.round_robin]

    def _inner_decision(self, plan: StepPlan, outcome: StepOutcome) -> InnerDecision:
        cfg, st = self.config, self.state
        if cfg.inner_target == "rates":
            return self.inner.decide(plan.q, outcome.tail_time_s, outcome.bulk_cut_s)
        samples, cache = self._samples, self._cache
        lo, hi = cfg.q_floor(plan.m), self._q_search_cap(plan.m)
        best = self.predictor.balanced_q(
            samples, plan.m, lo, hi, st.k_tail, st.k_bulk, hint=plan.q, cache=cache
        )

        def makespan(q: int) -> float:
            if (q, plan.m) not in cache:
                cache[(q, plan.m)] = self.predictor.predict_samples(samples, q, plan.m)
            return cache[(q, plan.m)].makespan(st.k_tail, st.k_bulk)

        return self.inner.move_toward(plan.q, float(best.q), makespan)

    def _history_len(self) -> int:
        """Remembered steps: ``history_steps``, fewer for large batches (at most ~2,048
        responses), which keeps a decision within a few milliseconds."""
        cfg = self.config
        per_step = max(1, cfg.num_groups * cfg.group_size)
        return max(1, min(cfg.history_steps, 2048 // per_step))

    def _q_search_cap(self, m: int) -> int:
        cfg = self.config
        return max(cfg.q_floor(m), min(cfg.q_cap, cfg.max_groups_per_tail_replica * m))

    def _update_corrections(
        self, plan: StepPlan, outcome: StepOutcome, work: StepWork, clean: bool
    ) -> str:
        """Update the observed/predicted ratios (and the balance gate); returns the gate's note
        when its decision flipped."""
        if not clean or not work.groups:
            return ""
        st, a = self.state, self.config.correction_smoothing
        note = ""
        # the last remembered step is this one: reuse its pre-processed sample
        pred = self.predictor.predict_samples(self._samples[-1:], plan.q, plan.m)
        if plan.m > 0 and plan.q > 0 and pred.tail_s > 0 and outcome.tail_time_s > 0:
            st.k_tail = (1 - a) * st.k_tail + a * (outcome.tail_time_s / pred.tail_s)
        gated = self.config.balance and self.config.gate is not None
        if gated and plan.m == 0 and pred.bulk_s > 0 and outcome.makespan_s > 0:
            note = self.gate.observe(plan.balance is not None, outcome.makespan_s / pred.bulk_s)
        if pred.bulk_s > 0 and outcome.bulk_cut_s > 0:
            if plan.m == 0 and plan.balance is not None and outcome.num_moves > 0:
                # balanced m = 0: how much the moves gained over the no-move prediction (an
                # executor that made no move, e.g. one without moves, keeps the old update)
                obs = outcome.makespan_s / pred.bulk_s
                st.k_uniform = (1 - a) * st.k_uniform + a * obs
                return note
            st.k_bulk = (1 - a) * st.k_bulk + a * (outcome.bulk_cut_s / pred.bulk_s)
        return note

    def _m0_correction(self) -> float:
        """What the outer loop multiplies m = 0's predicted time by: what moves gained
        (``k_uniform``) while the gate balances, the round-robin ratio while it does not."""
        if self.config.gate is None or self.gate.state.on:
            return self.state.k_uniform
        rr = self.gate.round_robin_ratio()
        return 1.0 if rr is None else rr

    def state_dict(self) -> dict[str, Any]:
        st = asdict(self.state)
        st["history"] = [h.to_dict() for h in self.state.history]
        return {"name": self.name, "state": st, "inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        st = dict(state["state"])
        st["history"] = [StepWork.from_dict(h) for h in st["history"]]
        st["gate"] = GateState(**st["gate"]) if "gate" in st else GateState()
        self.state = ControllerState(**st)
        self.gate.state = self.state.gate
        self.inner.load_state_dict(state["inner"])
        self._samples = self.predictor.samples(self.state.history)
        self._cache = {}

    def predict_pool_times(self, q: int, m: int) -> PredictedPoolTimes | None:
        """The predictor's pool times at (q, m) on the remembered steps, raw and corrected by
        the observed/predicted ratios (uncorrected at m = 0, as the outer loop compares it)."""
        if not self._samples:
            return None
        pred = self._cache.get((q, m)) or self.predictor.predict_samples(self._samples, q, m)
        kt, kb = (self.state.k_tail, self.state.k_bulk) if m > 0 else (1.0, 1.0)
        return PredictedPoolTimes(pred.tail_s * kt, pred.bulk_s * kb, pred.tail_s, pred.bulk_s)
