"""Surgery on a stopped league: widen every player's network and carry on training.

    python -m experiments.league --game=kuhn_poker --run_dir=runs/kuhn_poker-r1 --core_size=64 \\
        --minutes=2                          # poker's default core_size is 0 (no LSTM, not widened)
    python -m experiments.surgery --run_dir=runs/kuhn_poker-r1 --hidden_size=128 --core_size=128
    python -m experiments.league --game=kuhn_poker --run_dir=runs/kuhn_poker-r1 \\
        --hidden_size=128 --core_size=128                     # resumes, wider

OpenAI Five trained one agent for ten months through twenty such changes (seed 003,
appendix B). Here every player of the league is carried over, learning and frozen, so the
payoff matrix and the history stay meaningful:
- the learners' checkpoints (`learners/<agent>/checkpoint.msgpack`: parameters, and Adam's
  moments with zeros for the new units),
- every frozen player and every agent's initial parameters (what exploiter resets restore)
  under `params/`,
- `config.json` (the new sizes).

The widening rules are `agents.surgery`'s (new input weights random, new output weights zero;
exact for MLP and LSTM layers, attention and new observation features; approximate where a
LayerNorm normalises over a widened axis, or with `--lstm_noise`). Nothing is assumed: before
writing anything the tool plays `--games` games with the league's newest player, runs every
player old and new on the recorded observations, prints the largest change of any action
probability and value, and refuses (exit 2, nothing written) if a change meant to be exact
exceeds `--exact_tolerance` or an approximate one `--tolerance`. The old files are kept in
`<run_dir>/surgery-<date>/`. `--check` measures without writing. `--new_features=3,7`: the
positions of features a poker or matrix game's observation gained since the run was saved
(zero input weights; the check runs the old players on today's observations without them).

Exit codes: 0 done (or nothing to do), 2 refused (the reason printed; the run is unchanged).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time

import numpy as np
from absl import app, flags

from experiments.config import ConfigError, NetworkSettings, RunConfig
from experiments.nashconv import quiet_backend_probe

FLAGS = flags.FLAGS
SIZE_FIELDS = tuple(f.name for f in dataclasses.fields(NetworkSettings))


class Refused(RuntimeError):
    """Surgery cannot be done as asked; nothing was written."""


def load_run_config(run_dir: str) -> RunConfig:
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        raise Refused(f"{run_dir} is not a league's run directory (no config.json); pass the "
                      "--run_dir of a run started by experiments.league")
    try:
        with open(path) as f:
            return RunConfig.from_dict(json.load(f))
    except (ValueError, TypeError, ConfigError) as e:
        raise Refused(f"{path} is not a readable run config ({e})") from None


def new_sizes(config: RunConfig, requested: dict[str, int | None]) -> NetworkSettings:
    """The run's network sizes with the requested ones; Refused for a shrink."""
    old = config.network
    values = {}
    for name in SIZE_FIELDS:
        want = requested.get(name)
        have = getattr(old, name)
        if want is None:
            values[name] = have
        elif want < have:
            raise Refused(f"--{name}={want} is smaller than the run's {have}: shrinking is not "
                          "supported (a smaller network cannot compute the same function); "
                          "surgery only widens")
        else:
            values[name] = want
    return NetworkSettings(**values)


# -- the players' files -----------------------------------------------------------------------

def player_files(run_dir: str) -> tuple[list[str], list[str]]:
    """(frozen and initial parameter files under params/, learner checkpoints), sorted."""
    from learners import checkpoint

    params_dir = os.path.join(run_dir, "params")
    frozen = sorted(os.path.join(params_dir, f) for f in os.listdir(params_dir)
                    if f.endswith(".npz")) if os.path.isdir(params_dir) else []
    learners_dir = os.path.join(run_dir, "learners")
    checkpoints = []
    if os.path.isdir(learners_dir):
        for agent in sorted(os.listdir(learners_dir)):
            path = checkpoint.path(run_dir, agent)
            if os.path.exists(path):
                checkpoints.append(path)
    return frozen, checkpoints


