"""experiments/follower_failures.py: the mission's structure read from its words, and the breakdown of episodes
against the bot's on hand-made episodes."""

from __future__ import annotations

import pytest
from follower_failures import breakdown, structure

from msvae_hf.evaluation.rollout import EpisodeResult


@pytest.mark.parametrize(("mission", "expected"), [
    ("go to the red ball", "one goal"),
    ("go to a box and go to the grey key", "goals joined by and"),
    ("go to the red ball, then go to a door", "a sequence"),
    ("go to a ball after you go to the blue key", "a sequence"),
    ("go to a box and go to a key, then go to the red ball", "a sequence with and"),
])
def test_structure_of_a_mission(mission: str, expected: str) -> None:
    assert structure(mission) == expected


def _episode(mission: str, steps: int, success: bool) -> EpisodeResult:
    return EpisodeResult(seed=0, instruction=mission, actions=[2] * steps, steps=steps,
                         reward=float(success), success=success)


def test_breakdown_against_a_hand_count() -> None:
    episodes = [_episode("go to the red ball", 10, True), _episode("go to the red ball", 64, False),
                _episode("go to a box, then go to a key", 24, True), _episode("go to a box and go to a key", 12, True)]
    bot = [_episode("", steps, True) for steps in (10, 8, 12, 12)]
    row = breakdown(episodes, bot)
    assert row["success_rate"] == 0.75 and row["by_structure"]["one goal"] == {"episodes": 2, "success_rate": 0.5}
    assert row["by_structure"]["a sequence"]["success_rate"] == 1.0
    assert row["share_of_steps_in_failures"] == 64 / 110 and row["mean_steps_of_successes"] == 46 / 3
    assert row["success_steps_over_bot"] == {"median": 1.0, "mean": 4 / 3, "within_1.2x": 2 / 3}
