"""The cells of each level's study: one command each, done when its output exists.

A cell trains a run (``scripts/train.py``), makes demonstrations, labels a pool of unpaired trajectories,
pre-trains a speaker's encoders or compares finished runs. Names read ``<row>/seed<k>`` for runs (a row trains
its method's config file, ``configs/<method>.yaml``, for the level, with the row's own settings as flags; a
pre-training's row is its output folder's name),
``demos`` and ``labels/<labeller>`` for data, and ``<script>/<output>`` for comparisons and tables. Run
folders follow one convention: ``runs/<level>/<row>`` for seed 0 and ``runs/<level>/<row>_seed<k>`` for seed
k. Every MS-VAE seed starts from the seed-0 baselines (App. D initialises MS-VAE from trained baselines) and every
speaker-follower seed reads the seed-0 teacher's labels, so their seeds differ in data order and noise only, except
in :data:`INDEPENDENT_ROWS` and the pairs curve's rows with a ``teacher`` (and not ``one_teacher``), whose seed k
starts from the seed-k baselines or reads the seed-k teacher's labels (a row whose seed 0 is another row's,
``Row.seed0``, runs only its other seeds).

Both levels hold the rows of Tables 2 and 3 (:data:`TABLE_ROWS`) and the follower rows at twice the budget
(:data:`BUDGET_ROWS`); BossLocal also holds the rest of its study
(:data:`BOSSLOCAL_ROWS`, :func:`bosslocal_comparisons`), GoToSeqLocal its other rows at twice the budget
(:data:`GOTOSEQLOCAL_ROWS`). Each cell answers one of :data:`QUESTIONS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from msvae_hf.cli.train import parse_args
from msvae_hf.envs.levels import PAPER_LEVELS, level_folder
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER
from msvae_hf.training.train_config import TrainConfig, load_config, model_flags

REPO = Path(__file__).resolve().parents[1]

#: The paper's two one-room levels (App. C): folder name -> the name make_demos takes.
LEVELS = {level_folder(name): name for name in PAPER_LEVELS}

#: What each group of cells answers: key (a cell's ``question``) -> the question.
QUESTIONS = {
    "demos": "which demonstrations every run reads (App. C)",
    "follower": "does unpaired data help the follower? (Table 2, SR)",
    "speaker": "does unpaired data help the speaker? (Table 2, BLEU)",
    "speaker_follower": "does unpaired data help the speaker-follower? (Table 3)",
    "bleu": "what was tried against the BLEU result (V lowers the MS-VAE speaker's BLEU)",
    "pretraining": "speaker pre-training and self-training: where do unpaired trajectories raise BLEU?",
    "budget": "would more updates close the gap to the paper's SR? (Table 2's follower rows at 4000 updates; "
              "GoToSeqLocal's + V and Table 3 rows too; on BossLocal, the paper's batch and unpaired pool)",
    "objective_scale": "which reduction of the objective's terms makes App. D's weights behave as the paper says? "
                       "(docs/design.md, \"Loss scale\": the \"sum\" rows msvae*, the \"mean\" rows mean_msvae*)",
    "tables": "every run's numbers in one table, and the validation curves",
    "architectures": "what does the bottleneck cost a follower with many pairs? (Table 1, M = 100k)",
    "unpaired_curve": "how do the follower's SR and the speaker's BLEU grow with N, the unpaired trajectories?",
    "pairs_curve": "where does reading begin? SR and SR by reading against M, the pairs, with and without unpaired "
                   "trajectories (the pairs curve)",
}


@dataclass(frozen=True)
class Row:
    """A row of a results table: its method's ``configs/<config>.yaml`` with the row's ``overrides``, trained on
    ``seeds`` of a level into ``runs/<level>/<row>[_seed<k>]``."""

    label: str
    question: str
    needs: tuple[str, ...] = ()
    """cells every seed needs besides the demonstrations (e.g. the seed-0 baselines it starts from)"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """the seeds the study runs (none: a row kept but not run)"""
    overrides: tuple[str, ...] = ()
    """train.py flags beyond the config, e.g. ``--model.gamma 1`` or ``--max-updates 400`` for a run stopped
    early; ``{level}`` in a value is the level's folder name"""
    config: str | None = None
    """the method's config file, ``configs/<config>.yaml`` (None: the row's name)"""
    init: str | None = None
    """the pre-training (runs/<level>/<init>[_seed<k>]) that seed k starts from"""
    continues: str | None = None
    """the row whose finished seed-k run seed k continues to this row's budget (train.py's --continue-from)"""
    chosen_again: str | None = None
    """the row whose seed-k training seed k repeats but for the validation metric that keeps best/ (its
    ``--follower-metric``): the two records test two checkpoints of one run"""
    own_baselines: bool = False
    """seed k starts from the seed-k baseline follower and speaker (App. D), not from the seed-0 ones"""
    baselines: tuple[str, str] = ("follower", "speaker")
    """the rows of the baseline follower and speaker an ``own_baselines`` row starts from"""
    teacher: str | None = None
    """the row whose seed-k run (its ``best``) labels D_u for seed k (``labels/<teacher>[_seed<k>]``), where a
    row's ``pseudo_labels`` names the seed-0 teacher's labels for every seed"""
    one_teacher: bool = False
    """with ``teacher``: every seed reads the seed-0 teacher's labels (the seeds vary data order and noise only)"""
    rescorer: str | None = None
    """with ``teacher``: the row whose seed-k follower rescores the seed-k teacher's candidates, the seed reading
    ``labels/<teacher>[_seed<k>]_<rescored>`` (``label_unpaired.py --rescore-with``)"""
    rescored: str = "rescored"
    """with ``rescorer``: the rescored labels' suffix, which tells a later round's labels from an earlier's"""
    keep: float | None = None
    """with ``teacher``: the seed reads the share ``keep`` of those labels that their labelling was surest of,
    ``labels/<its labels>_top<percent>`` (``keep_confident.py``)"""
    seed0: str | None = None
    """the row whose seed-0 run is this row's seed 0 (the same training, not run again): this row runs the others"""
    demos: str = "demos"
    """the demonstrations cell the row reads (its flags name the folder where it is not the config's)"""

    def __post_init__(self) -> None:
        if self.rescorer is not None and self.teacher is None:
            raise ValueError(f"row {self.label!r}: a rescorer rescores a teacher's candidates; name the teacher")
        if self.rescored != "rescored" and self.rescorer is None:
            raise ValueError(f"row {self.label!r}: rescored={self.rescored!r} names rescored labels; name the rescorer")
        if self.keep is not None and (self.teacher is None or not 0.0 < self.keep < 1.0):
            raise ValueError(f"row {self.label!r}: keep={self.keep!r} keeps a share in (0, 1) of a teacher's labels; "
                             "name the teacher")


BASELINES = ("follower/seed0", "speaker/seed0")

#: Table 2 and Table 3 of the paper, on both levels.
TABLE_ROWS: dict[str, Row] = {
    "follower": Row("supervised follower (Table 2) / follower (Table 3)", "follower"),
    "speaker": Row("supervised speaker", "speaker"),
    "msvae_paired": Row("MS-VAE, paired only", "follower", BASELINES),
    "msvae": Row("MS-VAE full (+ V + D')", "follower", BASELINES),
    "msvae_v": Row("MS-VAE + V", "follower", BASELINES),
    "speaker_follower": Row("speaker-follower", "speaker_follower", ("labels/speaker",)),
    "msvae_speaker_follower": Row("MS-VAE-speaker-follower", "speaker_follower", ("labels/msvae",)),
}

#: Tables 2 and 3 with independent seeds, on both levels: seed k of an MS-VAE row starts from the seed-k baselines
#: and seed k of a speaker-follower row reads the seed-k teacher's labels, so that the seeds vary what the paper's
#: seeds vary (the baselines and teachers too), not data order and noise only. Seed 0 is the shared-start row's
#: seed 0 trained again.
INDEPENDENT_ROWS: dict[str, Row] = {
    "msvae_paired_own": Row("MS-VAE, paired only, each seed from its own baselines", "follower",
                            own_baselines=True, config="msvae_paired"),
    "msvae_v_own": Row("MS-VAE + V, each seed from its own baselines", "follower", own_baselines=True,
                       config="msvae_v"),
    "msvae_own": Row("MS-VAE full (+ V + D'), each seed from its own baselines", "follower", own_baselines=True,
                     config="msvae"),
    "speaker_follower_own": Row("speaker-follower, each seed on its own speaker's labels", "speaker_follower",
                                teacher="speaker", config="speaker_follower"),
    "msvae_speaker_follower_own": Row("MS-VAE-speaker-follower, each seed on its own MS-VAE's labels (MS-VAE full "
                                      "from its own baselines)", "speaker_follower", teacher="msvae_own",
                                      config="msvae_speaker_follower"),
}

#: Table 1 on both levels: the four followers trained on 100,000 pairs (data/<level>_pairs_100k) with the imitation
#: loss only, 10,000 updates of 128 (13 epochs), one seed.
TABLE1_ROWS: dict[str, Row] = {
    f"follower_m100k_{kind}": Row(f"follower, {label}, M = 100k pairs", "architectures", ("demos_pairs_100k",), (0,),
                                  overrides, config="follower_m100k_attention")
    for kind, label, overrides in (
        ("seq2seq", "seq2seq", ("--model.follower_attention", "none")),
        ("attention", "w/ attention", ()),
        ("bottleneck", "w/ bottleneck, K = 4", ("--model.follower_attention", "bottleneck")),
        ("bottleneck_k16", "w/ bottleneck, K = 16", ("--model.follower_attention", "bottleneck",
                                                     "--model.num_latent_tokens", "16")))
}

#: The size of a level's pool of unpaired trajectories, D_u (the study's demos cell).
UNPAIRED_POOL = 100_000
#: The share of a labelling's labels the kept rows read: those it was surest of (``keep_confident.py``).
KEEP_SHARE = 0.3

