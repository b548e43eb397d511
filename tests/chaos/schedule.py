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

FaultKind = Literal["kill", "pause", "update"]
SEED_VARIABLE: Final = "HOOKSTREAM_CHAOS_SEED"

# Most faults kill an actor; the admin API's pause (resumed later) and update (which
# rebuilds the subscription) come now and then.
WEIGHTS: Final[dict[FaultKind, int]] = {"kill": 8, "pause": 1, "update": 1}
MEAN_GAP_S: Final = 1.5
PAUSE_S: Final = (0.3, 2.0)


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    """Seconds after the load started."""
    kind: FaultKind
    pick: float
    """In [0, 1): which of the sorted candidates (actors, subscriptions) it hits."""
    hold_s: float = 0.0
    """For a pause: how long until the resume."""


def plan(seed: int, seconds: float, mean_gap_s: float = MEAN_GAP_S) -> list[Fault]:
    """Faults at exponentially spaced times within `seconds`, in time order."""
    rng = random.Random(seed)
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] for k in kinds]
    faults: list[Fault] = []
    at = rng.expovariate(1 / mean_gap_s)
    while at < seconds:
        kind = rng.choices(kinds, weights)[0]
        hold = rng.uniform(*PAUSE_S) if kind == "pause" else 0.0
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
