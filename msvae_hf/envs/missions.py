"""A level's missions as the level's own instruction objects: read text into them, compare two missions goal by
goal, regenerate an episode's mission from its seed, draw another mission for the same room, or make a typed
instruction the episode's mission (its verifier then judges by it).

The grammar is the one minigrid's ``LevelGen.rand_instr`` draws from and ``Instr.surface`` writes::

    mission := part | part ", then " part | part " after you " part       (BeforeInstr, AfterInstr)
    part    := action | action " and " action                              (AndInstr)
    action  := "go to " obj | "pick up " obj | "open " obj | "put " obj " next to " obj
    obj     := ("the " | "a ") [colour " "] (type | "object") [" in front of you" | " behind you" | " on your left"
               | " on your right"]

Goals are compared in the order they must be carried out ("A after you B" is B, then A; the two actions of
"A and B", which may be done in either order, in a fixed order of their own): :func:`goals` gives that list,
:func:`connectives` the shape that joins it, and :func:`score_labels` scores a speaker's labels against the true
missions with them (the article, "the" or "a", says only whether the description is unique in the room, and is
not compared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from minigrid.core.constants import COLOR_NAMES
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling
from minigrid.envs.babyai.core.verifier import (
    OBJ_TYPES,
    ActionInstr,
    AfterInstr,
    AndInstr,
    BeforeInstr,
    GoToInstr,
    Instr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)
from minigrid.utils.baby_ai_bot import BabyAIBot

#: Location phrases -> ``ObjDesc.loc`` (levels drawn with ``locations=True``; the Local levels have none).
LOCATIONS = {"in front of you": "front", "behind you": "behind", "on your left": "left", "on your right": "right"}
#: Action phrases -> the action kinds of ``LevelGen`` (``rand_instr``'s ``action_kinds``).
ACTIONS = {"go to": "goto", "pick up": "pickup", "open": "open", "put": "putnext"}
#: Instruction classes of the action kinds.
ACTION_CLASSES = {"goto": GoToInstr, "pickup": PickupInstr, "open": OpenInstr, "putnext": PutNextInstr}
#: The seed stream of :func:`draw_same_room_mission`, apart from every other use of an episode's seed.
SAME_ROOM_STREAM = 0x5A3E


class InstructionError(ValueError):
    """Text outside the levels' grammar; the message names the part that could not be read."""


@dataclass(frozen=True)
class Goal:
    """One action of a mission: its kind and the (colour, type, location) of each object it names (one, two for
    putnext); None where the text leaves it open ("the ball": colour None; "the red object": type None)."""

    action: str
    objects: tuple[tuple[str | None, str | None, str | None], ...]


GRAMMAR_HINT = ('BabyAI instructions are "go to / pick up / open / put X next to Y" with X like "the red ball", '
                'joined by "and", ", then" or "after you"')


def parse_object(text: str, whole: str) -> ObjDesc:
    """``"the red ball"`` -> ``ObjDesc("ball", "red")``; ``whole`` is the instruction, for the error."""
    words = text.split()
    if len(words) < 2 or words[0] not in ("the", "a"):
        raise InstructionError(f"{whole!r}: {text!r} is not an object description like 'the red ball' "
                               f"({GRAMMAR_HINT})")
    rest, loc = " ".join(words[1:]), None
    for phrase, name in LOCATIONS.items():
        if rest.endswith(" " + phrase):
            rest, loc = rest.removesuffix(" " + phrase), name
    words = rest.split()
    colour = words[0] if len(words) == 2 else None
    kind = words[-1]
    if len(words) > 2 or (colour is not None and colour not in COLOR_NAMES) or kind not in (*OBJ_TYPES, "object"):
        raise InstructionError(f"{whole!r}: {text!r} names no object (colours {', '.join(COLOR_NAMES)}; types "
                               f"{', '.join(OBJ_TYPES)} or 'object')")
    return ObjDesc(None if kind == "object" else kind, colour, loc)


