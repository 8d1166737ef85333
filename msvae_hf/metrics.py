"""Evaluation numbers: BLEU-4 of speakers, success-rate summaries of followers, App. D's smoothed maximum.

- `bleu`: corpus BLEU-4 (0-100) with sacrebleu's defaults (13a tokenisation, exponential smoothing).
- `summarize_episodes`: success rate, mean steps and mean BabyAI reward of rollout results.
- `smoothed_max`: App. D's protocol: success rate per epoch, a moving average over 5 epochs, its maximum.
- `load_bleu_metric`: the same BLEU as an `evaluate` metric, loaded from this package (no network).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


class Episode(Protocol):
    """What `summarize_episodes` reads (e.g. `msvae_hf.rollout.EpisodeResult`)."""

    success: bool
    steps: int
    reward: float


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


__all__ = ["bleu", "reference_streams", "summarize_episodes", "smoothed_max", "load_bleu_metric"]
