"""Every table by name, rendered as markdown, and the results documents' marked tables rendered anew."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

from .benchmarks import (
    table_attention_layout,
    table_demo_dataset,
    table_demo_generation,
    table_demo_storage,
    table_gemm_peaks,
    table_gpu_kernels,
    table_gpu_update,
    table_kernel_bound,
    table_resume,
    table_rollout,
    table_rollout_ratios,
    table_smoke,
    table_speaker_decode,
    table_train_step,
    table_train_step_compare,
    table_train_step_log,
    table_train_step_peak,
    table_train_step_profile,
    table_update_ops,
)
from .follower import table_follower_ablation, table_follower_failures, table_follower_scale
from .pairs_curve import (
    table_faced_objects,
    table_kept_labels,
    table_kept_verdict,
    table_label_accuracy,
    table_labels_by_goal_count,
    table_latent_probe,
    table_one_start,
    table_pairs_curve,
    table_pairs_verdict,
    table_reading_history,
    table_speaker_choice,
    table_teacher_verdict,
)
from .paper import (
    table_claims_film2,
    table_claims_film2_b256,
    table_headline,
    table_headline_film2,
    table_headline_film2_b256,
    table_headline_own,
    table_paper,
    table_paper_own,
    table_tests,
    table_tests_own,
)
from .readings import table_readings
from .records import RESULTS
from .runs import (
    table_budget,
    table_flatness,
    table_reruns,
    table_runs,
    table_seeds,
    table_seeds_again,
    table_selection,
    table_speed,
)
from .scale import table_architectures, table_unpaired
from .studies import (
    table_bleu_scales,
    table_follower_probe,
    table_follower_probe_by_goals,
    table_gradient_sweep,
    table_gradients,
    table_labels_by_parts,
    table_pragmatics,
    table_probe_data,
    table_probes,
    table_rescoring,
    table_speakers,
    table_validation,
)

MARK = re.compile(
    r"<!-- table: python experiments/collect_results\.py (\S+) --table (\S+) -->\n(.*?)<!-- end table -->\n", re.DOTALL)


TABLES: dict[str, Callable[..., list[str]]] = {
    "flatness": table_flatness, "paper": table_paper, "headline": table_headline, "tests": table_tests,
    "runs": table_runs, "seeds": table_seeds, "budget": table_budget, "selection": table_selection,
    "seeds_again": table_seeds_again,
    "speakers": table_speakers, "pragmatics": table_pragmatics,
    "rescoring": table_rescoring, "probes": table_probes, "probe_data": table_probe_data,
    "follower_probe": table_follower_probe, "follower_probe_by_goals": table_follower_probe_by_goals,
    "labels_by_parts": table_labels_by_parts,
    "gradients": table_gradients, "validation": table_validation, "train_step": table_train_step,
    "train_step_compare": table_train_step_compare, "train_step_peak": table_train_step_peak,
    "attention_layout": table_attention_layout, "gpu_update": table_gpu_update, "gpu_kernels": table_gpu_kernels,
    "update_ops": table_update_ops, "bleu_scales": table_bleu_scales,
    "gemm_peaks": table_gemm_peaks, "kernel_bound": table_kernel_bound,
    "train_step_log": table_train_step_log, "train_step_profile": table_train_step_profile,
    "speaker_decode": table_speaker_decode, "rollout": table_rollout, "rollout_ratios": table_rollout_ratios,
    "demo_generation": table_demo_generation, "demo_storage": table_demo_storage,
    "demo_dataset": table_demo_dataset, "smoke": table_smoke,
    "resume": table_resume, "reruns": table_reruns, "readings": table_readings,
    "gradient_sweep": table_gradient_sweep, "architectures": table_architectures, "unpaired": table_unpaired,
    "speed": table_speed, "paper_own": table_paper_own, "headline_own": table_headline_own,
    "tests_own": table_tests_own, "headline_film2": table_headline_film2, "claims_film2": table_claims_film2,
    "headline_film2_b256": table_headline_film2_b256, "claims_film2_b256": table_claims_film2_b256,
    "follower_ablation": table_follower_ablation,
    "follower_scale": table_follower_scale, "follower_failures": table_follower_failures,
    "pairs_curve": table_pairs_curve, "pairs_verdict": table_pairs_verdict, "label_accuracy": table_label_accuracy,
    "labels_by_goal_count": table_labels_by_goal_count,
    "kept_labels": table_kept_labels, "kept_verdict": table_kept_verdict, "speaker_choice": table_speaker_choice,
    "teacher_verdict": table_teacher_verdict,
    "reading_history": table_reading_history, "latent_probe": table_latent_probe, "one_start": table_one_start,
    "faced_objects": table_faced_objects,
}


def render(level: str, spec: str, root: Path = RESULTS) -> str:
    """One table, ``name`` or ``name:argument``, as markdown (ending in a newline)."""
    name, _, argument = spec.partition(":")
    if name not in TABLES:
        raise SystemExit(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    table = TABLES[name]
    if argument and list(inspect.signature(table).parameters)[1] == "root":  # (level, root, ...): none to take
        raise SystemExit(f"table {name!r} takes no argument; got {spec!r}")
    return "\n".join(table(level, argument, root=root) if argument else table(level, root=root)) + "\n"


def refresh(document: Path, root: Path = RESULTS) -> tuple[str, list[str]]:
    """The document with every marked table rendered anew, and the specs of the tables that changed."""
    text = document.read_text()
    changed: list[str] = []

    def redo(match: re.Match) -> str:
        level, spec, old = match.groups()
        new = render(level, spec, root)
        if new != old:
            changed.append(f"{level} {spec}")
        return match.group(0).replace(old, new) if old else match.group(0).replace("-->\n", "-->\n" + new, 1)

    return MARK.sub(redo, text), changed
