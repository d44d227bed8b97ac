"""Will it fit, and how fast? Every program of one iteration of a run, compiled for a TPU slice
(or this machine's devices) from the config alone, before you pay for the slice.

    python -m archer_jax.plan --config=configs/20q.py --target=v5litepod-8
    python -m archer_jax.plan --config=configs/20q_llm.py --target=v4-32 --json plan.json
    python -m archer_jax.plan --config=configs/20q.py:tiny --target=local

No weights are read and nothing is downloaded: the models' shapes come from their ``config.json``
(copies of the paper's models ship with the package). The run's mesh and sharding rules are built
on the target's devices and each program is compiled by XLA for that chip (libtpu's compiler,
from the ``tpu`` extra; it runs on any host): the sampler's prefill and decode for the rollouts,
the evaluations and each step's ``a_π``, the agent's own learner steps, built by the same code
as in a run, and a T5 oracle's decode when the config names one (:mod:`archer_jax.plan.abstract_parts`), with ``learner.micro_batch_size="auto"`` chosen from
the target's memory. For each program it prints the compiler's memory per chip (arguments,
temporaries, outputs, and the peak with every state the run holds resident) against the chip's
HBM, its FLOPs and bytes, a roofline time (the larger of FLOPs / peak FLOP/s and bytes / HBM
bandwidth: a lower bound), its compile time and its count per iteration; then the projected time
of an iteration and of the run. XLA counts a loop's body once: a learner step's FLOPs are counted
on its jaxpr (:mod:`archer_jax.plan.flops`: scanned layers and micro-batches multiplied out; its
bytes are XLA's count, a lower bound), and the decode loop's FLOPs are XLA's times its new tokens,
its bytes the floor of every parameter and the whole KV cache read once per new token. A program that does not fit
ends the command with one line naming it (exit status 1).

The package: ``command`` (the command line), ``planner`` (each program compiled and measured, the
``Plan``), ``abstract_parts`` (the run's parts as shapes), ``slices`` (TPU slices by gcloud name and
their chips' figures), ``flops`` (matmul FLOPs of a jaxpr), ``memory`` (bytes of a state on its
devices, also logged by a run).
"""