def _read_npz(path: str):
    from agents.storage import params_from_npz_bytes

    with open(path, "rb") as f:
        return params_from_npz_bytes(f.read())


def _read_checkpoint(path: str) -> dict:
    from learners import checkpoint

    try:
        return checkpoint.read_payload(path)
    except Exception as e:
        raise Refused(f"{path} is not a readable learner checkpoint ({e})") from None


def _widen_moments(plan, tree, old_params, params_like):
    """Adam's moments in the optimiser's state dict widened with zeros: parameter-shaped
    subtrees, or vectors of every parameter flattened (`optax.flatten`, leaves in
    `tree_leaves` order); counts and empty states as they are."""
    from jax.flatten_util import ravel_pytree

    from agents import surgery

    if isinstance(tree, dict):
        if tree and set(tree) == set(params_like):
            return surgery.widen_zeros(plan, tree, params_like)
        return {k: _widen_moments(plan, v, old_params, params_like) for k, v in tree.items()}
    old_flat, unravel = ravel_pytree(old_params)
    if np.ndim(tree) == 1 and np.size(tree) == old_flat.size:
        widened = surgery.widen_zeros(plan, unravel(np.asarray(tree)), params_like)
        return np.asarray(ravel_pytree(widened)[0], np.asarray(tree).dtype)
    return tree


# -- checking on recorded observations ---------------------------------------------------------

def record(config: RunConfig, network, params, games: int, steps: int, seed: int):
    """`steps` steps of `games` games of the player `params` against itself: time-major
    observations of both sides, `first` flags and the side-0 actions (network heads)."""
    import jax

    from actors.actor import make_policy_fn
    from actors.rollout import Games, play_stepwise
    from experiments.build import make_game

    game = make_game(config, games)
    timestep = game.reset(seed)
    start = Games.start(None, timestep.observations, network.initial_state(games),
                        network.initial_state(games), games, xp=np)
    _, played = play_stepwise(game, make_policy_fn(network), params, params, start,
                              jax.random.PRNGKey(seed), steps)
    return played.observation, played.opponent_observation, played.first, played.action.heads


def old_features_only(obs, positions):
    """A reference network's observation reduced to the features the old network read (in
    `split_observation`'s order), as one leaf; the legal masks kept."""
    from agents.networks import MASK_KEY, split_observation

    features, mask = split_observation(obs, 2)
    reduced = {"features": features[..., np.asarray(positions)]}
    if mask is not None:
        reduced[MASK_KEY] = mask
    return reduced


def differences(old_net, new_net, recorded, old_positions=None):
    """A function (old params, new params) -> (largest |change| of any action probability,
    of the value) over the recorded observations. `old_positions`: the old network reads only
    these features of today's observation (it was saved before the others existed)."""
    import jax
    import jax.numpy as jnp

    obs, opp, first, actions = recorded
    batch = first.shape[1]

    def outputs(network, old):
        kwargs = {"actions_seq": actions} if hasattr(network, "act") else {}
        o, p = obs, opp
        if old and old_positions is not None:
            o, p = old_features_only(obs, old_positions), old_features_only(opp, old_positions)

        def run(params):
            out, _ = network.unroll(params, o, first, network.initial_state(batch), p, **kwargs)
            return {h: jax.nn.softmax(x) for h, x in out.logits.items()}, out.value
        return jax.jit(run)

    run_old, run_new = outputs(old_net, True), outputs(new_net, False)

    def measure(old_params, new_params):
        (p_old, v_old), (p_new, v_new) = run_old(old_params), run_new(new_params)
        prob = max(float(jnp.max(jnp.abs(p_old[h] - p_new[h]))) for h in p_old)
        return prob, float(jnp.max(jnp.abs(v_old - v_new)))
    return measure


