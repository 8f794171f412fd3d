"""`DeviceLearnerGroup`: learners that play their own games on their device (the device path),
with what only it uses: `chunk_order` (a round's chunks, interleaved), `OpponentBank` (opponents'
parameters on the device) and `make_populations` (agents that share one program).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from experiments.build import agent_learner_configs, agent_z_banks, learner_setup, load_z_bank
from experiments.config import RunConfig
from experiments.nodes.base import _Learners
from league.players import WithdrawnPlayer, draw_past_withdrawn, learning_agents
from league.results import GameResult


def chunk_order(units: list, chunks: list[int]) -> list:
    """A round's chunks in the order they are dispatched: every unit's first chunk, then the
    second chunk of those with two or more, and so on (a unit with `chunks[i]` chunks appears
    that many times)."""
    return [unit for k in range(max(chunks, default=0)) for unit, n in zip(units, chunks) if n > k]


class OpponentBank:
    """Opponents' parameters on the device for a learner group's chunks: a co-located learner's
    current ones; another group's learning agent's from the coordinator, refreshed every
    `refresh_seconds`; a frozen player's from the coordinator once (`SIZE` kept, the least
    recently used leave first: a frozen player never changes)."""

    SIZE = 256

    def __init__(self, learners: Mapping[str, Any], coordinator, refresh_seconds: float):
        from agents.storage import Recent

        self._learners, self._coordinator, self._refresh = learners, coordinator, refresh_seconds
        self._frozen = Recent(self.SIZE)   # player id -> device params
        self._learning: dict[str, tuple[float, Any]] = {}  # agent id -> (fetched at, device params)
        self._lock = threading.Lock()   # chunks draw on threads

    def params(self, player_id: str, learning: bool):
        """The player's parameters on the device; WithdrawnPlayer for a frozen player whose
        file is damaged (the coordinator has withdrawn it)."""
        import jax

        if player_id in self._learners:
            return self._learners[player_id].current_params()
        with self._lock:
            if learning:
                fetched = self._learning.get(player_id)
                if fetched is None or time.monotonic() - fetched[0] >= self._refresh:
                    _, params = self._coordinator.learner_params(player_id)
                    fetched = (time.monotonic(), jax.device_put(params))
                    self._learning[player_id] = fetched
                return fetched[1]
            params = self._frozen.get(player_id)
            if params is None:
                got = self._coordinator.frozen_params(player_id)
                if got is None:
                    raise WithdrawnPlayer(player_id)
                params = jax.device_put(got[1])
                self._frozen.put(player_id, params)
            return params


class DeviceLearnerGroup(_Learners):
    """Learners for `agent_ids` that play their own games on their device (the device path,
    Podracer's Anakin: `learners.device.DeviceLearner` over `actors.rollout.DeviceRollout`).

    `run` goes round-robin over the agents, one chunk each: the agent's exact match
    distribution from the coordinator (`Coordinator.match_distribution`, what `request_match`
    samples from), `device.opponent_slots` opponents drawn from it for the chunk's B games (B /
    M games each, in the two players' races), their parameters from a device-resident bank
    (frozen players cached by id; learning opponents refreshed every
    `actor.param_refresh_seconds`; the agent itself for self-play), K updates in one jitted
    call, then the chunk's results in one `Coordinator.report` batch (one `GameResult` per
    opponent and branch). With `device.scripted_slots` S, a main agent's first S slots play
    the game's scripted opponent (enemy race at random per game) instead: those games are not
    league games (no payoff); their win rate is the learner metric `heuristic_win_rate`. With
    `device.scripted_task_slots` F, the first F of them each play a task that the scripted
    opponent's `curriculum` draws for all their games (`curricula`: the group passes the tasks
    along as opaque options, adds their rows to the races array and gives their results back;
    SMAX's curriculum is its forced armies). With `device.scripted_task_levels` the
    curriculum moves each task's level with the agent's results.
    A round gives each main agent `device.main_agent_chunks` chunks and each exploiter one,
    interleaved (`chunk_order`)."""

    HEURISTIC = "heuristic"  # the opponent named in a chunk's slots played by the scripted AI

    def __init__(self, config: RunConfig, agent_ids: list[str], agent_indices: Mapping[str, int],
                 coordinator, name: str = "learners"):
        from actors import rewards
        from actors.actor import example_unroll, value_shape
        from actors.rollout import DeviceRollout, ZSource
        from learners import checkpoint, distributed
        from learners.device import DeviceLearner

        self.config, self.name = config, name
        self._agent_indices = dict(agent_indices)
        self.agent_ids = list(agent_ids)
        self._coordinator = coordinator
        probe, self.network, self._initial, self._teachers = learner_setup(config, agent_ids, agent_indices)
        self.spec = probe.spec
        run = config.learner
        main = {p.player_id for p in learning_agents(config.league) if p.role == "main_agent"}
        self.scripted_slots = {a: config.device.scripted_slots if a in main else 0 for a in agent_ids}
        self.task_slots = {a: config.device.scripted_task_slots if a in main else 0 for a in agent_ids}
        self._fns = probe.fns
        self.chunks_per_round = {a: config.device.main_agent_chunks if a in main else 1 for a in agent_ids}

        def rollout(scripted_slots: int):
            scripted = None
            if scripted_slots:  # the game's scripted opponent on side 1 of those slots' games
                scripted = functools.partial(config.game_info.capabilities.scripted_opponent().side,
                                             probe.fns, 1)
            return DeviceRollout(
                self.network, probe.fns, batch_size=run.batch_size, num_slots=config.device.opponent_slots,
                unroll_length=run.unroll_length,
                reward_fn=rewards.device_reward(config.reward, self.spec, team_spirit=(
                    config.actor.team_spirit_start, config.actor.team_spirit_end, config.actor.team_spirit_updates)),
                value_shape=value_shape(self.network), races=bool(config.game_info.capabilities.races),
                z_probability=config.actor.z_reward_probability, devices=distributed.rollout_devices(),
                scripted=scripted, scripted_slots=scripted_slots,
                z_statistic=config.game_info.capabilities.z() if config.z_network else None)
        rollouts = {s: rollout(s) for s in set(self.scripted_slots.values())}
        # AlphaStar: main agents are conditioned on z sampled from their race's replays;
        # exploiters are not (z = 0).
        banks = agent_z_banks(config, load_z_bank(config, self.spec)) if config.z_network else {}
        z_sources = {a: None if banks.get(a) is None else ZSource(banks[a].table, banks[a].counts)
                     for a in agent_ids}
        teachers = any(t is not None for t in self._teachers.values())
        example = example_unroll(self.spec, self.network, run.unroll_length, teacher=teachers)
        learner_configs = agent_learner_configs(config, agent_ids)
        self.learners = {
            agent: DeviceLearner(self.network, self._initial[agent], learner_configs[agent], example,
                                 rollouts[self.scripted_slots[agent]],
                                 updates_per_chunk=config.device.updates_per_chunk,
                                 seed=config.seed * 1009 + agent_indices[agent],
                                 checkpoint_dir=checkpoint.directory(config.run_dir, agent),
                                 teacher_params=self._teachers[agent], z_source=z_sources[agent])
            for agent in agent_ids
        }
        self._rng = np.random.default_rng(config.seed * 7919 + min(agent_indices[a] for a in agent_ids))
        self._lock = threading.Lock()  # the bank and the random draws: chunks run on threads
        self._pool = None
        self.bank = OpponentBank(self.learners, coordinator, config.actor.param_refresh_seconds)
        self._stop = threading.Event()
        self._closed = False
        self.games = 0
        self.errors: list[str] = []
        # agent -> its last chunks' (wins, draws, losses) against the heuristic
        self._heuristic_results = {a: deque(maxlen=16) for a in agent_ids if self.scripted_slots[a]}
        # agent -> its task slots' tasks (the scripted opponent's `curriculum`)
        game_races = config.game_info.capabilities.races
        self.curricula = {a: config.game_info.capabilities.scripted_opponent().curriculum(
            probe.fns.config, [game_races.index(r) for r in config.race_names], self.task_slots[a],
            config.device, self._rng, self._lock) for a in agent_ids if self.task_slots[a]}
        self._in_round, self._playing = False, set()  # agents whose chunks run now
        self.populations, self._population_agents, self._alone = make_populations(self)
        # population -> its last chunks' (host seconds, program seconds)
        self._host_time = {id(p): deque(maxlen=16) for p in self.populations}

    def draw_opponents(self, agent_id: str):
        """(Opponents, races [B, 2] or None, slots: [(opponent, branch)], the match
        distribution) of the agent's next chunk, drawn from its match distribution; with forced
        slots (`curricula`) the races array gains the rows of their tasks ([B, 1 + R, 2]:
        the curriculum's `task_rows`) and a forced slot is (`HEURISTIC`, its task)."""
        import jax
        import jax.numpy as jnp

        from actors.rollout import Opponents

        m, scripted = self.config.device.opponent_slots, self.scripted_slots[agent_id]
        game_races = self.config.game_info.capabilities.races

        def draw():
            dist = self._coordinator.match_distribution(agent_id)
            with self._lock:
                picks = self._rng.choice(len(dist["opponents"]), size=m - scripted,
                                         p=np.asarray(dist["probabilities"]))
            slots = [(dist["opponents"][i], dist["branches"][i]) for i in picks]
            learning = set(dist["learning"])
            own = self.learners[agent_id].current_params()
            # a damaged frozen player raises WithdrawnPlayer here, now out of the distribution
            return dist, slots, [own if opp == agent_id else self.bank.params(opp, opp in learning)
                                 for opp, _ in slots]
        dist, slots, params = draw_past_withdrawn(draw, agent_id)
        # the scripted slots come first (the forced ones first of them, named by their task);
        # their parameters are not used
        curriculum = self.curricula.get(agent_id)
        forced = (curriculum.draw(self.network, self.learners[agent_id].current_params(),
                                  game_races.index(dist["home_race"])) if curriculum else [])
        slots = ([(self.HEURISTIC, task) for task in forced]
                 + [(self.HEURISTIC, self.HEURISTIC)] * (scripted - len(forced)) + slots)
        params = [params[0]] * scripted + params
        bank = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *params)
        use_self = jnp.asarray([opp == agent_id for opp, _ in slots])
        races = None
        if game_races:
            home, per_game = game_races.index(dist["home_race"]), self.config.learner.batch_size // m
            away = [game_races.index(dist["races"][opp]) for opp, _ in slots[scripted:]]
            with self._lock:
                enemies = self._rng.choice([game_races.index(r) for r in self.config.race_names],
                                           size=(scripted - len(forced)) * per_game)
            forced_races = [task[0] for task in forced]   # a task's first entry: the enemy race
            races = np.stack([np.full(m * per_game, home),
                              np.concatenate([np.repeat(forced_races, per_game).astype(int), enemies,
                                              np.repeat(away, per_game)])], 1)
            if forced:
                races = np.stack([races, *curriculum.task_rows(forced, per_game, m * per_game)], 1)
            races = jnp.asarray(races.astype(np.int32))
        return Opponents(bank, use_self), races, slots, dist

    def play_chunk(self, agent_id: str) -> int:
        """One chunk of the agent (see the class docstring); returns the games reported."""
        opponents, races, slots, dist = self.draw_opponents(agent_id)
        results = self.learners[agent_id].play_and_learn(opponents, races)
        return self.record_chunk(agent_id, results, slots, dist)

    def play_population_chunk(self, population) -> int:
        """One chunk of every agent of `population` (`learners.population.Population`) as one
        program: each agent's opponents drawn as for its own chunk; returns the games reported."""
        ids = self._population_agents[id(population)]
        t0 = time.perf_counter()
        drawn = [self.draw_opponents(agent_id) for agent_id in ids]
        races = None if drawn[0][1] is None else [d[1] for d in drawn]
        t1 = time.perf_counter()
        results = population.play_and_learn([d[0] for d in drawn], races)
        t2 = time.perf_counter()
        games = sum(self.record_chunk(agent_id, r, d[2], d[3]) for agent_id, r, d in zip(ids, results, drawn))
        # The host's share of the chunk's wall time: drawing opponents, then reporting results
        # (the program's own time includes its transfers in and out).
        self._host_time[id(population)].append(((t1 - t0) + (time.perf_counter() - t2), t2 - t1))
        return games

    def record_chunk(self, agent_id: str, results, slots, dist) -> int:
        """The chunk's results: the scripted slots' win rates, the forced slots' to their
        curriculum, the league games reported to the coordinator in one batch; returns the
        games reported."""
        if self._closed:   # a chunk that ended after the final checkpoints: not learnt, not counted
            return 0
        keys = ("wins", "draws", "losses", "score", "length")
        sums: dict[tuple[str, str], dict] = {}
        scripted, forced = self.scripted_slots[agent_id], self.task_slots[agent_id]

        def outcomes(part: slice):
            return [int(getattr(results, k)[part].sum()) for k in ("wins", "draws", "losses")]

        if forced:
            self.curricula[agent_id].record([task for _, task in slots[:forced]],
                                            [outcomes(slice(m, m + 1)) for m in range(forced)])
        if scripted > forced:
            self._heuristic_results[agent_id].append(outcomes(slice(forced, scripted)))
        for m, (opp, branch) in enumerate(slots[scripted:], scripted):  # same opponent and branch: added up
            total = sums.setdefault((opp, branch), dict.fromkeys(keys, 0))
            for k in keys:
                total[k] += getattr(results, k)[m].item()
        rows = [GameResult(agent_id, opp, **total, branch=branch, source="device", actor_id=self.name,
                           **({"home_race": dist["home_race"], "away_race": dist["races"][opp]}
                              if self.config.game_info.capabilities.races else {}))
                for (opp, branch), total in sums.items()]
        rows = [r for r in rows if r.games]
        games = self._coordinator.report(rows) if rows else 0
        self.games += games
        return games

    # -- the node's loop ------------------------------------------------------------------

    def _round(self) -> None:
        """A round: each agent's chunks (`chunks_per_round`: main agents
        `device.main_agent_chunks`, exploiters one), interleaved: every agent's first chunk is
        dispatched before any agent's second (`chunk_order`), so on a new league no agent waits
        for another's whole share, and its first chunk (its program's compile) comes early.
        `device.threads` chunks run at a time (JAX runs them side by side: one jitted program
        alone does not keep this machine's cores busy), never two of one agent at once."""
        from concurrent.futures import ThreadPoolExecutor, wait

        threads = self._thread_count()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{self.name}-chunk")
        units = [*self.populations, *self._alone]
        pending = chunk_order(units, [self.chunks_per_round[self._agents_of(u)[0]] for u in units])
        busy: set = set()
        turn = threading.Condition()

        def next_unit():
            with turn:
                while pending and not self._stop.is_set():
                    unit = next((u for u in pending if u not in busy), None)
                    if unit is not None:
                        pending.remove(unit)   # its earliest chunk in the order
                        busy.add(unit)
                        self._playing.update(self._agents_of(unit))
                        return unit
                    turn.wait(0.1)
                return None

        def worker():
            while (unit := next_unit()) is not None:
                try:
                    if isinstance(unit, str):
                        self.play_chunk(unit)
                    else:
                        self.play_population_chunk(unit)
                finally:
                    with turn:
                        busy.discard(unit)
                        self._playing.difference_update(self._agents_of(unit))
                        turn.notify_all()

        self._in_round = True
        try:
            futures = [self._pool.submit(worker) for _ in range(threads)]
            while wait(futures, timeout=0.25).not_done:
                if self._stop.is_set():   # stopping: the chunks in flight end on their own (`close`)
                    return
            for future in futures:
                future.result()
        finally:
            self._in_round = False

    def _agents_of(self, unit) -> list[str]:
        """The agents of a unit of a round: one agent, or a population program's."""
        return [unit] if isinstance(unit, str) else self._population_agents[id(unit)]

    def _thread_count(self) -> int:
        """Chunks run at once: `device.threads`, else one per core (at most one per agent)."""
        return max(1, self.config.device.threads or min(len(self.agent_ids), os.cpu_count() or 1))

    def metrics(self) -> dict[str, dict[str, float]]:
        """Each learner's metrics; with heuristic slots, `heuristic_win_rate` (wins and half the
        draws, the agent's last 16 chunks against the heuristic), `heuristic_draw_rate` (a side
        that cannot win draws out the clock) and `heuristic_games`; with forced slots their
        curriculum's (`curricula`); `waiting_for_turn` 1 while a round runs other agents' chunks
        and none of this one's (the coordinator's stall watch does not count that time); in a
        population program, `host_share`: the share of its last 16 chunks' wall time spent on
        the host (drawing opponents, reporting results) rather than in the program."""
        out = {agent: learner.metrics() for agent, learner in self.learners.items()}
        for agent, m in out.items():
            m["waiting_for_turn"] = float(self._in_round and agent not in self._playing)
        for agent, chunks in self._heuristic_results.items():
            wins, draws, losses = np.sum(list(chunks), 0) if chunks else (0, 0, 0)
            if games := wins + draws + losses:
                out[agent].update(heuristic_win_rate=(wins + 0.5 * draws) / games,
                                  heuristic_draw_rate=draws / games, heuristic_games=float(games))
        for agent, tasks in self.curricula.items():
            out[agent].update(tasks.metrics())
        for population in self.populations:
            times = list(self._host_time[id(population)])
            if times:
                host, program = np.sum(times, 0)
                for agent in self._population_agents[id(population)]:
                    out[agent]["host_share"] = float(host / (host + program))
        return out

    def close(self) -> None:
        """Final checkpoints without waiting for the chunks in flight (a first chunk may be
        compiling for minutes): each learner drops a chunk that ends after its checkpoint
        (`DeviceLearner.close`), and its games are not reported."""
        self._stop.set()
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for learner in self.learners.values():
            learner.close()


