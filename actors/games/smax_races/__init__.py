"""SMAX races and everything that is SMAX's, reached by the rest of the league only through the
game's registration (`actors.games.registry`, "smax_races") and its capabilities:

    game.py         the game: races, the army menu, the strategy step, jaxmarl's battle,
                    the scripted micro (`heuristic_policy`); its names are this package's
    scripted.py     the built-in AI as an opponent (`Capabilities.scripted_opponent`): a side
                    of a fused rollout, games against a player, the player's army picks
    record.py       recording replays (`python -m experiments.record`)
    supervised.py   behaviour cloning from replays (`python -m experiments.supervised`)
    start.py        the supervised start (`Capabilities.supervised_start`): the scripted AI's
                    games recorded, then cloned per race, for the league's automatic start and
                    for the two commands above, which reach record.py and supervised.py only
                    through it
    z.py            the statistic z (`Capabilities.z`): z of a recorded game, its encoding, the
                    bank of recorded z, the pseudo-rewards for following it (jax.numpy, both
                    experience paths)

    from actors.games import smax_races
    fns = smax_races.functions(smax_races.SmaxRacesConfig())
"""

from actors.games.smax_races.game import *  # noqa: F401,F403 -- the game's names are the package's
