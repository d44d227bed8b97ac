"""The critic's warm start in a run: masked-LM steps on the SFT demonstrations train its encoder
and leave its heads (their initial value too), its target starts equal to it, and a second run
with the same cache takes the stored encoder instead of training."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from archer_jax.run.warm_start import critic_start
from tests.pretraining.test_sft_start import warm_started
from tests.run.test_train_app import assert_same_tree, micro

pytestmark = pytest.mark.slow


def _pretrained(c, workdir):
    """(the critic's parameters and target after the warm start, as built, and its info)."""
    state, built, info = warm_started(c, workdir, critic_start, "critic")
    return state.params, state.target, built, info


def test_the_warm_start_trains_the_encoder_keeps_the_heads_and_is_cached(tmp_path):
    c = micro(critic_pretrain__steps=6, critic_pretrain__batch_size=8, critic_init_value=-3.0,
              sft__cache=str(tmp_path / "cache"))
    params, target, built, info = _pretrained(c, tmp_path / "first")
    assert info["steps"] == 6 and info["last_loss"] < info["first_loss"] and "cache" in info
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params["encoder"]),
                                                        jax.tree.leaves(built["encoder"])))
    for head in ("q1", "q2", "v1", "v2"):  # the heads as built, their output bias at critic_init_value
        assert_same_tree(params[head], built[head])
        np.testing.assert_array_equal(params[head]["out"]["bias"], -3.0)
    assert_same_tree(target, params)
    (entry,) = (tmp_path / "cache").iterdir()
    again, _, _, info_again = _pretrained(c, tmp_path / "second")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]
    assert "seconds" not in info_again or info_again == info  # taken from the cache, not trained again
    assert_same_tree(again, params)
