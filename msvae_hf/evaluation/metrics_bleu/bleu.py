"""Corpus BLEU-4 (sacrebleu, 0-100) as a local `evaluate` metric: `evaluate.load(".../bleu.py")`.

The same number as `msvae_hf.evaluation.metrics.bleu`; self-contained so that `evaluate` can load it offline.
"""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
  title = "A Call for Clarity in Reporting {BLEU} Scores",
  author = "Post, Matt",
  booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
  year = "2018",
  pages = "186--191",
}
"""
_DESCRIPTION = "Corpus BLEU-4 of generated BabyAI instructions, computed by sacrebleu with its defaults."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of generated instructions.
    references: one reference string, or a list of reference strings, per prediction.
Returns:
    bleu: corpus BLEU-4 in [0, 100].
Example:
    >>> metric = evaluate.load("msvae_hf/evaluation/metrics_bleu/bleu.py")
    >>> out = metric.compute(predictions=["go to the red ball"], references=["go to the red ball"])
    >>> round(out["bleu"], 6)
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Bleu(evaluate.Metric):
    """sacrebleu corpus BLEU-4; references may differ in number between predictions."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
                ),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions: list[str], references: list) -> dict[str, float]:
        return {"bleu": float(sacrebleu.corpus_bleu(predictions, reference_streams(references)).score)}


# Copied from msvae_hf.evaluation.metrics.reference_streams: this script loads without the package
# (tests/test_metrics.py checks that the copy is the same)
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

