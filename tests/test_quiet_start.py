"""Issue 58, a quiet first screen: with JAX_PLATFORMS unset JAX probes every backend and logs
the ones this host lacks at INFO ("Unable to initialize backend 'tpu'"), which absl's app.run
shows; `experiments.nashconv` drops only those lines."""

import logging
import os
import subprocess
import sys

from experiments.nashconv import quiet_backend_probe

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# an absl command whose first JAX call probes the backends, as a command's main does
COMMAND = """
import jax
from absl import app
from experiments.nashconv import quiet_backend_probe

def main(argv):
    if argv[1:] == ["quiet"]:
        quiet_backend_probe()
    jax.devices()
    print("done")

app.run(main)
"""


def test_the_backend_probe_lines_are_dropped_and_warnings_kept():
    logger = logging.getLogger("jax._src.xla_bridge")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelno, record.getMessage()))

    handler = Keep(logging.DEBUG)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        quiet_backend_probe()
        quiet_backend_probe()   # once is enough: no second filter
        logger.info("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so")
        logger.info("another INFO line")
        logger.warning("Unable to initialize backend 'cuda': asked for and missing")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert seen == [(logging.INFO, "another INFO line"),
                    (logging.WARNING, "Unable to initialize backend 'cuda': asked for and missing")]
    assert sum(type(f).__name__ == "_BackendProbe" for f in logger.filters) == 1


def test_a_command_under_absl_prints_no_probe_lines():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}

    def run(*args):
        done = subprocess.run([sys.executable, "-c", COMMAND, *args], cwd=REPOSITORY, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "done" in done.stdout, done.stderr
        return done.stderr

    loud = run()
    if "Unable to initialize backend" not in loud:
        # a host with every backend JAX probes (or none to probe): nothing to quieten here
        return
    assert "Unable to initialize backend" not in run("quiet")


# experiments.surgery's main with the surgery itself replaced by a first JAX call, as the real
# one makes (it loads the run's players on the device)
SURGERY = """
import jax
from absl import app
from experiments import surgery

def operate(*args, **kwargs):
    jax.devices()
    print("done")

surgery.operate = operate
surgery.define_flags()
app.run(surgery.main)
"""


def test_surgery_prints_no_probe_lines():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-c", SURGERY, "--run_dir=unused"], cwd=REPOSITORY, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert "Unable to initialize backend" not in done.stderr, done.stderr