#: MS-VAE full against N, on both levels: the first N unpaired trajectories of D_u (N = 0 is paired only, N =
#: 100k the full row), 2000 updates of 128 + 128, which see 256k unpaired trajectories: 286, 26 and 2.6 epochs.
CURVE_ROWS: dict[str, Row] = {
    "msvae_n1k": Row("MS-VAE full, N = 1k unpaired trajectories", "unpaired_curve", BASELINES,
                     overrides=("--num-unpaired", "1000"), config="msvae"),
    "msvae_n10k": Row("MS-VAE full, N = 10k unpaired trajectories", "unpaired_curve", BASELINES,
                      overrides=("--num-unpaired", "10000"), config="msvae"),
}
#: The curve's points in N's order (each row's N is its config's: ``num_unpaired``, else all of D_u).
CURVE = ("msvae_paired", *CURVE_ROWS, "msvae")

_UPDATES_4000 = ("--max-updates", "4000")
#: Table 2's follower comparison at twice the budget, on both levels: each seed's 2000-update run continued.
BUDGET_ROWS: dict[str, Row] = {
    "msvae_4000": Row("MS-VAE full (+ V + D'), 4000 updates", "budget", BASELINES, overrides=_UPDATES_4000,
                      continues="msvae", config="msvae"),
    "msvae_paired_4000": Row("MS-VAE, paired only, 4000 updates", "budget", BASELINES, overrides=_UPDATES_4000,
                             continues="msvae_paired", config="msvae_paired"),
}

_FRONT_DU = "speaker_init_front_unpaired"


def _labels(labeller: str) -> tuple[str, str]:
    """train.py's flags for a follower or speaker on ``labeller``'s labels of the level's D_u."""
    return "--pseudo-labels", f"data/pseudo_labels/{{level}}/{labeller}"
#: Table 3's speaker-follower with a teacher that names the objects: the front-cell pre-trained, self-trained
#: speaker labels all of D_u, where the baseline speaker labelled it for "speaker-follower" (both levels).
_SPEAKER_FOLLOWER_FRONT = Row("speaker-follower, labels by the front-cell pre-trained, self-trained speaker",
                              "speaker_follower", ("labels/speaker_front_selftrain",),
                              overrides=("--pseudo-labels", "data/pseudo_labels/{level}/speaker_front_selftrain"),
                              config="speaker_follower")
#: The FiLM followers' flags: FiLM on one map (film_layers 1) or on both (2), no a_{t-1}.
_FILM = ("--model.follower_conditioning", "film", "--model.previous_action_input", "false", "--model.film_layers", "1")
_FILM2 = ("--model.follower_conditioning", "film", "--model.previous_action_input", "false", "--model.film_layers", "2")

#: GoToSeqLocal's rows still rising at 2000 updates, continued to 4000 with the rows they are compared with.
GOTOSEQLOCAL_ROWS: dict[str, Row] = {
    "follower_m100k_attention_film": Row("follower, w/ attention, FiLM, no previous action, M = 100k pairs, 4000 "
                                         "updates", "architectures", ("demos_pairs_100k",), (0, 1),
                                         (*_FILM, *_UPDATES_4000), config="follower_m100k_attention"),
    "follower_m100k_attention_film_10k": Row("follower, w/ attention, FiLM, no previous action, M = 100k pairs, "
                                             "10,000 updates", "architectures", ("demos_pairs_100k",), (0,), _FILM,
                                             continues="follower_m100k_attention_film",
                                             config="follower_m100k_attention"),
    "follower_m100k_attention_film_recurrent": Row(
        "follower, w/ attention, FiLM read at each step by the LSTM's state (BabyAI 1.1), no previous action, M = "
        "100k pairs, 4000 updates", "architectures", ("demos_pairs_100k",), (0,),
        ("--model.follower_conditioning", "film_recurrent", "--model.previous_action_input", "false",
         "--model.film_layers", "1", *_UPDATES_4000),
        config="follower_m100k_attention"),
    # The recipe suspect: the FiLM follower's 10,000 updates at 1e-3, then 2000 more at BabyAI's 1e-4.
    "follower_m100k_attention_film_lr1e4": Row(
        "follower, w/ attention, FiLM, no previous action, M = 100k pairs, 10,000 updates at 1e-3 then 2000 at 1e-4",
        "architectures", ("demos_pairs_100k", "follower_m100k_attention_film_10k/seed0"), (0,),
        (*_FILM, "--init-from", "runs/{level}/follower_m100k_attention_film_10k/best", "--learning-rate", "1e-4",
         "--max-updates", "2000"), config="follower_m100k_attention"),
    "follower_m100k_attention_film_both": Row(
        "follower, w/ attention, FiLM read at each step by learned queries plus the LSTM's state, no previous action, "
        "M = 100k pairs, 4000 updates", "architectures", ("demos_pairs_100k",), (0,),
        ("--model.follower_conditioning", "film_both", "--model.previous_action_input", "false",
         "--model.film_layers", "1", *_UPDATES_4000),
        config="follower_m100k_attention"),
    # film_lr1e4's start and recipe with the FiLM's keys added (zero at the start): what reading by the state adds.
    "follower_m100k_attention_film_both_lr1e4": Row(
        "follower, w/ attention, FiLM (10,000 updates at 1e-3) grown into FiLM read by learned queries plus the "
        "LSTM's state, 2000 more at 1e-4, no previous action, M = 100k pairs", "architectures",
        ("demos_pairs_100k", "follower_m100k_attention_film_10k/seed0"), (0,),
        ("--model.follower_conditioning", "film_both", "--model.previous_action_input", "false",
         "--model.film_layers", "1", "--init-from",
         "runs/{level}/follower_m100k_attention_film_10k/best", "--learning-rate", "1e-4", "--max-updates", "2000"),
        config="follower_m100k_attention"),
    # The capacity suspect: the FiLM follower fits its training pairs little better than its valid ones (step
    # accuracy 0.915 / 0.892 after 12,000 updates); App. D's LSTM is BabyAI 1.1's halved, this one is 128 wide.
    "follower_m100k_attention_film_h512": Row(
        "follower, w/ attention, FiLM, no previous action, hidden size 512, M = 100k pairs, 2000 updates",
        "architectures", ("demos_pairs_100k",), (0,),
        (*_FILM, "--model.hidden_size", "512", "--max-updates", "2000"), config="follower_m100k_attention"),
    "follower_m100k_attention_film_h512_4k": Row(
        "follower, w/ attention, FiLM, no previous action, hidden size 512, M = 100k pairs, 4000 updates",
        "architectures", ("demos_pairs_100k",), (0,), (*_FILM, "--model.hidden_size", "512", *_UPDATES_4000),
        continues="follower_m100k_attention_film_h512", config="follower_m100k_attention"),
    "follower_m100k_attention_film2_lr1e4": Row(
        "follower, w/ attention, FiLM on both convolution maps, no previous action, M = 100k pairs, 10,000 updates "
        "at 1e-3 then 2000 at 1e-4", "architectures",
        ("demos_pairs_100k", "follower_m100k_attention_film2_10k/seed0"), (0,),
        (*_FILM2, "--init-from", "runs/{level}/follower_m100k_attention_film2_10k/best",
         "--learning-rate", "1e-4", "--max-updates", "2000"), config="follower_m100k_attention"),
    "msvae_v_4000": Row("MS-VAE + V, 4000 updates", "budget", BASELINES, overrides=_UPDATES_4000,
                        continues="msvae_v", config="msvae_v"),
    "speaker_follower_4000": Row("speaker-follower, 4000 updates", "budget", ("labels/speaker",),
                                 overrides=_UPDATES_4000, continues="speaker_follower", config="speaker_follower"),
    "msvae_speaker_follower_4000": Row("MS-VAE-speaker-follower, 4000 updates", "budget", ("labels/msvae",),
                                       overrides=_UPDATES_4000, continues="msvae_speaker_follower",
                                       config="msvae_speaker_follower"),
    # Table 3's speaker-follower with a teacher that names the objects, as on BossLocal: the speaker pre-trained on
    # the front-cell task over D_u, self-trained on its own labels of 40k of D_u, labels all of D_u.
    "speaker_front_unpaired": Row("speaker, front-cell pre-training on D_u", "pretraining", seeds=(0,),
                                  init=_FRONT_DU, config="speaker_paired"),
    "speaker_front_selftrain": Row("speaker, front-cell pre-training on D_u, self-trained on its labels",
                                   "pretraining", ("labels/speaker_front",), (0,), _labels("speaker_front"),
                                   init=_FRONT_DU, config="speaker_paired"),
    "speaker_follower_front": _SPEAKER_FOLLOWER_FRONT,
}

#: Table 1's "w/ attention" follower as the package builds it by default (FiLM on both convolution maps, the second
#: convolution combining what the instruction selected in the first, as BabyAI 1.1 puts a convolution after each
#: FiLM; no a_{t-1}), on both levels: 4000 updates, then continued to 10,000.
FILM2_TABLE1_ROWS: dict[str, Row] = {
    "follower_m100k_attention_film2": Row(
        "follower, w/ attention, FiLM on both convolution maps, no previous action, M = 100k pairs, 4000 updates",
        "architectures", ("demos_pairs_100k",), (0,), (*_FILM2, *_UPDATES_4000),
        config="follower_m100k_attention"),
    "follower_m100k_attention_film2_10k": Row(
        "follower, w/ attention, FiLM on both convolution maps, no previous action, M = 100k pairs, 10,000 updates",
        "architectures", ("demos_pairs_100k",), (0,), _FILM2,
        continues="follower_m100k_attention_film2", config="follower_m100k_attention"),
}

