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
