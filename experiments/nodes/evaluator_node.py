"""`EvaluatorNode`: plays the pairs of players the coordinator names and reports the games;
records exact NashConv (poker) and main agents' win rates against the scripted heuristic (SMAX)
over time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from experiments.build import make_game, make_network
from experiments.config import RunConfig
from experiments.nodes.base import CoreShare, ParamsSource
from league.players import WithdrawnPlayer
from league.results import GameResult


class EvaluatorNode:
    """Keeps the payoff matrix honest: plays the pairs with the fewest games between them.

    Besides, off the actors' path: in poker the exact NashConv of the Nash mixture and of each
    main agent every `nash_conv_every_seconds`, and each exploiter snapshot's gap to a best
    response against its target once (`measure_exploiter_gap`); in SMAX (evaluator_0 only) each main agent's
    win rate against jaxmarl's scripted heuristic every `heuristic_every_seconds`, as OpenAI
    Five tracked TrueSkill against fixed reference agents."""

    def __init__(self, config: RunConfig, coordinator, learner_groups: Mapping[str, Any],
                 evaluator_id: str = "evaluator_0", device: bool = False):
        from actors.evaluator import Evaluator, EvaluatorConfig

        self.config = config
        self.evaluator_id = evaluator_id
        self._coordinator = coordinator
        game = make_game(config, config.evaluator.games)
        network = make_network(config, game.spec)
        params_source = ParamsSource(learner_groups, coordinator)
        self._params_source = params_source
        # The device path: `device.evaluation_pairs` pairs at once in one vmapped program.
        self._device = self._device_evaluation(game, network) if device else None
        self._evaluator = Evaluator(game, network, params_source,
                                    config=EvaluatorConfig(seed=config.seed, greedy=config.evaluator.greedy),
                                    evaluator_id=evaluator_id)
        # One evaluator measures against the heuristic: more would repeat the same curve.
        self._heuristic = None
        if (config.game_info.capabilities.scripted_opponent and evaluator_id == "evaluator_0"
                and config.evaluator.heuristic_every_seconds > 0):
            self._heuristic = (network, params_source, game.fns.config)
        self._last_heuristic = time.monotonic()
        self._exact, self._last_nash_conv = None, time.monotonic()
        if config.evaluator.exact and config.game_info.capabilities.exact_evaluator:
            tools = config.game_info.capabilities.exact_evaluator()  # the game's exact tools
            self._exact = tools.ExactEvaluator(config.game, network, params_source)
        self._stop = threading.Event()
        self._share = CoreShare(config.evaluator.core_share)   # --evaluator.core_share
        self.games = 0
        self.heuristic_measurements = 0

    def run(self) -> None:
        """Evaluates until `stop()`, on a thread of its own: `run` returns within a second of
        the stop, without waiting for the evaluation in flight (its first program may be
        compiling for a minute); an error of the evaluation is raised here."""
        self._stop.clear()
        error: list[BaseException] = []

        def loop():
            try:
                while not self._stop.is_set():
                    started = time.monotonic()
                    self.heuristic_next()
                    try:
                        did = self.exact_next() or self.evaluate_next()
                    except WithdrawnPlayer:
                        continue  # a damaged frozen player, withdrawn now: the next pair is without it
                    finally:
                        rest = self._share.worked(time.monotonic() - started)
                    self._stop.wait(rest if did else max(rest, 1.0))
            except Exception as e:   # after a stop: the run is ending, its nodes closing
                if not self._stop.is_set():
                    error.append(e)

        worker = threading.Thread(target=loop, daemon=True, name=f"{self.evaluator_id}-loop")
        worker.start()
        while worker.is_alive() and not self._stop.wait(0.5):
            pass
        worker.join(timeout=1.0)
        if error:
            raise error[0]

    def heuristic_next(self) -> int:
        """SMAX, evaluator_0: once `heuristic_every_seconds` have passed since the last time
        (or the start), measures the main agents against the heuristic; returns the number of
        rows recorded (0: not due, or not measured here)."""
        if self._heuristic is None:
            return 0
        if time.monotonic() - self._last_heuristic < self.config.evaluator.heuristic_every_seconds:
            return 0
        self._last_heuristic = time.monotonic()
        return len(self.measure_against_heuristic())

    def exact_next(self) -> int:
        """Games with an exact meta-game (poker): computes the exact payoffs of the next frozen
        player the coordinator names against every frozen player already in, and reports them;
        returns the number of pairs (0: nothing to do, or no exact meta-game)."""
        if self._exact is None:
            return 0
        every = self.config.evaluator.nash_conv_every_seconds
        if every > 0 and time.monotonic() - self._last_nash_conv >= every:
            self._last_nash_conv = time.monotonic()
            self.measure_exploitability()
        work = self._coordinator.exact_work()
        if not work:
            return 0
        payoffs = self._exact.payoffs(work["player"], work["against"])
        # A player whose parameters are not finite (a learner whose updates were all skipped
        # snapshotted NaN) has no policy: it is withdrawn, not reported (issue 31, nothing silent).
        # When only some opponents' payoffs are not finite, the player plays finitely against
        # the others: those opponents' parameters are the bad ones, and they are withdrawn.
        bad = [o for o, values in payoffs.items() if not np.all(np.isfinite(values))]
        why = ("its exact payoffs are not finite: its parameters hold NaN or inf (a learner whose "
               "updates were skipped as non-finite?)")
        if bad and len(bad) == len(payoffs):
            self._coordinator.withdraw(work["player"], why)
            return 1
        for opponent in bad:
            self._coordinator.withdraw(opponent, why)
        payoffs = {o: values for o, values in payoffs.items() if o not in bad}
        self.measure_exploiter_gap(work["player"])
        self._coordinator.report_exact(work["player"], payoffs)
        return len(payoffs) + 1

    def measure_exploiter_gap(self, player_id: str) -> list[dict]:
        """For an exploiter's snapshot: its gap to a best response against its target now
        (`ExactEvaluator.exploiter_gap`), recorded in league.db (`exploiter_gaps`). A main
        exploiter's target is each main agent's current parameters, a league exploiter's the
        Nash mixture its life trained against when it had a fixed one (`Coordinator.trained_target`),
        else the league's latest (none before the first Nash). Returns the gaps ([]: not an
        exploiter's snapshot). Called before the snapshot's exact payoffs are reported, so a
        snapshot whose measurement was cut short is named again by `exact_work`."""
        players = {p["player_id"]: p for p in self._coordinator.players()}
        parent = players.get(players.get(player_id, {}).get("parent"))
        role = parent and parent["role"]
        if role not in ("main_exploiter", "league_exploiter"):
            return []
        frozen = {p for p, q in players.items() if q["role"] == "historical"}
        if role == "main_exploiter":
            targets = [(p, {p: 1.0}) for p, q in players.items() if q["role"] == "main_agent"]
        else:
            targets = [("nash", self._coordinator.trained_target(player_id) or self._coordinator.nash_weights())]
        gaps = [g for name, weights in targets
                if (g := self._exact.exploiter_gap(player_id, name, weights, frozen)) is not None]
        if gaps:
            self._coordinator.record_exploiter_gaps(player_id, gaps)
        return gaps

    def _device_evaluation(self, game, network):
        """(rollout, jitted `actors.rollout.evaluate_pairs`) of `evaluation_games` games per pair."""
        import functools

        import jax

        from actors import rewards
        from actors.rollout import DeviceRollout, evaluate_pairs

        rollout = DeviceRollout(network, game.fns, self.config.evaluator.games, 1, 2,
                                rewards.device_reward("outcome", game.spec),
                                races=bool(self.config.game_info.capabilities.races))
        return rollout, jax.jit(functools.partial(evaluate_pairs, rollout))

    def evaluate_pairs_next(self) -> int:
        """The device path: `device.evaluation_pairs` pairs the coordinator names (the fewest
        games between them), `evaluation_games` games each in the two players' own races, in
        one vmapped program; one counted row per pair. Returns the number of games."""
        import jax
        import jax.numpy as jnp

        pairs = self._coordinator.evaluation_matches(self.config.device.evaluation_pairs)
        if not pairs:
            return 0
        padded = pairs + [pairs[-1]] * (self.config.device.evaluation_pairs - len(pairs))
        params = {p: self._params_source.latest_params(p)[1]
                  for m in pairs for p in (m["home"], m["away"])}

        def stacked(side):
            return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]),
                                          *[params[m[side]] for m in padded])

        races = None
        game_races = self.config.game_info.capabilities.races
        if game_races:
            races = jnp.asarray([[[game_races.index(m["home_race"]), game_races.index(m["away_race"])]]
                                 * self.config.evaluator.games for m in padded], jnp.int32)
        key = jax.random.fold_in(jax.random.PRNGKey(self.config.seed), self.games)
        results = jax.device_get(self._device[1](stacked("home"), stacked("away"), key, races))
        rows = [GameResult(m["home"], m["away"], wins=int(results.wins[i]),
                           draws=int(results.draws[i]), losses=int(results.losses[i]),
                           score=float(results.score[i]), length=int(results.length[i]),
                           branch="evaluation", source="evaluator", actor_id=self.evaluator_id,
                           **({"home_race": m["home_race"], "away_race": m["away_race"]}
                              if self.config.game_info.capabilities.races else {}))
                for i, m in enumerate(pairs)]
        games = self._coordinator.report([r for r in rows if r.games])
        self.games += games
        return games

    def evaluate_next(self) -> int:
        """Plays `evaluation_games` games of the pair the coordinator names, in the two
        players' own races, and reports them; returns the number of games (0: no pair yet).
        On the device path: `evaluate_pairs_next`."""
        if self._device is not None:
            return self.evaluate_pairs_next()
        matches = self._coordinator.evaluation_matches(1)
        if not matches:
            return 0
        m = matches[0]
        results = self._evaluator.evaluate(m["home"], m["away"], self.config.evaluator.games,
                                           races=(m["home_race"], m["away_race"]))
        self._coordinator.report(results)
        self.games += len(results)
        return len(results)

    def measure_exploitability(self) -> dict[str, float]:
        """Exact NashConv of the league's latest Nash mixture ("nash"), of the average of its
        published mixtures ("nash_average", `Coordinator.average_nash_weights`) and of each main
        agent, recorded in league.db (`exploitability`) for the dashboard's curve."""
        players = self._coordinator.players()
        mains = [p["player_id"] for p in players if p["role"] == "main_agent"]
        frozen = {p["player_id"] for p in players if p["role"] == "historical"}
        mixtures = {"nash": self._coordinator.nash_weights(),
                    "nash_average": self._coordinator.average_nash_weights()}
        values = self._exact.nash_conv(mixtures, mains, frozen)
        self._coordinator.record_exploitability(values)
        return values

    def run_agent_params(self, player: dict, players: list[dict]):
        """(version, params) of the run's agent of `player`'s race (`RUN_DIR:result:RACE`,
        `experiments.agent_ref`): the main agent's current parameters averaged with its
        `AVERAGE_NEWEST` newest snapshots', as the run names its agent (a snapshot whose
        parameters are not to be had is left out); its current ones alone while it has no
        snapshot. None while its parameters are not to be had."""
        from experiments import agent_ref

        got = self._params_source.latest_params(player["player_id"])
        if got is None:
            return None
        trees = []
        for snapshot in agent_ref.frozen_snapshots(players, player["player_id"])[-agent_ref.AVERAGE_NEWEST:]:
            try:
                held = self._params_source.latest_params(snapshot["player_id"])
            except LookupError:   # not stored (withdrawn, or not written yet): left out
                held = None
            if held is not None:
                trees.append(held[1])
        return got[0], (agent_ref.average_trees(trees + [got[1]]) if trees else got[1])

    def measure_against_heuristic(self) -> list[dict]:
        """The run's agent of each main agent (`run_agent_params`: its current parameters
        averaged with its newest snapshots', the agent `RUN_DIR:result:RACE` names; z = 0)
        against jaxmarl's scripted heuristic
        playing each race of the run: `heuristic_games` games per agent and heuristic race
        (the game's `ScriptedOpponent.play`, the agent on side 0, seed = the run's seed: every
        measurement plays the same dice, so the curve moves with the parameters; its most likely
        actions with `heuristic_greedy`), recorded in
        league.db (`heuristic`) for the dashboard's curve; returns the rows recorded."""
        if self._heuristic is None:
            return []
        network, _, game_config = self._heuristic
        scripted = self.config.game_info.capabilities.scripted_opponent()
        settings = self.config.evaluator
        rows = []
        players = self._coordinator.players()
        for player in players:
            if player["role"] != "main_agent":
                continue
            got = self.run_agent_params(player, players)
            if got is None:
                continue
            version, params = got
            for opponent_race in self.config.race_names:
                if self._stop.is_set():  # a part of a measurement would skew the curve's mean
                    return []
                outcomes = np.asarray(scripted.play(
                    network, params, (player["race"], opponent_race), settings.heuristic_games,
                    seed=self.config.seed, config=game_config, greedy=settings.heuristic_greedy))
                wins, draws = int(np.sum(outcomes > 0)), int(np.sum(outcomes == 0))
                rows.append({"player_id": player["player_id"], "version": int(version), "race": player["race"],
                             "opponent_race": opponent_race, "win_rate": (wins + 0.5 * draws) / len(outcomes),
                             "games": len(outcomes), "wins": wins, "draws": draws,
                             "losses": int(np.sum(outcomes < 0))})
        if rows:
            self._coordinator.record_heuristic(rows)
        self.heuristic_measurements += 1
        return rows

    def stop(self) -> None:
        self._stop.set()

    def metrics(self) -> dict:
        return {"games": self.games, "heuristic_measurements": self.heuristic_measurements,
                "core_share": self._share.measured(),
                **({} if self._exact is None else {f"exact_{k}": v for k, v in self._exact.metrics().items()})}
