"""The parity tests (this folder among them) run with float32 matmuls at "highest" precision."""

import jax


def test_parity_tests_pin_the_highest_matmul_precision(request):
    assert request.node.get_closest_marker("parity") is not None
    assert jax.config.jax_default_matmul_precision == "highest"
