"""The run's configuration as a reader meets it (issue 58, item 4): each flag's help lives on its
field, one actor configuration, a flag the chosen experience path never reads is refused, and
short aliases only where the docs use them; old run directories still resume."""

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from actors.config import ActorConfig
from experiments.config import (
    ALIASES,
    EARLIER_NAMES,
    RENAMED,
    ConfigError,
    RunConfig,
    fields,
    help_text,
    undocumented,
)
from experiments.program import DEVICE_ONLY, REPLAY_ONLY, unread_settings
from league.settings import setting

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- help from the fields' metadata ------------------------------------------------------


def test_every_setting_carries_its_help_on_its_field():
    assert undocumented() == []
    for path, _ in fields():
        assert len(help_text(path).split()) >= 2, path
    assert help_text("learner.loss.entropy_weight").startswith("entropy bonus")
    assert "AlphaStar: 0.25" in help_text("league.snapshots.league_exploiter_reset_probability")


def test_a_setting_without_help_is_named():
    @dataclasses.dataclass(frozen=True)
    class Inner:
        documented: int = setting(1, "a setting with its help")
        bare: int = 2  # a comment is no help: help lives in the field's metadata

    @dataclasses.dataclass(frozen=True)
    class Outer:
        inner: Inner = dataclasses.field(default_factory=Inner)
        rate: float = setting(0.5, "another setting")

    assert undocumented(Outer()) == ["inner.bare"]
    assert help_text("inner.documented", Outer()) == "a setting with its help"


def test_a_setting_refuses_a_mutable_default_and_an_empty_help():
    with pytest.raises(TypeError, match="immutable"):
        setting([1, 2], "a list would be shared by every instance")
    with pytest.raises(ValueError, match="help"):
        setting(1, " ")


# -- one actor configuration ------------------------------------------------------------


def test_the_run_and_its_actors_share_one_actor_configuration():
    from actors.actor import ActorConfig as ActorsActorConfig

    config = RunConfig.make(game="matrix_rps", **{"learner.unroll_length": 8, "seed": 3,
                                                  "actor.param_refresh_seconds": 2.0})
    assert ActorsActorConfig is ActorConfig and type(config.actor) is ActorConfig
    actor = config.actor_config(2)
    assert (actor.unroll_length, actor.seed, actor.param_refresh_seconds) == (8, 3 * 7919 + 2, 2.0)
    assert actor.reward_plugin == config.reward and actor.episodes_per_match == 32
    assert ActorConfig().episodes_per_match == RunConfig().actor.episodes_per_match   # one default
    # the earlier name of the refresh period, still passed by experiments/nodes/
    with pytest.raises(ConfigError, match="--actor.batch_size must be at least 1"):
        RunConfig.make(game="matrix_rps", **{"actor.batch_size": 0})


def test_the_heads_of_the_kl_to_the_teacher_need_its_weight():
    with pytest.raises(ConfigError, match="the KL to the teacher, which is off: pass its weight"):
        RunConfig.make(game="kuhn_poker", **{"learner.loss.kl_teacher_heads": "policy"})
    with pytest.raises(ConfigError, match="kl_teacher_heads must be head names"):
        RunConfig.make(game="kuhn_poker", **{"learner.loss.kl_teacher_heads": "a,,b",
                                             "learner.loss.kl_teacher_weight": 0.1, "teacher": "r:p"})
    # SMAX's default heads (the micro) apply where its KL does: with a start, not without one
    # or with the weight set to 0; heads a user gives are still checked
    assert RunConfig.make(init="auto").learner.loss.kl_teacher_heads == "action_type,target"
    assert RunConfig.make(init="none").learner.loss.kl_teacher_heads == ""
    assert RunConfig.make(init="auto", kl_teacher_cost=0.0).learner.loss.kl_teacher_heads == ""
    with pytest.raises(ConfigError, match="which is off"):
        RunConfig.make(init="none", **{"learner.loss.kl_teacher_heads": "target"})


