"""A seeded fault schedule: the same seed gives the same faults at the same times.

Pure: `plan(seed, seconds)` draws every choice up front, as numbers (a fault's kind, its
time, which actor or subscription it hits as a fraction `pick` of the candidates sorted
by name), so a failing run replays with its seed alone (`HOOKSTREAM_CHAOS_SEED`). What a
pick resolves to is decided when the fault fires, from the tree as it is then; the run
prints what it hit.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Final, Literal

FaultKind = Literal["kill", "pause", "update", "cut", "unsubscribe"]
SEED_VARIABLE: Final = "HOOKSTREAM_CHAOS_SEED"

# Most faults kill an actor; the admin API's pause (resumed later) and update (which
# rebuilds the subscription) come now and then.
WEIGHTS: Final[dict[FaultKind, int]] = {"kill": 8, "pause": 1, "update": 1}
MEAN_GAP_S: Final = 1.5
PAUSE_S: Final = (0.3, 2.0)
# The later kinds, drawn from a stream of their own (`extra=True`), so that adding them
# left every seed's kills, pauses and updates as they were: a cut of every broker
# connection (healed after `hold_s`) and an unsubscribe (subscribed again after `hold_s`).
EXTRA_WEIGHTS: Final[dict[FaultKind, int]] = {"cut": 1, "unsubscribe": 1}
EXTRA_MEAN_GAP_S: Final = 6.0
EXTRA_HOLD_S: Final[dict[FaultKind, tuple[float, float]]] = {
    "cut": (0.3, 1.5), "unsubscribe": (0.5, 3.0)}
HELD: Final = frozenset({"pause", "cut", "unsubscribe"})
"""The kinds that last `hold_s`."""


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    """Seconds after the load started."""
    kind: FaultKind
    pick: float
    """In [0, 1): which of the sorted candidates (actors, subscriptions) it hits."""
    hold_s: float = 0.0
    """For a pause: how long until the resume."""


def plan(seed: int, seconds: float, mean_gap_s: float = MEAN_GAP_S, *,
         extra: bool = False) -> list[Fault]:
    """Faults at exponentially spaced times within `seconds`, in time order; with `extra`,
    the cuts and unsubscribes of their own stream besides."""
    faults = _draw(random.Random(seed), seconds, mean_gap_s, WEIGHTS,
                   {"pause": PAUSE_S})
    if extra:
        faults += _draw(random.Random(f"{seed}:extra"), seconds, EXTRA_MEAN_GAP_S,
                        EXTRA_WEIGHTS, EXTRA_HOLD_S)
    return sorted(faults, key=lambda f: f.at_s)


def _draw(rng: random.Random, seconds: float, mean_gap_s: float,
          weights: dict[FaultKind, int],
          holds: dict[FaultKind, tuple[float, float]]) -> list[Fault]:
    kinds = list(weights)
    faults: list[Fault] = []
    at = rng.expovariate(1 / mean_gap_s)
    while at < seconds:
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        hold = rng.uniform(*holds[kind]) if kind in holds else 0.0
        faults.append(Fault(round(at, 3), kind, rng.random(), round(hold, 3)))
        at += rng.expovariate(1 / mean_gap_s)
    return faults


def choose(candidates: list[str], pick: float) -> str:
    """The candidate `pick` names among `candidates` sorted."""
    ordered = sorted(candidates)
    return ordered[min(int(pick * len(ordered)), len(ordered) - 1)]


def choose_by_kind(candidates: dict[str, str], pick: float) -> str:
    """A candidate (name -> kind) by kind first, then among that kind: the one instance
    member, control or journal flusher is as likely a victim as one of the many partition
    actors."""
    kinds = sorted(set(candidates.values()))
    scaled = pick * len(kinds)
    kind = kinds[min(int(scaled), len(kinds) - 1)]
    return choose([name for name, k in candidates.items() if k == kind], scaled % 1)


def seed_from_env() -> int:
    """`HOOKSTREAM_CHAOS_SEED` when set (a replay), else a fresh one."""
    given = os.environ.get(SEED_VARIABLE, "").strip()
    return int(given) if given else random.SystemRandom().randrange(1, 2**31)
