"""`LearnerGroup`: the learners of several learning agents in one process (one JAX runtime:
identical shapes compile once) and the Reverb server holding their tables, one per agent (the
replay path). On one machine a dozen learner processes would not fit (each holds a JAX runtime);
on a cluster the program makes one group per agent (`--learner_groups=agent`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping

from experiments.build import agent_learner_configs, learner_setup
from experiments.config import RunConfig
from experiments.nodes.base import _Learners


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