def parse_action(text: str, whole: str) -> ActionInstr:
    """One action phrase (``"put the red ball next to the key"``) as its instruction object; "open" takes a door,
    "pick up" and the object moved by "put" anything but a door (as the levels draw them)."""
    for phrase, kind in ACTIONS.items():
        if text.startswith(phrase + " "):
            rest = text.removeprefix(phrase + " ")
            if kind != "putnext":
                desc = parse_object(rest, whole)
                _check_door(kind, desc, whole)
                return ACTION_CLASSES[kind](desc)
            moved, sep, fixed = rest.partition(" next to ")
            if sep:
                desc = parse_object(moved, whole)
                _check_door(kind, desc, whole)
                return PutNextInstr(desc, parse_object(fixed, whole))
    raise InstructionError(f"{whole!r}: {text!r} is not an action ({GRAMMAR_HINT})")


def _check_door(kind: str, desc: ObjDesc, whole: str) -> None:
    """InstructionError where the action cannot take the object: only doors open; a door is not picked up or moved."""
    if kind == "open" and desc.type != "door":
        what = f"a {desc.type}" if desc.type else "any object"
        raise InstructionError(f"{whole!r}: only a door can be opened, not {what}")
    if kind in ("pickup", "putnext") and desc.type == "door":
        raise InstructionError(f"{whole!r}: a door cannot be {'picked up' if kind == 'pickup' else 'moved'}")


def parse_mission(text: str) -> Instr:
    """Instruction text as the level's own instruction objects (what its verifier judges an episode by); an
    :class:`InstructionError` naming the part that is outside the grammar (module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"an instruction is a string, got {type(text).__name__}")
    whole = " ".join(text.strip().split())
    if not whole:
        raise InstructionError("the instruction is empty")

    def part(piece: str) -> Instr:
        first, sep, second = piece.partition(" and ")
        return AndInstr(parse_action(first, whole), parse_action(second, whole)) if sep else parse_action(piece, whole)

    for sep, kind in ((", then ", BeforeInstr), (" after you ", AfterInstr)):
        if sep in whole:
            first, _, second = whole.partition(sep)
            return kind(part(first), part(second))
    return part(whole)


def _object(desc: ObjDesc) -> tuple[str | None, str | None, str | None]:
    return desc.color, desc.type, desc.loc


def goal_groups(instr: Instr) -> tuple[tuple[Goal, ...], ...]:
    """The mission's actions in the order they must be carried out ("A after you B": B, then A), grouped: an action
    alone, or the two of an "and", which either order carries out (in a fixed order of their own, so that two
    missions compare)."""
    if isinstance(instr, BeforeInstr):
        return goal_groups(instr.instr_a) + goal_groups(instr.instr_b)
    if isinstance(instr, AfterInstr):
        return goal_groups(instr.instr_b) + goal_groups(instr.instr_a)
    if isinstance(instr, AndInstr):
        return (tuple(sorted(goals(instr.instr_a) + goals(instr.instr_b), key=repr)),)
    if isinstance(instr, PutNextInstr):
        return ((Goal("putnext", (_object(instr.desc_move), _object(instr.desc_fixed))),),)
    kind = next(k for k, cls in ACTION_CLASSES.items() if isinstance(instr, cls))
    return ((Goal(kind, (_object(instr.desc),)),),)


def goals(instr: Instr) -> tuple[Goal, ...]:
    """The mission's actions in the order they must be carried out (:func:`goal_groups`, one after another)."""
    return tuple(goal for group in goal_groups(instr) for goal in group)


def _matches(said: Goal, true: Goal) -> int:
    """How many of a goal's fields (its action, each object's type and colour) another goal gets right."""
    fields = int(said.action == true.action)
    for k, (colour, kind, _) in enumerate(true.objects):
        if k < len(said.objects):
            fields += (said.objects[k][1] == kind) + (said.objects[k][0] == colour)
    return fields


def _aligned(said: tuple[tuple[Goal, ...], ...], true: tuple[tuple[Goal, ...], ...]) -> list[Goal]:
    """The label's goals, one per true goal, in the order to compare them: where both group their goals alike, each
    "and" pair in whichever of its two orders matches more of the truth's fields; otherwise in order."""
    if [len(g) for g in said] != [len(g) for g in true]:
        return [goal for group in said for goal in group]
    out: list[Goal] = []
    for mine, truth in zip(said, true, strict=True):
        if len(mine) == 2 and sum(map(_matches, mine[::-1], truth)) > sum(map(_matches, mine, truth)):
            mine = mine[::-1]
        out += mine
    return out