#: Tables 2 and 3 with the default follower (FiLM on both maps, no a_{t-1}; its flags spelled out, so that the rows
#: keep their follower whatever the default), on both levels, with independent seeds: seed k of an MS-VAE row
#: starts from the seed-k ``follower_film2`` and ``speaker_film2``, seed k of a speaker-follower row reads the
#: seed-k teacher's labels. ``speaker_film2`` is ``speaker``'s model (a speaker has no follower), trained again with
#: the rows so that every run of the table is of one commit.
_FILM2_BASELINES = ("follower_film2", "speaker_film2")
FILM2_ROWS: dict[str, Row] = {
    "follower_film2": Row("supervised follower, FiLM on both maps", "follower", overrides=_FILM2, config="follower"),
    "speaker_film2": Row("supervised speaker (beside the FiLM follower)", "speaker", overrides=_FILM2,
                         config="speaker"),
    "msvae_paired_film2": Row("MS-VAE, paired only, FiLM on both maps", "follower", overrides=_FILM2,
                              own_baselines=True, baselines=_FILM2_BASELINES, config="msvae_paired"),
    "msvae_v_film2": Row("MS-VAE + V, FiLM on both maps", "follower", overrides=_FILM2, own_baselines=True,
                         baselines=_FILM2_BASELINES, config="msvae_v"),
    "msvae_film2": Row("MS-VAE full (+ V + D'), FiLM on both maps", "follower", overrides=_FILM2,
                       own_baselines=True, baselines=_FILM2_BASELINES, config="msvae"),
    "speaker_follower_film2": Row("speaker-follower, FiLM on both maps, each seed on its own speaker's labels",
                                  "speaker_follower", overrides=_FILM2, teacher="speaker_film2",
                                  config="speaker_follower"),
    "msvae_speaker_follower_film2": Row("MS-VAE-speaker-follower, FiLM on both maps, each seed on its own MS-VAE's "
                                        "labels", "speaker_follower", overrides=_FILM2, teacher="msvae_film2",
                                        config="msvae_speaker_follower"),
}

#: Rows of those at the paper's batch of pairs (256 an update; App. D) for 2000 updates (5 % of the paper's
#: 40,000), validated every 400, run on one GPU (``reproduce.py --cuda-graphs``, or experiments/gpu_grid.sh): the
#: supervised follower and MS-VAE full with its unpaired batch at its config's 128, then MS-VAE full at the paper's
#: whole batch (256 unpaired trajectories too). Seed k of MS-VAE starts from the seed-k ``follower_film2`` and
#: ``speaker_film2`` (128 a batch), as its row above does; the follower beside it is the same recipe at this batch.
_PAPER_BATCH = ("--batch-size", "256", "--max-updates", "2000", "--eval-every", "400", "--checkpoint-every", "400")
FILM2_PAPER_BATCH_ROWS: dict[str, Row] = {
    "follower_film2_b256_u2000": Row("supervised follower, FiLM on both maps, 2000 updates of 256 pairs", "follower",
                                     overrides=(*_FILM2, *_PAPER_BATCH), config="follower"),
    "msvae_film2_b256_u2000": Row("MS-VAE full (+ V + D'), FiLM on both maps, 2000 updates of 256 pairs and 128 "
                                  "unpaired trajectories", "follower", overrides=(*_FILM2, *_PAPER_BATCH),
                                  own_baselines=True, baselines=_FILM2_BASELINES, config="msvae"),
    "msvae_film2_b256u256_u2000": Row("MS-VAE full (+ V + D'), FiLM on both maps, 2000 updates of 256 pairs and 256 "
                                      "unpaired trajectories (the paper's whole batch)", "follower",
                                      overrides=(*_FILM2, *_PAPER_BATCH, "--unpaired-batch-size", "256"),
                                      own_baselines=True, baselines=_FILM2_BASELINES, config="msvae"),
}

_FIVE = (0, 1, 2, 3, 4)
_FRONT_BASELINES = ("follower/seed0", "speaker_front_unpaired/seed0")  # BASELINES, the speaker pre-trained on D_u
_FRONT_SPEAKER = ("--init-speaker", "runs/{level}/speaker_front_unpaired/best")
_GAMMA1 = ("--model.gamma", "1.0")
_OWN_OBS = ("--model.share_observation_encoder", "false")
_FIXED_DECODER = ("--model.unpaired_trains_action_decoder", "false")

#: The rest of the BossLocal study (labels as in scripts/collect_results.py's RUNS).
BOSSLOCAL_ROWS: dict[str, Row] = {
    "msvae_paired_speaker_follower": Row("speaker-follower, labels by MS-VAE paired only", "speaker_follower",
                                         ("labels/msvae_paired",), (0,), _labels("msvae_paired"),
                                         config="speaker_follower"),
    # MS-VAE settings tried for BLEU; those stopped early keep the budget they stopped at.
    "msvae_gamma1": Row("MS-VAE full, gamma = 1", "bleu", BASELINES, overrides=_GAMMA1, config="msvae"),
    "msvae_gamma10": Row("MS-VAE full, gamma = 10 (stopped at 400)", "bleu", BASELINES, (0,),
                         ("--model.gamma", "10.0", "--max-updates", "400"), config="msvae"),
    "msvae_alpha1000": Row("MS-VAE full, D' weight alpha = 1000", "bleu", BASELINES, (0,),
                           ("--model.alpha", "1000.0"), config="msvae"),
    "msvae_gamma1_alpha10": Row("MS-VAE full, gamma = 1, alpha = 10", "bleu", BASELINES,
                                overrides=(*_GAMMA1, "--model.alpha", "10.0"), config="msvae"),
    "msvae_gamma1_alpha100": Row("MS-VAE full, gamma = 1, alpha = 100", "bleu", BASELINES, (0,),
                                 (*_GAMMA1, "--model.alpha", "100.0"), config="msvae"),
    "msvae_k16": Row("MS-VAE full, K = 16 tokens", "bleu", BASELINES, (0,), ("--model.num_latent_tokens", "16"),
                     config="msvae"),
    "msvae_trajbeta": Row("MS-VAE full, trajectory beta = 0.01 (stopped at 400)", "bleu", BASELINES, (0,),
                          ("--model.trajectory_beta", "0.01", "--max-updates", "400"), config="msvae"),
    # The paper's batch (256 + 256) on its million unpaired trajectories (data/bosslocal_1m).
    "msvae_b256_1m": Row("MS-VAE full, batch 256 on 1M unpaired trajectories", "budget", (*BASELINES, "demos_1m"),
                         (0, 1), ("--demos", "data/{level}_1m", "--batch-size", "256", "--unpaired-batch-size",
                                  "256"), config="msvae"),
    "msvae_paired_trajbeta": Row("MS-VAE paired only, trajectory beta = 0.01 (not run)", "bleu", BASELINES, (),
                                 ("--model.trajectory_beta", "0.01"), config="msvae_paired"),
    "msvae_trajbeta1": Row("MS-VAE full, trajectory beta = 1 (stopped at 1000)", "bleu", BASELINES, (0,),
                           ("--model.trajectory_beta", "1.0", "--max-updates", "1000"), config="msvae"),
    "msvae_fixeddec": Row("MS-VAE full, V trains q(z|a,o) only (stopped at 1000)", "bleu", BASELINES, (0,),
                          (*_FIXED_DECODER, "--max-updates", "1000"), config="msvae"),
    "msvae_gamma1_fixeddec": Row("MS-VAE full, gamma = 1, V trains q(z|a,o) only", "bleu", BASELINES, (0,),
                                 (*_GAMMA1, *_FIXED_DECODER), config="msvae"),
    "msvae_paired_ownobs": Row("MS-VAE, paired only, own observation encoder for q(z|a,o)", "bleu", BASELINES,
                               overrides=_OWN_OBS, config="msvae_paired"),
    "msvae_ownobs": Row("MS-VAE full, own observation encoder for q(z|a,o)", "bleu", BASELINES, overrides=_OWN_OBS,
                        config="msvae"),
    "msvae_gamma1_ownobs": Row("MS-VAE full, gamma = 1, own observation encoder for q(z|a,o)", "bleu", BASELINES,
                               overrides=(*_GAMMA1, *_OWN_OBS), config="msvae"),
    "msvae_paired_finit": Row("MS-VAE paired only, follower-only init (App. D)", "bleu", ("follower/seed0",), (0,),
                              ("--model.gamma", "0.0", "--model.alpha", "0.0"), config="msvae_finit"),
    "msvae_finit": Row("MS-VAE full, follower-only init (App. D)", "bleu", ("follower/seed0",), (0,)),
    "msvae_paired_then_paired": Row("MS-VAE paired only, then 400 paired-only updates", "bleu",
                                    ("msvae_paired/seed0",), (0,), ("--init-from", "runs/{level}/msvae_paired/best"),
                                    config="msvae_then_paired"),
    "msvae_then_paired": Row("MS-VAE full, then 400 paired-only updates", "bleu", ("msvae/seed0",), (0,)),
    # The baseline speaker: self-trained, pre-trained on the front-cell task, both.
    "speaker_paired": Row("speaker (paired only), 1200 updates", "pretraining"),
    "speaker_selftrain": Row("speaker self-trained (its own labels of D_u)", "pretraining", ("labels/speaker",),
                             overrides=_labels("speaker"), config="speaker_paired"),
    "speaker_msvae_labels": Row("speaker on MS-VAE labels of D_u (gamma = 1, alpha = 10)", "pretraining",
                                ("labels/msvae_gamma1_alpha10",), (0,), _labels("msvae_gamma1_alpha10"),
                                config="speaker_paired"),
    "speaker_paired_selftrain": Row("speaker self-trained on the 1200-update speaker's labels of 40k of D_u",
                                    "pretraining", ("labels/speaker_paired",), overrides=_labels("speaker_paired"),
                                    config="speaker_paired"),
    "speaker_front_paired": Row("speaker, front-cell pre-training on the paired trajectories", "pretraining",
                                seeds=_FIVE, init="speaker_init_front_paired", config="speaker_paired"),
    "speaker_front_unpaired": Row("speaker, front-cell pre-training on D_u", "pretraining", seeds=_FIVE,
                                  init=_FRONT_DU, config="speaker_paired"),
    "speaker_front_selftrain": Row("speaker, front-cell pre-training on D_u, self-trained on the seed-0 speaker's "
                                   "labels", "pretraining", ("labels/speaker_front",), _FIVE, _labels("speaker_front"),
                                   init=_FRONT_DU, config="speaker_paired"),
    # MS-VAE's speaker side from the seed-0 speaker pre-trained on D_u (its own observation encoder, which the
    # trajectory encoder was pre-trained with): does V raise BLEU once the speaker sees the objects?
    "msvae_front_paired": Row("MS-VAE paired only, speaker side from the front-cell pre-trained speaker",
                              "pretraining", _FRONT_BASELINES, overrides=(*_OWN_OBS, *_FRONT_SPEAKER),
                              config="msvae_paired"),
    "msvae_front_gamma1": Row("MS-VAE full, gamma = 1, speaker side from the front-cell pre-trained speaker",
                              "pretraining", _FRONT_BASELINES, overrides=(*_GAMMA1, *_OWN_OBS, *_FRONT_SPEAKER),
                              config="msvae"),
    "speaker_front_selftrain2": Row("speaker, front-cell pre-training on D_u, second round of self-training",
                                    "pretraining", ("labels/speaker_front2",), (0, 1), _labels("speaker_front2"),
                                    init=_FRONT_DU, config="speaker_paired"),
    # the front-cell pre-trained, self-trained speaker here reaches BLEU 40 (the baseline speaker 25)
    "speaker_follower_front": _SPEAKER_FOLLOWER_FRONT,
    # Table 3's MS-VAE-speaker-follower with the best MS-VAE speaker by test BLEU (MS-VAE paired only, speaker side
    # from the front-cell pre-trained speaker: 27.0 against the full MS-VAE's 19.7) labelling all of D_u.
    "msvae_speaker_follower_front": Row("MS-VAE-speaker-follower, labels by MS-VAE paired only with the front-cell "
                                        "pre-trained speaker", "speaker_follower", ("labels/msvae_front_paired",),
                                        overrides=_labels("msvae_front_paired"), config="speaker_follower"),
}


