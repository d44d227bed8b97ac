"""Oracle throughput (questions/s): our batched, jitted flan-t5 oracle against the official
Hugging Face PyTorch calls, in the same run on the same machine.

The model is a random T5 of flan-t5-small's shape (8 + 8 layers, 512 wide, 6 heads, gated GELU,
32128 tokens; the official oracles are fine-tunes of it, and random weights decode at the same
speed). Prompts are the official 20Q ones (``"The object is {word}." + question``) for a batch of
``--batch`` envs, 16 greedy new tokens. Three ways of answering one step's questions:

* ``ours``: :class:`archer_jax.model_oracle.T5Generator` (one jitted encode + greedy decode
  over the whole batch, power-of-two buckets; compiled before timing);
* ``hf_batched``: the official env's call (``tokenizer(prompts, padding=True)`` then
  ``model.generate(max_new_tokens=16, do_sample=False)`` over the batch);
* ``hf_per_question``: the same call once per question.

Before timing, ours and ``hf_batched`` must give the same texts. Hugging Face stops a batch once
every row has emitted EOS; ours always runs the 16 steps (a static program), which the figures include.

    python benchmarks/oracle.py --batch 32 --repeats 5
Writes benchmarks/results/oracle_<backend>.json.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from common import RESULTS, print_table, time_call, write_result  # noqa: I001 (sets the XLA flags first)

import jax  # noqa: E402

from archer_jax import model_oracle, models  # noqa: E402
from archer_jax.envs import oracle_formats, twenty_questions  # noqa: E402
from archer_jax.models.tiny import train_tokenizer  # noqa: E402

FLAN_T5_SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=8, num_heads=6,
                     feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
                     pad_token_id=0, eos_token_id=1)


def build(directory: Path, seed: int = 0):
    """A random flan-t5-small-shaped T5 (HF PyTorch, saved as an HF directory) with a T5-style
    tokenizer trained offline; returns the PyTorch model."""
    import torch
    import transformers

    train_tokenizer("t5", directory)
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**FLAN_T5_SMALL)).eval()
    model.save_pretrained(directory)
    return model


def prompts(batch: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [o.name for o in twenty_questions.objects()]
    questions = [a.question for a in twenty_questions.attributes()]
    fmt = oracle_formats.FORMATS[("t5", "twenty_questions")]
    return [fmt.prompt(rng.choice(words), rng.choice(questions)) for _ in range(batch)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32, help="questions per env step (the official rollout has 32 envs)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-question-repeats", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        hf = build(directory)
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        ours = model_oracle.T5Generator(models.load_t5(directory), models.load_tokenizer(directory, padding_side="right"))
    texts = prompts(args.batch)

    def hf_call(batch: list[str]) -> list[str]:
        encoded = tokenizer(batch, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = hf.generate(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                              max_new_tokens=args.new_tokens, do_sample=False)
        return tokenizer.batch_decode(out, skip_special_tokens=True)

    compile_s = time.perf_counter()
    got = ours(texts, args.new_tokens)
    compile_s = time.perf_counter() - compile_s
    expected = hf_call(texts)
    same = sum(a == b for a, b in zip(got, expected))
    if same != len(texts):
        raise SystemExit(f"ours and Hugging Face disagree on {len(texts) - same} of {len(texts)} answers")
    rows = []
    _, ours_s = time_call(lambda: ours(texts, args.new_tokens), args.repeats)
    rows.append(dict(method="ours (jitted, batched)", batch=args.batch, seconds=ours_s, questions_per_s=args.batch / ours_s,
                     compile_s=compile_s))
    _, hf_s = time_call(lambda: hf_call(texts), args.repeats)
    rows.append(dict(method="hf_batched (official)", batch=args.batch, seconds=hf_s, questions_per_s=args.batch / hf_s))
    _, per_s = time_call(lambda: [hf_call([t]) for t in texts], args.per_question_repeats)
    rows.append(dict(method="hf_per_question", batch=args.batch, seconds=per_s, questions_per_s=args.batch / per_s))
    for row in rows:
        row["speedup_vs_hf_batched"] = hf_s / row["seconds"]
    print_table(rows, [("method", "method", "s"), ("batch", "batch", "d"), ("seconds", "s/step", ".3f"),
                       ("questions_per_s", "questions/s", ".1f"), ("speedup_vs_hf_batched", "x hf_batched", ".2f"),
                       ("compile_s", "first call s", ".1f")])
    path = write_result(f"oracle_{jax.default_backend()}", dict(vars(args), model="random flan-t5-small shape",
                                                                torch_threads=torch.get_num_threads(),
                                                                answers_identical=same), rows, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
