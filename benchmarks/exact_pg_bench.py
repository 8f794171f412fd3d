"""Can the learner's network reach a best response at all? Exact gradient ascent, no sampling.

    python -m benchmarks.exact_pg_bench --run_dir=D --steps=3000 --seeds=0,1 \
        --arms=softmax_table,softmax_mlp,neurd_mlp

The task is `benchmarks/best_response_bench.py`'s: one player's chips against the newest Nash
mixture of a finished poker league (seats averaged), from random initial parameters. Here the
gradient is exact instead of sampled. The player's tabular policy pi(theta) (its network run on
every information state at once) gives the exact value

    V(theta) = 1/2 sum_z c(z) u_0(z) (x_theta^0(z) x_mix^1(z) - x_mix^0(z) x_theta^1(z))

(`poker_policy.TerminalPaths`: c the chance, x the players' own reaches of terminal z), and
Adam follows one of two directions:

- softmax: grad V, the policy gradient with its expectation taken exactly;
- neurd: Neural Replicator Dynamics (Hennes et al. 2020, "Neural Replicator Dynamics: Multiagent
  Learning via Hedging Policy Gradients", eq. 8 with the threshold of sec. 4): the logits y
  follow sum_a stopgrad(A(s, a)) grad y(s, a), A(s, a) = dV/dpi(a|s) - sum_b pi(b|s) dV/dpi(b|s),
  without softmax's pi(a|s) factor, and a logit outside [-beta, beta] stops moving outward.

Arms are `<direction>_<parameters>`: parameters "table" (one logit per information state and
action: tabular softmax) or "mlp" (the run's network, or `--hidden_size`). Every `--every` steps
the policy is measured exactly (`actors.evaluator.best_response_gap`), as is the fraction of
decision states whose most likely action has probability above 0.99 (saturated).

The last line: `RESULT exact_pg value=<v> br=<b> ratio=<v/b> target=1.0 arm=<best arm>`.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

ARMS = [f"{d}_{p}" for d in ("softmax", "neurd") for p in ("table", "mlp")]


class Task:
    """The exact game of one player against a fixed tabular mixture (see the module docstring)."""

    def __init__(self, game, target):
        import jax.numpy as jnp
        from open_spiel.python import policy as os_policy

        from actors.games.poker import policy as poker_policy

        self.game, self.target = game, target
        self.paths = poker_policy.TerminalPaths(game)
        self.template = os_policy.TabularPolicy(game)
        states, actions = len(self.template.state_lookup), game.num_distinct_actions()
        dim = int(np.prod(game.information_state_tensor_shape()))
        self.info = np.zeros((states, dim), np.float32)
        self.legal = np.zeros((states, actions), bool)
        self._visit(game.new_initial_state())
        mix = self.paths.reaches(target)
        self._c, self._u = jnp.asarray(self.paths.chance), jnp.asarray(self.paths.utility)
        self._paths = [jnp.asarray(p) for p in self.paths.paths]
        self._mix = [jnp.asarray(m) for m in mix]
        self.decisions = self.legal.sum(1) > 1

    def _visit(self, state):
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                self._visit(state.child(action))
            return
        player = state.current_player()
        index = self.template.state_lookup[self.template._state_key(state, player)]  # noqa: SLF001
        self.info[index] = state.information_state_tensor(player)
        self.legal[index, state.legal_actions(player)] = True
        for action in state.legal_actions(player):
            self._visit(state.child(action))

    def value(self, table):
        """V of a [S, A] table of action probabilities (traceable)."""
        import jax.numpy as jnp

        flat = jnp.concatenate([table.ravel(), jnp.ones(1, table.dtype)])
        x0, x1 = (flat[p].prod(1) for p in self._paths)
        return 0.5 * (jnp.sum(self._c * self._u * x0 * self._mix[1])
                      - jnp.sum(self._c * self._u * self._mix[0] * x1))

    def measure(self, table) -> dict[str, float]:
        from open_spiel.python import policy as os_policy

        from actors.games.poker.exact import best_response_gap

        policy = os_policy.TabularPolicy(self.game)
        policy.action_probability_array[:] = np.asarray(table, np.float64)
        out = best_response_gap(self.game, policy, self.target, self.paths)
        probs = np.asarray(table)[self.decisions]
        out["saturated"] = float(np.mean(probs.max(1) > 0.99))
        return out


def neurd_surrogate(logits, advantages, legal, beta: float):
    """sum over legal (s, a) of stopgrad(A) * y, where y moves only while it stays in
    [-beta, beta] in the direction A pushes it (NeuRD's threshold): its gradient is NeuRD's
    direction (Hennes et al. 2020, eq. 8)."""
    import jax
    import jax.numpy as jnp

    from learners.losses import neurd_moves

    moves = neurd_moves(logits, advantages, legal, beta)
    return jnp.sum(jnp.where(moves, jax.lax.stop_gradient(advantages) * logits, 0.0))


def run_arm(task: Task, arm: str, network, spec, steps: int, every: int, seed: int,
            learning_rate: float, beta: float) -> dict:
    """{"curve": [(step, value, saturated)], "br_value"} of one arm and seed."""
    import jax
    import jax.numpy as jnp
    import optax

    from actors.games.poker import openspiel as poker
    from experiments import build

    direction, parameters = arm.split("_")
    legal = jnp.asarray(task.legal)
    states = task.legal.shape[0]
    if parameters == "table":
        theta = jnp.zeros(task.legal.shape, jnp.float32)

        def logits_of(p):
            return jnp.where(legal, p, -1e9)
    else:
        obs = {"info_state": jnp.asarray(task.info), "acting": jnp.ones(states, bool),
               poker.MASK_KEY: {poker.ACTION_HEAD: legal}}
        theta = build.initial_params(network, spec, 0, seed)

        def logits_of(p):
            out, _ = network.step(p, obs, network.initial_state(states), jnp.ones(states, bool))
            return out.logits[poker.ACTION_HEAD]

    def table_of(p):
        return jax.nn.softmax(logits_of(p))

    def ascent(p):
        if direction == "softmax":
            return task.value(table_of(p))
        probs = jax.lax.stop_gradient(table_of(p))
        dv = jax.grad(task.value)(probs)
        advantages = dv - jnp.sum(probs * dv, -1, keepdims=True)
        return neurd_surrogate(logits_of(p), advantages, legal, beta)

    optimizer = optax.adam(learning_rate)

    @jax.jit
    def step(p, state):
        grads = jax.grad(ascent)(p)
        updates, state = optimizer.update(jax.tree_util.tree_map(jnp.negative, grads), state, p)
        return optax.apply_updates(p, updates), state

    first = task.measure(table_of(theta))
    curve = [(0, first["exploiter_value"], first["saturated"])]
    state = optimizer.init(theta)
    for i in range(1, steps + 1):
        theta, state = step(theta, state)
        if i % every == 0 or i == steps:
            m = task.measure(table_of(theta))
            curve.append((i, m["exploiter_value"], m["saturated"]))
    return {"curve": curve, "br_value": first["br_value"]}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", required=True, help="a finished (or running) poker league's run directory")
    parser.add_argument("--steps", type=int, default=3000, help="Adam steps per arm and seed")
    parser.add_argument("--every", type=int, default=1000, help="steps between exact measurements")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (initial parameters)")
    parser.add_argument("--arms", default="softmax_table,softmax_mlp,neurd_mlp",
                        help="comma-separated <softmax|neurd>_<table|mlp>")
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="Adam's learning rate")
    parser.add_argument("--beta", type=float, default=10.0, help="NeuRD's logit threshold")
    parser.add_argument("--hidden_size", type=int, default=0, help="the mlp arms' width (0: the run's network)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from actors.games import make_batch_game
    from actors.games.poker import openspiel as poker
    from actors.games.poker import policy as poker_policy
    from benchmarks.best_response_bench import (  # its flags are absl's: none parsed here
        nash_target,
        print_finals,
    )
    from experiments import build
    from experiments.config import RunConfig

    try:
        run_config = RunConfig.from_dict(json.load(open(f"{args.run_dir}/config.json")))
    except FileNotFoundError:
        raise SystemExit(f"{args.run_dir}/config.json not found: pass a league's run directory") from None
    if run_config.game not in ("kuhn_poker", "leduc_poker"):
        raise SystemExit(f"{args.run_dir} is a {run_config.game} league; this benchmark needs a poker league")
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms names {unknown}; choose from {', '.join(ARMS)}")
    ids, weights, params = nash_target(args.run_dir)
    game = poker.load_game(run_config.game)
    spec = make_batch_game(run_config.game, 8).spec
    theirs = build.make_network(run_config, spec)
    walk = poker_policy.PolicyWalk(game, theirs)
    task = Task(game, poker_policy.mix_policies(game, [walk(p) for p in params], weights))
    if theirs.core_size > 1:
        raise SystemExit(f"{args.run_dir}'s network has a recurrent core; the mlp arms need one without")
    network = (build.make_network(RunConfig.make(game=run_config.game, hidden_size=args.hidden_size), spec)
               if args.hidden_size else theirs)
    print(f"target: the Nash mixture of {args.run_dir} ({len(ids)} players); learning rate "
          f"{args.learning_rate}, beta {args.beta}", flush=True)
    finals = {}
    for arm in arms:
        for seed in (int(s) for s in args.seeds.split(",") if s):
            start = time.perf_counter()
            out = run_arm(task, arm, network, spec, args.steps, args.every, seed,
                          args.learning_rate, args.beta)
            br = out["br_value"]
            finals.setdefault(arm, []).append(out["curve"][-1][1])
            print(f"  [{arm} seed {seed}] best response {br:.4f}; value (saturated) at steps "
                  + ", ".join(f"{i}: {v:+.4f} ({s:.2f})" for i, v, s in out["curve"])
                  + f"; {time.perf_counter() - start:.0f} s", flush=True)
    print_finals("exact_pg", finals, br, f"final value (seeds {args.seeds})", digits=4)


if __name__ == "__main__":
    main()
