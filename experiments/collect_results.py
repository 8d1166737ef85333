#!/usr/bin/env python
"""The tables of the results documents, rendered from the committed files under ``results/``.

    python experiments/collect_results.py gotoseqlocal --table paper          # print one table
    python experiments/collect_results.py bosslocal --write docs/results/bosslocal.md   # refresh every table
    python experiments/collect_results.py bosslocal --check docs/results/bosslocal.md   # exit 1 where one differs
    python experiments/collect_results.py gotoseqlocal --floor                # random policies -> floor.json

``results/<level>/runs/<run>.json`` holds one finished run (written by experiments/reproduce.py: config,
seed, commit, machine, wall time, test metrics, validation curve); ``results/<level>/floor.json`` the random
policies on the test seeds; other JSON files there the outputs of the study's tools (compare_speakers,
pragmatic_speakers, probe_speaker, benchmarks/objective_gradients.py). ``results/benchmarks/`` holds the
benchmarks' JSON. A results document marks each table with the command that prints it:

    <!-- table: python experiments/collect_results.py bosslocal --table seeds:msvae_paired,msvae -->
    | ... |
    <!-- end table -->

Tables: ``paper`` (Tables 2 and 3 beside the paper's numbers), ``headline`` (the same in one short table),
``tests`` (the paper's one-sided t-tests over seeds), ``paper_own``, ``headline_own`` (the same from the
independent seeds: seed k of each row from the seed-k baselines or teacher, the supervised rows those
baselines), ``tests_own`` (the t-tests from the independent seeds beside the shared-start ones),
``headline_film2``, ``claims_film2`` (Tables 2 and 3 with the FiLM follower, independent seeds: SR, SR told another
mission and their difference, SPL, steps beside the bot's; the paper's claims tested on them),
``headline_film2_b256``, ``claims_film2_b256`` (the same for the supervised follower and MS-VAE full at the
paper's batch of pairs, 256),
``readings`` (the paper's statements about its weights and Table 2 under each reading of the objective's
scale), ``runs:ROW,...`` (every run of those rows, one line each, with the random floor), ``seeds:ROW,...``
(mean +- sd over seeds, t-tests against the first row),
``seeds_again:ROW,...`` (the same, each run trained again counted as it was trained again),
``flatness:ROW,...`` (has each run's validation SR stopped rising), ``budget:ROW,...`` (runs continued to a
larger budget, each seed beside the run it continued), ``selection:ROW,...`` (one training, best/ chosen on validation
reading beside the run chosen on validation SR, or both choices of runs trained with --also-select),
``speakers:FILE``, ``pragmatics:FILE``,
``rescoring:FILE`` (pragmatic_speakers per system and seed: lam chosen on valid and the best on test),
``probes:FILE``, ``probe_data:FILE`` (how many trajectories each probe read), ``gradients:FILE``,
``gradient_sweep:FILE,...`` (objective_gradients.py's JSONs side by side, with their alpha sweeps),
``bleu_scales:FILE`` (speakers' test descriptions under the BLEU-4 variants of experiments/bleu_scales.py),
``reruns`` (runs trained again after their record, beside it), ``architectures`` (Table 1: the followers by
attention on many pairs, beside the paper's), ``follower_ablation`` (the follower's conditioning x a_{t-1}
at M = 1000, mean +- sd over seeds), ``follower_scale`` (Table 1's follower on 100,000 pairs at equal updates),
``follower_failures`` (experiments/follower_failures.py: SR by the mission's structure, steps against the bot's),
``unpaired`` (MS-VAE's SR and BLEU against N, the unpaired
trajectories), ``validation:FILE`` (a table of
experiments/validation_table.py kept as FILE.md: each row's maxima over its seeds); for ``benchmarks``:
``train_step:FILE``, ``train_step_profile:FILE`` (an update's profile),
``train_step_compare:FILE,...`` (one line per benchmark, times against the first), ``train_step_peak:FILE,...``
(the GEMM peak each measured and MS-VAE's fraction of it), ``attention_layout:FILE,...`` (two settings of a
switch timed in one process: padded against length-grouped attention, or F.linear against oneDNN),
``gemm_peaks:FILE,...`` (torch.matmul's and oneDNN's peaks and each model's fraction of either),
``kernel_bound:FILE`` (each update beside its kernels replayed alone: the fraction of the peak they allow),
``train_step_log:LOG,...`` (the seconds per update that benchmarks/gpu_check.sh prints into its log, each
matched to the benchmark's own JSON), ``speaker_decode:FILE``, ``rollout:FILE``,
``rollout_ratios:FILE``, ``demo_generation:FILE``, ``demo_storage:FILE``, ``demo_dataset:FILE``,
``smoke:FOLDER`` (the short training runs ``smoke_*.json`` of gpu_check.sh), ``resume:FILE`` (gpu_check.sh's
weight comparisons), ``gpu_update:FOLDER`` and ``gpu_kernels:FOLDER`` (benchmarks/gpu_update.sh's layouts,
and the captured update's costliest kernels), ``update_ops:FILE`` (operators and activations of one update per
layout). FILE: a JSON name under the folder, without ``.json`` (LOG: a
``.txt`` name without ``.txt``; both may include a subfolder).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cells import LEVELS
from result_tables.markdown import refresh, render
from result_tables.records import RESULTS


def random_floor(level: str, episodes: int = 1000) -> dict[str, dict[str, float]]:
    """Random policies over left/right/forward and over all 7 actions on the test seeds."""
    import msvae_hf  # noqa: F401  (registers the levels)
    from msvae_hf.envs.seeds import TEST_SEED_START
    from msvae_hf.evaluation.metrics import summarize_episodes
    from msvae_hf.evaluation.rollout import RandomPolicy, evaluation_seeds, rollout

    seeds = evaluation_seeds(episodes, TEST_SEED_START)
    env = f"BabyAI-{LEVELS[level]}-v0"
    return {f"random_{n}_actions": summarize_episodes(rollout(RandomPolicy(n, seed=0), env, seeds, batch_size=256))
            for n in (3, 7)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", help="a level folder under results/ (bosslocal, gotoseqlocal) or benchmarks")
    parser.add_argument("--table", help="one table to print (see above)")
    parser.add_argument("--write", type=Path, help="a results document whose marked tables are rendered anew")
    parser.add_argument("--check", type=Path, help="a results document: exit 1 if a marked table differs")
    parser.add_argument("--floor", action="store_true", help="roll out random policies -> results/<level>/floor.json")
    args = parser.parse_args(argv)
    if args.floor:
        out = RESULTS / args.level / "floor.json"
        out.write_text(json.dumps(random_floor(args.level), indent=2) + "\n")
        print(f"wrote {out}")
    if args.table:
        sys.stdout.write(render(args.level, args.table))
    for document, write in ((args.write, True), (args.check, False)):
        if document is None:
            continue
        text, changed = refresh(document)
        if write:
            document.write_text(text)
            print(f"{document}: {len(changed)} table(s) changed")
        elif changed:
            sys.exit(f"{document}: tables differ from results/: {', '.join(changed)}")


if __name__ == "__main__":
    main()
