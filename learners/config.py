"""The learner's configuration: plain frozen dataclasses (no JAX, Reverb or TF at import), so
that a run's configuration and its command-line flags can be built from them cheaply.
`LossConfig` (learners/losses.py) holds every weight of the loss.
"""

from __future__ import annotations

import dataclasses
import json

from learners.losses import LossConfig


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

    table: str = "learner"  # the table's name (a league run names it after the agent)
    selector: str = "uniform"  # "uniform" sampling or "fifo" (a queue when samples_per_insert is 1)
    max_size: int = 4096  # unrolls the table holds; the oldest are removed first
    samples_per_insert: float = 2.0  # target times each unroll is sampled (AlphaStar: 2)
    min_size_to_sample: int = 1  # unrolls in the table before sampling starts
    error_buffer: float | None = None  # the rate limiter's slack in samples (None: two batches)

    def __post_init__(self):
        if self.selector not in ("fifo", "uniform"):
            raise ValueError(f"selector must be 'fifo' or 'uniform', got {self.selector!r}")
        if self.samples_per_insert <= 0 or self.max_size < 1 or self.min_size_to_sample < 1:
            raise ValueError("samples_per_insert, max_size and min_size_to_sample must be > 0")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Everything the learner needs besides the network and its initial parameters."""

    batch_size: int = 32  # unrolls per update
    unroll_length: int = 32  # steps per unroll (consecutive unrolls overlap by one step)
    learning_rate: float = 3e-4  # Adam's learning rate
    adam_b1: float = 0.9  # Adam's beta 1
    adam_b2: float = 0.999  # Adam's beta 2
    adam_eps: float = 1e-8  # Adam's epsilon
    max_grad_norm: float | None = 40.0  # clip the gradient's global norm to this (None: no clip)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    sampler: str = "dataset"            # "dataset" (reverb.TrajectoryDataset) or "client" (a thread with Reverb's Client)
    prefetch_batches: int = 2           # device batches waiting in the queue
    checkpoint_every: int = 0           # updates between checkpoints; 0: only on request/close
    metrics_window: int = 100           # updates averaged in metrics()

    def __post_init__(self):
        if self.batch_size < 1 or self.unroll_length < 2:
            raise ValueError("batch_size must be >= 1 and unroll_length >= 2")
        if self.sampler not in ("dataset", "client"):
            raise ValueError(f"sampler must be 'dataset' or 'client', got {self.sampler!r}")
        if self.prefetch_batches < 1:
            raise ValueError("prefetch_batches must be >= 1")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)
