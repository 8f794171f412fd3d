"""The nodes of a league program besides the coordinator: plain classes whose public methods
are their RPC surface, so a launcher can place them in one process or as Ray actors
(experiments/program.py builds the graph, experiments/launchers.py runs it).

- `LearnerGroup`: the learners of several learning agents in one process (one JAX runtime:
  identical shapes compile once) and the Reverb server holding their tables, one per agent.
  On one machine a dozen learner processes would not fit (each holds a JAX runtime); on a
  cluster the program makes one group per agent (`--learner_groups=agent`).
- `ActorGroup`: the actors of several agents in one process, each on its own thread.
- `EvaluatorNode`: plays the pairs of players the coordinator names and reports the games;
  records exact NashConv (poker) and main agents' win rates against the scripted heuristic
  (SMAX) over time.
- `ParamsSource`: how actors and evaluators reach any player's parameters.

Handles to other nodes are the nodes themselves or proxies that read like them (Ray).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from experiments.build import (
    agent_learner_configs,
    agent_races,
    agent_z_banks,
    initial_params,
    learner_setup,
    load_teachers,
    load_z_bank,
    make_game,
    make_network,
)
from experiments.config import RunConfig
from league.players import WithdrawnPlayer, draw_past_withdrawn, learning_agents
from league.results import GameResult


def lost_node(error: BaseException | None) -> BaseException | None:
    """The call to another node whose process was lost, and that Ray restarts, in `error` or
    what caused it (Ray's RayActorError and its subclasses ActorDiedError and
    ActorUnavailableError), else None: the caller tries again once that node is back; it is
    no bug."""
    import sys

    ray = sys.modules.get("ray")   # only a Ray run can lose a node this way
    seen = set()
    while ray is not None and error is not None and id(error) not in seen:
        if isinstance(error, ray.exceptions.RayActorError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class ParamsSource:
    """Parameters by player id: a learning agent's from its learner group, a frozen player's
    from the coordinator (`Coordinator.frozen_params`: the run directory is on its host only),
    the `CACHE_SIZE` most recently used kept here, since a frozen player never changes."""

    CACHE_SIZE = 64

    def __init__(self, learner_groups: Mapping[str, Any], coordinator):
        from agents.storage import Recent

        self._learners = dict(learner_groups)
        self._coordinator = coordinator
        self._frozen = Recent(self.CACHE_SIZE)   # player id -> (version, params)

    def latest_params(self, player_id: str, min_version: int | None = None):
        if player_id in self._learners:
            return self._learners[player_id].params(player_id, min_version)
        got = self._frozen.get(player_id)
        if got is None:
            got = self._coordinator.frozen_params(player_id)
            if got is None:
                raise WithdrawnPlayer(player_id)
            self._frozen.put(player_id, got)
        version, params = got
        if min_version is not None and version < min_version:
            return None
        return version, params


class _Learners:
    """The per-agent RPC surface every learner group shares (`self.learners`: agent -> learner)."""

    learners: dict
    _initial: dict

    def initial_params(self, agent_id: str):
        return self._initial[agent_id]

    def steps(self, agent_id: str) -> int:
        return self.learners[agent_id].steps()

    def snapshot(self, agent_id: str):
        return self.learners[agent_id].snapshot()

    def reset(self, agent_id: str, params) -> int:
        return self.learners[agent_id].reset(params)

    def params(self, agent_id: str, min_version: int | None = None):
        return self.learners[agent_id].params(min_version)

    def stop(self) -> None:
        self._stop.set()

    def checkpoint(self) -> None:
        from learners.learner import save_checkpoints

        save_checkpoints(self.learners)   # a full disk: one line for the group

    def run(self) -> None:
        """Round-robin over the learners (`_round`: an update each on the replay path, a chunk
        each on the device path) until `stop()`; checkpoints every `checkpoint_every_seconds`
        (a kill -9 loses at most that much)."""
        self._stop.clear()
        last_checkpoint = time.time()
        while not self._stop.is_set():
            if time.time() - last_checkpoint >= self.config.checkpoint_every_seconds:
                self.checkpoint()
                last_checkpoint = time.time()
            self._round()


class LearnerGroup(_Learners):
    """Learners for `agent_ids` sharing one process, one JAX runtime and one Reverb server
    (the replay path: actors write to their agent's table)."""

    def __init__(self, config: RunConfig, agent_ids: list[str], agent_indices: Mapping[str, int]):
        import reverb

        from actors.actor import example_unroll
        from agents.trajectory import reverb_signature
        from learners import checkpoint
        from learners.learner import Learner
        from learners.replay import make_table

        self.config = config
        self.agent_ids = list(agent_ids)
        probe, self.network, self._initial, self._teachers = learner_setup(config, agent_ids, agent_indices)
        self.spec = probe.spec
        teachers = any(t is not None for t in self._teachers.values())
        run = config.learner
        example = example_unroll(self.spec, self.network, run.unroll_length, teacher=teachers)
        learner_configs, tables = agent_learner_configs(config, agent_ids), []
        for agent in agent_ids:
            # One table per agent, named after it; sampling starts once a batch is there.
            replay = dataclasses.replace(run.replay, table=agent, min_size_to_sample=max(
                run.replay.min_size_to_sample, run.batch_size))
            learner_configs[agent] = dataclasses.replace(learner_configs[agent], replay=replay)
            tables.append(make_table(replay, reverb_signature(example), run.batch_size))
        self._server = reverb.Server(tables, port=None)
        self._address = f"localhost:{self._server.port}"
        self._client = reverb.Client(self._address)
        self.learners = {
            agent: Learner(self.network, self._initial[agent], learner_configs[agent], example,
                           reverb_address=self._address,
                           checkpoint_dir=checkpoint.directory(config.run_dir, agent),
                           teacher_params=self._teachers[agent])
            for agent in agent_ids
        }
        self._stop = threading.Event()

    def reverb_address(self) -> str:
        host = os.environ.get("LEAGUE_REVERB_HOST")
        if host is None:
            try:
                import ray

                host = ray.util.get_node_ip_address() if ray.is_initialized() else "localhost"
            except Exception:
                host = "localhost"
        return f"{host}:{self._server.port}"

    def metrics(self) -> dict[str, dict[str, float]]:
        info = self._client.server_info()  # once for every table
        return {agent: learner.metrics(info) for agent, learner in self.learners.items()}

    def _round(self) -> None:
        """One update for each learner that has a batch ready (a short sleep if none had)."""
        done = 0
        for learner in self.learners.values():
            if self._stop.is_set():
                break
            done += learner.update(1, timeout=0.005)
        if not done:
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        for learner in self.learners.values():
            learner.close()
        self._server.stop()


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
    opponent and branch). With `device.heuristic_slots` S, a main agent's first S slots play
    the game's scripted opponent (enemy race at random per game) instead: those games are not
    league games (no payoff); their win rate is the learner metric `heuristic_win_rate`. With
    `device.heuristic_forced_slots` F, the first F of them each play a task that the scripted
    opponent's `curriculum` draws for all their games (`curricula`: the group passes the tasks
    along as opaque options, adds their rows to the races array and gives their results back;
    SMAX's forced cells and handicaps: `actors.games.smax_races.curriculum`).
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
        self.heuristic_slots = {a: config.device.heuristic_slots if a in main else 0 for a in agent_ids}
        self.forced_slots = {a: config.device.heuristic_forced_slots if a in main else 0 for a in agent_ids}
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
                z_probability=config.actor.z_pseudo_reward_probability, devices=distributed.rollout_devices(),
                scripted=scripted, scripted_slots=scripted_slots,
                z_statistic=config.game_info.capabilities.z() if config.z_network else None)
        rollouts = {s: rollout(s) for s in set(self.heuristic_slots.values())}
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
                                 rollouts[self.heuristic_slots[agent]],
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
        self._heuristic_results = {a: deque(maxlen=16) for a in agent_ids if self.heuristic_slots[a]}
        # agent -> its forced slots' tasks (the scripted opponent's `curriculum`: SMAX's cells)
        game_races = config.game_info.capabilities.races
        self.curricula = {a: config.game_info.capabilities.scripted_opponent().curriculum(
            probe.fns.config, [game_races.index(r) for r in config.race_names], self.forced_slots[a],
            config.device, self._rng, self._lock) for a in agent_ids if self.forced_slots[a]}
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

        m, scripted = self.config.device.opponent_slots, self.heuristic_slots[agent_id]
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
        scripted, forced = self.heuristic_slots[agent_id], self.forced_slots[agent_id]

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


