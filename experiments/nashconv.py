"""Exact NashConv of a poker policy, computed by OpenSpiel.

    python -m experiments.nashconv --game=leduc_poker --policy=uniform
    python -m experiments.nashconv --game=kuhn_poker --params=policy.npz
    python -m experiments.nashconv --game=leduc_poker --params=run/params.bin \
        --loader=mypackage.mymodule:load_policy

The last line printed is the NashConv (OpenSpiel: uniform 4.7472 on Leduc, 11/12 on Kuhn).

--params loads saved parameters through a loader hook, a function `load(path, game) -> policy_fn`
where `policy_fn(obs)` maps a batch of the pool's observations (`info_state` [N, dim], `acting`
[N], `action_mask` {"action": [N, A]}) to action probabilities [N, A] (see
`actors.games.poker.policy_from_callable`). The default loader reads a .npz of a tabular policy:
one array of probabilities [A] per information-state string (the key).
"""

from __future__ import annotations

import importlib

import numpy as np
from absl import app, flags

from actors.games import poker

FLAGS = flags.FLAGS


def load_npz_table(path: str, game) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: np.asarray(data[key]) for key in data.files}


def measure(game_name: str, params: str | None = None, loader: str | None = None) -> float:
    game = poker.load_game(game_name)
    if params is None:
        policy = poker.policy_from_callable(game, poker.uniform_policy_fn)
    elif loader is None:
        policy = poker.policy_from_table(game, load_npz_table(params, game))
    else:
        module_name, _, fn_name = loader.partition(":")
        load = getattr(importlib.import_module(module_name), fn_name)
        policy = poker.policy_from_callable(game, load(params, game))
    return poker.nash_conv(game, policy)


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program)."""
    flags.DEFINE_string("game", "leduc_poker", "OpenSpiel two-player zero-sum game, e.g. kuhn_poker.")
    flags.DEFINE_enum("policy", "uniform", ["uniform"], "Built-in policy to measure (without --params).")
    flags.DEFINE_string("params", None, "Saved parameters to measure instead of --policy.")
    flags.DEFINE_string("loader", None, "module:function loading --params into a policy callable; "
                        "default: .npz tabular policy keyed by information-state string.")


def main(argv):
    del argv
    what = FLAGS.params or f"{FLAGS.policy} policy"
    value = measure(FLAGS.game, FLAGS.params, FLAGS.loader)
    print(f"game={FLAGS.game} policy={what}")
    print(f"{value:.6f}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