def connectives(instr: Instr) -> str:
    """How the goals are joined, in the order of :func:`goals`: ``"_"`` one action, ``"and(_,_)"``, ``"then(x,y)"``
    (", then" and "after you" alike, once put in the order of execution)."""
    if isinstance(instr, BeforeInstr):
        return f"then({connectives(instr.instr_a)},{connectives(instr.instr_b)})"
    if isinstance(instr, AfterInstr):
        return f"then({connectives(instr.instr_b)},{connectives(instr.instr_a)})"
    if isinstance(instr, AndInstr):
        return f"and({connectives(instr.instr_a)},{connectives(instr.instr_b)})"
    return "_"


#: What :func:`score_labels` reports, each a share in [0, 1] (``labels``: how many were scored).
LABEL_ACCURACY_FIELDS = ("exact", "in_grammar", "same_mission", "same_goal_count", "action", "object_type",
                         "colour", "connective")


def score_labels(labels: Sequence[str], missions: Sequence[str]) -> dict[str, float | int]:
    """A speaker's labels against the true missions, one of each per trajectory:

    - ``exact``: the same words; ``in_grammar``: the label reads as a mission (:func:`parse_mission`);
    - ``same_mission``: the same goals in the order of execution, joined the same way (what a follower told the
      label would have to do is what the mission asks);
    - ``same_goal_count``: as many goals as the mission;
    - where the count is right: ``action``, each goal's action kind; ``object_type`` and ``colour``, each object of
      each goal (an object the label's goal lacks counts as wrong); ``connective``, the joining shape, over
      missions of two goals or more. Denominators: the mission's goals, objects and multi-goal missions among the
      labels with the right count (0 where there are none).
    """
    if len(labels) != len(missions):
        raise ValueError(f"{len(labels)} labels for {len(missions)} missions")
    if not missions:
        raise ValueError("score_labels got no labels")
    counts = dict.fromkeys(LABEL_ACCURACY_FIELDS, 0)
    totals = {"action": 0, "object_type": 0, "colour": 0, "connective": 0}
    for label, mission in zip(labels, missions, strict=True):
        truth = parse_mission(mission)
        true_groups = goal_groups(truth)
        true_goals = goals(truth)
        counts["exact"] += " ".join(label.split()) == " ".join(mission.split())
        try:
            said = parse_mission(label)
        except InstructionError:
            continue
        said_goals = goals(said)
        counts["in_grammar"] += 1
        counts["same_mission"] += said_goals == true_goals and connectives(said) == connectives(truth)
        if len(said_goals) != len(true_goals):
            continue
        counts["same_goal_count"] += 1
        if len(true_goals) > 1:
            totals["connective"] += 1
            counts["connective"] += connectives(said) == connectives(truth)
        for mine, true in zip(_aligned(goal_groups(said), true_groups), true_goals, strict=True):
            totals["action"] += 1
            counts["action"] += mine.action == true.action
            for k, (colour, kind, _) in enumerate(true.objects):
                totals["object_type"] += 1
                totals["colour"] += 1
                if k < len(mine.objects):
                    counts["object_type"] += mine.objects[k][1] == kind
                    counts["colour"] += mine.objects[k][0] == colour
    n = len(missions)
    scores: dict[str, float | int] = {"labels": n}
    for name in LABEL_ACCURACY_FIELDS:
        scores[name] = counts[name] / (totals[name] or 1) if name in totals else counts[name] / n
    return scores


def regenerate_missions(level_id: str, seeds: Sequence[int]) -> list[str]:
    """Each seed's mission, as ``env.reset(seed=s)`` of the level makes it (a demonstration's ``instruction``)."""
    env = gym.make(level_id)
    try:
        return [env.reset(seed=int(s))[0]["mission"] for s in seeds]
    finally:
        env.close()


def has_mission_generator(env: gym.Env) -> bool:
    """Whether the env's level draws its missions with ``LevelGen``'s generator (so that another can be drawn)."""
    return hasattr(env.unwrapped, "rand_instr") and hasattr(env.unwrapped, "action_kinds")