@dataclass(frozen=True)
class Labeller:
    """Labels of the unpaired pool made greedily by ``model`` (``<run>/<best or best_speaker>``, a run folder of
    ``runs/<level>``: seed 0's unless a row's ``teacher`` asks for seed k's)."""

    model: str
    question: str
    num_unpaired: int | None = None
    """label only the first N trajectories (None: all)"""
    demos: str = "demos"
    """the demonstrations cell whose unpaired split it labels (``demos``: data/<level>_100k)"""
    rescorer: str | None = None
    """a follower (``<run>/best``) that rescores the speaker's candidates (``label_unpaired.py --rescore-with``)"""


TABLE_LABELLERS = {"speaker": Labeller("speaker/best", "speaker_follower"),
                   "msvae": Labeller("msvae/best", "speaker_follower")}
#: The front-cell pre-trained speaker labelling 40k of D_u for its own self-training, and the self-trained one
#: labelling all of D_u for the speaker-follower (both levels).
_FRONT_LABELLERS = {
    "speaker_front": Labeller("speaker_front_unpaired/best", "pretraining", 40_000),
    "speaker_front_selftrain": Labeller("speaker_front_selftrain/best", "speaker_follower"),
}
#: A second round of the front-cell route at M = 1,000 and 10,000: the front-cell speaker's candidates for all of
#: D_u rescored by the follower trained on its first labels (``label_unpaired.py --rescore-with``); at M = 1,000 a
#: third, rescored by the second round's student.
_RESCORED_LABELLERS = {
    f"speaker_cells_film2_{tag}_rescored": Labeller(f"speaker_cells_film2_{tag}/best", "pairs_curve",
                                                    demos="demos_curve",
                                                    rescorer=f"speaker_follower_cells_film2_{tag}/best")
    for tag in ("m1k", "m10k")
} | {
    # A third round at M = 1,000: the same candidates rescored by the second round's student (seed 0).
    "speaker_cells_film2_m1k_rescored2": Labeller("speaker_cells_film2_m1k/best", "pairs_curve", demos="demos_curve",
                                                  rescorer="speaker_follower_cells_rescored_film2_m1k/best"),
}
BOSSLOCAL_LABELLERS = {
    **_FRONT_LABELLERS,
    "msvae_paired": Labeller("msvae_paired/best", "speaker_follower"),
    "msvae_gamma1_alpha10": Labeller("msvae_gamma1_alpha10/best_speaker", "pretraining"),
    "speaker_paired": Labeller("speaker_paired/best", "pretraining", 40_000),
    "speaker_front2": Labeller("speaker_front_selftrain/best", "pretraining", 40_000),
    "msvae_front_paired": Labeller("msvae_front_paired/best_speaker", "speaker_follower"),
    # the route's second round on seed 0's chain, whose first student is the one-teacher row's
    "speaker_cells_film2_m1k_rescored": _RESCORED_LABELLERS["speaker_cells_film2_m1k_rescored"],
    # its third round: the same candidates rescored by the second round's seed-0 student
    "speaker_cells_film2_m1k_rescored2": _RESCORED_LABELLERS["speaker_cells_film2_m1k_rescored2"],
}
GOTOSEQLOCAL_LABELLERS = {**_FRONT_LABELLERS, **_RESCORED_LABELLERS}


@dataclass(frozen=True)
class Cell:
    """One step of a study: ``command`` makes ``output``; the cells named in ``needs`` come first."""

    name: str
    command: tuple[str, ...]
    output: Path
    needs: tuple[str, ...] = ()
    run_dir: Path | None = field(default=None)
    """for a training cell, its run folder: resumed where it holds a checkpoint"""
    question: str = "tables"
    """the key in :data:`QUESTIONS` of what this cell helps answer"""
    after: tuple[str, ...] = ()
    """cells that run first where they run too, never started for this one: the run it continues (a run of the
    whole budget from the start is the same run, for where that one is not on this machine)"""


#: The objective's scale on both levels (model config ``loss_reduction``): App. D's statements (gamma 1 against
#: 100, beta 1 against 0.1, alpha 1/2 against 1/20), one seed as the paper's preliminary runs, under each reading
#: (``msvae*``: "sum", the default; ``mean_msvae*``: "mean"), and Table 2's MS-VAE rows under "mean".
_MEAN = ("--model.loss_reduction", "mean")
_BETA1 = ("--model.beta", "1.0")
READING_ROWS: dict[str, Row] = {
    "msvae_gamma1": Row("MS-VAE full, gamma = 1", "objective_scale", BASELINES, (0,), _GAMMA1, config="msvae"),
    "msvae_beta1": Row("MS-VAE full, beta = 1", "objective_scale", BASELINES, (0,), _BETA1, config="msvae"),
    "msvae_alpha05": Row("MS-VAE full, alpha = 1/2", "objective_scale", BASELINES, (0,), ("--model.alpha", "0.5"),
                         config="msvae"),
    "mean_msvae_paired": Row("MS-VAE, paired only (mean reading)", "objective_scale", BASELINES, overrides=_MEAN,
                             config="msvae_paired"),
    "mean_msvae_v": Row("MS-VAE + V (mean reading)", "objective_scale", BASELINES, overrides=_MEAN, config="msvae_v"),
    "mean_msvae": Row("MS-VAE full (+ V + D') (mean reading)", "objective_scale", BASELINES, overrides=_MEAN,
                      config="msvae"),
    "mean_msvae_gamma1": Row("MS-VAE full, gamma = 1 (mean reading)", "objective_scale", BASELINES, (0,),
                             (*_MEAN, *_GAMMA1), config="msvae"),
    "mean_msvae_beta1": Row("MS-VAE full, beta = 1 (mean reading)", "objective_scale", BASELINES, (0,),
                            (*_MEAN, *_BETA1), config="msvae"),
    "mean_msvae_alpha05": Row("MS-VAE full, alpha = 1/2 (mean reading)", "objective_scale", BASELINES, (0,),
                              (*_MEAN, "--model.alpha", "0.5"), config="msvae"),
    "mean_msvae_alpha2": Row("MS-VAE full, alpha = 2, where D' pulls as J-bar does (mean reading)", "objective_scale",
                             BASELINES, overrides=(*_MEAN, "--model.alpha", "2.0"), config="msvae"),
}


#: The pairs curve's M, nested: the first M pairs of data/<level>_curve (100,000 pairs, the study's 100,000 unpaired
#: trajectories, valid and test splits: the same seeds as data/<level>_100k, so its first 1,000 pairs are those).
CURVE_PAIRS = (1000, 3000, 10_000, 30_000, 100_000)
#: The pairs curve's updates of 128 pairs (+ 128 unpaired trajectories), every run alike.
CURVE_UPDATES = 4000
#: The M at which the curve runs three seeds (one elsewhere, to start).
CURVE_THREE_SEEDS = (1000, 10_000, 100_000)


#: Routes to an MS-VAE whose follower reads, each MS-VAE full with one change (the last two changes: its control is
#: ``gamma1``): q(z|a,o) on the frames without the action tokens (``posterior_reads_actions``;
#: experiments/probe_latent.py measures whether z_tau holds the actions or the goals); V weighted as one paired ELBO
#: (gamma = 1, not App. D's 100), so that the action decoder learns under z_tau with a weight of 1.5 against 0.5 under
#: z_y (A_1 / 2 + gamma V against C_2 / 2), not 100.5; and gamma = 1 with KL[q(z|a,o) || q(z|y)] on the pairs
#: (``posterior_alignment``, q(z|y) held fixed), so that V trains the action decoder on codes of the goals, which the
#: probe finds z_tau does not hold without it.
CURVE_ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "frames": ("q(z|a,o) on the frames alone", ("--model.posterior_reads_actions", "false")),
    "gamma1": ("gamma = 1", ("--model.gamma", "1")),
    "gamma1_align": ("gamma = 1, q(z|a,o) pulled to q(z|y) on the pairs", ("--model.gamma", "1",
                                                                           "--model.posterior_alignment", "1")),
}


def curve_tag(m: int) -> str:
    """``m1k`` for 1,000 pairs, ``m100k`` for 100,000."""
    return f"m{m // 1000}k"


