"""Detective: the Z-machine game ``detective.z5`` through ``jericho``.

    env = Detective("shared/data/detective.z5")
    obs = env.reset()
    result = env.step("take paper")

The observation is laid out in four sections, all computed without spending a game turn (the
``look``/``inventory`` commands and jericho's valid-action search run on a saved emulator state
that is restored afterwards)::

    Location:
    << Chief's office >>
    You are standing in the Chief's office. ...

    Inventory:
    You are carrying nothing.

    Last:
    <the game's answer to the last action (the opening text after reset)>

    Valid actions: east, take paper, north, west

(``list_valid_actions=False`` leaves the last section out: jericho's search for valid actions
tries every candidate command in the emulator and takes most of a step's time, ~0.2 s.)

Reward is the change of the game's score. The game awards its first 10 points while it starts;
the score before the game starts counts as 0, so those points come with the first step and an
episode's rewards always add up to its final score (the 360 maximum for a won game).

Actions are sanitised and never raise: control characters are removed (a NUL hangs the
emulator; a newline would submit two commands), and so are non-ASCII and backslashes (the
interpreter's own escapes: ``\\_`` is Return, ``\\X`` its hotkeys), at most 16 words and 120
characters are kept (long word lists overflow the game's arrays and halt it), and only the
first command of a chain is sent (Inform runs ``w. e``, ``w, e`` and ``w then e`` as several
moves in one turn, which would get around the step limit; addressing a character as
``someone, do this`` is lost with it). A command that still halts the emulator, or leaves it
with no answer, is undone. Commands that would break the episode are refused with a fixed
answer and ``info.invalid``: the game's debugging verbs (``purloin``/``abstract`` hand out
scored objects), commands that write files in the working directory (``save``, ``script``,
``recording``), and commands that leave the game stuck in a menu or a yes/no prompt
(``help``, ``quit``, ``restart``).

``info.invalid`` marks the actions the game did not take: refused or undone ones, empty ones, and
those the parser rejects ("That's not a verb I recognise.", "I don't know the word ...": jericho's
list of parser complaints, matched on every line of the answer, since the game's answer starts
on a new line that jericho's own check trips over). A step before ``reset()`` or after the
episode ended raises :class:`~archer_jax.envs.base.EnvError` (the contract of
:mod:`archer_jax.envs.base`).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

from archer_jax.envs.base import EnvError, StepInfo, StepResult, episode_over, not_started

_INSTALL_HINT = 'pip install -e ".[detective]"'

MAX_ACTION_CHARS = 120  # jericho cuts at 198 bytes; Inform's own parse buffer is about this size
MAX_ACTION_WORDS = 16  # "take paper paper ..." with ~25 words overflows the game's arrays and halts it
BLOCKED_REPLY = "[That command is not available in this environment.]"
NO_RESPONSE_REPLY = "[The game gave no answer; the command was ignored.]"

# First words that are refused (compared on their first 9 letters, as Inform's dictionary does).
_BLOCKED_VERBS = frozenset(
    w[:9]
    for w in (
        # Inform library debugging verbs: they move objects or the player, or dump internals.
        "purloin abstract gonear goto tree showobj showverb scope trace actions changes daemons "
        "timers messages routines random showme responses xtree xpurloin xabstract "
        # Files in the working directory.
        "save restore script transcript unscript noscript recording replay "
        # Menus and yes/no prompts that swallow the following commands.
        "help about info information informati hint hints menu quit q die restart"
    ).split()
)
_CHAIN_SPLIT = re.compile(r"[.,;!?]|\bthen\b", re.IGNORECASE)
# Not printable ASCII, or a backslash: dumb-frotz reads "\_" as Return and "\X" as its hotkeys.
_DROPPED_CHARS = re.compile(r"[^\x20-\x7e]+|\\")


def sanitize_action(action: Any) -> str:
    """Any input -> one printable-ASCII command (maybe empty): the first command of a chain."""
    text = action if isinstance(action, str) else str(action)
    text = _DROPPED_CHARS.sub(" ", text[: 64 * MAX_ACTION_CHARS])
    text = _CHAIN_SPLIT.split(text, maxsplit=1)[0]
    return " ".join(text.split()[:MAX_ACTION_WORDS])[:MAX_ACTION_CHARS].strip()


# Parser complaints that jericho's list (jericho.defines.UNRECOGNIZED_REGEXPS) may miss.
_NOT_UNDERSTOOD = re.compile(r"not a verb I recogni[sz]e|I only understood you as far as|I didn't understand that sentence",
                             re.IGNORECASE)


def understood(response: str, unrecognized: Any = ()) -> bool:
    """Whether the game's ``response`` says the command was parsed: none of its lines matches
    ``unrecognized`` (jericho's regular expressions, matched from each line's start) or one of
    Inform's own complaints."""
    if _NOT_UNDERSTOOD.search(response):
        return False
    lines = [line.strip() for line in response.splitlines() if line.strip()]
    return not any(p.match(line) for line in lines for p in unrecognized)


def _is_blocked(command: str) -> bool:
    words = command.lower().split()
    return bool(words) and words[0][:9] in _BLOCKED_VERBS