def draw_same_room_mission(env: gym.Env, seed: int, tries: int = 100) -> str:
    """Give a freshly reset episode another mission of its level for the same room, and return its text.

    The level's own generator (``LevelGen.rand_instr`` with the level's action and instruction kinds, then its
    ``validate_instrs``) draws from a stream of ``seed`` of its own, until the mission asks for other goals than the
    episode's (not the same goals in other words); the room and the agent stay as reset. The level's verifier then
    judges the episode by the new mission, and its step limit is the one the level gives that mission. Levels that
    are not a ``LevelGen`` are refused (they have no generator to draw from)."""
    level: Any = env.unwrapped
    if not has_mission_generator(env):
        raise ValueError(f"{env.spec.id if env.spec else type(level).__name__} has no mission generator to draw "
                         "another mission from (a LevelGen level: BabyAI's GoToSeq, BossLevel, the Local levels)")
    own = (goals(level.instrs), connectives(level.instrs))
    saved = level._np_random, level._np_random_seed  # gymnasium's setter would forget the seed: restore both as were
    level._np_random = np.random.default_rng([SAME_ROOM_STREAM, int(seed)])
    try:
        for _ in range(tries):
            try:
                instrs = level.rand_instr(action_kinds=level.action_kinds, instr_kinds=level.instr_kinds)
                level.validate_instrs(instrs)
            except (RejectSampling, RecursionError):
                continue
            if (goals(instrs), connectives(instrs)) != own:
                surface = instrs.surface(level)
                break
        else:
            raise RuntimeError(f"no other mission for seed {seed}'s room in {tries} draws")
    finally:
        level._np_random, level._np_random_seed = saved
    _install(level, instrs, surface)
    return surface


def _install(level: Any, instrs: Instr, surface: str) -> None:
    """Make ``instrs`` the mission of a freshly reset episode: the verifier judges by it, the observations carry
    ``surface``, and the step limit is the one the level gives it (RoomGridLevel.reset's)."""
    level.instrs, level.surface, level.mission = instrs, surface, surface
    instrs.reset_verifier(level)
    if not getattr(level, "fixed_max_steps", True):
        level.max_steps = level.num_navs_needed(instrs) * level.room_size**2 * level.num_rows * level.num_cols


def _descriptions(instr: Instr) -> list[ObjDesc]:
    if isinstance(instr, (BeforeInstr, AfterInstr, AndInstr)):
        return _descriptions(instr.instr_a) + _descriptions(instr.instr_b)
    if isinstance(instr, PutNextInstr):
        return [instr.desc_move, instr.desc_fixed]
    return [instr.desc]


def room_objects(env: gym.Env) -> list[str]:
    """What the episode's grid holds, as "colour type" (walls and floor left out), sorted."""
    grid = env.unwrapped.grid
    cells = (grid.get(i, j) for i in range(grid.width) for j in range(grid.height))
    return sorted(f"{c.color} {c.type}" for c in cells if c is not None and c.type not in ("wall", "floor"))


def set_mission(env: gym.Env, text: str) -> str:
    """Make ``text`` the mission of a freshly reset episode of a BabyAI level and return it as the episode will
    carry it (lower case, single spaces): the level's verifier then judges the episode by it. Text outside the
    grammar, or an object description that matches nothing in the room, is an :class:`InstructionError` naming it
    (and listing the room's objects), raised before anything changes."""
    level: Any = env.unwrapped
    if not hasattr(level, "instrs") or not hasattr(level, "num_navs_needed"):
        raise ValueError(f"{env.spec.id if env.spec else type(level).__name__} is not a BabyAI level: it has no "
                         "verifier to judge an instruction by")
    surface = " ".join(str(text).lower().split())
    instrs = parse_mission(surface)
    for desc in _descriptions(instrs):
        if not desc.find_matching_objs(level)[0]:
            named = " ".join(w for w in (desc.color, desc.type or "object", desc.loc and f"({desc.loc})") if w)
            raise InstructionError(f"{surface!r}: nothing in this room is a {named}; the room holds "
                                   f"{', '.join(room_objects(env))}")
    if hasattr(level, "validate_instrs"):  # what the level's generator refuses (e.g. an object put next to itself)
        try:
            level.validate_instrs(instrs)
        except RejectSampling as err:
            raise InstructionError(f"{surface!r}: the level cannot judge it: {err}") from None
    _install(level, instrs, surface)
    return surface


