"""Evaluation numbers: BLEU-4 of speakers, success-rate summaries of followers, App. D's smoothed maximum.

- `bleu`: corpus BLEU-4 (0-100) with sacrebleu's defaults (13a tokenisation, exponential smoothing).
- `summarize_episodes`: success rate, mean steps and mean BabyAI reward of rollout results; `follower_summary`
  adds the success rate told another episode's mission, SPL against the bot and the bot's mean steps.
- `smoothed_max`: App. D's protocol: success rate per epoch, a moving average over 5 epochs, its maximum.
- `load_bleu_metric`: the same BLEU as an `evaluate` metric, loaded from this package (no network).
- `compare_bleu`: several speakers on the same references, with sacrebleu's paired bootstrap resampling
  (95% confidence intervals and p-values against the first system).
- `instruction_parts_match`: what BLEU mixes up, apart: how often a speaker gets the instruction's
  sequence of actions (go to / pick up / put next to / open) and its sequence of objects right.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import sacrebleu

BLEU_METRIC_SCRIPT = Path(__file__).parent / "metrics_bleu" / "bleu.py"


def reference_streams(references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-prediction references -> sacrebleu's reference streams (stream j holds every j-th reference).

    Predictions with fewer references than the others get ``None`` in the missing streams, which
    sacrebleu ignores.
    """
    per_prediction = [[r] if isinstance(r, str) else list(r) for r in references]
    if any(not refs for refs in per_prediction):
        raise ValueError("every prediction needs at least one reference")
    width = max(len(refs) for refs in per_prediction)
    return [[refs[j] if j < len(refs) else None for refs in per_prediction] for j in range(width)]


