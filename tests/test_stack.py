"""The pinned stack works for user networks too: flax's `nn.scan` on the pinned JAX.

flax 0.10.4 calls `jax.api_util.debug_info`, which jax 0.4.34 lacks, so any network written
with `nn.scan` (e.g. JaxMARL's recurrent baselines) fails with AttributeError; the pin is 0.10.3.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class ScannedGRU(nn.Module):
    """A GRU cell scanned over time (JaxMARL's ScannedRNN pattern)."""

    features: int

    @nn.compact
    def __call__(self, carry, xs):
        scan = nn.scan(nn.GRUCell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=0, out_axes=0)
        return scan(features=self.features)(carry, xs)


def test_a_scanned_flax_gru_runs_and_matches_the_cell_stepped_by_hand():
    T, B, D, H = 5, 3, 4, 6
    xs = jax.random.normal(jax.random.PRNGKey(0), (T, B, D))
    carry = jnp.zeros((B, H))
    model = ScannedGRU(H)
    params = model.init(jax.random.PRNGKey(1), carry, xs)
    final, ys = jax.jit(model.apply)(params, carry, xs)
    assert ys.shape == (T, B, H)
    cell = nn.GRUCell(features=H)
    cell_params = {"params": params["params"]["ScanGRUCell_0"]}
    h = carry
    for t in range(T):
        h, y = cell.apply(cell_params, h, xs[t])
        np.testing.assert_allclose(ys[t], y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final, h, rtol=1e-5, atol=1e-6)
