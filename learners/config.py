"""The learner's configuration: plain frozen dataclasses (no JAX, Reverb or TF at import), so
that a run's configuration and its command-line flags can be built from them cheaply.
`LossConfig` holds every weight of the loss (the terms are in learners/losses.py).
"""

from __future__ import annotations

import dataclasses
import json
import typing

from league.settings import setting


def _floats(config) -> None:
    """A whole number given to a float field becomes a float (JSON's `0` for `vtrace_lambda=0`:
    jitted learning code checks its dtypes, and rlax refuses an int lambda)."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if type(value) is int and float in typing.get_args(hints[f.name]) + (hints[f.name],):
            object.__setattr__(config, f.name, float(value))


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Every weight and hyperparameter of the total loss.

    Defaults follow AlphaStar (V-trace + TD(lambda) + UPGO, no discount, lambda = 0.8 for the
    value as in its pseudocode) with OpenAI Five's entropy coefficient; `ppo()` gives OpenAI
    Five's Table 2 baseline (PPO clip 0.2, GAE lambda 0.95, entropy 0.01, value weight 1,
    horizon 180 s: gamma = 0.9993).
    """

    policy_loss: str = setting(
        "vtrace", "\"vtrace\" (AlphaStar: V-trace + UPGO + TD(lambda)), \"ppo\" (OpenAI Five: PPO + GAE) "
        "or \"neurd\" (R-NaD's Neural Replicator Dynamics on V-trace's advantage)")
    discount: float = setting(1.0, "discount multiplied into the data's per-step discounts")
    policy_weight: float = setting(1.0, "weight of the V-trace (or PPO) policy term")
    upgo_weight: float = setting(1.0, "weight of the UPGO policy term (0: off)")
    upgo_follow_forced: bool = setting(
        False, "UPGO follows the return through steps where the agent had no choice (the opponent's "
        "turn), instead of judging them by \"Q >= V\" (`losses.upgo_returns`); false: AlphaStar's formula")
    value_weight: float = setting(1.0, "weight of the value term (the value loss already carries the 1/2)")
    entropy_weight: float = setting(0.01, "entropy bonus (OpenAI Five: 0.01; poker runs: 0.1)")
    entropy_weight_end: float | None = setting(
        None, "final entropy weight of an annealing (MMD's temperature alpha -> 0: the regularised "
        "equilibrium approaches a Nash equilibrium): geometric from entropy_weight to this over "
        "entropy_anneal_updates learner updates, then constant (`losses.entropy_schedule`); None: constant")
    entropy_anneal_updates: int = setting(0, "learner updates over which the entropy weight anneals")
    kl_teacher_weight: float = setting(
        0.0, "weight of KL(teacher || policy), AlphaStar's penalty to the supervised policy")
    kl_teacher_heads: str = setting(
        "", "the policy heads the KL to the teacher covers, comma-separated (e.g. \"action_type,target\": "
        "a unit game's micro without its army pick, where the teacher's pick, cloned from games that "
        "cover the menu evenly, has no skill for the KL to keep); empty: every head (AlphaStar)")
    kl_behaviour_weight: float = setting(
        0.0, "1/eta of magnetic mirror descent: weight of KL(pi || behaviour policy) (`kl_to_behaviour_loss`)")
    magnet_weight: float = setting(
        0.0, "alpha of KL(pi || magnet), MMD / R-NaD's moving magnet: the learner's own parameters, "
        "replaced by the current ones every magnet_every updates (`kl_to_magnet_loss`; 0: no magnet)")
    magnet_every: int = setting(1000, "learner updates between replacements of the magnet")
    exploiter_entropy_weight: float | None = setting(
        None, "the exploiters' entropy weight (None: entropy_weight); exploiters learn best "
        "responses, so neither the magnet nor entropy annealing applies to them (`for_role`)")
    vtrace_lambda: float = setting(1.0, "lambda of the V-trace traces c_t")
    clip_rho_threshold: float = setting(1.0, "rho-bar of the V-trace targets")
    clip_pg_rho_threshold: float = setting(1.0, "rho-bar of the V-trace policy-gradient advantage")
    importance_correction: bool = setting(
        True, "importance ratios of the off-policy corrections; false: every ratio is 1 (ablation)")
    value_target: str = setting("td_lambda", "\"td_lambda\" (AlphaStar) or \"vtrace\" (IMPALA; ablation)")
    td_lambda: float = setting(0.8, "lambda of the TD(lambda) value target (AlphaStar: 0.8)")
    ppo_clip_epsilon: float = setting(0.2, "PPO's clip epsilon (OpenAI Five: 0.2)")
    neurd_beta: float = setting(
        2.0, "NeuRD's logit threshold beta: a centred logit stops moving outward beyond +-beta "
        "(`losses.neurd_policy_loss`; R-NaD: 2)")
    neurd_clip: float = setting(10_000.0, "NeuRD's clip of the all-actions advantage (R-NaD: 10,000)")
    gae_lambda: float = setting(0.95, "lambda of GAE for PPO (OpenAI Five: 0.95)")
    pseudo_policy_weight: float = setting(
        1.0, "weight of the V-trace policy term of z's pseudo-rewards (SMAX main agents conditioned "
        "on z; `losses.pseudo_reward_losses`; 0: off; unused by networks without z)")
    pseudo_value_weight: float = setting(
        1.0, "weight of the TD(lambda) value term of z's pseudo-rewards (0: off; unused by networks without z)")

    def __post_init__(self):
        _floats(self)
        if self.policy_loss not in ("vtrace", "ppo", "neurd"):
            raise ValueError(f"policy_loss must be 'vtrace', 'ppo' or 'neurd', got {self.policy_loss!r}")
        if self.value_target not in ("td_lambda", "vtrace"):
            raise ValueError(f"value_target must be 'td_lambda' or 'vtrace', got {self.value_target!r}")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError("discount must be in [0, 1]")
        for name in ("vtrace_lambda", "td_lambda", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        for name in ("policy_weight", "upgo_weight", "value_weight", "entropy_weight",
                     "kl_teacher_weight", "kl_behaviour_weight", "clip_rho_threshold", "clip_pg_rho_threshold",
                     "ppo_clip_epsilon", "pseudo_policy_weight", "pseudo_value_weight",
                     "magnet_weight", "neurd_beta", "neurd_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.kl_teacher_heads and not all(self.teacher_heads):
            raise ValueError(f"kl_teacher_heads must be head names separated by commas (e.g. "
                             f"\"action_type,target\"), or empty for every head; got {self.kl_teacher_heads!r}")
        if self.exploiter_entropy_weight is not None and self.exploiter_entropy_weight < 0:
            raise ValueError(f"exploiter_entropy_weight must be >= 0; got {self.exploiter_entropy_weight}")
        if self.magnet_every < 1:
            raise ValueError(f"magnet_every must be >= 1 (learner updates); got {self.magnet_every}")
        if self.entropy_weight_end is not None:
            if not 0 < self.entropy_weight_end <= self.entropy_weight or self.entropy_anneal_updates < 1:
                raise ValueError("entropy annealing needs 0 < entropy_weight_end <= entropy_weight "
                                 "and entropy_anneal_updates >= 1 (or entropy_weight_end unset)")

    @property
    def teacher_heads(self) -> tuple[str, ...]:
        """The heads of `kl_teacher_heads` (); (): every head."""
        if not self.kl_teacher_heads:
            return ()
        return tuple(h.strip() for h in self.kl_teacher_heads.split(","))

    def for_role(self, main_agent: bool) -> LossConfig:
        """The loss of one learning agent: main agents take this one; exploiters (main and
        league exploiters) learn best responses to their targets, so the terms that keep a
        main agent's last iterate near an equilibrium (the magnet, entropy annealing) are off
        for them and their entropy weight is `exploiter_entropy_weight` when set."""
        if main_agent:
            return self
        return dataclasses.replace(
            self, magnet_weight=0.0, entropy_weight_end=None, entropy_anneal_updates=0,
            entropy_weight=(self.entropy_weight if self.exploiter_entropy_weight is None
                            else self.exploiter_entropy_weight))

    @classmethod
    def ppo(cls, **overrides) -> LossConfig:
        """OpenAI Five Table 2 ("Baseline" column) as a PPO+GAE configuration."""
        values = dict(policy_loss="ppo", discount=0.9993, upgo_weight=0.0, value_weight=1.0,
                      entropy_weight=0.01, ppo_clip_epsilon=0.2, gae_lambda=0.95, td_lambda=0.95)
        values.update(overrides)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The learner's Reverb table.

    selector "fifo": items are sampled oldest first and each at most
    `ceil(samples_per_insert)` times (a queue when it is 1); "uniform": uniform sampling,
    oldest removed first once `max_size` is reached. `samples_per_insert` is the
    `SampleToInsertRatio` target reuse (AlphaStar replays each datum twice; OpenAI Five aims at
    about 1); `error_buffer` is the slack, in samples, the limiter allows around that ratio
    (default: two batches' worth).
    """

    table: str = setting("learner", "the Reverb table's name (a league run names it after the agent)")
    selector: str = setting(
        "uniform", "the replay table's sampling: \"uniform\", or \"fifo\" (a queue when samples_per_insert is 1)")
    max_size: int = setting(4096, "unrolls the replay table holds; the oldest are removed first")
    samples_per_insert: float = setting(
        2.0, "target times each unroll is sampled from the replay table (AlphaStar: 2)")
    min_size_to_sample: int = setting(1, "unrolls in the replay table before sampling starts")
    error_buffer: float | None = setting(
        None, "the replay rate limiter's slack in samples around samples_per_insert (None: two batches)")

    def __post_init__(self):
        if self.selector not in ("fifo", "uniform"):
            raise ValueError(f"selector must be 'fifo' or 'uniform', got {self.selector!r}")
        if self.samples_per_insert <= 0 or self.max_size < 1 or self.min_size_to_sample < 1:
            raise ValueError("samples_per_insert, max_size and min_size_to_sample must be > 0")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Everything the learner needs besides the network and its initial parameters."""

    batch_size: int = setting(32, "unrolls per update (on the device path: games each learner plays at once)")
    unroll_length: int = setting(32, "steps per unroll (consecutive unrolls overlap by one step)")
    learning_rate: float = setting(3e-4, "Adam's learning rate")
    exploiter_learning_rate: float | None = setting(
        None, "the exploiters' learning rate (None: learning_rate); alone against a fixed target a "
        "faster rate gets there in fewer updates (BENCHMARKS.md, \"Leduc: exploiters that live "
        "longer and learn faster\")")
    exploration: float = setting(
        0.0, "device path: chance that a learner plays a uniform legal action, not its policy's "
        "(`agents.networks.exploring_log_probs`; V-trace corrects for it); 0: the policy itself")
    exploiter_exploration: float | None = setting(
        None, "device path: the exploiters' chance of a uniform legal action (None: exploration)")
    adam_b1: float = setting(0.9, "Adam's beta 1")
    adam_b2: float = setting(0.999, "Adam's beta 2")
    adam_eps: float = setting(1e-8, "Adam's epsilon")
    max_grad_norm: float | None = setting(40.0, "clip the gradient's global norm to this (None: no clip)")
    learning_rate_scales: str = setting(
        "", "parameters that learn at a multiple of the learning rate: NAME=K pairs separated by "
        "commas, NAME a part of the parameters' path (e.g. policy_composition=10: SMAX's army pick, "
        "one decision a game); empty: every parameter at the learning rate")
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    sampler: str = setting(
        "dataset", "replay path: how the learner samples its table: \"dataset\" "
        "(reverb.TrajectoryDataset) or \"client\" (a thread with Reverb's Client)")
    prefetch_batches: int = setting(2, "replay path: sampled batches waiting on the device")
    checkpoint_every: int = setting(0, "learner updates between checkpoints; 0: only on request or close")
    metrics_window: int = setting(100, "learner updates averaged in the learner's metrics")

    def __post_init__(self):
        _floats(self)
        if self.batch_size < 1 or self.unroll_length < 2:
            raise ValueError("batch_size must be >= 1 and unroll_length >= 2")
        if self.sampler not in ("dataset", "client"):
            raise ValueError(f"sampler must be 'dataset' or 'client', got {self.sampler!r}")
        if self.prefetch_batches < 1:
            raise ValueError("prefetch_batches must be >= 1")
        for name in ("learning_rate", "exploiter_learning_rate"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0; got {value}")
        for name in ("exploration", "exploiter_exploration"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1); got {value}")
        _ = self.rate_scales  # a malformed learning_rate_scales fails here, not in the learner

    @property
    def rate_scales(self) -> tuple[tuple[str, float], ...]:
        """`learning_rate_scales` as (name, K) pairs; (): none."""
        pairs = []
        for item in filter(None, (i.strip() for i in self.learning_rate_scales.split(","))):
            name, _, k = item.partition("=")
            try:
                scale = float(k)
            except ValueError:
                scale = float("nan")
            if not name.strip() or not scale > 0:
                raise ValueError(f"learning_rate_scales must be NAME=K pairs separated by commas, K > 0 "
                                 f"(e.g. \"policy_composition=10\"); got {self.learning_rate_scales!r}")
            pairs.append((name.strip(), scale))
        return tuple(pairs)

    def for_role(self, main_agent: bool) -> LearnerConfig:
        """The learner of one learning agent: main agents take this one; exploiters take
        `exploiter_learning_rate` and `exploiter_exploration` when set, and the loss of their
        role (`LossConfig.for_role`)."""
        own = not main_agent and self.exploiter_learning_rate is not None
        explore = not main_agent and self.exploiter_exploration is not None
        return dataclasses.replace(self, learning_rate=self.exploiter_learning_rate if own else self.learning_rate,
                                   exploration=self.exploiter_exploration if explore else self.exploration,
                                   loss=self.loss.for_role(main_agent))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)
