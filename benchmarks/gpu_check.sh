#!/usr/bin/env bash
# The base code on a GPU machine whose image already has JAX and numpy (BENCHMARKS.md, "The base
# stack"): the core tests, one SMAX learner's update, the Kuhn league and the 3-race SMAX league
# on the device path, each in one process. Run from the repository's root with the wheels the
# image lacks in .whl/ (dm-haiku, rlax, distrax, tfp-nightly, dm-tree, jaxmarl, gymnax,
# gymnasium, open-spiel, pgx, trueskill, plotly, tensorboardX and their small dependencies:
# `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl NAME==VERSION`).
# Writes its logs to $OUT (default: ./gpu_check).
OUT=${OUT:-gpu_check}
mkdir -p "$OUT"
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import sys, jax, numpy, flax, haiku, rlax, optax; print(sys.version.split()[0], 'jax', jax.__version__, 'numpy', numpy.__version__, 'flax', flax.__version__, 'haiku', haiku.__version__, 'rlax', rlax.__version__, 'optax', optax.__version__, jax.devices())" 2>&1 | tee $OUT/versions.txt
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $OUT/versions.txt
echo "== core tests (Python 3.12, GPU)"
timeout 120 python3 -m pytest -q -p no:cacheprovider -x tests/test_losses.py tests/test_networks.py tests/test_jax_poker.py tests/test_league_core.py tests/test_stack.py tests/test_exploiter_gap.py -k "not short_kuhn_league and not nashconv_gaps" 2>&1 | tee $OUT/tests.log | tail -4
echo "== SMAX learner update alone (GPU)"
timeout 90 python3 -m benchmarks.learner_bench --parts=smax --updates=50 --rounds=1 2>&1 | tee $OUT/learner.log | grep -E "SMAX|RESULT|compile" | tail -4
echo "== Kuhn league, device path, one process (GPU)"
timeout 110 python3 -m benchmarks.device_bench --game=kuhn_poker --paths=device --seconds=30 --warmup=40 2>&1 | tee $OUT/kuhn.log | grep -E "device |RESULT" | tail -3
echo "== SMAX 3-race league, device path, one process (GPU)"
timeout 190 python3 -m benchmarks.device_bench --game=smax_races --paths=device --seconds=50 --warmup=60 2>&1 | tee $OUT/smax.log | grep -E "device |alone|RESULT" | tail -4