def test_a_race_s_kl_weight_reaches_only_that_race_s_learners():
    from experiments.build import agent_learner_configs
    from league.players import learning_agents

    config = RunConfig.make(races=3, init="auto", kl_teacher_cost=0.03, kl_teacher_by_race="zerg=0.1")
    agents = learning_agents(config.league)
    learners = agent_learner_configs(config, [p.player_id for p in agents])
    for p in agents:   # every role of the race: main agents, main and league exploiters
        assert learners[p.player_id].loss.kl_teacher_weight == (0.1 if p.race == "zerg" else 0.03), p
    assert {p.role for p in agents if p.race == "zerg"} == {"main_agent", "main_exploiter", "league_exploiter"}
    # a race's weight alone is a KL term: it needs a teacher, and its heads are kept
    off = RunConfig.make(races=3, init="auto", kl_teacher_cost=0.0, kl_teacher_by_race="terran=0.2")
    assert (off.teacher_source, off.kl_teacher_weights) == ("init", {"terran": 0.2, "protoss": 0.0, "zerg": 0.0})
    with pytest.raises(ConfigError, match="a KL weight needs a teacher"):
        RunConfig.make(game="kuhn_poker", kl_teacher_by_race="any=0.1")
    for bad in ("zerg", "orc=0.1", "zerg=-1", "zerg=x", "zerg=nan"):
        with pytest.raises(ConfigError, match=r"is not RACE=WEIGHT with RACE one of terran, protoss, zerg"):
            RunConfig.make(races=3, init="auto", kl_teacher_by_race=bad)


def test_a_config_json_from_before_the_actor_configurations_were_one_resumes():
    config = RunConfig.make(game="kuhn_poker", **{"actor.episodes_per_match": 8})
    saved = config.to_dict()
    for name in ("unroll_length", "seed", "write_queue", "params_timeout"):
        del saved["actor"][name]
    assert RunConfig.from_dict(json.loads(json.dumps(saved))) == config


# -- a setting the chosen experience path does not read ---------------------------------


def test_a_replay_setting_on_the_device_path_is_refused_naming_what_does_its_job():
    with pytest.raises(ConfigError) as e:
        unread_settings("device", "--experience=device", {"actor.batch_size", "learner.batch_size"})
    assert str(e.value).startswith("--actor.batch_size is read by the replay path only")
    assert "--learner.batch_size" in str(e.value) and "--experience=replay" in str(e.value)
    for name in ("actor.per_learner", "actor.episodes_per_match", "learner.replay.max_size",
                 "learner.replay.samples_per_insert", "learner.sampler"):
        with pytest.raises(ConfigError, match=f"--{re.escape(name)} is read by the replay path only"):
            unread_settings("device", "auto: ...", {name})
        unread_settings("replay", "--experience=replay", {name})


def test_a_device_setting_on_the_replay_path_is_refused():
    for name in ("device.threads", "device.opponent_slots", "device.population",
                 "learner.exploration", "device.scripted_slots"):
        with pytest.raises(ConfigError, match=f"--{re.escape(name)} is read by the device path only"):
            unread_settings("replay", "--experience=replay", {name})
        unread_settings("device", "--experience=device", {name})


def test_settings_both_paths_read_are_never_refused():
    both = {p for p, _ in fields()} - {
        p for p, _ in fields() for key in [*REPLAY_ONLY, *DEVICE_ONLY]
        if p == key or (key.endswith(".") and p.startswith(key))}
    assert {"learner.batch_size", "actor.param_refresh_seconds", "actor.reward_plugin",
            "learner.unroll_length", "device.updates_per_chunk"} - both == {"device.updates_per_chunk"}
    for path in ("device", "replay"):
        unread_settings(path, "auto: ...", both)
    # every key names settings there are
    known = {p for p, _ in fields()}
    for key in [*REPLAY_ONLY, *DEVICE_ONLY]:
        assert any(p == key or (key.endswith(".") and p.startswith(key)) for p in known), key