def carries_out(env: gym.Env, seed: int, actions: Sequence[int], text: str) -> bool:
    """Whether ``actions``, played in episode ``seed`` of ``env``'s level with ``text`` made its mission
    (:func:`set_mission`), carry the mission out as the level's verifier judges it, done at the last action: the
    trajectory is then a demonstration of ``text``. A label outside the grammar or naming an object the room lacks,
    one the trajectory fails or carries out before its end (the steps after would be taught as part of it) is not."""
    env.reset(seed=int(seed))
    try:
        set_mission(env, text)
    except InstructionError:
        return False
    for step, action in enumerate(actions, 1):
        _, reward, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            return terminated and reward > 0 and step == len(actions)
    return False


def bot_is_quicker(env: gym.Env, seed: int, text: str, steps: int) -> bool:
    """Whether BabyAI's bot, the demonstrations' own, carries out the mission ``text`` in episode ``seed`` in fewer
    than ``steps`` steps (a bot that trips on the layout is not)."""
    env.reset(seed=int(seed))
    set_mission(env, text)
    try:
        bot = BabyAIBot(env.unwrapped)
        for _ in range(steps - 1):
            _, reward, terminated, truncated, _ = env.step(int(bot.replan()))
            if terminated or truncated:
                return terminated and reward > 0
    except Exception:  # the bot's assertions on rare layouts, as in data.demos.run_bot
        return False
    return False


def demonstrates(env: gym.Env, seed: int, actions: Sequence[int], text: str) -> bool:
    """Whether the trajectory is a demonstration of ``text`` as the bot would give it: it carries the mission out
    (:func:`carries_out`) and the bot, told ``text`` in the same episode, needs at least as many steps. A label that
    names only some of the goals the trajectory went to ("go to the box" for a trajectory that went to a ball first)
    is carried out, but the bot goes to the box at once: the steps to the ball would be taught as part of it."""
    return carries_out(env, seed, actions, text) and not bot_is_quicker(env, seed, text, len(actions))


def replay_label(env: gym.Env, seed: int, actions: Sequence[int], text: str) -> dict[str, bool]:
    """``carried_out`` (:func:`carries_out`) and ``demonstrated`` (:func:`demonstrates`) for one trajectory and its
    label, the episode replayed once."""
    carried = carries_out(env, seed, actions, text)
    return {"carried_out": carried, "demonstrated": carried and not bot_is_quicker(env, seed, text, len(actions))}


#: What replaying a label in its trajectory's episode tells (:func:`replay_label`).
REPLAY_FIELDS = ("carried_out", "demonstrated")


def goal_count(mission: str) -> int:
    """How many goals ``mission`` asks for (:func:`goals` of :func:`parse_mission`)."""
    return len(goals(parse_mission(mission)))


def rows_by_goal_count(missions: Sequence[str]) -> dict[int, list[int]]:
    """The indices of ``missions`` by how many goals each asks for (:func:`goal_count`), in order of the count."""
    groups: dict[int, list[int]] = {}
    for i, mission in enumerate(missions):
        groups.setdefault(goal_count(mission), []).append(i)
    return dict(sorted(groups.items()))


def replay_each(level_id: str, seeds: Sequence[int], actions: Sequence[Sequence[int]],
                texts: Sequence[str]) -> list[dict[str, bool]]:
    """:func:`replay_label` of each trajectory (``seeds[i]``'s episode played with ``actions[i]``) and its label
    ``texts[i]``, on one env of the level."""
    if not len(seeds) == len(actions) == len(texts):
        raise ValueError(f"{len(seeds)} seeds, {len(actions)} trajectories and {len(texts)} missions: one each")
    if not texts:
        raise ValueError("replay_each got no trajectories")
    env = gym.make(level_id)
    try:
        return [replay_label(env, *row) for row in zip(seeds, actions, texts, strict=True)]
    finally:
        env.close()