# -- the surgery ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Report:
    players: int = 0
    checkpoints: int = 0
    max_prob: float = 0.0
    max_value: float = 0.0
    worst: str = ""
    backup: str | None = None


def operate(run_dir: str, requested: dict[str, int | None], *, new_features=None,
            lstm_noise: float = 0.0, tolerance: float = 0.05, exact_tolerance: float = 1e-5,
            games: int = 8, steps: int = 32, check_only: bool = False, seed: int = 0,
            out=sys.stdout) -> Report:
    """Widens every player of the stopped run in `run_dir` (see the module docstring).
    Refused (nothing written) if it cannot be done or the check fails."""
    from experiments import run_lock

    config = load_run_config(run_dir)
    sizes = new_sizes(config, requested)
    if config.teacher:
        raise Refused(f"the run learns from --teacher={config.teacher}, whose parameters are not "
                      "part of this run and would no longer fit the wider network; widen the "
                      "teacher's run the same way first, or start a run without a teacher")
    try:
        lock = run_lock.hold(run_dir, "experiments.surgery")
    except run_lock.RunLocked as e:
        raise Refused(str(e)) from None
    try:
        return _operate(run_dir, config, sizes, new_features, lstm_noise, tolerance,
                        exact_tolerance, games, steps, check_only, seed, out)
    finally:
        lock.close()


def old_feature_positions(saved: int, features: int, new_features) -> list[int] | None:
    """Where the saved players' observation features are in today's observation (None if it
    did not change), given the positions of the new ones; Refused if that does not add up."""
    new = sorted({int(k) for k in new_features or ()})
    if saved == features:
        if new:
            raise Refused(f"--new_features given, but the game's observation has the same {features} "
                          "features the saved players read")
        return None
    if saved > features:
        raise Refused(f"the game's observation has {features} features, fewer than the {saved} the "
                      "saved players read: surgery cannot remove inputs")
    if len(new) != features - saved or new[0] < 0 or new[-1] >= features:
        raise Refused(
            f"the game's observation has {features} features, the saved players read {saved}: pass "
            f"--new_features with the positions of the {features - saved} new ones (0..{features - 1}, in "
            "agents.networks.split_observation's order: the observation's leaves by sorted key, "
            f"flattened){'; got ' + ','.join(map(str, new)) if new else ''}")
    return [k for k in range(features) if k not in set(new)]


