"""Evaluate followers (success rate from batched rollouts) and speakers (BLEU-4 on held-out pairs).

Shared by ``scripts/train.py`` (periodic validation, final test), ``scripts/evaluate.py`` and
``scripts/label_unpaired.py``. Seeds: test rollouts start at ``TEST_SEED_START`` (1e9, BabyAI's convention) and
validation rollouts at ``VALID_SEED_START`` (1.5e9), both above every demonstration seed (``msvae_hf.envs.seeds``),
so no episode is ever trained on.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from ..data.collator import DemoCollator, for_loader, read_rows, without_instructions
from ..envs import missions
from ..envs.levels import resolve_level
from ..envs.seeds import TEST_SEED_START
from .metrics import bleu, follower_summary
from .rollout import BotPolicy, EpisodeResult, evaluate_policy


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> ``cuda`` where a GPU is visible, else ``cpu``; anything else as ``torch.device(name)``.

    Asking for a GPU that is not there is an error naming it, not a silent fall back to the CPU.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but torch sees no CUDA GPU (torch {torch.__version__})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r} asked for, but torch sees {torch.cuda.device_count()} GPU(s)")
    return device


def device_name(device: torch.device) -> str:
    """The GPU's name (e.g. "NVIDIA H100 80GB HBM3") or "cpu", for benchmark reports."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def evaluate_follower(
    model: Any,
    level: str,
    episodes: int,
    seed_start: int = TEST_SEED_START,
    batch_size: int = 256,
    tokenizer: Any = None,
    progress: bool = False,
    num_workers: int = 0,
    reading: bool = True,
) -> tuple[dict[str, float], list[EpisodeResult]]:
    """:func:`~msvae_hf.evaluation.metrics.follower_summary` of ``model.policy()`` (greedy) on fixed seeds, and the
    episodes told their own missions. Each seed is rolled out twice, told its own mission and told the mission of the
    next seed (success judged by its own), and compared with the bot on the same seed. The model is called once per
    step for all live envs of a batch (stepped in ``num_workers`` processes if > 0). A third rollout tells each seed
    another mission drawn by the level for its room and judges it by that (``success_rate_same_room``; levels
    without a mission generator skip it). ``reading=False`` rolls out the own missions only (no
    ``success_rate_other_mission``, ``reading`` or ``success_rate_same_room``)."""
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    bot = bot_episodes(resolve_level(level), episodes, seed_start)
    with evaluating(model):
        policy = model.policy(tokenizer)
        own = evaluate_policy(policy, level, episodes, seed_start, batch_size, progress, num_workers)
        told = [b.instruction for b in bot[1:]]
        other = (evaluate_policy(policy, level, episodes, seed_start, batch_size, progress, num_workers, told)
                 if reading else [])
        same_room = []
        if reading and has_mission_generator(level):
            same_room = evaluate_policy(policy, level, episodes, seed_start, batch_size, progress, num_workers,
                                        missions="same_room")
    return follower_summary(own, other, bot[:-1], same_room), own


@functools.cache
def has_mission_generator(level: str) -> bool:
    """Whether ``level`` draws its missions with ``LevelGen``'s generator (so that another can be drawn)."""
    import gymnasium as gym

    env = gym.make(resolve_level(level))
    try:
        return missions.has_mission_generator(env)
    finally:
        env.close()


@functools.lru_cache(maxsize=8)
def bot_episodes(level: str, episodes: int, seed_start: int) -> tuple[EpisodeResult, ...]:
    """The bot (the demonstrator) on ``episodes + 1`` evaluation seeds from ``seed_start``: its steps on each seed
    (SPL's reference) and the missions (seed s is told seed s + 1's). Deterministic; kept for the next call."""
    return tuple(evaluate_policy(BotPolicy(), level, episodes + 1, seed_start, batch_size=64))


def iterate_batches(dataset: Any, collator: DemoCollator, batch_size: int) -> Iterator[dict]:
    """Collated batches of ``dataset`` in order."""
    data = for_loader(dataset)
    for start in range(0, len(data), batch_size):
        yield collator(read_rows(data, range(start, min(start + batch_size, len(data)))))


