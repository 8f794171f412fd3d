"""Settings by the learners' accelerator (experiments.config.DEVICE_DEFAULTS): CPU keeps the
measured laptop batch, a GPU or TPU gets a batch that fills it, a batch given wins, and the first
screen says which and why."""

from experiments.config import DEVICE_DEFAULTS, RunConfig, device_defaults


def test_cpu_keeps_the_measured_batch_and_an_accelerator_gets_a_full_one():
    config = RunConfig.make(game="kuhn_poker")
    cpu, line = device_defaults(config, "cpu", set())
    assert cpu == config and "device: cpu: learner batch 16" in line and "CPU default" in line
    for backend in ("gpu", "tpu"):
        chosen, line = device_defaults(config, backend, set())
        assert chosen.learner.batch_size == DEVICE_DEFAULTS[backend]["learner.batch_size"] == 256
        assert chosen.device.population and not config.device.population and "one program for" in line
        assert f"device: {backend}: learner batch 256" in line and "fills the accelerator" in line
        # nothing else moves: the learning rate (documented, not scaled) and the game's settings
        assert chosen.learner.learning_rate == config.learner.learning_rate
        assert chosen.league == config.league


def test_a_batch_given_wins_on_any_device():
    config = RunConfig.make(game="kuhn_poker", **{"learner.batch_size": 32})
    chosen, line = device_defaults(config, "gpu", {"learner.batch_size"})
    assert chosen.learner.batch_size == 32 and "(given;" in line
