"""Behaviour cloning from replays: one supervised agent per SMAX race (AlphaStar, seed 002,
"Supervised learning"; issue 14 section 1).

The command: `python -m experiments.supervised --replays=replays/heuristic --out=supervised.npz`.

For each race, every recorded (game, side) played in that race is one training sequence: the
side's observations from the strategy step to the game's end. The network is the RL network
(`agents.make_network` with `hidden_size` / `core_size`, the league's defaults), unrolled over the sequence with teacher forcing (`network.unroll(...,
actions_seq=recorded actions)`: the target head is conditioned on the recorded action type).
The loss is the cross-entropy of the recorded action under the masked logits, summed over the
heads, each head averaged over the entries where it is a decision:
- `composition`: the strategy step (t = 0);
- `action_type`: battle steps, units alive;
- `target`: battle steps, units alive whose recorded action type is attack (for other types
  the network forces target 0: no decision).
z (a network with a z input, the default: `--z`): every sequence's observations carry its own
side's z (`obs["z"]`, `actors.games.smax_races.z.encode_z` of the replay's `z/` arrays, the same at every
step of the game), set to zero for 10% of the training sequences, drawn per sequence and batch
(AlphaStar, Methods "Supervised learning": "z is set to zero 10% of the time"), so that the
policy also plays unconditioned (z = 0: exploiters, evaluators). Held-out accuracy uses each
game's own z.

A held-out tenth of the games (by game, `--holdout`) is never trained on; the accuracy per head
(argmax of the masked logits == the recorded action, on the entries above) is reported on it,
with chance (the mean of 1 / legal values) beside it. `--eval_games=N` then plays each race's
agent (side 0, sampling) against the scripted heuristic in every matchup
(`actors.games.smax_races.scripted.play_against_heuristic`) and prints the win rates (draws half).

Output: ONE file, the project's params format (`coordinator.param_store.params_to_npz_bytes`)
holding a dict {race: that race's network parameters}, version = training steps per race;
`experiments.build.load_supervised(path, race)` reads one race's parameters. Beside it `<out>.json`: network
sizes, replay directory and spec fingerprint, accuracies and win rates. Bad input (not a replay
directory, another game, spec or format version, a corrupt chunk, no games of a race): a
message naming the file, exit 2, nothing written.
"""

from __future__ import annotations

import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from actors import replays
from actors.games import smax_races
from actors.games.smax_races import z as z_statistic
from agents.specs import MASK_KEY

HEADS = ("composition", "action_type", "target")
ATTACK = smax_races.ATTACK
Z_ZERO_PROBABILITY = 0.1  # AlphaStar: z is set to zero 10% of the time in supervised learning


