"""envs/missions.py: instruction text read into the level's own instruction objects, labels scored against the true
missions, and another mission drawn for an episode's room (the follower's "does it do what it is told" measure)."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest
from conftest import TINY_LEVEL
from minigrid.utils.baby_ai_bot import BabyAIBot

from msvae_hf.data.demos import load_demos, run_bot
from msvae_hf.envs.missions import (
    InstructionError,
    bot_is_quicker,
    carries_out,
    connectives,
    demonstrates,
    draw_same_room_mission,
    goals,
    parse_mission,
    regenerate_missions,
    replay_labels,
    room_objects,
    score_labels,
    set_mission,
)
from msvae_hf.evaluation.metrics import summarize_episodes
from msvae_hf.evaluation.rollout import BotPolicy, RandomPolicy, rollout

LOCAL_LEVELS = ("BabyAI-GoToSeqLocal-v0", "BabyAI-BossLocal-v0")


@pytest.mark.parametrize("level", LOCAL_LEVELS)
def test_every_mission_reads_back_into_the_levels_own_objects(level: str) -> None:
    env = gym.make(level)
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        parsed = parse_mission(obs["mission"])
        assert parsed.surface(env.unwrapped) == obs["mission"]
        assert goals(parsed) == goals(env.unwrapped.instrs)
        assert connectives(parsed) == connectives(env.unwrapped.instrs)


def test_a_seed_regenerates_the_mission_its_demonstration_carried_out(tiny_demos) -> None:
    paired = load_demos(tiny_demos)["paired"]
    assert regenerate_missions(TINY_LEVEL, paired["seed"]) == list(paired["instruction"])


def test_a_demonstration_carries_out_its_mission_and_not_others(tiny_demos) -> None:
    """carries_out replays a trajectory in its episode with a mission installed: the bot's demonstration carries out its
    own mission at its last action; without that action, or told what its room lacks or no mission at all, it does
    not; another episode's mission it carries out about as often as chance has a trajectory meet it at its end."""
    paired = load_demos(tiny_demos)["paired"]
    seeds, actions, missions = list(paired["seed"]), list(paired["actions"]), list(paired["instruction"])
    env = gym.make(TINY_LEVEL)
    assert all(carries_out(env, s, a, m) for s, a, m in zip(seeds, actions, missions, strict=True))
    assert not any(carries_out(env, s, a[:-1], m) for s, a, m in zip(seeds, actions, missions, strict=True))
    assert not carries_out(env, seeds[0], actions[0], "go to the red balloon")
    assert not carries_out(env, seeds[0], actions[0], "")
    absent = next(f"go to the {c} key" for c in ("red", "green", "blue", "purple", "yellow", "grey")
                  if f"{c} key" not in room_objects_of(env, seeds[0]))
    assert not carries_out(env, seeds[0], actions[0], absent)
    everyone = len(seeds)
    assert replay_labels(TINY_LEVEL, seeds, actions, missions) == {"carried_out": everyone, "demonstrated": everyone}
    others = missions[1:] + missions[:1]
    assert replay_labels(TINY_LEVEL, seeds, actions, others)["carried_out"] < everyone / 2
    with pytest.raises(ValueError, match="one each"):
        replay_labels(TINY_LEVEL, seeds, actions[1:], missions)
    with pytest.raises(ValueError, match="no trajectories"):
        replay_labels(TINY_LEVEL, [], [], [])


