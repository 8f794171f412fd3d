"""Kuhn and Leduc poker: the JAX game, OpenSpiel's pool and exact tools, policies as tables.

    game.py       the JAX game (`PokerFunctions`, `JaxPokerGame`), equal to OpenSpiel's on every
                  history; its `text` drawing for a person playing it (`experiments.play`)
    openspiel.py  OpenSpiel's games as a pool (`OpenSpielPool`), `nash_conv`, best responses and
                  policy adapters (`policy_from_callable`, `policy_from_table`)
    policy.py     a recurrent network as an exact tabular policy (`network_policy`), mixtures of
                  players (`mix_policies`), terminal reaches and exact payoffs (`TerminalPaths`)
    exact.py      the `exact_evaluator` capability: `ExactEvaluator` (the league's exact
                  measurements), `best_response_gap`, `agent_policy`

The registry (`actors.games.registry`) declares the games; generic code reaches these modules
through the games' capabilities only.
"""