def _pairs_curve_rows() -> dict[str, Row]:
    """The pairs curve, for each M of :data:`CURVE_PAIRS`: the supervised follower and speaker on the M pairs, MS-VAE
    full from them on the M pairs and all 100,000 unpaired trajectories, and the speaker-follower on that MS-VAE's
    labels, and on the supervised speaker's (one seed, to start), each :data:`CURVE_UPDATES` updates with the default
    (FiLM on both maps) follower; and the budget confound: the supervised follower at M = 1,000, 3,000 and 10,000 and
    the front-cell students on 1,000 pairs continued to 10,000 updates; and the routes to a reading MS-VAE
    (:data:`CURVE_ROUTES`) at M = 1,000 and 10,000, beside MS-VAE on the pairs alone, which tells what of a route's
    reading comes from the unpaired trajectories; and the front-cell route at M = 1,000 and 10,000: the speaker reading
    the front cells, the speaker-follower on its labels and on those labels rescored by that speaker-follower (at M =
    1,000 also on them rescored by the student of that second round, and the three rounds again with each seed on its
    own teacher's chain), and MS-VAE (gamma = 1) from that speaker, whose q(z|a,o) then reads the cells, beside MS-VAE
    on the pairs alone from the same speaker, its control; at M = 1,000 the front-cell speaker also taught the steps
    that complete a goal, and two rounds of its students, the front-cell speaker chosen on its labels demonstrated and
    its students, and that speaker taught also on its pairs' parts and three rounds of its students."""
    rows: dict[str, Row] = {}

    def row(name: str, label: str, m: int, seeds: tuple[int, ...], updates: int = CURVE_UPDATES,
            extra: tuple[str, ...] = (), needs: tuple[str, ...] = (), **kw) -> None:
        flags = (*_FILM2, "--demos", "data/{level}_curve", "--num-paired", str(m), "--max-updates", str(updates),
                 *extra)
        rows[name] = Row(label, "pairs_curve", needs, seeds, flags, demos="demos_curve", **kw)

    for m in CURVE_PAIRS:
        tag, seeds = curve_tag(m), (0, 1, 2) if m in CURVE_THREE_SEEDS else (0,)
        row(f"follower_film2_{tag}", f"supervised follower, M = {m:,} pairs", m, seeds, config="follower")
        row(f"speaker_film2_{tag}", f"supervised speaker, M = {m:,} pairs", m, seeds, config="speaker")
        row(f"msvae_film2_{tag}", f"MS-VAE full, M = {m:,} pairs + 100,000 unpaired", m, seeds, config="msvae",
            own_baselines=True, baselines=(f"follower_film2_{tag}", f"speaker_film2_{tag}"))
        row(f"speaker_follower_film2_{tag}", f"speaker-follower on MS-VAE full's labels, M = {m:,} pairs", m, seeds,
            teacher=f"msvae_film2_{tag}", config="msvae_speaker_follower")
        row(f"speaker_follower_sup_film2_{tag}", f"speaker-follower on the supervised speaker's labels, M = {m:,} "
            "pairs", m, (0,), teacher=f"speaker_film2_{tag}", config="speaker_follower")
    for m in (1000, 10_000):
        tag = curve_tag(m)
        row(f"speaker_cells_film2_{tag}", f"supervised speaker reading the front cells, M = {m:,} pairs", m, (0, 1, 2),
            extra=("--model.trajectory_front_cells", "true"), config="speaker")
        row(f"speaker_follower_cells_film2_{tag}", f"speaker-follower on the labels of the speaker reading the front "
            f"cells, M = {m:,} pairs", m, (0, 1, 2) if m == 1000 else (0,), teacher=f"speaker_cells_film2_{tag}",
            one_teacher=True, config="speaker_follower")
        row(f"speaker_follower_cells_rescored_film2_{tag}", "speaker-follower on the front-cell speaker's labels "
            f"rescored by the follower of its first labels, M = {m:,} pairs", m, (0, 1, 2) if m == 1000 else (0,),
            extra=_labels(f"speaker_cells_film2_{tag}_rescored"), needs=(f"labels/speaker_cells_film2_{tag}_rescored",),
            config="speaker_follower")
        if m == 1000:  # the front-cell speaker also taught which steps complete a goal, and its students
            row(f"speaker_goals_film2_{tag}", "supervised speaker reading the front cells, taught the steps that "
                f"complete a goal, M = {m:,} pairs", m, (0, 1, 2),
                extra=("--model.trajectory_front_cells", "true", "--model.goal_steps_weight", "1"), config="speaker")
            row(f"speaker_follower_goals_film2_{tag}", "speaker-follower on the labels of the front-cell speaker "
                f"taught the goal steps, each seed its own teacher's, M = {m:,} pairs", m, (0, 1, 2),
                teacher=f"speaker_goals_film2_{tag}", config="speaker_follower")
            # the front-cell speaker's run chosen on its labels: best/ is the checkpoint whose greedy labels the
            # most valid trajectories demonstrate (--speaker-metric demonstrated), not BLEU's; training is the same
            row(f"speaker_cells_demo_film2_{tag}", "supervised speaker reading the front cells, chosen on its valid "
                f"labels demonstrated, M = {m:,} pairs", m, (0, 1, 2),
                extra=("--model.trajectory_front_cells", "true", "--speaker-metric", "demonstrated"), config="speaker")
            row(f"speaker_follower_cells_demo_film2_{tag}", "speaker-follower on the labels of the front-cell speaker "
                f"chosen on its valid labels demonstrated, each seed its own teacher's, M = {m:,} pairs", m,
                (0, 1, 2), teacher=f"speaker_cells_demo_film2_{tag}", config="speaker_follower")
            # the front-cell speaker chosen so, taught also on its pairs' parts: each multi-goal pair cut after each
            # goal step, each part with the words of the goal it completes (experiments/paired_parts.py)
            rows[f"speaker_cells_parts_film2_{tag}"] = Row(
                "supervised speaker reading the front cells, chosen on its valid labels demonstrated, taught also on "
                f"its pairs' parts, M = {m:,} pairs", "pairs_curve", (), (0, 1, 2),
                (*_FILM2, "--demos", f"data/{{level}}_parts_{tag}", "--num-paired", "null", "--max-updates",
                 str(CURVE_UPDATES),
                 "--model.trajectory_front_cells", "true", "--speaker-metric", "demonstrated"),
                demos=f"demos_parts_{tag}", config="speaker")
            row(f"speaker_follower_cells_parts_film2_{tag}", "speaker-follower on the labels of the front-cell "
                f"speaker taught also on its pairs' parts, each seed its own teacher's, M = {m:,} pairs", m, (0, 1, 2),
                teacher=f"speaker_cells_parts_film2_{tag}", config="speaker_follower")
            row(f"speaker_follower_cells_parts_rescored_film2_{tag}", "speaker-follower on the labels of the "
                "front-cell speaker taught also on its pairs' parts, rescored by the follower of its first labels, "
                f"each seed its own teacher's chain, M = {m:,} pairs", m, (0, 1, 2),
                teacher=f"speaker_cells_parts_film2_{tag}", rescorer=f"speaker_follower_cells_parts_film2_{tag}",
                config="speaker_follower")
            row(f"speaker_follower_cells_parts_rescored2_film2_{tag}", "speaker-follower on the labels of the "
                "front-cell speaker taught also on its pairs' parts, rescored by the second round's student, each "
                f"seed its own teacher's chain, M = {m:,} pairs", m, (0, 1, 2),
                teacher=f"speaker_cells_parts_film2_{tag}",
                rescorer=f"speaker_follower_cells_parts_rescored_film2_{tag}", rescored="rescored2",
                config="speaker_follower")
            row(f"speaker_follower_goals_rescored_film2_{tag}", "speaker-follower on the labels of the front-cell "
                "speaker taught the goal steps, rescored by the follower of its first labels, each seed its own "
                f"teacher's chain, M = {m:,} pairs", m, (0, 1, 2), teacher=f"speaker_goals_film2_{tag}",
                rescorer=f"speaker_follower_goals_film2_{tag}", config="speaker_follower")
        if m == 1000:  # both rounds again with each seed on its own teacher (seed 0's is the rows' above)
            row(f"speaker_follower_cells_own_film2_{tag}", "speaker-follower on the labels of the speaker reading the "
                f"front cells, each seed its own teacher's, M = {m:,} pairs", m, (1, 2),
                teacher=f"speaker_cells_film2_{tag}", seed0=f"speaker_follower_cells_film2_{tag}",
                config="speaker_follower")
            row(f"speaker_follower_cells_rescored_own_film2_{tag}", "speaker-follower on the front-cell speaker's "
                f"labels rescored by the follower of its first labels, each seed its own teacher's, M = {m:,} pairs",
                m, (1, 2), teacher=f"speaker_cells_film2_{tag}", rescorer=f"speaker_follower_cells_own_film2_{tag}",
                seed0=f"speaker_follower_cells_rescored_film2_{tag}", config="speaker_follower")
            row(f"speaker_follower_cells_rescored2_film2_{tag}", "speaker-follower on the front-cell speaker's labels "
                f"rescored by the second round's student, M = {m:,} pairs", m, (0, 1, 2),
                extra=_labels(f"speaker_cells_film2_{tag}_rescored2"),
                needs=(f"labels/speaker_cells_film2_{tag}_rescored2",), config="speaker_follower")
            row(f"speaker_follower_cells_rescored2_own_film2_{tag}", "speaker-follower on the front-cell speaker's "
                f"labels rescored by the second round's student, each seed its own teacher's chain, M = {m:,} pairs",
                m, (1, 2), teacher=f"speaker_cells_film2_{tag}",
                rescorer=f"speaker_follower_cells_rescored_own_film2_{tag}", rescored="rescored2",
                seed0=f"speaker_follower_cells_rescored2_film2_{tag}", config="speaker_follower")
        if m == 1000:  # the second round's labels, only the 30 % its labelling was surest of
            row(f"speaker_follower_cells_rescored_top30_film2_{tag}", "speaker-follower on the 30 % of the front-cell "
                "speaker's labels rescored by the follower of its first labels that the rescoring was surest of, each "
                f"seed its own teacher's chain, M = {m:,} pairs", m, (0, 1, 2), teacher=f"speaker_cells_film2_{tag}",
                rescorer=f"speaker_follower_cells_own_film2_{tag}", keep=KEEP_SHARE, config="speaker_follower")
            row(f"speaker_follower_cells_rescored_first30k_film2_{tag}", "speaker-follower on the first 30,000 of the "
                "front-cell speaker's labels rescored by the follower of its first labels (as many as the kept row's, "
                f"drawn blind), each seed its own teacher's chain, M = {m:,} pairs", m, (0,),
                extra=("--num-unpaired", str(round(KEEP_SHARE * UNPAIRED_POOL))), teacher=f"speaker_cells_film2_{tag}",
                rescorer=f"speaker_follower_cells_own_film2_{tag}", config="speaker_follower")
        cells_start = dict(own_baselines=True, baselines=(f"follower_film2_{tag}", f"speaker_cells_film2_{tag}"))
        row(f"msvae_cells_film2_{tag}", f"MS-VAE full, gamma = 1, from the speaker reading the front cells, M = {m:,} "
            "pairs + 100,000 unpaired", m, (0, 1, 2), extra=("--model.gamma", "1"), config="msvae", **cells_start)
        row(f"msvae_paired_cells_film2_{tag}", "MS-VAE, paired only, from the speaker reading the front cells, "
            f"M = {m:,} pairs (the front cells' control)", m, (0, 1, 2), config="msvae_paired", **cells_start)
        start = dict(own_baselines=True, baselines=(f"follower_film2_{tag}", f"speaker_film2_{tag}"))
        beside = (0, 1, 2) if m == 1000 else (0,)  # gamma = 1 and its control beside the front cells' seeds
        row(f"msvae_paired_film2_{tag}", f"MS-VAE, paired only, M = {m:,} pairs (the routes' control)", m, beside,
            config="msvae_paired", **start)
        for route, (what, flags) in CURVE_ROUTES.items():
            seeds = beside if route == "gamma1" else (0,)
            row(f"msvae_film2_{tag}_{route}", f"MS-VAE full, {what}, M = {m:,} pairs + 100,000 unpaired", m, seeds,
                extra=flags, config="msvae", **start)

    def continued(base: str, seeds: tuple[int, ...] | None = None, updates: int = 10_000) -> None:
        """``<base>_u<updates/1000>k``: each of ``seeds`` (default: the base row's) of ``base`` continued to
        ``updates`` updates, a shared seed 0 (``Row.seed0``) the sharing row's continued too."""
        spec = rows[base]
        flags = spec.overrides
        at = flags.index("--max-updates") + 1
        tag, budget = f"_u{updates // 1000}k", f"{updates:,}" if updates >= 10_000 else str(updates)  # 4000, 10,000
        rows[f"{base}{tag}"] = replace(
            spec, label=f"{spec.label}, {budget} updates", seeds=spec.seeds if seeds is None else seeds,
            overrides=(*flags[:at], str(updates), *flags[at + 1:]), continues=base,
            seed0=None if spec.seed0 is None else f"{spec.seed0}{tag}")

    for m in (1000, 3000, 10_000):  # the budget confound: each run continued to 10,000 updates
        continued(f"follower_film2_{curve_tag(m)}")
    continued("speaker_follower_cells_film2_m1k", (0,))
    continued("speaker_follower_cells_own_film2_m1k")
    # the front-cell MS-VAE on 10,000 pairs and its control at twice their budget
    continued("msvae_cells_film2_m10k", updates=8000)
    continued("msvae_paired_cells_film2_m10k", updates=8000)
    for m in (1000, 3000, 10_000):  # the supervised follower's training again, best/ chosen on validation reading
        base = rows[f"follower_film2_{curve_tag(m)}"]
        rows[f"follower_film2_{curve_tag(m)}_byreading"] = replace(
            base, label=f"{base.label}, chosen on validation reading", seeds=(0, 1, 2),
            chosen_again=f"follower_film2_{curve_tag(m)}",
            overrides=(*base.overrides, "--follower-metric", "reading"))
    return rows


