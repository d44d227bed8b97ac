"""Host-side batches from token rows (the replay buffer's) agree with batches from texts."""

import numpy as np

from archer_jax.learners import batches
from tests.learners import text_batches
from archer_jax.models.tokenizer import action_rows, token_rows


def test_critic_batch_from_rows_equals_the_text_path(tokenizers):
    _, critic_tok = tokenizers
    obs = ["Questions:\n", "Questions:\nIs it alive? Yes.\n"]
    act, nxt, pi = ["Is it alive?", "Is it a dog?"], ["Questions:\nIs it alive? No.\n"] * 2, ["Is it red?", "x"]
    from_texts = text_batches.critic_batch(critic_tok, obs, act, nxt, pi, [-1.0, 0.0], [False, True], max_length=64)
    rows = lambda texts: token_rows(critic_tok, texts, max_length=64)  # noqa: E731
    from_rows = batches.critic_batch(
        critic_tok, rows(obs), rows(act), rows(nxt), rows(pi), [-1.0, 0.0], [False, True], max_length=64
    )
    for a, b in zip(from_texts, from_rows):
        for x, y in zip(np.atleast_1d(a), np.atleast_1d(b)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # Paired fields share a length bucket; the critic tokenizer pads on the right.
    assert from_rows.observation.ids.shape == from_rows.next_observation.ids.shape
    assert from_rows.observation.mask[0, 0] == 1  # [batch, length]


def test_action_rows_end_with_the_stop_token_and_keep_their_beginning(tokenizers):
    policy_tok, _ = tokenizers
    newline = policy_tok("\n", add_special_tokens=False)["input_ids"]
    short, long = action_rows(policy_tok, ["Is it a dog?", "Does it have keys that you press " * 4], max_action_length=12)
    assert list(short[-len(newline):]) == newline
    full = policy_tok("Does it have keys that you press " * 4 + "\n", add_special_tokens=False)["input_ids"]
    assert len(full) > 12 and list(long) == full[:12]
