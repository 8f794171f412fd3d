"""`ActorGroup`: the actors of several agents in one process (the replay path), each on its own
thread."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

from experiments.build import (
    agent_races,
    agent_z_banks,
    initial_params,
    load_teachers,
    load_z_bank,
    make_game,
    make_network,
)
from experiments.config import RunConfig
from experiments.nodes.base import ParamsSource, lost_node


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