#: The pairs curve on GoToSeqLocal (:func:`_pairs_curve_rows`).
PAIRS_CURVE_ROWS = _pairs_curve_rows()
#: BossLocal's pairs curve, where GoToSeqLocal's shape says to look: the supervised follower at M = 1,000, 3,000,
#: 10,000 and 100,000, and the front-cell speaker's route (its speaker and speaker-follower) at 1,000 and 10,000: three
#: seeds of each follower and of the speaker on 1,000 pairs, one of the speaker on 10,000; the
#: ``speaker_follower_cells_film2_*`` students read seed 0's labels, and ``speaker_follower_cells_own_film2_m1k``
#: (seeds 1 and 2; its seed 0 is ``speaker_follower_cells_film2_m1k``'s run) each its own seed's speaker's.
_BOSSLOCAL_CURVE_SEEDS = {
    **{f"follower_film2_{curve_tag(m)}": (0, 1, 2) for m in (1000, 3000, 10_000, 100_000)},
    "speaker_cells_film2_m1k": (0, 1, 2), "speaker_cells_film2_m10k": (0,),
    "speaker_follower_cells_film2_m1k": (0, 1, 2), "speaker_follower_cells_film2_m10k": (0, 1, 2),
    "speaker_follower_cells_own_film2_m1k": (1, 2),
    # the second round on each seed's own chain: its teacher's candidates rescored by its own student
    "speaker_follower_cells_rescored_own_film2_m1k": (1, 2),
    # its seed 0: the one-teacher row's student rescores seed 0's speaker's candidates
    "speaker_follower_cells_rescored_film2_m1k": (0,),
    # the third round on each seed's own chain: the candidates rescored by the second round's student
    "speaker_follower_cells_rescored2_own_film2_m1k": (1, 2),
    # its seed 0: the second round's seed-0 student rescores seed 0's speaker's candidates
    "speaker_follower_cells_rescored2_film2_m1k": (0,),
    # the second round's labels on each seed's own chain, only the 30 % the rescoring was surest of
    "speaker_follower_cells_rescored_top30_film2_m1k": (0, 1, 2),
    # its control: as many of those labels, the first 30,000 (the trajectories are drawn at random)
    "speaker_follower_cells_rescored_first30k_film2_m1k": (0,),
    # a teacher for the long trajectories: the front-cell speaker also taught the steps that complete a goal, and
    # each seed's student on its own teacher's labels
    "speaker_goals_film2_m1k": (0, 1, 2), "speaker_follower_goals_film2_m1k": (0, 1, 2),
    # the front-cell speaker chosen on what its labels are for: the valid trajectories that demonstrate them
    "speaker_cells_demo_film2_m1k": (0, 1, 2), "speaker_follower_cells_demo_film2_m1k": (0, 1, 2),
    # that speaker taught also on its pairs' parts, and each seed's student on its own teacher's labels
    "speaker_cells_parts_film2_m1k": (0, 1, 2), "speaker_follower_cells_parts_film2_m1k": (0, 1, 2),
    # its second round: each seed's parts speaker's candidates rescored by that seed's student (its third round,
    # ``speaker_follower_cells_parts_rescored2_film2_m1k``, is GoToSeqLocal's only)
    "speaker_follower_cells_parts_rescored_film2_m1k": (0, 1, 2),
    # the budget confound at the target's two points: each seed continued to 10,000 updates
    "follower_film2_m3k_u10k": (0, 1, 2), "speaker_follower_cells_film2_m1k_u10k": (0,),
    "speaker_follower_cells_own_film2_m1k_u10k": (1, 2),
}
BOSSLOCAL_CURVE_ROWS = {name: replace(PAIRS_CURVE_ROWS[name], seeds=seeds)
                        for name, seeds in _BOSSLOCAL_CURVE_SEEDS.items()}
#: The rows of BossLocal's curve with three seeds: its followers', the front-cell speaker's on 1,000 pairs and their
#: students', the goal-steps speaker's and its students', the kept labels' students, the front-cell speaker chosen
#: on its labels demonstrated and its students, and that speaker taught also on its pairs' parts and its students'
#: two rounds.
BOSSLOCAL_THREE_SEEDS = tuple(name for name, row in BOSSLOCAL_CURVE_ROWS.items() if row.seeds == (0, 1, 2))


def level_rows(level: str) -> dict[str, Row]:
    """Every row of ``level``'s study, by config name (a level's own rows over the shared ones)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; known: {sorted(LEVELS)}")
    extra = ({**BOSSLOCAL_ROWS, **FILM2_PAPER_BATCH_ROWS, **BOSSLOCAL_CURVE_ROWS} if level == "bosslocal"
             else {**GOTOSEQLOCAL_ROWS, **PAIRS_CURVE_ROWS})
    return {**TABLE_ROWS, **BUDGET_ROWS, **READING_ROWS, **INDEPENDENT_ROWS, **TABLE1_ROWS, **FILM2_TABLE1_ROWS,
            **CURVE_ROWS, **FILM2_ROWS, **extra}


def run_dir(level: str, row: str, seed: int) -> Path:
    """``runs/<level>/<row>`` for seed 0, ``runs/<level>/<row>_seed<k>`` otherwise."""
    return Path("runs", level, row if seed == 0 else f"{row}_seed{seed}")


def same_labels(name: str, one: Labeller, other: Labeller) -> Labeller:
    """``one``, where it makes the same labels as ``other`` (the same model, rescorer, pool and number); else a
    ValueError: two labellers would write ``labels/<name>``."""
    fields = ("model", "rescorer", "demos", "num_unpaired")
    if any(getattr(one, f) != getattr(other, f) for f in fields):
        raise ValueError(f"labels/{name} would be made by two labellers: {one} and {other}")
    return one


def seed_run(level: str, row: str, seed: int) -> Path:
    """The run folder of ``row``'s seed ``seed``: :func:`run_dir`, or for seed 0 of a row that shares it
    (``Row.seed0``) the other row's."""
    shared = level_rows(level)[row].seed0
    return run_dir(level, shared if seed == 0 and shared else row, seed)


def run_row(run: str) -> tuple[str, int]:
    """(row, seed) of a run folder's name: ``msvae_v_seed2`` -> ("msvae_v", 2), ``msvae`` -> ("msvae", 0)."""
    match = re.fullmatch(r"(.+)_seed(\d+)", run)
    return (match.group(1), int(match.group(2))) if match else (run, 0)


def row_label(level: str, row: str) -> str:
    """The label a results table gives ``row`` of ``level``'s study."""
    rows = level_rows(level)
    if row not in rows:
        raise KeyError(f"{level} has no row {row!r}")
    return rows[row].label


def demos_dir(level: str, cell: str = "demos") -> Path:
    """The folder a demonstrations cell writes: ``demos`` data/<level>_100k, ``demos_<name>`` data/<level>_<name>."""
    return Path("data", f"{level}_100k" if cell == "demos" else f"{level}_{cell.removeprefix('demos_')}")


def labels_dir(level: str, labeller: str) -> Path:
    return Path("data", "pseudo_labels", level, labeller)


