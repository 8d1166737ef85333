"""The paper's miniaturised BabyAI levels, GoToSeqLocal and BossLocal (App. C).

App. C: "the gridworld of GoToSeq and BossLevel consists of nine rooms (3 x 3), whereas the gridworld
of GoToSeqLocal and BossLocal consists of only one room", with the same instruction grammar minus the
instructions that need doors. Both levels are minigrid's `LevelGen` with one 8x8 room, no locked room
(`locked_room_prob=0`, required by a 1x1 grid) and no "open" action kind (with it `LevelGen` loops
forever looking for a door).

Choices, measured with the bot (`BabyAIBot`) over 500 episodes against App. C's table
(trajectory / instruction length; GoToSeqLocal 8.85 / 10.56, BossLocal 12.07 / 11.57):
- 8 objects in the room, as in BabyAI's own one-room "Local" levels (GoToLocal, PutNextLocal).
  With 2 (GoToSeq's 18 objects spread over 9 rooms) trajectories are too short: 6.98 steps.
  GoToSeqLocal with 8: 8.80 / 10.22.
- BossLocal: action kinds goto, pickup, putnext, without location words ("on your left"):
  12.17 / 11.55. With locations instructions are too long (11.85 / 13.50).
- `unblocking=False` (every object reachable without moving another one), as in GoToSeq. With
  unblocking the bot sometimes trips an assertion in DropSubgoal.

`LevelGen.reset` prints its rejection-sampling messages to stdout; these levels swallow them.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import gymnasium as gym
from minigrid.envs.babyai.core.levelgen import LevelGen

GOTOSEQ_LOCAL_ID = "BabyAI-GoToSeqLocal-v0"
BOSS_LOCAL_ID = "BabyAI-BossLocal-v0"

#: The paper's one-room levels (App. C), the package's own: the studies' levels and the first the Space offers.
PAPER_LEVELS = ("BossLocal", "GoToSeqLocal")
#: BabyAI's other one-room levels, which the Space offers after them.
OTHER_ONE_ROOM_LEVELS = ("GoToLocal", "PickupLoc", "PutNextLocal")

#: Short names accepted by `resolve_level`, mapped to gymnasium ids.
LEVELS: dict[str, str] = {
    "GoToSeqLocal": GOTOSEQ_LOCAL_ID,
    "BossLocal": BOSS_LOCAL_ID,
    "GoToSeq": "BabyAI-GoToSeq-v0",
    "BossLevel": "BabyAI-BossLevel-v0",
}


class _QuietLevelGen(LevelGen):
    """`LevelGen` whose rejection-sampling messages ("Sampling rejected: ...") never reach stdout."""

    def reset(self, **kwargs: Any) -> Any:
        with contextlib.redirect_stdout(io.StringIO()):
            return super().reset(**kwargs)


class _LocalLevel(_QuietLevelGen):
    """One 8x8 room of 8 objects, no locked room, no location words, no unblocking (see module doc)."""

    ACTION_KINDS: tuple[str, ...] = ()

    def __init__(self, room_size: int = 8, num_dists: int = 8, **kwargs: Any) -> None:
        super().__init__(
            room_size=room_size,
            num_rows=1,
            num_cols=1,
            num_dists=num_dists,
            locked_room_prob=0,
            locations=False,
            unblocking=False,
            action_kinds=list(self.ACTION_KINDS),
            **kwargs,
        )


class GoToSeqLocal(_LocalLevel):
    """GoToSeq in one 8x8 room: up to four go-to subgoals joined by "and" / ", then" / "after you"."""

    ACTION_KINDS = ("goto",)


class BossLocal(_LocalLevel):
    """BossLevel in one 8x8 room without doors: go-to, pick-up and put-next subgoals, no locations."""

    ACTION_KINDS = ("goto", "pickup", "putnext")


def register_levels() -> None:
    """Register the Local levels with gymnasium (idempotent)."""
    for env_id, cls in ((GOTOSEQ_LOCAL_ID, GoToSeqLocal), (BOSS_LOCAL_ID, BossLocal)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"{__name__}:{cls.__name__}")


def resolve_level(name: str) -> str:
    """A gymnasium id from a short name (GoToSeqLocal, BossLocal, GoToSeq, BossLevel, or any registered
    BabyAI level as ``X`` for ``BabyAI-X-v0``) or a full registered id."""
    if name in LEVELS:
        return LEVELS[name]
    if name in LEVELS.values() or (name.startswith("BabyAI-") and name in gym.registry):
        return name
    if f"BabyAI-{name}-v0" in gym.registry:
        return f"BabyAI-{name}-v0"
    valid = ", ".join([*LEVELS, *LEVELS.values()])
    raise ValueError(f"unknown level {name!r}; valid names: {valid} (or any registered BabyAI-*-v0 id)")


def level_folder(name: str) -> str:
    """The folder name of a level (``BossLocal`` or ``BabyAI-BossLocal-v0`` -> ``bosslocal``): what config files'
    ``{level}`` stands for in ``runs/{level}/...`` and ``data/{level}_100k``."""
    return resolve_level(name).removeprefix("BabyAI-").removesuffix("-v0").lower()


register_levels()