def make_populations(group: DeviceLearnerGroup):
    """With `device.population`, a learner group's agents that share a population key and their
    chunks per round as one program each (`learners.population.Population`, split into
    `device.population_parts`); the rest play alone. Returns (populations, {id(population): its
    agents}, agents alone)."""
    from learners import distributed
    from learners.population import Population, population_key

    config = group.config
    if not config.device.population:
        return [], {}, list(group.agent_ids)
    groups: dict = {}
    for agent in group.agent_ids:
        key = (population_key(group.learners[agent]), group.chunks_per_round[agent])
        groups.setdefault(key, []).append(agent)
    populations, members, alone = [], {}, []
    parts = config.device.population_parts or group._thread_count()
    split = [part for agents in groups.values()
             for part in np.array_split(np.array(agents, object), max(1, min(parts, len(agents) // 2)))]
    for agents in (list(part) for part in split):
        if len(agents) == 1:
            alone.extend(agents)
            continue
        # several processes (--distributed.*): what the others build to run it with this one
        # (`experiments.distributed_league.population_program` builds it from these)
        recipe = None if not distributed.multiprocess() else (
            "experiments.distributed_league:population_program", config.to_dict(),
            list(group.agent_ids), dict(group._agent_indices), group.name, len(populations))
        population = Population([group.learners[a] for a in agents], recipe)
        populations.append(population)
        members[id(population)] = agents
    return populations, members, alone