def runs_read(level: str, command: tuple[str, ...]) -> tuple[str, ...]:
    """The cells that made the runs ``command`` names (``runs/<level>/<run>/...``), in order of mention."""
    names = [f"{row}/seed{seed}" for arg in command
             for row, seed in map(run_row, re.findall(rf"runs/{level}/([^/,=\s]+)", arg))]
    return tuple(dict.fromkeys(names))


def train_command(level: str, row: str, threads: int = 1) -> list[str]:
    """scripts/train.py's command for ``row`` of ``level``'s study: the method's config for the level, the row's own
    flags (``{level}`` filled in); the cells add the seed, the run folder and what a seed starts from."""
    spec = level_rows(level)[row]
    return ["python", "scripts/train.py", "--config", f"configs/{spec.config or row}.yaml", "--level", LEVELS[level],
            "--threads", str(threads), *(flag.replace("{level}", level) for flag in spec.overrides),
            *head_follower_flags(spec.overrides)]


def head_follower_flags(overrides: tuple[str, ...]) -> list[str]:
    """The study's rows were trained with :data:`~msvae_hf.models.configuration_msvae.HEAD_FOLLOWER` (the instruction at
    the action head, a_{t-1} read): its flags for each of its settings a row's ``overrides`` leave to the default."""
    return model_flags({name: value for name, value in HEAD_FOLLOWER.items() if f"--model.{name}" not in overrides})


def row_config(level: str, row: str) -> TrainConfig:
    """The TrainConfig of ``row``'s seed-0 run on ``level``, as scripts/train.py resolves its command."""
    config, overrides = parse_args(train_command(level, row)[2:])
    return load_config(str(REPO / config), {**overrides, "output_dir": str(run_dir(level, row, 0))})


def level_cells(level: str, seeds: tuple[int, ...] | None = None, threads: int = 1, num_proc: int = 2) -> list[Cell]:
    """Every cell of ``level``'s study, needs first. ``seeds``: None for each row's own seeds (the study as
    run), or the seeds to run every row on (seed 0 always: the others start from it); a comparison that reads
    a run not among them is left out."""
    rows = level_rows(level)
    demos = demos_dir(level)
    cells = [Cell(
        "demos",
        ("python", "scripts/make_demos.py", "--level", LEVELS[level], "--paired", "1000", "--unpaired",
         str(UNPAIRED_POOL), "--valid", "500", "--test", "500", "--seed", "0", "--num-proc", str(num_proc),
         "--out", str(demos)),
        demos / "README.md",  # the dataset card, written last
        question="demos",
    ), Cell(
        "demos_pairs_100k",
        ("python", "scripts/make_demos.py", "--level", LEVELS[level], "--paired", "100000", "--unpaired", "1000",
         "--valid", "500", "--test", "500", "--seed", "0", "--num-proc", str(num_proc), "--out",
         f"data/{level}_pairs_100k"),
        Path("data", f"{level}_pairs_100k", "README.md"), question="architectures",
    ), Cell(
        "floor", ("python", "experiments/collect_results.py", level, "--floor"),
        Path("results", level, "floor.json"), question="tables",
    )]
    if any(spec.demos == "demos_curve" for spec in rows.values()):
        cells.append(Cell(
            "demos_curve",
            ("python", "scripts/make_demos.py", "--level", LEVELS[level], "--paired", "100000", "--unpaired",
             str(UNPAIRED_POOL), "--valid", "500", "--test", "500", "--seed", "0", "--num-proc", str(num_proc), "--out",
             str(demos_dir(level, "demos_curve"))),
            demos_dir(level, "demos_curve") / "README.md", question="pairs_curve",
        ))
    for parts in sorted({spec.demos for spec in rows.values() if spec.demos.startswith("demos_parts_m")}):
        m = next(k for k in CURVE_PAIRS if curve_tag(k) == parts.removeprefix("demos_parts_"))
        cells.append(Cell(
            parts, ("python", "experiments/paired_parts.py", "--demos", str(demos_dir(level, "demos_curve")),
                    "--num-paired", str(m), "--out", str(demos_dir(level, parts))),
            demos_dir(level, parts) / "stats.json", ("demos_curve",), question="pairs_curve"))
    row_seeds = {row: tuple(k for k in (spec.seeds if seeds is None or not spec.seeds else sorted({0, *seeds}))
                            if k or not spec.seed0)  # a shared seed 0 (Row.seed0) is the other row's run
                 for row, spec in rows.items()}
    pretrainings = {}
    teachers: dict[str, Labeller] = {}  # the rows' seed-k teachers (Row.teacher), labelled where they are read
    kept: dict[str, tuple[str, float, str]] = {}  # labels kept from a teacher's (Row.keep): source, share, question
    for seed in sorted({s for run in row_seeds.values() for s in run}):  # seed-major: seed 0 of every row first
        for row, spec in rows.items():
            if seed not in row_seeds[row]:
                continue
            out = run_dir(level, row, seed)
            command = train_command(level, row, threads)
            needs = [spec.demos, *spec.needs]
            if spec.own_baselines:
                follower, speaker = spec.baselines
                needs += [f"{follower}/seed{seed}", f"{speaker}/seed{seed}"]
                command += ["--init-follower", str(run_dir(level, follower, seed) / "best"),
                            "--init-speaker", str(run_dir(level, speaker, seed) / "best")]
            if spec.teacher is not None:
                k = 0 if spec.one_teacher else seed
                teacher = seed_run(level, spec.teacher, k).name
                rescorer = None if spec.rescorer is None else f"{seed_run(level, spec.rescorer, k).name}/best"
                taught = teacher if rescorer is None else f"{teacher}_{spec.rescored}"
                labeller = Labeller(f"{teacher}/best", spec.question, demos=spec.demos, rescorer=rescorer)
                same_labels(taught, teachers.get(taught, labeller), labeller)
                teachers[taught] = labeller
                if spec.keep is not None:
                    kept[f"{taught}_top{round(100 * spec.keep)}"] = (taught, spec.keep, spec.question)
                    taught = f"{taught}_top{round(100 * spec.keep)}"
                needs.append(f"labels/{taught}")
                command += ["--pseudo-labels", str(labels_dir(level, taught))]
            if spec.init is not None:
                init = run_dir(level, spec.init, seed)
                pretrainings[init] = pretraining_cell(level, spec.init, seed, threads)
                needs.append(pretrainings[init].name)
                command += ["--init-from", str(init)]
            after = ()
            if spec.continues is not None:
                after = (f"{spec.continues}/seed{seed}",)
                command += ["--continue-from", str(run_dir(level, spec.continues, seed))]
            if seed:
                command += ["--seed", str(seed)]
            command += ["--output-dir", str(out)]
            cells.append(Cell(f"{row}/seed{seed}", tuple(command), out / "results.json", tuple(needs), out,
                              spec.question, after=after))
    cells += pretrainings.values()
    labellers = {**TABLE_LABELLERS, **(BOSSLOCAL_LABELLERS if level == "bosslocal" else GOTOSEQLOCAL_LABELLERS)}
    for name, labeller in teachers.items():
        labellers[name] = same_labels(name, labellers.get(name, labeller), labeller)
    for name, labeller in labellers.items():  # needs_first moves each before its first student
        out = labels_dir(level, name)
        command = ["python", "scripts/label_unpaired.py", "--speaker", f"runs/{level}/{labeller.model}",
                   "--demos", str(demos_dir(level, labeller.demos)), "--out", str(out), "--threads", str(threads)]
        if labeller.num_unpaired is not None:
            command += ["--num-unpaired", str(labeller.num_unpaired)]
        if labeller.rescorer is not None:
            # the speaker's candidates kept: the next round's labeller, the same speaker's, runs only its follower
            command += ["--rescore-with", f"runs/{level}/{labeller.rescorer}", "--candidates-cache",
                        f"data/candidates/{level}"]
        cells.append(Cell(f"labels/{name}", tuple(command), out / "pseudo_labels.json",
                          (*runs_read(level, tuple(command)),
                           *(() if labeller.demos == "demos" else (labeller.demos,))),  # demos: the runs' too
                          question=labeller.question))
    for name, (source, share, question) in kept.items():
        out = labels_dir(level, name)
        command = ("python", "scripts/keep_confident.py", "--labels", str(labels_dir(level, source)), "--fraction",
                   f"{share:g}", "--out", str(out), "--threads", str(threads))
        cells.append(Cell(f"labels/{name}", command, out / "pseudo_labels.json", (f"labels/{source}",),
                          question=question))
    if level == "bosslocal":
        cells.append(Cell(
            "demos_1m",
            ("python", "scripts/make_demos.py", "--level", "BossLocal", "--paired", "1000", "--unpaired", "1000000",
             "--valid", "500", "--test", "500", "--seed", "0", "--num-proc", str(num_proc), "--out",
             "data/bosslocal_1m"),
            Path("data", "bosslocal_1m", "README.md"), question="budget",
        ))
        cells += bosslocal_comparisons(cells, threads)
    else:
        cells += gotoseqlocal_comparisons(cells)
    return needs_first(cells)


def pretraining_cell(level: str, name: str, seed: int, threads: int) -> Cell:
    """``runs/<level>/speaker_init_front_<split>[_seed<k>]``: a speaker's encoders pre-trained on the
    front-cell task (msvae_hf.extensions.pretraining) over the ``<split>`` trajectories, for train.py's --init-from."""
    split = name.removeprefix("speaker_init_front_")
    out = run_dir(level, name, seed)
    command = ("python", "experiments/pretrain_speaker.py", "--demos", str(demos_dir(level)), "--split", split,
               "--updates", "600", "--seed", str(seed), "--threads", str(threads),
               "--config", "configs/speaker.yaml", "--out", str(out))
    return Cell(f"{name}/seed{seed}", command, out / "pretraining.json", ("demos",), question="pretraining")


def seed_models(flag: str, label: str, row: str, n: int, checkpoint: str = "best") -> list[str]:
    """``flag "LABEL[, seed k]=runs/bosslocal/<row>[_seed<k>]/<checkpoint>"`` for seeds 0 .. n-1."""
    args = []
    for k in range(n):
        args += [flag, f"{label}{f', seed {k}' if k else ''}={run_dir('bosslocal', row, k)}/{checkpoint}"]
    return args