def test_a_label_of_the_last_goal_alone_is_carried_out_not_demonstrated() -> None:
    """A trajectory that went to two goals carries out a label naming the second alone where it first faces that
    object at its end; it demonstrates it only where the bot told that label takes as many steps (the first goal on
    its way), and the detours are not: the steps to the first goal would be taught as part of the label."""
    env = gym.make("BabyAI-GoToSeqLocal-v0")
    detours = on_the_way = 0
    for seed in range(100):
        row = run_bot(env, seed)
        true_goals = goals(parse_mission(row["instruction"]))
        if len(true_goals) < 2 or row["status"] != "ok":
            continue
        colour, kind, _ = true_goals[-1].objects[0]
        label = f"go to the {colour} {kind}" if colour else f"go to a {kind}"
        if not carries_out(env, seed, row["actions"], label):
            continue
        assert demonstrates(env, seed, row["actions"], row["instruction"])
        steps = bot_steps(env, seed, label)  # the bot told the label, counted here step by step
        quicker = steps is not None and steps < len(row["actions"])
        assert bot_is_quicker(env, seed, label, len(row["actions"])) is quicker
        assert demonstrates(env, seed, row["actions"], label) is not quicker
        detours += quicker
        on_the_way += not quicker
    assert detours >= 5 and on_the_way >= 1


def bot_steps(env: gym.Env, seed: int, text: str, limit: int = 1000) -> int | None:
    """How many steps BabyAI's bot takes to carry out ``text`` in episode ``seed`` (None where it does not)."""
    env.reset(seed=seed)
    set_mission(env, text)
    bot = BabyAIBot(env.unwrapped)
    for step in range(1, limit + 1):
        _, reward, terminated, truncated, _ = env.step(int(bot.replan()))
        if terminated or truncated:
            return step if terminated and reward > 0 else None
    return None


def room_objects_of(env: gym.Env, seed: int) -> list[str]:
    env.reset(seed=seed)
    return room_objects(env)


def test_goals_in_the_order_they_are_carried_out() -> None:
    after = parse_mission("go to the red ball after you pick up a key")
    then = parse_mission("pick up a key, then go to the red ball")
    assert goals(after) == goals(then) and connectives(after) == connectives(then) == "then(_,_)"
    assert [g.action for g in goals(after)] == ["pickup", "goto"]
    swapped = parse_mission("go to a ball and go to the box")
    assert goals(parse_mission("go to the box and go to a ball")) == goals(swapped)
    put = goals(parse_mission("put the purple object next to the grey key on your left"))
    assert put[0].objects == (("purple", None, None), ("grey", "key", "left"))


@pytest.mark.parametrize(("text", "named"), [
    ("go to the red balloon", "'the red balloon' names no object"),
    ("walk to the red ball", "'walk to the red ball' is not an action"),
    ("go to red ball", "'red ball' is not an object description"),
    ("put the red ball near the key", "is not an action"),
    ("go to the ball, then", "', then' ... "),
])
def test_text_outside_the_grammar_is_one_line_naming_the_part(text: str, named: str) -> None:
    with pytest.raises(InstructionError) as err:
        parse_mission(text)
    message = str(err.value)
    assert "\n" not in message and repr(text) in message
    if "..." not in named:
        assert named in message


def test_empty_or_not_text_is_refused() -> None:
    with pytest.raises(InstructionError, match="empty"):
        parse_mission("   ")
    with pytest.raises(TypeError, match="string"):
        parse_mission(["go to the ball"])  # type: ignore[arg-type]


def test_label_scores_against_a_count_by_hand() -> None:
    missions = ["go to the red ball, then go to a key"] * 4 + ["go to the box"] * 2
    labels = [
        "go to the red ball, then go to a key",  # exact
        "go to a key after you go to the red ball",  # the same mission in other words
        "go to the green ball, then go to a box",  # right count: colours 1/2, types 1/2
        "go to the red ball",  # one goal of two
        "go to the yellow box",  # right count, wrong colour (None in the mission)
        "go to the red ball please",  # outside the grammar
    ]
    scores = score_labels(labels, missions)
    assert scores["labels"] == 6
    assert scores["exact"] == pytest.approx(1 / 6)
    assert scores["in_grammar"] == pytest.approx(5 / 6)
    assert scores["same_mission"] == pytest.approx(2 / 6)
    assert scores["same_goal_count"] == pytest.approx(4 / 6)
    # the four right-count labels: 2 + 2 + 2 + 1 goals, one object each
    assert scores["action"] == 1.0
    assert scores["object_type"] == pytest.approx(6 / 7)
    assert scores["colour"] == pytest.approx(5 / 7)
    assert scores["connective"] == 1.0  # the three of two goals, "then" and "after you" alike
    with pytest.raises(ValueError, match="2 labels for 1 missions"):
        score_labels(["go to the box"] * 2, ["go to the box"])


