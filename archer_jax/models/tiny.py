"""The tiny preset: small GPT-2 / Llama / RoBERTa / T5 models with a byte-level BPE tokenizer trained offline.

Used by the tests and by the embedded default run, so nothing is downloaded. The tokenizer is
trained with ``tokenizers`` on text generated here (dialogues in the style of the project's
environments); byte-level BPE encodes any text, the corpus only shapes which merges exist.
Both are written as ordinary Hugging Face directories, so every loader path is exercised.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from archer_jax.models.gpt2.model import GPT2Config
from archer_jax.models.llama.model import LlamaConfig
from archer_jax.models.pretrained import ARCHITECTURES, save_pretrained
from archer_jax.models.roberta.model import RobertaConfig
from archer_jax.models.t5.model import T5Config

KINDS = ("gpt2", "llama", "roberta", "t5")
CAUSAL_KINDS = ("gpt2", "llama")  # tiny policies
TINY_PREFIX = "tiny:"  # a config's "tiny:gpt2" / "tiny:llama" / "tiny:roberta": built offline by build_tiny
# The tiny Llama's chat template: Mistral-Instruct's format ("[INST] ... [/INST]"), so that the
# chat-template path of the prompts (archer_jax.sampling.prompts) runs offline as it does for a 7B model.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
_GPT2_SPECIAL = ["<|endoftext|>"]
_ROBERTA_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
_T5_SPECIAL = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2; "</s>" ends every text

_OBJECTS = (
    "airplane car truck bicycle boat train bus motorcycle helicopter rocket dog cat horse cow "
    "elephant lion tiger bear rabbit mouse snake frog eagle penguin dolphin shark whale apple "
    "banana orange grape strawberry carrot potato tomato onion bread cheese egg pizza cake "
    "chair table bed sofa lamp door window mirror clock television computer phone keyboard "
    "camera radio piano guitar violin drum football basketball tennis ball pen pencil book "
    "paper scissors knife fork spoon plate cup bottle shirt pants shoes hat coat glove sock "
    "tree flower grass rock mountain river sun moon star cloud hammer screwdriver ladder rope"
).split()
_CATEGORIES = (
    "an animal", "a vehicle", "a fruit", "a vegetable", "food", "furniture", "an electronic device",
    "a musical instrument", "a toy", "a tool", "clothing", "a plant", "something in nature",
    "made of metal", "made of wood", "bigger than a person", "alive", "used in the kitchen",
    "something you can hold", "found in a house", "used for sports", "used outdoors",
)
_CITIES = (
    "Tokyo, Japan", "Seoul, South Korea", "Paris, France", "London, United Kingdom", "Cairo, Egypt",
    "Lagos, Nigeria", "Mumbai, India", "Sao Paulo, Brazil", "Mexico City, Mexico", "New York, United States",
    "Sydney, Australia", "Moscow, Russia", "Istanbul, Turkey", "Jakarta, Indonesia", "Berlin, Germany",
)
_COMMANDS = (
    "look", "inventory", "north", "south", "east", "west", "up", "down", "take paper", "read paper",
    "open door", "take gun", "examine body", "go to the kitchen", "unlock the door with the key",
)


def tiny_corpus(num_dialogues: int = 600, seed: int = 0) -> list[str]:
    """Generated training text for the tiny tokenizer (deterministic for a given seed)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_dialogues):
        obj = rng.choice(_OBJECTS)
        turns = ["Questions:"]
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.6:
                q = f"Is it {rng.choice(_CATEGORIES)}?"
            else:
                q = f"Is it a {rng.choice(_OBJECTS)}?"
            turns.append(f"{q} {rng.choice(['Yes.', 'No.', 'Invalid Question.'])}")
        turns.append(f"Is it a {obj}? Yes.")
        lines.append("\n".join(turns) + "\n")
        city = rng.choice(_CITIES)
        lines.append(
            f"Is the city in {city.split(', ')[1]}? Yes. What is the weather like? It is warm.\n"
            f"Is the city {city}? Yes.\n"
        )
        lines.append(" ".join(rng.sample(_COMMANDS, 4)))
    return lines


def train_tokenizer(kind: str, directory: str | os.PathLike, vocab_size: int = 1024, seed: int = 0):
    """Trains a byte-level BPE tokenizer on :func:`tiny_corpus` and saves it to ``directory``.

    ``kind`` ``gpt2`` gives a GPT-2 style tokenizer (``<|endoftext|>`` as BOS/EOS/UNK);
    ``llama`` the same with a chat template (:data:`TINY_CHAT_TEMPLATE`); ``roberta`` a RoBERTa style one (``<s> <pad> </s> <unk> <mask>`` = ids 0..4, ``<s>``
    and ``</s>`` around each text); ``t5`` a T5 style one (``<pad> </s> <unk>`` = ids 0..2,
    ``</s>`` after each text). Returns the Hugging Face tokenizer.
    """
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if kind not in KINDS:
        raise ValueError(f"tokenizer kind must be one of {KINDS}, got {kind!r}")
    special = {"roberta": _ROBERTA_SPECIAL, "t5": _T5_SPECIAL}.get(kind, _GPT2_SPECIAL)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(tiny_corpus(seed=seed), trainer)
    if kind == "t5":
        bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
        tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="</s>",
                                                         unk_token="<unk>", model_max_length=512)
        tokenizer.save_pretrained(directory)
        return tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = bpe.model.save(tmp)
        cls = transformers.RobertaTokenizer if kind == "roberta" else transformers.GPT2Tokenizer
        tokenizer = cls(vocab=vocab, merges=merges)
    tokenizer.model_max_length = 512
    if kind == "llama":
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return tokenizer