def bleu(predictions: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> float:
    """Corpus BLEU-4 in [0, 100]; `references[i]` is one string or a list of strings for `predictions[i]`."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    if not predictions:
        raise ValueError("bleu needs at least one prediction")
    return float(sacrebleu.corpus_bleu(list(predictions), reference_streams(references)).score)


def compare_bleu(
    systems: Mapping[str, Sequence[str]], references: Sequence[str], num_samples: int = 1000
) -> dict[str, dict[str, float | None]]:
    """Corpus BLEU-4 of each system with sacrebleu's paired bootstrap resampling (Koehn 2004).

    ``systems`` maps a name to its predictions, all for the same ``references`` (one per prediction); the
    first system is the baseline. Returns, per system, ``bleu`` (the corpus score, equal to :func:`bleu`),
    ``mean`` and ``ci`` (the bootstrap mean and 95% half-width) and ``p_value`` (None for the baseline): the
    probability, over resamples, that the difference to the baseline is due to chance. Resampling uses
    sacrebleu's fixed seed, so the result is deterministic.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ValueError("compare_bleu needs at least two systems (the first is the baseline)")
    for name, predictions in systems.items():
        if len(predictions) != len(references):
            raise ValueError(f"system {name!r} has {len(predictions)} predictions for {len(references)} references")
    test = PairedTest([(n, list(p)) for n, p in systems.items()], {"BLEU": BLEU()}, [list(references)],
                      test_type="bs", n_samples=num_samples)
    _, scores = test()
    return {
        name: {"bleu": float(r.score), "mean": float(r.mean), "ci": float(r.ci),
               "p_value": None if r.p_value is None else float(r.p_value)}
        for name, r in zip(scores["System"], scores["BLEU"])
    }


class Episode(Protocol):
    """What `summarize_episodes` reads (e.g. `msvae_hf.evaluation.rollout.EpisodeResult`)."""

    success: bool
    steps: int
    reward: float


ACTION_WORDS = ("go", "pick", "put", "open")  # the first word of each BabyAI action phrase


@functools.cache
def _object_words() -> frozenset[str]:
    """Colours, object types and "object" (an unspecified type), read from minigrid once."""
    from minigrid.core.constants import COLOR_NAMES
    from minigrid.envs.babyai.core.verifier import OBJ_TYPES

    return frozenset(COLOR_NAMES) | frozenset(OBJ_TYPES) | {"object"}


def instruction_parts(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(action words, color/type words) of a BabyAI instruction, in order."""
    words, objects = text.replace(",", " , ").split(), _object_words()
    return tuple(w for w in words if w in ACTION_WORDS), tuple(w for w in words if w in objects)


def instruction_parts_match(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Fractions of predictions whose action words (``actions``), object words (``objects``) and both
    (``both``) equal the reference's, in the order the words appear in the text (not the order of
    execution: "put ... after you open ..." and "open ..., then put ..." differ), e.g. "pick up a red ball,
    then go to the box" has actions (pick, go) and objects (red, ball, box)."""
    if len(predictions) != len(references) or not references:
        raise ValueError(f"need as many predictions as references (>0), got {len(predictions)} and {len(references)}")
    parts = [(instruction_parts(p), instruction_parts(r)) for p, r in zip(predictions, references, strict=True)]
    n = len(parts)
    return {
        "actions": sum(p[0] == r[0] for p, r in parts) / n,
        "objects": sum(p[1] == r[1] for p, r in parts) / n,
        "both": sum(p == r for p, r in parts) / n,
    }


def summarize_episodes(results: Iterable[Episode]) -> dict[str, float]:
    """success_rate (fraction in [0, 1]), mean_steps, mean_reward and the number of episodes."""
    results = list(results)
    if not results:
        raise ValueError("summarize_episodes got no episodes")
    return {
        "success_rate": float(np.mean([bool(r.success) for r in results])),
        "mean_steps": float(np.mean([r.steps for r in results])),
        "mean_reward": float(np.mean([r.reward for r in results])),
        "episodes": len(results),
    }


def spl(success: bool, steps: int, reference_steps: int) -> float:
    """Success weighted by path length (Anderson et al. 2018, the standard of vision-and-language navigation):
    success x reference / max(reference, steps), with the bot's steps on the same seed as the reference."""
    return float(success) * reference_steps / max(reference_steps, steps, 1)


def follower_summary(
    own: Sequence[Episode], other: Sequence[Episode], bot: Sequence[Episode], same_room: Sequence[Episode] = ()
) -> dict[str, float]:
    """The follower's numbers on one list of seeds, each list in seed order:

    - ``success_rate``, ``mean_steps``, ``mean_reward`` and ``episodes`` of ``own`` (told each env's mission);
    - ``success_rate_other_mission`` where ``other`` is given: the success rate of the same seeds told another
      episode's mission (success still judged by each env's own): what the follower achieves without reading;
      and ``reading``, ``success_rate`` minus it: how much of the success comes from the instruction;
    - ``spl``: mean success weighted by path length against the bot's steps on the same seed (:func:`spl`);
    - ``bot_mean_steps``: the bot's mean steps on those seeds, beside ``mean_steps``;
    - ``success_rate_same_room`` where ``same_room`` is given: the success rate of the same seeds each told, and
      judged by, another mission drawn by the level for its room: whether the follower does what it is told.
    """
    if len(own) != len(bot) or any(len(told) not in (0, len(own)) for told in (other, same_room)):
        raise ValueError(f"need one episode per seed in each list, got {len(own)}, {len(other)}, {len(bot)}"
                         + (f" and {len(same_room)}" if same_room else ""))
    summary = summarize_episodes(own)
    if other:
        summary["success_rate_other_mission"] = float(np.mean([bool(r.success) for r in other]))
        # from the counts, so that equal differences compare equal (best/'s first maximum is the first)
        summary["reading"] = (sum(bool(r.success) for r in own) - sum(bool(r.success) for r in other)) / len(own)
    summary["spl"] = float(np.mean([spl(r.success, r.steps, b.steps) for r, b in zip(own, bot, strict=True)]))
    summary["bot_mean_steps"] = float(np.mean([b.steps for b in bot]))
    if same_room:
        summary["success_rate_same_room"] = float(np.mean([bool(r.success) for r in same_room]))
    return summary


#: The follower metrics every evaluation reports (``results.json``'s ``test``, validation, ``evaluate.py``).
FOLLOWER_METRICS = ("success_rate", "success_rate_other_mission", "reading", "success_rate_same_room", "spl",
                    "mean_steps", "bot_mean_steps")


def smoothed_max(values: Sequence[float], window: int = 5) -> float:
    """Maximum of the moving average over `window` consecutive values (App. D: per-epoch SR, window 5).

    Only full windows count; a series shorter than `window` gives its plain mean.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("smoothed_max got no values")
    if values.size < window:
        return float(values.mean())
    return float(np.convolve(values, np.ones(window) / window, mode="valid").max())


def load_bleu_metric(**kwargs: Any) -> Any:
    """The package's BLEU as an `evaluate.EvaluationModule`, loaded from a local script (works offline)."""
    import evaluate

    return evaluate.load(str(BLEU_METRIC_SCRIPT), **kwargs)


__all__ = ["bleu", "reference_streams", "summarize_episodes", "follower_summary", "spl", "FOLLOWER_METRICS",
           "smoothed_max", "load_bleu_metric"]