def trajectory_batches(model: Any, dataset: Any, batch_size: int, desc: str | None = None, tokenizer: Any = None,
                       instructions: bool = False) -> Iterator[dict[str, torch.Tensor]]:
    """``dataset``'s trajectories collated in order, ``batch_size`` a batch, on ``model``'s device; a progress bar
    named ``desc`` unless it is None. Its instructions are left out, or with ``instructions`` tokenized beside them
    (``input_ids``, ``attention_mask``)."""
    collator = DemoCollator(model._resolve_tokenizer(tokenizer))
    batches = iterate_batches(dataset if instructions else without_instructions(dataset), collator, batch_size)
    if desc is not None:
        from tqdm.auto import tqdm

        batches = tqdm(batches, total=-(-len(dataset) // batch_size), desc=desc)
    for batch in batches:
        yield {k: v.to(model.device) for k, v in batch.items() if instructions or k != "input_ids"}


def check_goal_step_read_out(model: Any) -> None:
    """ValueError unless ``model`` has a goal-step read-out (a speaker trained with ``goal_steps_weight`` > 0)."""
    if getattr(model, "goal_step_head", None) is None:
        raise ValueError(f"{type(model).__name__} has no goal-step read-out: a speaker trained with "
                         "goal_steps_weight > 0 has one")


@torch.no_grad()
def goal_step_accuracy(speaker: Any, dataset: Any, batch_size: int = 64,
                       truth: list[list[int]] | None = None) -> dict[str, Any]:
    """How well a speaker's goal-step read-out (``SpeakerModel.goal_step_logits``, a step predicted where its
    logit is above 0) finds the steps that complete a goal of each trajectory's own mission, which the level's
    verifier marks in its episode replayed from its seed (``truth``, or :func:`~msvae_hf.data.demos.with_goal_steps`
    where it is not given): ``exact``, the share of trajectories whose predicted steps are all and only those;
    ``count``, the share with as many; ``last_step``, the share whose last step is predicted (a demonstration's last
    action completes its last goal); ``precision`` (0 where nothing is predicted) and ``recall`` over all steps; and
    ``exact`` for the trajectories of each true number of goal steps (``by_goal_steps``; two goals completed by one
    action are one step)."""
    if len(dataset) == 0:
        raise ValueError("goal_step_accuracy got an empty dataset")
    check_goal_step_read_out(speaker)
    if truth is None:
        from ..data.demos import with_goal_steps

        truth = list(with_goal_steps(dataset)["goal_steps"])
    if len(truth) != len(dataset):
        raise ValueError(f"{len(truth)} lists of goal steps for {len(dataset)} trajectories: one each")
    marked = [set(steps) for steps in truth]
    predicted = [set(steps) for steps in predicted_goal_steps(speaker, dataset, batch_size)]
    lengths = [len(actions) for actions in dataset["actions"]]
    pairs = list(zip(predicted, marked, strict=True))
    hits = sum(len(p & t) for p, t in pairs)
    groups: dict[int, list[bool]] = {}
    for p, t in pairs:
        groups.setdefault(len(t), []).append(p == t)
    n = len(pairs)
    return {"trajectories": n, "exact": sum(p == t for p, t in pairs) / n,
            "count": sum(len(p) == len(t) for p, t in pairs) / n,
            "last_step": sum(length - 1 in p for p, length in zip(predicted, lengths, strict=True)) / n,
            "precision": hits / max(sum(map(len, predicted)), 1), "recall": hits / max(sum(map(len, marked)), 1),
            "by_goal_steps": {str(k): {"trajectories": len(v), "exact": sum(v) / len(v)}
                              for k, v in sorted(groups.items())}}


@torch.no_grad()
def predicted_goal_steps(speaker: Any, dataset: Any, batch_size: int = 64) -> list[list[int]]:
    """The steps of each trajectory of ``dataset`` where the speaker's goal-step read-out
    (``SpeakerModel.goal_step_logits``) has a logit above 0, in order: where it finds a goal of the trajectory's
    mission completed."""
    check_goal_step_read_out(speaker)
    predicted: list[list[int]] = []
    with evaluating(speaker):
        for batch in trajectory_batches(speaker, dataset, batch_size):
            logits = speaker.goal_step_logits(batch["observations"], batch["directions"], batch["actions"],
                                              batch["trajectory_mask"])
            predicted += [torch.nonzero(row > 0).flatten().tolist() for row in logits.cpu()]
    return predicted


@contextlib.contextmanager
def evaluating(model: Any) -> Iterator[Any]:
    """``model`` in eval mode inside the block, back in the mode it had after."""
    training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(training)


@torch.no_grad()
def describe_dataset(
    model: Any, dataset: Any, tokenizer: Any = None, batch_size: int = 256, progress: bool = False, **generate_kwargs
) -> list[str]:
    """The speaker's instruction for every trajectory of ``dataset`` (batched ``generate``), in order."""
    tokenizer = model._resolve_tokenizer(tokenizer)
    texts: list[str] = []
    with evaluating(model):
        for batch in trajectory_batches(model, dataset, batch_size, "describing" if progress else None, tokenizer):
            ids = model.generate(
                batch["observations"], batch["directions"], batch["actions"], batch["trajectory_mask"],
                **generate_kwargs,
            )
            texts += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return texts


def rolled_instructions(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with pair i given pair i-1's instruction (and its mask); trajectories unchanged."""
    return {**batch, "input_ids": batch["input_ids"].roll(1, 0), "attention_mask": batch["attention_mask"].roll(1, 0)}


def rolled_texts(texts: list[str]) -> list[str]:
    """``texts`` with item i given item i-1's text (the first the last one's), as :func:`rolled_instructions`."""
    return texts[-1:] + texts[:-1]


def same_words_as_the_one_before(texts: list[str]) -> int:
    """How many of ``texts`` are the same words as the one :func:`rolled_texts` gives them instead."""
    return sum(a == b for a, b in zip(texts, rolled_texts(texts), strict=True))


@torch.no_grad()
def instruction_use(model: Any, dataset: Any, batch_size: int = 250) -> dict[str, float | int]:
    """Per real step: mean -log p(a_t | ...) and the share of argmax actions equal to the bot's, with each pair's
    own instruction (``*_own``) and with another pair's (``*_other``); ``same_text``: the share of pairs whose other
    instruction is the same words as their own."""
    if len(dataset) < 2:
        raise ValueError(f"need at least two pairs to give each another pair's instruction, got {len(dataset)}")
    if batch_size < 2:
        raise ValueError(f"batch_size must be at least 2 (instructions are exchanged within a batch), got {batch_size}")
    collate = DemoCollator(model.tokenizer)
    totals = {"nll_own": 0.0, "nll_other": 0.0, "accuracy_own": 0.0, "accuracy_other": 0.0}
    steps = same = 0
    # batch bounds; a last batch of one would be given its own instruction: fold it into the batch before
    bounds = list(range(0, len(dataset), batch_size)) + [len(dataset)]
    if bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    data = for_loader(dataset)
    with evaluating(model):
        for start, end in zip(bounds, bounds[1:]):
            rows = read_rows(data, range(start, end))
            batch = {k: v.to(model.device) for k, v in collate(rows).items()}
            mask = batch["trajectory_mask"].bool()
            steps += int(mask.sum())
            same += same_words_as_the_one_before([row["instruction"] for row in rows])
            for name, inputs in (("own", batch), ("other", rolled_instructions(batch))):
                _, logits = model.action_log_likelihood(
                    inputs["input_ids"], inputs["attention_mask"], inputs["observations"], inputs["directions"],
                    inputs["actions"], inputs["trajectory_mask"])
                # from the logits, so that a model trained with loss_reduction "mean" is scored per step too
                log_p = logits.log_softmax(-1).gather(-1, batch["actions"].long().unsqueeze(-1)).squeeze(-1)
                totals[f"nll_{name}"] -= float(log_p[mask].sum())
                totals[f"accuracy_{name}"] += float(((logits.argmax(-1) == batch["actions"]) & mask).sum())
    return {**{k: v / steps for k, v in totals.items()}, "pairs": len(dataset), "steps": steps,
            "same_text": same / len(dataset)}


def evaluate_speaker(
    model: Any, dataset: Any, tokenizer: Any = None, max_examples: int | None = None, batch_size: int = 256
) -> tuple[float, list[str]]:
    """Corpus BLEU-4 (sacrebleu) of greedy descriptions against the bot's instructions on held-out pairs."""
    if len(dataset) == 0:
        raise ValueError("evaluate_speaker got an empty dataset")
    if max_examples is not None:
        dataset = dataset.select(range(min(max_examples, len(dataset))))
    predictions = describe_dataset(model, dataset, tokenizer, batch_size=batch_size)
    return bleu(predictions, list(dataset["instruction"])), predictions