# Sizes of the models built offline: ``tiny:<kind>`` (every test, the embedded default) and
# ``small:<kind>``, wide and deep enough for the full 157-object Twenty Questions on a CPU.
SIZES = {"tiny": dict(width=64, layers=2, heads=4), "small": dict(width=128, layers=4, heads=4)}
PREFIXES = tuple(f"{size}:" for size in SIZES)


def tiny_config(kind: str, vocab_size: int, size: str = "tiny") -> GPT2Config | LlamaConfig | RobertaConfig | T5Config:
    """The model config of ``kind`` at ``size`` (:data:`SIZES`) for a tokenizer of ``vocab_size`` tokens."""
    if size not in SIZES:
        raise ValueError(f"model size must be one of {tuple(SIZES)}, got {size!r}")
    width, layers, heads = SIZES[size]["width"], SIZES[size]["layers"], SIZES[size]["heads"]
    if kind == "gpt2":
        return GPT2Config(
            vocab_size=vocab_size, n_positions=512, n_embd=width, n_layer=layers, n_head=heads, bos_token_id=0,
            eos_token_id=0,
        )
    if kind == "llama":  # Llama-shaped: RMSNorm, RoPE, grouped-query attention (2 key/value heads), SwiGLU
        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=width, intermediate_size=width * 11 // 4, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads // 2, max_position_embeddings=512, bos_token_id=0,
            eos_token_id=0,
        )
    if kind == "roberta":
        return RobertaConfig(
            vocab_size=vocab_size,
            hidden_size=width,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * width,
            max_position_embeddings=514,
        )
    if kind == "t5":  # flan-t5-shaped: gated GELU, its own LM head (an oracle: noise, but every path runs)
        return T5Config(vocab_size=vocab_size, d_model=width, d_kv=width // heads, d_ff=2 * width, num_layers=layers,
                        num_heads=heads, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    raise ValueError(f"tiny model kind must be one of {KINDS}, got {kind!r}")


def build_tiny(kind: str, directory: str | os.PathLike, seed: int = 0, size: str = "tiny") -> Path:
    """Writes a randomly initialised ``kind`` model of ``size`` (:data:`SIZES`) and its tokenizer as an
    HF directory.

    Reuses ``directory`` when it already holds a model of that kind and size. Returns its path.
    """
    import jax
    from flax import nnx

    directory = Path(directory).expanduser()
    if _holds_tiny(directory, kind, size):
        return directory
    if (directory / "config.json").is_file():
        raise ValueError(f"{directory}: holds another model than a {size} {kind}; pass an empty or new directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    # Built in a private sibling and renamed into place, so that processes sharing the directory
    # (the hosts of a run on one machine or one shared disk) never read a half-written model.
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        staging.chmod(0o755)
        tokenizer = train_tokenizer(kind, staging, seed=seed)
        config = tiny_config(kind, len(tokenizer), size)
        with jax.default_device(jax.local_devices(backend="cpu")[0]):
            model = ARCHITECTURES[kind].module_cls(config, rngs=nnx.Rngs(seed))
        save_pretrained(model, staging, tokenizer=tokenizer)
        try:
            os.rename(staging, directory)  # atomic; refused when another process's copy landed first
        except OSError:
            if not _holds_tiny(directory, kind, size):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _holds_tiny(directory: Path, kind: str, size: str = "tiny") -> bool:
    marker = directory / "config.json"
    if not marker.is_file():
        return False
    found = json.loads(marker.read_text())
    width = next((found[k] for k in ("n_embd", "hidden_size", "d_model") if k in found), None)
    return found.get("model_type") == kind and width == SIZES[size]["width"]


def offline_model(name: str) -> tuple[str, str] | None:
    """``("small", "gpt2")`` for ``small:gpt2`` (a model built offline); None for any other name."""
    size, sep, kind = name.partition(":")
    return (size, kind) if sep and size in SIZES else None


def tiny_kind(name: str) -> str | None:
    """``llama`` for ``tiny:llama`` or ``small:llama`` (a model built offline); None for any other name."""
    found = offline_model(name)
    return found[1] if found else None


def model_directory(name: str, workdir: str | os.PathLike) -> str:
    """``tiny:<kind>`` and ``small:<kind>`` are built (offline) under ``workdir/models``; anything
    else is a hub name or directory for the loaders."""
    found = offline_model(name)
    if found is not None:
        size, kind = found
        if kind not in KINDS:
            raise ValueError(f"{name!r} is not a model built offline; known: "
                             f"{', '.join(p + k for p in PREFIXES for k in KINDS)}")
        return str(build_tiny(kind, Path(workdir) / "models" / f"{size}_{kind}", size=size))
    return name