def bosslocal_comparisons(cells: list[Cell], threads: int) -> list[Cell]:
    """BossLocal's comparisons of finished runs (speakers by BLEU, probes, rescored speaking) and its tables;
    each needs the cells of the runs it reads, and is left out when one of them is not in ``cells``."""
    r = "runs/bosslocal"
    demos = ("--demos", str(demos_dir("bosslocal")))
    speakers = [
        ("MS-VAE paired only", "msvae_paired/best_speaker"),
        ("MS-VAE paired only, seed 1", "msvae_paired_seed1/best_speaker"),
        ("speaker (baseline)", "speaker/best"),
        ("MS-VAE full", "msvae/best"),
        ("MS-VAE full, seed 1", "msvae_seed1/best_speaker"),
        ("MS-VAE gamma = 1", "msvae_gamma1/best_speaker"),
        ("MS-VAE gamma = 1, seed 1", "msvae_gamma1_seed1/best_speaker"),
        ("MS-VAE alpha = 1000", "msvae_alpha1000/best"),
        ("MS-VAE paired only, seed 2", "msvae_paired_seed2/best_speaker"),
        ("MS-VAE full, seed 2", "msvae_seed2/best_speaker"),
        ("MS-VAE gamma = 1, seed 2", "msvae_gamma1_seed2/best_speaker"),
        ("MS-VAE paired only, follower-only init", "msvae_paired_finit/best_speaker"),
        ("MS-VAE full, follower-only init", "msvae_finit/best_speaker"),
        ("MS-VAE paired only, then paired", "msvae_paired_then_paired/best_speaker"),
        ("MS-VAE full, then paired", "msvae_then_paired/best_speaker"),
        ("MS-VAE trajectory beta = 1", "msvae_trajbeta1/best_speaker"),
        ("MS-VAE gamma = 1, alpha = 10", "msvae_gamma1_alpha10/best_speaker"),
        ("MS-VAE gamma = 1, alpha = 10, seed 1", "msvae_gamma1_alpha10_seed1/best_speaker"),
        ("MS-VAE gamma = 1, alpha = 10, seed 2", "msvae_gamma1_alpha10_seed2/best_speaker"),
        ("MS-VAE gamma = 1, alpha = 100", "msvae_gamma1_alpha100/best_speaker"),
        ("MS-VAE full, V trains q(z|a,o) only", "msvae_fixeddec/best_speaker"),
        ("MS-VAE gamma = 1, V trains q(z|a,o) only", "msvae_gamma1_fixeddec/best_speaker"),
    ]
    probed = [("speaker (baseline)", "speaker/best"), ("MS-VAE paired only", "msvae_paired/best_speaker"),
              ("MS-VAE full (gamma 100)", "msvae/best"), ("MS-VAE gamma 1", "msvae_gamma1/best_speaker"),
              ("MS-VAE gamma 1, alpha 10", "msvae_gamma1_alpha10/best_speaker")]
    # Follower-rescored speaking: each speaker with its own run's follower, NAME#k marking seed k.
    systems = [("MS-VAE paired only#{k}", "msvae_paired", "msvae_paired"),
               ("MS-VAE full, gamma 1, alpha 10#{k}", "msvae_gamma1_alpha10", "msvae_gamma1_alpha10"),
               ("MS-VAE full, gamma 1#{k}", "msvae_gamma1", "msvae_gamma1"),
               ("MS-VAE full, App. D#{k}", "msvae", "msvae")]
    pragmatic = []
    for name, speaker, follower in systems:
        for k in range(3):
            checkpoint = "best" if (speaker, k) == ("msvae", 0) else "best_speaker"  # seed 0 has no best_speaker/
            pragmatic += ["--system", f"{name.format(k=k)}={run_dir('bosslocal', speaker, k)}/{checkpoint},"
                                      f"{run_dir('bosslocal', follower, k)}/best"]
    pragmatic += ["--system", f"baselines: speaker, follower={r}/speaker/best,{r}/follower/best"]
    for k in range(3):
        pragmatic += ["--system", f"paired-only speaker, full follower#{k}="
                                  f"{run_dir('bosslocal', 'msvae_paired', k)}/best_speaker,"
                                  f"{run_dir('bosslocal', 'msvae_gamma1_alpha10', k)}/best"]
    front = (seed_models("--speaker", "speaker, paired only", "speaker_paired", 3)
             + seed_models("--speaker", "paired-only speaker, self-trained", "speaker_paired_selftrain", 3)
             + seed_models("--speaker", "front-cell on paired trajectories", "speaker_front_paired", 5)
             + seed_models("--speaker", "front-cell on D_u", "speaker_front_unpaired", 5)
             + seed_models("--speaker", "front-cell on D_u, self-trained", "speaker_front_selftrain", 5)
             + seed_models("--speaker", "front-cell on D_u, second round", "speaker_front_selftrain2", 2))
    curves = ("follower", "speaker", "msvae_paired", "msvae", "msvae_gamma1", "speaker_follower",
              "msvae_paired_speaker_follower", "msvae_speaker_follower")
    made = [
        ("probes", "speaker", "results/bosslocal/speaker_probes.json",
         ("experiments/probe_speaker.py", *demos,
          *[a for label, run in probed for a in ("--model", f"{label}={r}/{run}")])),
        ("compare_speakers/bosslocal_speakers", "speaker", "results/bosslocal/speakers_msvae_test.json",
         ("experiments/compare_speakers.py", *demos,
          *[a for label, run in speakers for a in ("--speaker", f"{label}={r}/{run}")])),
        ("pragmatic_speakers", "bleu", "results/bosslocal/pragmatic_rescoring_k8.json",
         ("experiments/pragmatic_speakers.py", *demos, "--threads", str(threads), "--candidates", "8", *pragmatic)),
        ("compare_speakers/bosslocal_speakers_front", "pretraining", "results/bosslocal/speakers_pretrained_test.json",
         ("experiments/compare_speakers.py", *demos, *front)),
        ("compare_speakers/bosslocal_speakers_front_train_pairs", "pretraining",
         "results/bosslocal/speakers_pretrained_train_pairs.json",
         ("experiments/compare_speakers.py", *demos, "--split", "paired",
          "--speaker", f"speaker, paired only={r}/speaker_paired/best",
          "--speaker", f"front-cell on D_u={r}/speaker_front_unpaired/best",
          "--speaker", f"front-cell on D_u, self-trained={r}/speaker_front_selftrain/best")),
        ("compare_speakers/bosslocal_msvae_front", "pretraining", "results/bosslocal/speakers_msvae_front_test.json",
         ("experiments/compare_speakers.py", *demos, "--speaker", f"front-cell on D_u={r}/speaker_front_unpaired/best",
          *seed_models("--speaker", "MS-VAE paired only, front-cell speaker", "msvae_front_paired", 3,
                      "best_speaker"),
          *seed_models("--speaker", "MS-VAE gamma = 1, front-cell speaker", "msvae_front_gamma1", 3,
                      "best_speaker"))),
        *((f"compare_speakers/bosslocal_msvae_front_v_seed{k}", "pretraining",
           f"results/bosslocal/speakers_msvae_front_v_seed{k}_test.json",
           ("experiments/compare_speakers.py", *demos,
            *seed_models("--speaker", "MS-VAE paired only, front-cell speaker", "msvae_front_paired", 3,
                         "best_speaker")[2 * k:2 * k + 2],
            *seed_models("--speaker", "MS-VAE gamma = 1, front-cell speaker", "msvae_front_gamma1", 3,
                         "best_speaker")[2 * k:2 * k + 2]))
          for k in range(3)),
        ("plot_curves", "tables", "results/bosslocal/validation_curves.png",
         ("experiments/plot_curves.py", *[f"{r}/{run}" for run in curves],
          "--metric", "valid/success_rate", "--metric", "valid/bleu")),
    ]
    return comparison_cells("bosslocal", made, cells)


def gotoseqlocal_comparisons(cells: list[Cell]) -> list[Cell]:
    """GoToSeqLocal's teachers of Table 3 side by side on the test pairs (BLEU, action and object sequences
    right): the supervised speaker, the front-cell pre-trained one before and after self-training (the teacher
    of ``speaker_follower_front``) and MS-VAE full's speaker (the seed-0 teacher of ``msvae_speaker_follower_own``)."""
    r = "runs/gotoseqlocal"
    made = [("compare_speakers/gotoseqlocal_speakers_front", "speaker_follower",
             "results/gotoseqlocal/speakers_front_test.json",
             ("experiments/compare_speakers.py", "--demos", str(demos_dir("gotoseqlocal")),
              "--speaker", f"speaker (baseline)={r}/speaker/best",
              "--speaker", f"front-cell on D_u={r}/speaker_front_unpaired/best",
              "--speaker", f"front-cell on D_u, self-trained={r}/speaker_front_selftrain/best",
              "--speaker", f"MS-VAE full, own baselines={r}/msvae_own/best_speaker"))]
    return comparison_cells("gotoseqlocal", made, cells)


def comparison_cells(level: str, made: list[tuple[str, str, str, tuple[str, ...]]], cells: list[Cell]) -> list[Cell]:
    """A cell for each ``(name, question, output, script and arguments)`` in ``made``, writing ``--out output``;
    one that reads a run whose cell is not in ``cells`` is left out."""
    known = {c.name for c in cells}
    out = []
    for name, question, output, command in made:
        command = ("python", *command, "--out", output)
        needs = runs_read(level, command)
        if all(need in known for need in needs):
            out.append(Cell(name, command, Path(output), needs, question=question))
    return out


def needs_first(cells: list[Cell]) -> list[Cell]:
    """``cells`` in their order, except that each comes after the cells it needs; a cycle is an error."""
    by_name = {c.name: c for c in cells}
    ordered: dict[str, Cell] = {}

    def visit(cell: Cell, path: tuple[str, ...]) -> None:
        if cell.name in ordered:
            return
        if cell.name in path:
            raise ValueError(f"cells need each other: {' -> '.join((*path, cell.name))}")
        for need in cell.needs:
            if need not in by_name:
                raise ValueError(f"{cell.name} needs {need!r}, which is not a cell")
            visit(by_name[need], (*path, cell.name))
        ordered[cell.name] = cell

    for cell in cells:
        visit(cell, ())
    return list(ordered.values())
