"""Scenes drawn by code written apart from `engine/training/scenes.py`, as a training source.

The third to sixth generators (`third.py` … `sixth.py`) were written in sessions 36–38, the seventh
(`seventh.py`) in session 38, the eighth (`eighth.py`) in session 51 and the ninth to twelfth (`ninth.py` …
`twelfth.py`, moved from docs/experiments/ in session 56) in sessions 52–55, each as a blind evaluation
generator by a writer who did not read the training generator: other drawing code, other shades
for the same colour names, other backgrounds and camera effects. Their failures have since been
read, so they no longer serve as blind checks. `engine.train --foreign P` draws a share P of the
training scenes from them, one generator of `--foreign-from` at random per scene (default
`SESSION51`, the third to sixth, so session 51's recipes draw the same scenes as they did), so the
model sees the same vocabulary drawn more ways. Queries, questions and captions for those scenes are
made by the training code (`scenes.make_query`, `qa.make_qa`), so the labels follow the project's
query rules.

Never trained on: the independent generator (`engine/training/independent_scenes.py`,
`engine.evaluate --generator independent`) and the blind thirteenth (`docs/experiments/thirteenth_scenes.py`).

The generators import scipy and draw at 20–120 ms a scene on one core, so they are loaded on first
use.
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

from engine.training.scenes import Scene

# name → (module, its batch function): batch(seed, n) → [(Scene, Query), ...], deterministic per seed
GENERATORS: dict[str, tuple[str, str]] = {
    "third": ("engine.training.foreign.third", "third_batch"),
    "fourth": ("engine.training.foreign.fourth", "fourth_batch"),
    "fifth": ("engine.training.foreign.fifth", "fifth_batch"),
    "sixth": ("engine.training.foreign.sixth", "sixth_batch"),
    "seventh": ("engine.training.foreign.seventh", "seventh_batch"),
    "eighth": ("engine.training.foreign.eighth", "eighth_batch"),
    "ninth": ("engine.training.foreign.ninth", "ninth_batch"),
    "tenth": ("engine.training.foreign.tenth", "tenth_batch"),
    "eleventh": ("engine.training.foreign.eleventh", "eleventh_batch"),
    "twelfth": ("engine.training.foreign.twelfth", "twelfth_batch"),
}
SESSION51: tuple[str, ...] = ("third", "fourth", "fifth", "sixth")   # the default set of `draw`


def check_names(names) -> tuple[str, ...]:
    """`names` as a tuple, each a key of GENERATORS (ValueError naming the unknown one otherwise)."""
    names = tuple(names)
    for name in names:
        if name not in GENERATORS:
            raise ValueError(f"unknown scene generator {name!r}: choose from {', '.join(GENERATORS)}")
    if not names:
        raise ValueError("no scene generator named: give at least one of " + ", ".join(GENERATORS))
    return names


def batch_function(name: str) -> Callable[[int, int], list]:
    """The batch function of generator `name` (a key of GENERATORS)."""
    module, attr = GENERATORS[name]
    return getattr(importlib.import_module(module), attr)


def draw(rng: np.random.Generator, names: tuple[str, ...] = SESSION51) -> tuple[str, int]:
    """Which scene `foreign_scene` makes, from two draws of `rng`: a generator name (uniformly among
    `names`, in sorted order) and a 31-bit seed for its first scene."""
    names = sorted(names)
    name = names[int(rng.integers(len(names)))]
    return name, int(rng.integers(2 ** 31))


def foreign_scene(rng: np.random.Generator, names: tuple[str, ...] = SESSION51) -> Scene:
    """The scene `draw(rng, names)` names; the generator's own query is dropped."""
    name, seed = draw(rng, names)
    return batch_function(name)(seed, 1)[0][0]