class SupervisedError(ValueError):
    """Bad input to behaviour cloning; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------------
# Data: per race, a list of sequences (obs tree [L, ...], actions {head: [L, ...]}).


def load_sequences(directory: str, spec, holdout: float, seed: int = 0, read_once: bool = True):
    """{race index: (train sequences, held-out sequences)} from a replay directory; a sequence
    is (obs, actions, z) of one side of one game, cut at the game's length, z its encoded
    statistic (`z.encode_z`, [Z_SIZE]). Games are held out
    whole: game k of the directory is held out if a seeded permutation puts it in the last
    `holdout` fraction. Every chunk is read, checked and decompressed once (`read_once`; False:
    the earlier way, all chunks checked first, then read again), all before any training, so a
    corrupt chunk still stops the cloning before anything is written."""
    data = replays.open_replays(directory, game=spec.name, spec=spec, verify=not read_once)
    rng = np.random.default_rng(seed)
    held = rng.permutation(data.num_games) < int(round(holdout * data.num_games))
    out = {r: ([], []) for r in range(len(smax_races.RACES))}
    k = 0
    if read_once:  # every chunk read (its checksum checked) and decompressed once, two at a time
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            chunks = list(pool.map(data.read_chunk, data.chunks))
    else:  # the earlier reading: every chunk verified, then read again
        chunks = data.iter_chunks()
    for chunk in chunks:
        obs = [replays.unflatten_prefix(chunk, f"side{s}/obs") for s in range(2)]
        acts = [replays.unflatten_prefix(chunk, f"side{s}/action") for s in range(2)]
        z = z_statistic.encode_z(chunk["z/army"], chunk["z/attack_order"], chunk["z/attack_counts"])
        for g in range(chunk["length"].shape[0]):
            length = int(chunk["length"][g])
            for s in range(2):
                seq = (jax.tree.map(lambda x, g=g, length=length: x[g, :length], obs[s]),
                       {h: acts[s][h][g, :length] for h in HEADS}, z[g, s])
                out[int(chunk["races"][g, s])][1 if held[k] else 0].append(seq)
            k += 1
    return out, data


def sequence_z(seqs, rng: np.random.Generator | None = None,
               zero_probability: float = Z_ZERO_PROBABILITY) -> np.ndarray:
    """[B, Z_SIZE]: each sequence's own z; with `rng`, each set to zero with probability
    `zero_probability` (independently per sequence: AlphaStar's 10%)."""
    z = np.stack([s[2] for s in seqs]).astype(np.float32)
    if rng is not None:
        z = z * (rng.random(len(seqs)) >= zero_probability)[:, None]
    return z


def batch_sequences(seqs, horizon: int, z: np.ndarray | None = None):
    """Sequences -> time-major batch: obs [T, B, ...], actions [T, B, ...], valid [T, B].
    `z` [B, Z] (`sequence_z`), if given, becomes `obs["z"]` [T, B, Z] (the same every step)."""
    def pad(x):
        return np.concatenate([x, np.zeros((horizon - x.shape[0],) + x.shape[1:], x.dtype)])
    obs = jax.tree.map(lambda *xs: np.stack([pad(x) for x in xs], 1), *[s[0] for s in seqs])
    if z is not None:
        obs["z"] = np.broadcast_to(z[None], (horizon,) + z.shape).copy()
    acts = {h: np.stack([pad(s[1][h]) for s in seqs], 1) for h in HEADS}
    lengths = np.array([s[1]["composition"].shape[0] for s in seqs])
    valid = np.arange(horizon)[:, None] < lengths[None, :]
    return obs, acts, valid


# ---------------------------------------------------------------------------------------------
# The loss.


def merged_logits(logits: dict, num_units: int) -> dict:
    """Unit heads with their unit axis [..., n, A] (stacks "h/i" heads if the network splits)."""
    if "action_type" in logits:
        return logits
    out = {"composition": logits["composition"]}
    for h in ("action_type", "target"):
        out[h] = jnp.stack([logits[f"{h}/{i}"] for i in range(num_units)], axis=-2)
    return out


def decision_weights(obs, actions, valid):
    """Per head, where its recorded action is a decision (see the module docstring), as float
    weights of the action's shape [T, B(, n)]."""
    t = jnp.arange(valid.shape[0])[:, None]
    strategy = valid & (t == 0)
    battle = valid & (t > 0)
    alive = obs["alive"].astype(bool) & battle[..., None]
    return {"composition": strategy.astype(jnp.float32),
            "action_type": alive.astype(jnp.float32),
            "target": (alive & (actions["action_type"] == ATTACK)).astype(jnp.float32)}


def bc_outputs(network, num_units, params, obs, actions, valid):
    """(loss, {head: (cross-entropy sum, correct, chance sum, count)}) of one batch."""
    batch = valid.shape[1]
    out, _ = network.unroll(params, obs, valid & (jnp.arange(valid.shape[0])[:, None] == 0),
                            network.initial_state(batch), None, actions)
    logits = merged_logits(out.logits, num_units)
    weights = decision_weights(obs, actions, valid)
    loss, stats = 0.0, {}
    for h in HEADS:
        log_p = jax.nn.log_softmax(logits[h].astype(jnp.float32))
        a = actions[h].astype(jnp.int32)
        nll = -jnp.take_along_axis(log_p, a[..., None], -1)[..., 0]
        w = weights[h]
        count = w.sum()
        loss = loss + (nll * w).sum() / jnp.maximum(count, 1.0)
        correct = (jnp.argmax(logits[h], -1) == a) * w
        legal = obs[MASK_KEY][h].sum(-1)
        chance = w / jnp.maximum(legal, 1)
        stats[h] = ((nll * w).sum(), correct.sum(), chance.sum(), count)
    return loss, stats


@functools.lru_cache(maxsize=4)
def _functions(network, num_units: int, learning_rate: float):
    optimiser = optax.adam(learning_rate)

    def loss_fn(params, obs, actions, valid):
        return bc_outputs(network, num_units, params, obs, actions, valid)

    @jax.jit
    def update(params, opt_state, obs, actions, valid):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, obs, actions, valid)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, stats

    return optimiser, update, jax.jit(loss_fn)