class ActorGroup:
    """The actors of several agents in one process, each running on its own thread."""

    def __init__(self, config: RunConfig, assignments: list[tuple[str, str]], coordinator,
                 learner_groups: Mapping[str, Any]):
        """`learner_groups`: agent id -> the learner group that learns it."""
        from actors.actor import Actor

        self.config = config
        params_source = ParamsSource(learner_groups, coordinator)
        # Asked again when a learner group's server is lost (Ray restarted the group: a new
        # server, another port; actors.actor.Actor._drop_learner).
        addresses = {agent: group.reverb_address for agent, group in learner_groups.items()}
        self.actors = {}
        network = teachers = z_banks = None
        races = agent_races(config)
        for index, (actor_id, agent_id) in enumerate(assignments):
            game = make_game(config, config.actor.batch_size)
            if network is None:
                network = make_network(config, game.spec)
                teachers = load_teachers(config, initial_params(network, game.spec, 0, config.seed))
                z_banks = agent_z_banks(config, load_z_bank(config, game.spec))
            actor_config = config.actor_config(index)
            # AlphaStar: main agents are conditioned on z sampled from their race's replays;
            # exploiters are not (z = 0).
            self.actors[actor_id] = Actor(actor_id, agent_id, game, network, coordinator, params_source,
                                          addresses[agent_id], agent_id, actor_config,
                                          teacher_params=None if teachers is None else teachers[races[agent_id]],
                                          z_bank=z_banks[agent_id], retry_reports_if=lost_node)
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def run(self) -> None:
        """Runs every actor on a thread until `stop()`; returns when they have all stopped.
        An actor that fails stops the group at once with its error (never a thread gone
        without a word while its learner waits for games): the launcher then restarts the
        group (Ray) or stops the run with the message (one process). When every failure is a
        call to a lost node (the coordinator restarting: `lost_node`), that error is raised
        as it is, and the Ray launcher runs the group again once the node is back."""
        def loop(actor_id, actor):
            try:
                actor.run()
            except Exception as e:
                self.errors.append(f"{actor_id} failed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                failures.append(e)

        self.errors, failures = [], []
        self._threads = [threading.Thread(target=loop, args=(i, a), daemon=True, name=i)
                         for i, a in self.actors.items()]
        for t in self._threads:
            t.start()
        while any(t.is_alive() for t in self._threads) and not self.errors:
            time.sleep(0.2)
        if self.errors:
            self.stop()
            for t in self._threads:
                t.join(timeout=10)
            if all(lost_node(e) for e in failures):
                raise lost_node(failures[0])
            first = self.errors[0].splitlines()[0]
            raise RuntimeError(f"{first}" + (f" ({len(self.errors)} actors failed)" if len(self.errors) > 1 else ""))

    def stop(self) -> None:
        for actor in self.actors.values():
            actor.stop()

    def close(self) -> None:
        """Stops the actors' refresh and writer threads (all at once: each may wait briefly
        for its last unrolls to be accepted)."""
        threads = [threading.Thread(target=a.close, daemon=True) for a in self.actors.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)

    def metrics(self) -> dict[str, dict]:
        return {i: a.metrics() for i, a in self.actors.items()}


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
            from actors.evaluator import ExactEvaluator

            self._exact = ExactEvaluator(config.game, network, params_source)
        self._stop = threading.Event()
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
                    self.heuristic_next()
                    try:
                        if not (self.exact_next() or self.evaluate_next()):
                            self._stop.wait(1.0)
                    except WithdrawnPlayer:
                        continue  # a damaged frozen player, withdrawn now: the next pair is without it
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

    def measure_against_heuristic(self) -> list[dict]:
        """Each main agent's current parameters (z = 0) against jaxmarl's scripted heuristic
        playing each race of the run: `heuristic_games` games per agent and heuristic race
        (the game's `ScriptedOpponent.play`, the agent on side 0, seed = the run's seed: every
        measurement plays the same dice, so the curve moves with the parameters; its most likely
        actions with `heuristic_greedy`), recorded in
        league.db (`heuristic`) for the dashboard's curve; returns the rows recorded."""
        if self._heuristic is None:
            return []
        network, params_source, game_config = self._heuristic
        scripted = self.config.game_info.capabilities.scripted_opponent()
        settings = self.config.evaluator
        rows = []
        for player in self._coordinator.players():
            if player["role"] != "main_agent":
                continue
            got = params_source.latest_params(player["player_id"])
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
                **({} if self._exact is None else {f"exact_{k}": v for k, v in self._exact.metrics().items()})}