def league(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "experiments.league", "--game=matrix_rps",
                           "--runner=inprocess", "--dashboard_port=-1", *args],
                          cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=300)


def test_the_league_refuses_the_docs_batch_size_on_the_device_path(tmp_path):
    done = league("--experience=device", "--batch_size=64", f"--run_dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr
    assert "--actor.batch_size is read by the replay path only" in done.stderr
    assert "--learner.batch_size" in done.stderr
    assert not (tmp_path / "run").exists()   # refused before anything is written


def test_a_games_defaults_are_not_settings_given(tmp_path):
    # Leduc's defaults set learner.exploiter_exploration (device path only); on the replay path
    # they are not the user's: the run goes on to its next check (this environment's Reverb).
    done = league("--game=leduc_poker", "--experience=replay", f"--run_dir={tmp_path / 'run'}")
    assert "is read by the device path only" not in done.stderr, done.stderr


# -- aliases only where the docs use them; earlier names still resume -------------------


def commands_text() -> str:
    files = ["README.md", *glob.glob("docs/*.md"), *glob.glob("tests/*.py"),
             *glob.glob("benchmarks/**/*.py", recursive=True), *glob.glob(".ci/**/*", recursive=True)]
    text = ""
    for name in files:
        path = os.path.join(REPOSITORY, name)
        if os.path.isfile(path) and not name.endswith("test_config.py"):
            text += open(path, errors="ignore").read()
    return text


def test_every_alias_is_used_by_a_command_of_the_docs_or_tests():
    text = commands_text()
    unused = [a for a in ALIASES if not re.search(rf"(?<![\w.])--{a}(?![\w.])", text)]
    assert unused == []
    assert len(ALIASES) < len(EARLIER_NAMES) and set(ALIASES.items()) <= set(EARLIER_NAMES.items())


def test_a_name_that_is_no_alias_is_refused_and_its_path_works():
    with pytest.raises(ConfigError, match="unknown settings"):
        RunConfig.make(game="matrix_rps", replay_size=64)
    assert RunConfig.make(game="matrix_rps", **{"learner.replay.max_size": 64}).learner.replay.max_size == 64


def test_a_flat_config_json_with_names_that_are_no_longer_aliases_resumes():
    flat = {"game": "kuhn_poker", "races": 1, "runner": "inprocess", "replay_size": 64,
            "samples_per_insert": 1.0, "upgo_cost": 0.5, "episodes_per_match": 8,
            "team_spirit_updates": 10, "learner_sampler": "client", "entropy_cost": None}
    config = RunConfig.from_dict(flat)
    assert (config.learner.replay.max_size, config.learner.replay.samples_per_insert) == (64, 1.0)
    assert (config.learner.loss.upgo_weight, config.actor.episodes_per_match) == (0.5, 8)
    assert (config.actor.team_spirit_updates, config.learner.sampler) == (10, "client")
    assert config.learner.loss.entropy_weight == 0.1   # None: Kuhn's default


def test_settings_renamed_generic_keep_their_earlier_names_in_commands_and_config_json():
    """Issue 86 item 3: SMAX's words became the generic names (`RENAMED`); a command or a nested
    config.json of a run saved before gives the same settings under the names of today."""
    earlier = {"device.heuristic_slots": 2, "device.heuristic_forced_slots": 1,
               "device.heuristic_forced_handicap": True, "actor.z_pseudo_reward_probability": 0.5}
    made = RunConfig.make(game="smax_races", init="none", **earlier)
    saved = RunConfig.make(game="smax_races", init="none").to_dict()
    for old, value in earlier.items():
        group, leaf = old.split(".")
        saved[group][leaf] = value
        del saved[group][RENAMED[old].split(".")[1]]
    resumed = RunConfig.from_dict(saved)
    for config in (made, resumed):
        assert (config.device.scripted_slots, config.device.scripted_task_slots) == (2, 1)
        assert config.device.scripted_task_levels is True
        assert config.actor.z_reward_probability == 0.5
    assert set(RENAMED) == set(earlier)