@pytest.mark.parametrize("level", LOCAL_LEVELS)
def test_another_mission_for_the_same_room(level: str) -> None:
    env = gym.make(level)
    for seed in range(25):
        obs, _ = env.reset(seed=seed)
        grid, agent = env.unwrapped.grid.encode().copy(), tuple(env.unwrapped.agent_pos)
        other = draw_same_room_mission(env, seed)
        assert other != obs["mission"] and env.unwrapped.mission == other
        assert np.array_equal(env.unwrapped.grid.encode(), grid) and tuple(env.unwrapped.agent_pos) == agent
        bot, reward = BabyAIBot(env), 0.0  # the bot plans for the new mission, and the verifier judges by it
        for _ in range(env.unwrapped.max_steps):
            _, reward, terminated, truncated, _ = env.step(bot.replan())
            if terminated or truncated:
                break
        assert reward > 0
        env.reset(seed=seed)
        assert draw_same_room_mission(env, seed) == other  # one mission a seed


def test_a_level_without_a_generator_is_refused() -> None:
    env = gym.make("BabyAI-GoToRedBall-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="no mission generator"):
        draw_same_room_mission(env, 0)


class OwnMissionBot:
    """A follower that ignores what it is told: the bot carrying out each seed's own mission (on a twin env of the
    same seed), then random steps."""

    def __init__(self, level: str, seeds: Sequence[int]) -> None:
        self.level, self.seeds, self.rng = level, list(seeds), np.random.default_rng(0)

    def reset(self, instructions: Sequence[str]) -> None:
        self.twins = [gym.make(self.level) for _ in instructions]
        for twin, seed in zip(self.twins, self.seeds, strict=True):
            twin.reset(seed=seed)
        self.bots = [BabyAIBot(twin) for twin in self.twins]
        self.done = [False] * len(instructions)

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        actions = []
        for i in env_ids:
            action = int(self.rng.integers(3)) if self.done[i] else int(self.bots[i].replan())
            if not self.done[i]:
                _, _, terminated, truncated, _ = self.twins[i].step(action)
                self.done[i] = terminated or truncated
            actions.append(action)
        return np.array(actions)


def test_same_room_missions_tell_a_follower_that_reads_from_one_that_does_not() -> None:
    level, seeds = "BabyAI-GoToSeqLocal-v0", list(range(10**9, 10**9 + 120))

    def sr(policy, missions: str) -> float:
        return summarize_episodes(rollout(policy, level, seeds, missions=missions))["success_rate"]

    ignores = OwnMissionBot(level, seeds)
    assert sr(ignores, "own") == 1.0
    stubborn = sr(OwnMissionBot(level, seeds), "same_room")
    walk_own, walk_same_room = sr(RandomPolicy(3), "own"), sr(RandomPolicy(3), "same_room")
    assert abs(walk_same_room - walk_own) < 0.12  # a random walk meets either mission as often
    assert stubborn < walk_same_room + 0.15  # ignoring the words: near the random walk, far from its own 100 %
    assert sr(BotPolicy(), "same_room") == 1.0  # reading: as on its own missions
    episodes = rollout(BotPolicy(), level, seeds[:4], missions="same_room")
    own = [e.instruction for e in rollout(BotPolicy(), level, seeds[:4])]
    assert all(e.instruction != o for e, o in zip(episodes, own, strict=True))  # told, and judged by, the other


def test_given_missions_are_judged_alike_in_a_pool_and_refused_when_they_cannot_be() -> None:
    from msvae_hf.evaluation.rollout import EnvPool

    level, seeds = "BabyAI-GoToSeqLocal-v0", list(range(10**9, 10**9 + 6))
    texts = [e.instruction for e in rollout(BotPolicy(), level, seeds, missions="same_room")]
    listed = rollout(RandomPolicy(3), level, seeds, missions=texts)
    with EnvPool(level, 3, 2) as pool:
        pooled = rollout(RandomPolicy(3), pool, seeds, missions=texts)
        same_room = rollout(RandomPolicy(3), pool, seeds, missions="same_room")
    assert [e.to_dict() for e in pooled] == [e.to_dict() for e in listed] == [e.to_dict() for e in same_room]
    with pytest.raises(ValueError, match="2 missions for 6 seeds"):
        rollout(RandomPolicy(3), level, seeds, missions=texts[:2])
    with pytest.raises(ValueError, match="missions must be one of own, same_room"):
        rollout(RandomPolicy(3), level, seeds, missions="other")
    with pytest.raises(InstructionError, match="nothing in this room is a yellow ball; the room holds blue ball, "):
        rollout(RandomPolicy(3), level, seeds[:1], missions=["go to the red key, then go to the yellow ball"])


@pytest.mark.parametrize(("text", "reason"), [
    ("open the red ball", "only a door can be opened, not a ball"),
    ("open the object", "only a door can be opened, not any object"),
    ("pick up the door", "a door cannot be picked up"),
    ("put the door next to the ball", "a door cannot be moved"),
])
def test_actions_the_levels_never_draw_are_refused_as_text(text: str, reason: str) -> None:
    with pytest.raises(InstructionError, match=reason):
        parse_mission(text)
    assert score_labels([text], ["go to the red ball"])["in_grammar"] == 0.0  # a label, scored, not a crash


def test_the_goals_of_an_and_are_paired_as_they_match_best() -> None:
    partly = score_labels(["go to the red ball and go to the yellow key"],
                          ["go to the red ball and go to the grey key"])
    assert (partly["object_type"], partly["colour"]) == (1.0, 0.5)
    other = score_labels(["pick up the red ball and pick up the blue key"],
                         ["go to the red ball and pick up the blue key"])
    assert (other["action"], other["object_type"], other["colour"]) == (0.5, 1.0, 1.0)


def test_a_refused_mission_leaves_the_episode_as_it_was() -> None:
    env = gym.make("BabyAI-BossLocal-v0")
    env.reset(seed=1)
    level = env.unwrapped
    before = (level.mission, level.instrs, level.max_steps, level.np_random_seed)
    with pytest.raises(InstructionError, match="the level cannot judge it"):
        set_mission(env, "put the blue box next to the blue box")  # one blue box in the room
    with pytest.raises(InstructionError, match="nothing in this room is a purple ball"):
        set_mission(env, "go to the purple ball")
    assert (level.mission, level.instrs, level.max_steps, level.np_random_seed) == before
    told = set_mission(env, "Go to the  RED box, then pick up a yellow key")
    assert told == level.mission == "go to the red box, then pick up a yellow key"
    assert level.max_steps == 2 * 64  # two navigations of an 8x8 room, as the level gives a mission of two
    draw_same_room_mission(env, 1)
    assert level.np_random_seed == before[3]


def test_a_bad_mission_through_a_pool_is_one_line() -> None:
    from msvae_hf.evaluation.rollout import EnvPool

    with EnvPool("BabyAI-GoToSeqLocal-v0", 2, 2) as pool, pytest.raises(InstructionError) as err:
        rollout(RandomPolicy(3), pool, [10**9, 10**9 + 1], missions=["go to the red key", "go to the yellow ball"])
    assert "\n" not in str(err.value) and "nothing in this room is a" in str(err.value)
    with pytest.raises(InstructionError, match="is not an action"):  # the grammar: before any episode runs
        rollout(RandomPolicy(3), "GoToSeqLocal", [10**9, 10**9 + 1], missions=["go to the red key", "walk"])