def replay_labels(level_id: str, seeds: Sequence[int], actions: Sequence[Sequence[int]],
                 texts: Sequence[str]) -> dict[str, int]:
    """``carried_out`` and ``demonstrated``: how many trajectories (``seeds[i]``'s episode played with
    ``actions[i]``) carry out ``texts[i]`` (:func:`carries_out`) and demonstrate it (:func:`demonstrates`), on one
    env of the level (:func:`replay_each`)."""
    replays = replay_each(level_id, seeds, actions, texts)
    return {key: sum(replay[key] for replay in replays) for key in REPLAY_FIELDS}


def goal_steps(env: gym.Env, seed: int, actions: Sequence[int], demonstration: bool = False) -> list[int]:
    """The steps (0-based action indices) whose action the level's verifier judges to complete a goal of episode
    ``seed``'s own mission ("go to the red ball, then open a door": the step that faces the ball, the one that opens
    the door); a step completing two goals at once is listed once. For a demonstration the last step is the last
    goal's. Nothing but the episode's seed and actions is read: training reads these steps where a model is asked
    for them (``SpeakerConfig.goal_steps_weight``), never the mission's text (:func:`completed_goals`' steps; with
    ``demonstration``, a ValueError unless the last action completes the mission)."""
    return [step for step, _ in completed_goals(env, seed, actions, demonstration)]


def _goal_statuses(instr: Instr) -> list[tuple[ActionInstr, Any]]:
    """Each action of a mission with the reading of its status (True once the verifier holds it done), in the order
    the instruction says them: a part of a sequence or an "and" keeps its status on its parent (``a_done``,
    ``b_done``); a lone action has none (None): its end is the episode's."""
    if isinstance(instr, ActionInstr):
        return [(instr, None)]
    out: list[tuple[ActionInstr, Any]] = []
    for part, field in ((instr.instr_a, "a_done"), (instr.instr_b, "b_done")):
        if isinstance(part, ActionInstr):
            out.append((part, lambda parent=instr, field=field: getattr(parent, field) == "success"))
        else:
            out += _goal_statuses(part)
    return out


def completed_goals(env: gym.Env, seed: int, actions: Sequence[int],
                    demonstration: bool = False) -> list[tuple[int, list[str]]]:
    """:func:`goal_steps` with the goals each step completes, as the level's instruction objects say them
    (``surface`` at the episode's start, the mission's own words), in the order the instruction says them: the
    verifier's statuses are sticky, and the step where it holds the whole mission done completes every goal not done
    before it. An episode that ends before its last action is a ValueError; with ``demonstration``, so is one whose
    last action does not complete the mission (a bot demonstration's does; a part of an episode replayed from the
    episode's seed does not)."""
    env.reset(seed=int(seed))
    level: Any = env.unwrapped
    statuses = _goal_statuses(level.instrs)
    words = [goal.surface(level) for goal, _ in statuses]
    done = [False] * len(statuses)
    out: list[tuple[int, list[str]]] = []
    for step, action in enumerate(actions):
        _, reward, terminated, truncated, _ = env.step(int(action))
        now = [True] * len(statuses) if terminated and reward > 0 else [
            was or (status is not None and status()) for was, (_, status) in zip(done, statuses, strict=True)]
        new = [text for text, was, is_ in zip(words, done, now, strict=True) if is_ and not was]
        if new:
            out.append((step, new))
        done = now
        if (terminated or truncated) and step < len(actions) - 1:
            raise ValueError(f"episode of seed {seed} ended at step {step}, before its {len(actions)} actions")
    if demonstration and not (actions and terminated and reward > 0):
        raise ValueError(f"episode of seed {seed}: its {len(actions)} actions do not complete its mission, replayed "
                         "from the seed (not a whole demonstration)")
    return out


__all__ = ["Goal", "InstructionError", "LABEL_ACCURACY_FIELDS", "carries_out", "completed_goals", "connectives",
           "draw_same_room_mission",
           "goal_steps", "goals", "parse_mission", "regenerate_missions", "room_objects", "score_labels", "set_mission",
           "bot_is_quicker", "demonstrates", "replay_each", "replay_label", "replay_labels", "REPLAY_FIELDS",
           "goal_count", "rows_by_goal_count"]