def _operate(run_dir, config, sizes, new_features, lstm_noise, tolerance, exact_tolerance, games,
             steps, check_only, seed, out) -> Report:
    import jax

    from agents import surgery
    from agents.networks import split_observation
    from experiments.build import initial_params, make_game, make_network
    from learners import checkpoint

    new_config = dataclasses.replace(config, network=sizes)
    spec = make_game(config, 1).spec
    old_net, new_net = make_network(config, spec), make_network(new_config, spec)
    frozen, checkpoints = player_files(run_dir)
    if not frozen and not checkpoints:
        raise Refused(f"{run_dir} holds no players yet (no params/ and no learner checkpoints)")
    players = {os.path.relpath(p, run_dir): _read_npz(p) for p in frozen}
    payloads = {os.path.relpath(p, run_dir): _read_checkpoint(p) for p in checkpoints}
    template = initial_params(new_net, spec, 0, config.seed + 7919)
    some = next(iter(payloads.values()))["params"] if payloads else next(iter(players.values()))[1]
    keep = None  # the old features' positions in today's observation, if it gained some
    if hasattr(old_net, "act"):
        own, global_features = surgery.unit_input_sizes(old_net.config, some)
        plan = surgery.plan(old_net.config, new_net.config, own_features=own,
                            global_features=global_features, lstm_noise=lstm_noise)
    else:
        features = int(split_observation(spec.sides[0].zero_observation(), 0)[0].shape[-1])
        saved = int(np.shape(some["agent/~/torso/~/linear_0"]["w"])[0])
        keep = old_feature_positions(saved, features, new_features)
        plan = surgery.plan(old_net.config, new_net.config, old_features=saved, new_features=features,
                            feature_positions=keep, lstm_noise=lstm_noise)
    if sizes == config.network and keep is None and lstm_noise == 0:
        print(f"nothing to do: the run's network is already {dataclasses.asdict(sizes)} and the "
              "observation has not changed", file=out)
        return Report()
    limit = exact_tolerance if plan.exact else tolerance
    print(f"surgery on {run_dir}: {dataclasses.asdict(config.network)} -> {dataclasses.asdict(sizes)}; "
          f"{len(players)} parameter files, {len(checkpoints)} learner checkpoints", file=out)
    print("  exact (function preserving)" if plan.exact else
          "  approximate: " + "; ".join(plan.approximate), file=out)

    def widen(name, params):
        try:
            return surgery.widen(plan, params, template, seed=seed, lstm_noise=lstm_noise)
        except surgery.SurgeryError as e:
            raise Refused(f"{name}: {e} (is it a player of this run's game and network?)") from None

    # Observations from the newest player (a learner if any), recorded with the old network
    # (with the widened one if the observation gained features: the old cannot read them).
    newest = next(iter(payloads.values()))["params"] if payloads else some
    if keep is None:
        recorded = record(config, old_net, jax.tree_util.tree_map(np.asarray, newest), games, steps, seed)
    else:
        recorded = record(config, new_net, widen("the newest player", newest), games, steps, seed)
    measure = differences(old_net, new_net, recorded, keep)
    report = Report()
    widened_players, widened_payloads = {}, {}
    started = time.time()
    items = [(n, p) for n, (_, p) in players.items()] + [(n, p["params"]) for n, p in payloads.items()]
    for k, (name, params) in enumerate(items):
        new_params = widen(name, params)
        prob, value = measure(params, new_params)
        if max(prob, value) > max(report.max_prob, report.max_value):
            report.worst = name
        report.max_prob, report.max_value = max(report.max_prob, prob), max(report.max_value, value)
        if name in players:
            widened_players[name] = (players[name][0], new_params)
        else:
            widened_payloads[name] = new_params
        if (k + 1) % 50 == 0 or k + 1 == len(items):
            print(f"  checked {k + 1}/{len(items)} players ({time.time() - started:.0f} s): largest "
                  f"change so far: probability {report.max_prob:.2e}, value {report.max_value:.2e}", file=out)
    report.players, report.checkpoints = len(widened_players), len(widened_payloads)
    print(f"largest change over {len(items)} players x {games} games x {steps} steps: action "
          f"probability {report.max_prob:.3g}, value {report.max_value:.3g} (at {report.worst}); "
          f"limit {limit:g} ({'exact' if plan.exact else 'approximate'})", file=out)
    if report.max_prob > limit or report.max_value > limit:
        flag = "--exact_tolerance" if plan.exact else "--tolerance"
        raise Refused(f"the widened players differ from the old ones by more than {limit:g} "
                      f"({flag}); nothing was written" + ("" if plan.exact else
                      "; raise --tolerance to accept it, or widen only exact layers"))
    if check_only:
        print("--check: nothing written", file=out)
        return report

    # Everything is computed; write: backup first, then each file atomically, config.json last.
    backup = os.path.join(run_dir, "surgery-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(backup)
    for name in [*players, *payloads, "config.json"]:
        os.makedirs(os.path.dirname(os.path.join(backup, name)) or backup, exist_ok=True)
        shutil.copy2(os.path.join(run_dir, name), os.path.join(backup, name))
    report.backup = backup
    from agents.storage import params_to_npz_bytes, write_atomic

    for name, (version, params) in widened_players.items():
        write_atomic(os.path.join(run_dir, name), params_to_npz_bytes(params, version))
    for name, params in widened_payloads.items():
        payload = payloads[name]
        opt_state = _widen_moments(plan, payload["opt_state"], payload["params"], params)
        file = os.path.join(run_dir, name)
        older = checkpoint.previous(file)
        if os.path.exists(older):  # the narrow one before it: kept in the backup, not beside the wide one
            os.replace(older, os.path.join(backup, os.path.dirname(name), checkpoint.PREVIOUS))
        checkpoint.save(file, checkpoint.Checkpoint(
            int(payload["version"]), int(payload["steps"]), int(payload["num_skipped"]), params, opt_state))
        os.remove(checkpoint.previous(file))  # the narrow one `save` moved aside: copied to the backup above
    write_atomic(os.path.join(run_dir, "config.json"),
                  json.dumps(new_config.to_dict(), indent=2, sort_keys=True).encode())
    _record_event(run_dir, config, sizes, report)
    flags_now = " ".join(f"--network.{n}={getattr(sizes, n)}" for n in SIZE_FIELDS)
    print(f"widened {report.players} parameter files and {report.checkpoints} learner checkpoints; "
          f"the old files are in {backup}\nresume with: python -m experiments.league "
          f"--game={config.game} --races={config.races} --run_dir={run_dir} {flags_now}", file=out)
    return report


def _record_event(run_dir: str, config: RunConfig, sizes: NetworkSettings, report: Report) -> None:
    """A `surgery` row in league.db's events (the dashboard's event log)."""
    from coordinator.history import DB_NAME, LeagueHistory

    path = os.path.join(run_dir, DB_NAME)
    if not os.path.exists(path):
        return
    history = LeagueHistory(path)
    try:
        reason = (f"network {dataclasses.asdict(config.network)} -> {dataclasses.asdict(sizes)}; "
                  f"max change p {report.max_prob:.2g} v {report.max_value:.2g}")
        history.add_event("surgery", "", None, 0, reason)
    finally:
        history.close()


def define_flags() -> None:
    flags.DEFINE_string("run_dir", None, "The stopped league's run directory.")
    for name in SIZE_FIELDS:
        flags.DEFINE_integer(name, None, f"The new network.{name} (at least the run's; unchanged if left out).")
        flags.DEFINE_alias(f"network.{name}", name)
    flags.DEFINE_list("new_features", [], "Poker and matrix games: positions of the features the "
                      "game's observation gained since the run was saved (their input weights start "
                      "at zero: exact).")
    flags.DEFINE_float("lstm_noise", 0.0, "Scale of random values for the new LSTM units' weights into "
                       "the old gates (OpenAI Five's 'random small values'); 0 keeps the LSTM exact.")
    flags.DEFINE_float("tolerance", 0.05, "Largest accepted change of any action probability or value "
                       "for an approximate surgery.")
    flags.DEFINE_float("exact_tolerance", 1e-5, "Largest accepted change where the surgery is exact.")
    flags.DEFINE_integer("games", 8, "Games recorded for the check.")
    flags.DEFINE_integer("steps", 32, "Steps recorded per game for the check.")
    flags.DEFINE_bool("check", False, "Measure the change and write nothing.")
    flags.DEFINE_integer("seed", 0, "Seed of the recorded games.")
    flags.mark_flag_as_required("run_dir")


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; see --help", file=sys.stderr)
        return 2
    quiet_backend_probe()   # no "Unable to initialize backend 'tpu'" lines on the first screen
    requested = {name: FLAGS[name].value for name in SIZE_FIELDS}
    try:
        new_features = [int(k) for k in FLAGS.new_features]
    except ValueError:
        print(f"error: --new_features takes integer positions, got {','.join(FLAGS.new_features)}",
              file=sys.stderr)
        return 2
    try:
        operate(FLAGS.run_dir, requested, new_features=new_features, lstm_noise=FLAGS.lstm_noise,
                tolerance=FLAGS.tolerance,
                exact_tolerance=FLAGS.exact_tolerance, games=FLAGS.games, steps=FLAGS.steps,
                check_only=FLAGS.check, seed=FLAGS.seed)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