def evaluate(network, num_units, params, seqs, horizon: int, batch_size: int,
             learning_rate: float = 1e-3) -> dict:
    """Loss and accuracy per head (with chance) over `seqs`, teacher-forced."""
    _, _, loss_fn = _functions(network, num_units, learning_rate)
    totals = {h: np.zeros(4) for h in HEADS}
    for i in range(0, len(seqs), batch_size):
        part = seqs[i:i + batch_size]
        part = part + [part[0]] * (batch_size - len(part))  # one compiled shape
        z = sequence_z(part) if _takes_z(network) else None
        obs, acts, valid = batch_sequences(part, horizon, z)
        valid[:, len(seqs[i:i + batch_size]):] = False
        _, stats = loss_fn(params, obs, acts, valid)
        for h in HEADS:
            totals[h] += np.array([float(x) for x in stats[h]])
    out = {}
    for h, (nll, correct, chance, count) in totals.items():
        c = max(count, 1.0)
        out[h] = {"loss": nll / c, "accuracy": correct / c, "chance": chance / c, "decisions": int(count)}
    return out


def _takes_z(network) -> bool:
    from agents import z_size

    return z_size(network) > 0


BUCKET = 32  # batches are padded to a multiple of this many steps (few compiled shapes)


def length_buckets(seqs, horizon: int) -> list[tuple[int, list[int]]]:
    """[(padded length, indices of the sequences of that bucket)]: lengths rounded up to a
    multiple of BUCKET, capped at `horizon` (SMAX games last 1..101 steps, most well under)."""
    buckets: dict[int, list[int]] = {}
    for i, seq in enumerate(seqs):
        length = seq[1]["composition"].shape[0]
        buckets.setdefault(min(horizon, -(-length // BUCKET) * BUCKET), []).append(i)
    return sorted(buckets.items())


def schedule(train, horizon: int, steps: int, batch_size: int, seed: int, race: int, takes_z: bool):
    """The batches of `steps` training steps, drawn up front from the same numpy generator and in
    the same order as the step-by-step loop draws them (`train_race_stepwise`): per step a bucket
    with probability proportional to its sequences, `batch_size` of its sequences (with
    replacement) and, with z, which of them keep their z (AlphaStar's 10% zeroed). Returns
    (buckets [(padded length, member indices)], bucket per step [S], member positions
    [S, batch_size], keep z [S, batch_size] (float; ones without z)). The draws do not depend on
    the parameters, so drawing them first changes nothing that is learnt."""
    rng = np.random.default_rng(seed * 7 + race)
    buckets = length_buckets(train, horizon)
    sizes = np.array([len(b[1]) for b in buckets], float)
    which = np.zeros(steps, np.int32)
    positions = np.zeros((steps, batch_size), np.int32)
    keep = np.ones((steps, batch_size), np.float32)
    for step in range(steps):
        k = rng.choice(len(buckets), p=sizes / sizes.sum())
        members = buckets[k][1]
        pick = rng.choice(members, batch_size)
        which[step] = k
        positions[step] = np.searchsorted(members, pick)  # members are in ascending order
        if takes_z:
            keep[step] = rng.random(batch_size) >= Z_ZERO_PROBABILITY
    return buckets, which, positions, keep


def bucket_arrays(train, members, bucket_horizon: int, capacity: int):
    """One bucket's sequences as time-major arrays padded to `bucket_horizon` steps and
    `capacity` sequences (what `batch_sequences` makes of a batch of them, for all of them at
    once): (obs [H, N, ...], actions {head: [H, N, ...]}, lengths [N], z [N, Z])."""
    seqs = [train[i] for i in members]
    like = train[0]
    obs = jax.tree.map(lambda x: np.zeros((bucket_horizon, capacity) + x.shape[1:], x.dtype), like[0])
    acts = {h: np.zeros((bucket_horizon, capacity) + like[1][h].shape[1:], like[1][h].dtype) for h in HEADS}
    lengths = np.zeros(capacity, np.int32)
    z = np.zeros((capacity,) + np.shape(like[2]), np.float32)
    for n, (o, a, zs) in enumerate(seqs):
        length = a["composition"].shape[0]
        lengths[n] = length
        z[n] = zs
        for dst, src in zip(jax.tree.leaves(obs), jax.tree.leaves(o), strict=True):
            dst[:length, n] = src
        for h in HEADS:
            acts[h][:length, n] = a[h]
    return obs, acts, lengths, z


@functools.lru_cache(maxsize=4)
def _block_functions(network, num_units: int, learning_rate: float, takes_z: bool):
    """(optimiser, run): `run(params, opt_state, data, which, positions, keep, active)` takes a
    block of steps in one program (a `lax.scan`): per step the batch is gathered on the device
    from its bucket's arrays (`data`: one (obs, actions, lengths, z) per bucket, `lax.switch` on
    the step's bucket, so a batch is padded only to its bucket's length as before) and one Adam
    update of the same loss as `_functions`' `update` is taken; steps with `active` false change
    nothing (padding of the last block). Returns (params, opt_state, loss per step)."""
    optimiser = optax.adam(learning_rate)

    def loss_fn(params, obs, actions, valid):
        return bc_outputs(network, num_units, params, obs, actions, valid)

    def run(params, opt_state, data, which, positions, keep, active):
        def branch(k, carry, pos, kept):
            params, opt_state = carry
            obs, acts, lengths, z = data[k]
            horizon = acts["composition"].shape[0]
            batch_obs = jax.tree.map(lambda x: jnp.take(x, pos, axis=1), obs)
            batch_acts = {h: jnp.take(acts[h], pos, axis=1) for h in HEADS}
            valid = jnp.arange(horizon)[:, None] < jnp.take(lengths, pos)[None, :]
            if takes_z:
                zs = jnp.take(z, pos, axis=0) * kept[:, None]
                batch_obs["z"] = jnp.broadcast_to(zs[None], (horizon,) + zs.shape)
            (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, batch_obs, batch_acts, valid)
            updates, new_state = optimiser.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_state, loss

        def step(carry, xs):
            k, pos, kept, on = xs
            branches = [functools.partial(branch, b) for b in range(len(data))]
            params, opt_state, loss = jax.lax.switch(k, branches, carry, pos, kept)
            new = jax.tree.map(lambda n, o: jnp.where(on, n, o), (params, opt_state), carry)
            return new, loss

        carry, losses = jax.lax.scan(step, (params, opt_state), (which, positions, keep, active))
        return carry[0], carry[1], losses

    return optimiser, jax.jit(run, donate_argnums=(0, 1))


def race_data(train_by_race: dict, horizon: int):
    """The bucket lengths of every race's training sequences and each bucket's capacity (its
    most sequences in any race), so that every race's arrays have the same shapes: one program
    for all races."""
    horizons, capacity = set(), {}
    for train in train_by_race.values():
        for h, members in length_buckets(train, horizon):
            horizons.add(h)
            capacity[h] = max(capacity.get(h, 0), len(members))
    return {h: capacity[h] for h in sorted(horizons)}


def train_race(network, spec, race: int, train, held, steps: int, batch_size: int,
               learning_rate: float, seed: int, horizon: int, log=print, shapes: dict | None = None):
    """Behaviour cloning of one race; returns (params, held-out metrics). The batches are those
    of `train_race_stepwise` (`schedule`), the training data is on the device once (`bucket_arrays`)
    and a tenth of the steps is one program (`_block_functions`): the same updates without a
    batch assembled and sent per step. `shapes` ({bucket length: capacity}, `race_data`): the
    same for every race, one compile for all."""
    from agents import initial_params

    num_units = spec.sides[0].num_units
    takes_z = _takes_z(network)
    shapes = shapes or race_data({race: train}, horizon)
    buckets, which, positions, keep = schedule(train, horizon, steps, batch_size, seed, race, takes_z)
    own = dict(buckets)
    data = tuple(bucket_arrays(train, own.get(h, []), h, max(capacity, 1)) for h, capacity in shapes.items())
    order = [list(shapes).index(h) for h, _ in buckets]  # this race's bucket k -> its slot in `shapes`
    which = np.asarray(order, np.int32)[which]
    data = jax.device_put(data)
    params = jax.device_put(initial_params(network, spec, race, seed))
    optimiser, run = _block_functions(network, num_units, learning_rate, takes_z)
    opt_state = optimiser.init(params)
    block = max(1, steps // 10)
    blocks = -(-steps // block)
    pad = blocks * block - steps
    active = np.arange(blocks * block) < steps
    which, positions, keep = (np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
                              for x in (which, positions, keep))
    name = smax_races.RACES[race]
    start = time.time()
    for i in range(blocks):
        part = slice(i * block, (i + 1) * block)
        params, opt_state, losses = run(params, opt_state, data, which[part], positions[part],
                                        keep[part], active[part])
        step = min((i + 1) * block, steps)
        log(f"[supervised] {name} step {step}/{steps}: loss {np.mean(np.asarray(losses)[active[part]]):.3f} "
            f"({time.time() - start:.0f}s)", flush=True)
    del data
    held_metrics = (evaluate(network, num_units, params, held, horizon, batch_size, learning_rate)
                    if held else {})
    return jax.tree.map(np.asarray, params), held_metrics


def train_race_stepwise(network, spec, race: int, train, held, steps: int, batch_size: int,
                        learning_rate: float, seed: int, horizon: int, log=print, shapes=None):
    """The earlier behaviour cloning of one race, one jitted update per step on a batch
    assembled on the host (`batch_sequences`) and sent to the device: the reference that
    `train_race` must equal (tests), and `--method=stepwise` of the benchmark."""
    from agents import initial_params

    num_units = spec.sides[0].num_units
    params = jax.device_put(initial_params(network, spec, race, seed))
    optimiser, update, _ = _functions(network, num_units, learning_rate)
    opt_state = optimiser.init(params)
    rng = np.random.default_rng(seed * 7 + race)
    name = smax_races.RACES[race]
    buckets = length_buckets(train, horizon)
    sizes = np.array([len(b[1]) for b in buckets], float)
    start, recent = time.time(), []
    for step in range(1, steps + 1):
        # A bucket with probability proportional to its sequences, then a batch from it: every
        # sequence is equally likely, and a batch is padded only to its bucket's length.
        bucket_horizon, members = buckets[rng.choice(len(buckets), p=sizes / sizes.sum())]
        pick = rng.choice(members, batch_size)
        seqs = [train[i] for i in pick]
        z = sequence_z(seqs, rng) if _takes_z(network) else None
        obs, acts, valid = batch_sequences(seqs, bucket_horizon, z)
        params, opt_state, loss, _ = update(params, opt_state, obs, acts, valid)
        recent.append(float(loss))
        if step % max(1, steps // 10) == 0 or step == steps:
            log(f"[supervised] {name} step {step}/{steps}: loss {np.mean(recent):.3f} "
                f"({time.time() - start:.0f}s)", flush=True)
            recent = []
    held_metrics = (evaluate(network, num_units, params, held, horizon, batch_size, learning_rate)
                    if held else {})
    return jax.tree.map(np.asarray, params), held_metrics


METHODS = {"blocked": train_race, "stepwise": train_race_stepwise}


def supervised(replay_dir: str, out: str, races=smax_races.RACES, steps: int = 2000,
               batch_size: int = 16, learning_rate: float = 1e-3, holdout: float = 0.1,
               hidden_size: int = 64, core_size: int = 64, eval_games: int = 0, seed: int = 0,
               config: smax_races.SmaxRacesConfig | None = None, log=print, z: bool = True,
               method: str = "blocked") -> dict:
    """Trains and writes the supervised agents; returns the report written to `<out>.json`.
    `method`: "blocked" (`train_race`) or "stepwise" (`train_race_stepwise`, the earlier loop
    and reading: the same batches and updates, slower)."""
    from agents import make_network
    from agents.storage import params_to_npz_bytes

    config = config or smax_races.SmaxRacesConfig()
    spec = smax_races.functions(config).spec
    network = make_network(spec, unit=True, hidden_size=hidden_size, core_size=core_size,
                           z=(z_statistic.Z_SIZE, len(z_statistic.PSEUDO_REWARDS)) if z else None)
    data, replay_set = load_sequences(replay_dir, spec, holdout, seed, read_once=method != "stepwise")
    for race in races:
        r = smax_races.RACES.index(race)
        if not data[r][0]:
            raise SupervisedError(f"{replay_dir}: no recorded games of {race} to train on; record "
                                  "games of every race (python -m experiments.record --policy=heuristic)")
    horizon = max(s[1]["composition"].shape[0] for pair in data.values() for part in pair for s in part)
    log(f"[supervised] {replay_set.num_games} games from {replay_dir}; sequences per race (train/held out): "
        + ", ".join(f"{smax_races.RACES[r]} {len(a)}/{len(b)}" for r, (a, b) in data.items()), flush=True)
    all_params, report = {}, {"replays": os.path.abspath(replay_dir),
                              "spec_fingerprint": replay_set.header["spec_fingerprint"],
                              "network": {"hidden_size": hidden_size, "core_size": core_size, "z": z},
                              "steps": steps, "batch_size": batch_size, "races": {}}
    shapes = race_data({r: data[r][0] for r in (smax_races.RACES.index(x) for x in races)}, horizon)
    for race in races:
        r = smax_races.RACES.index(race)
        start = time.time()
        params, held = METHODS[method](network, spec, r, data[r][0], data[r][1], steps, batch_size,
                                       learning_rate, seed, horizon, log, shapes=shapes)
        all_params[race] = params
        report["races"][race] = {"held_out": held, "seconds": time.time() - start}
        log(f"[supervised] {race} held-out accuracy: " + (", ".join(
            f"{h} {m['accuracy']:.3f} (chance {m['chance']:.3f}, {m['decisions']} decisions)"
            for h, m in held.items()) or "no held-out games"), flush=True)
        if eval_games:
            from actors.games.smax_races import scripted

            rates = {}
            for opponent in smax_races.RACES:
                outcomes = scripted.play_against_heuristic(network, jax.device_put(params),
                                                           (race, opponent), eval_games, seed=seed,
                                                           config=config)
                rates[opponent] = {"win_rate": scripted.win_rate(outcomes),
                                   "wins": int((outcomes > 0).sum()), "draws": int((outcomes == 0).sum()),
                                   "losses": int((outcomes < 0).sum())}
            report["races"][race]["vs_heuristic"] = rates
            mean = float(np.mean([v["win_rate"] for v in rates.values()]))
            report["races"][race]["vs_heuristic_mean"] = mean
            log(f"[supervised] {race} vs the heuristic ({eval_games} games per matchup, draws half): "
                + ", ".join(f"vs {o} {v['win_rate']:.2f} ({v['wins']}W {v['draws']}D {v['losses']}L)"
                            for o, v in rates.items()) + f"; mean {mean:.2f}", flush=True)
    data_bytes = params_to_npz_bytes(all_params, steps)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data_bytes)
    os.replace(tmp, out)
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    log(f"[supervised] wrote {out} (params of {', '.join(races)}) and {out}.json", flush=True)
    return report
