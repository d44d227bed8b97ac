"""The oracle that answers the agent's questions, and the text normalization its grammar uses.

An :class:`Oracle` maps ``(secret, question)`` to an answer. The embedded oracles answer from a
hand-checked knowledge base (``Yes.``, ``No.`` or ``Invalid Question.``); a model oracle (the
official fine-tuned flan-t5) can implement the same interface.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Protocol, runtime_checkable

YES, NO, INVALID = "Yes.", "No.", "Invalid Question."

MAX_QUESTION_CHARS = 500  # longer questions are not parsed: "Invalid Question."


@runtime_checkable
class Oracle(Protocol):
    def answer(self, secret: str, question: str) -> str:
        """The answer to ``question`` about the hidden ``secret`` (its primary name)."""
        ...


# Ways of saying "it" that the grammar reduces to "it" (longest first).
_SUBJECTS = (
    "the object you are thinking of",
    "the thing you are thinking of",
    "the object you're thinking of",
    "the secret object",
    "the hidden object",
    "your object",
    "the object",
    "this object",
    "the thing",
    "the item",
    "your item",
    "this thing",
    "this",
    "that",
)
_KIND_OF = ("a kind of", "a type of", "some kind of", "some type of", "a sort of", "one of the")


def normalize(text: str) -> str:
    """Lowercase ASCII words separated by single spaces; punctuation other than ``'`` dropped.

    Control characters and non-ASCII symbols (emoji) become spaces; accented letters lose
    their accents (``Bogotá`` -> ``bogota``).
    """
    text = unicodedata.normalize("NFKD", text[: MAX_QUESTION_CHARS * 2])
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return " ".join(text.split())


def canonical_question(text: str) -> str:
    """:func:`normalize`, then "is the object ..." / "is this a kind of ..." -> "is it ..."."""
    q = normalize(text)
    for filler in ("so ", "ok ", "okay ", "well ", "question ", "next question "):
        if q.startswith(filler):
            q = q[len(filler) :]
    for verb in ("is", "does", "can", "would", "could", "will", "has", "do"):
        for subject in _SUBJECTS:
            prefix = f"{verb} {subject} "
            if q.startswith(prefix):
                q = f"{verb} it " + q[len(prefix) :]
                break
    if q.startswith("would it be "):
        q = "is it " + q[len("would it be ") :]
    for kind in _KIND_OF:
        if q.startswith(f"is it {kind} "):
            q = "is it a " + q[len(f"is it {kind} ") :]
            break
    return q


def ends_with_name(question: str, names: tuple[str, ...]) -> bool:
    """Whether ``question`` (trailing punctuation cut) ends with one of ``names`` as whole words."""
    q = normalize(question)
    return any(q == n or q.endswith(" " + n) for n in (normalize(name) for name in names) if n)


def mentions(text: str, name: str) -> bool:
    """Whether ``name`` occurs in ``text`` as whole words (both normalized)."""
    n = normalize(name)
    return bool(n) and re.search(rf"(^| ){re.escape(n)}( |$)", normalize(text)) is not None


class NameIndex:
    """Finds which secrets a question names: every ``(name, key)`` pair matched as whole words,
    longest names first, so "cooking pot" is one name and not "pot" as well."""

    def __init__(self, pairs):
        self._names = sorted(((normalize(n), key) for n, key in pairs), key=lambda x: -len(x[0]))

    def names_of(self, keys: set) -> set[str]:
        """The normalized names of ``keys``."""
        return {n for n, key in self._names if key in keys}

    def find(self, question: str) -> set:
        """The keys of the names ``question`` mentions."""
        text = f" {normalize(question)} "
        found = set()
        for name, key in self._names:
            if name and f" {name} " in text:
                found.add(key)
                text = text.replace(f" {name} ", " | ")
        return found
