"""SMAX's supervised start (`actors.games.base.SupervisedStart`): games of jaxmarl's scripted
heuristic on both sides, every race pairing and army evenly (`record.py`), then behaviour
cloning per race of the run (`supervised.py`). `experiments.supervised_start` caches the
results under keys made of `recording` and `training` and starts the league from them.
"""

from __future__ import annotations

# Bump when recording or behaviour cloning changes what a start with the same settings is.
# 2: the heuristic no longer walks every unit to the map's top-right corner (its default target
# was set on the strategy step; `game.heuristic_policy`), so version-1 replays and starts
# imitate a side-0-favouring walk and are rebuilt.
VERSION = 2
# ... and this when only behaviour cloning changes (the recorded games are reused). 2: the
# network takes z (fed each game's own z, zeroed 10% of the time); starts of version 1 have no
# z input and are rebuilt.
START_VERSION = 2
# Settings of the build that are not flags (supervised.py's defaults).
RECORD_SEED = 0
CHUNK_GAMES = 27
LEARNING_RATE = 1e-3
HOLDOUT = 0.1
TRAIN_SEED = 0


def recording(config) -> dict:
    """What determines the recorded games: the versions, the game's spec and menu, the number of
    games (`--supervised.games`) and the recording seed."""
    from actors import replays
    from actors.games.smax_races import game, record

    game_config = game.SmaxRacesConfig()
    spec = game.functions(game_config).spec
    return {"version": VERSION, "replay_format": replays.FORMAT_VERSION, "game": spec.name,
            "spec_fingerprint": replays.spec_fingerprint(spec),
            "game_config": record.game_config_description(game_config),
            "policy": "heuristic", "games": config.supervised.games, "seed": RECORD_SEED}


def training(config) -> dict:
    """What determines the cloning besides the replays, the network and the races."""
    return {"version": VERSION, "start_version": START_VERSION, "learning_rate": LEARNING_RATE,
            "holdout": HOLDOUT, "seed": TRAIN_SEED}


def record(directory: str, config, log=print) -> None:
    """Records `--supervised.games` games of the heuristic on both sides into `directory`."""
    from actors.games.smax_races import record as recorder

    recorder.record(directory, "heuristic", config.supervised.games, CHUNK_GAMES, RECORD_SEED, log=log)


def train(replay_dir: str, out: str, config, log=print) -> None:
    """Clones one agent per race of the run from `replay_dir` into `out` (and `out.json`)."""
    from actors.games.smax_races import supervised

    s = config.supervised
    supervised.supervised(replay_dir, out, config.race_names, steps=s.steps, batch_size=s.batch_size,
                          learning_rate=LEARNING_RATE, holdout=HOLDOUT,
                          hidden_size=config.network.hidden_size, core_size=config.network.core_size,
                          z=config.network.z, seed=TRAIN_SEED, log=log)


# -- the commands `python -m experiments.record` and `python -m experiments.supervised` --------

def errors() -> tuple:
    """The errors recording and cloning raise for bad input (the commands print them, exit 2)."""
    from actors import replays
    from actors.games.smax_races.record import RecordError
    from actors.games.smax_races.supervised import SupervisedError

    return RecordError, SupervisedError, replays.ReplayError


def record_games(directory: str, policy, games: int, chunk_games: int, seed: int, game_config=None,
                 log=print) -> dict:
    """Records `games` games into `directory`: `policy` "heuristic" (the scripted AI on both
    sides, every race pairing and army evenly) or a player's (network, params) on both sides."""
    from actors.games.smax_races import record as recorder

    return recorder.record(directory, policy, games, chunk_games, seed, game_config, log=log)


def clone(replay_dir: str, out: str, races, game_config=None, log=print, **settings) -> dict:
    """Clones one agent per race in `races` from `replay_dir` into `out` (and `out.json`);
    `settings`: `supervised.supervised`'s (steps, batch_size, learning_rate, network sizes, ...)."""
    from actors.games.smax_races import supervised

    return supervised.supervised(replay_dir, out, races, config=game_config, log=log, **settings)