def _import_jericho():
    """jericho, with its valid-action helper pointed at a blank spaCy pipeline."""
    try:
        import jericho
        import jericho.defines
        # Not ``jericho.util``: jericho's package namespace takes ``from ctypes import *``, so once
        # anything has imported ctypes.util, the attribute ``jericho.util`` is ctypes.util.
        util = importlib.import_module("jericho.util")
    except ImportError as e:
        raise ImportError(f"Detective needs the jericho package: {_INSTALL_HINT}") from e
    # jericho.util._load_spacy() loads "en_core_web_sm" (not on PyPI; it would try to download
    # it) unless the module global ``spacy_nlp`` already exists.
    if getattr(util, "spacy_nlp", None) is None:
        try:
            import spacy
        except ImportError as e:
            raise ImportError(f"Detective needs spacy for jericho's valid actions: {_INSTALL_HINT}") from e
        util.spacy_nlp = spacy.blank("en")
    return jericho


class Detective:
    """The ``Env`` protocol over one jericho ``FrotzEnv`` (one game per instance)."""

    def __init__(self, game_path: str | os.PathLike, max_steps: int = 50, *, list_valid_actions: bool = True):
        path = Path(game_path)
        if not path.is_file():
            raise EnvError(f"Detective game file not found: {os.fspath(path)}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.game_path = os.fspath(path.resolve())
        self.max_steps = int(max_steps)
        # jericho's valid-action search tries every candidate command in the emulator: about
        # 0.2 s a step, most of a step's time. False leaves it out of the observation.
        self.list_valid_actions = bool(list_valid_actions)
        self._jericho = _import_jericho()
        self._game = None  # the FrotzEnv, made on the first reset (keeps the object picklable)
        self._steps = 0
        self._prev_score = 0
        self._done = False
        self._started = False  # reset() since the emulator was made

    # -- pickling: the emulator (a dlopen'ed copy of libfrotz) stays behind -------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_jericho=None, _game=None, _started=False, _done=False, _steps=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._jericho = _import_jericho()

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None
        self._started = False

    # -- the protocol ------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> str:
        """Restarts the game. ``seed`` (None or 0: the walkthrough's seed) seeds the emulator."""
        if self._game is None:
            self._game = self._jericho.FrotzEnv(self.game_path)
        self._game.seed(seed)
        opening, _ = self._game.reset()
        self._steps, self._prev_score, self._done = 0, 0, False
        self._started = True
        obs, _ = self._observe(opening)
        return obs

    def step(self, action: str) -> StepResult:
        if self._game is None or not self._started:
            raise not_started("Detective")
        if self._done:
            raise episode_over("Detective")

        game = self._game
        command = sanitize_action(action)
        before = game.get_state()
        invalid = False
        if _is_blocked(command):
            response, invalid = BLOCKED_REPLY, True
        else:
            response = game.step(command)[0]  # empty -> "I beg your pardon?", no turn spent
            if not response.strip() or game._emulator_halted():
                # Stuck in a menu/prompt, or a runtime error halted the emulator: undo the
                # command. The halted flag lives outside the saved state: only a restart clears it.
                if game._emulator_halted():
                    game.reset()
                game.set_state(before)
                response, invalid = NO_RESPONSE_REPLY, True
            else:
                invalid = not command or not understood(response, self._jericho.defines.UNRECOGNIZED_REGEXPS)
        self._steps += 1

        score = game.get_score()
        reward = float(score - self._prev_score)
        self._prev_score = score
        won = bool(game.victory())
        ended = won or bool(game.game_over())
        self._done = ended or self._steps >= self.max_steps
        obs, valid = self._observe(response, ended=ended)
        max_score = game.get_max_score()
        info = StepInfo(
            success=won or (max_score > 0 and score >= max_score),
            at_limit=self._done and not ended,  # the official code ends the game at its step limit too
            invalid=invalid,
            extra={
                "score": score,
                "moves": game.get_moves(),
                "max_score": max_score,
                "steps": self._steps,
                "action": command,
                "valid_actions": valid,
            },
        )
        return StepResult(obs, reward, self._done, info)

    # -- helpers -----------------------------------------------------------------------------
    def get_walkthrough(self) -> list[str]:
        """jericho's walkthrough for the loaded game (empty for games it does not know)."""
        if self._game is None:
            self._game = self._jericho.FrotzEnv(self.game_path)
        return list(self._game.get_walkthrough())

    def _peek(self, command: str) -> str:
        """The game's answer to ``command`` from the current state, which is then restored."""
        game = self._game
        state = game.get_state()
        try:
            return game.step(command)[0].strip()
        finally:
            game.set_state(state)

    def _observe(self, last_text: str, ended: bool = False) -> tuple[str, list[str]]:
        game = self._game
        state = game.get_state()
        if ended:  # the game now only answers "RESTART, RESTORE ... or QUIT?"
            location, inventory, valid = "(the game is over)", "(the game is over)", []
        else:
            location = self._peek("look")
            inventory = self._peek("inventory")
            valid = []
            if self.list_valid_actions:
                # use_parallel would fork a multiprocessing pool per game (never closed).
                valid = list(game.get_valid_actions(use_object_tree=True, use_ctypes=True, use_parallel=False))
        game.set_state(state)  # _peek and jericho restore it already; this makes it certain
        text = (
            f"Location:\n{location}\n\n"
            f"Inventory:\n{inventory}\n\n"
            f"Last:\n{last_text.strip()}"
        )
        if self.list_valid_actions:
            text += f"\n\nValid actions: {', '.join(valid) if valid else '(none)'}"
        return text, valid
