"""Model cards and run cards: what a checkpoint or a finished run shows on the Hub.

A model card is the Jinja template `model_cards/model_card.md` rendered with
`huggingface_hub.ModelCard.from_template` (:func:`render_model_card`); a run's card (:func:`render_run_card`) adds
its test numbers, how they were measured and the command that trained it, with local absolute paths shown
relative to the folder the run was trained from. The dataset card (`model_cards/dataset_card.md`) is rendered where
the demonstrations are written, `msvae_hf.data.demos.render_dataset_card`. Cards are never validated here
(`ModelCard.validate` calls the Hub).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.utils import validate_repo_id

from ..envs.seeds import TEST_SEED_START, VALID_SEED_START
from ..models.configuration_msvae import FOLLOWER_FIELDS
from ..training.train_config import with_follower
from ..utils.run_folder import read_json, selections
from .card_templates import template_path
from .repo_ids import is_hub_repo_id

#: model_kind -> (card title, what the checkpoint is).
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "msvae": ("MS-VAE", "The multimodal sequential VAE, holding both its follower and its speaker."),
    "follower": ("Follower", "A follower: a BabyAI instruction and egocentric observations -> actions."),
    "speaker": ("Speaker", "A speaker: a BabyAI trajectory (observations and actions) -> an instruction."),
    "speaker-follower": (
        "Speaker-follower",
        "A follower trained on paired demonstrations plus unpaired trajectories labelled by a speaker.",
    ),
}


LICENSE = "apache-2.0"
"""The package's license (LICENSE), which its cards carry."""

#: What each kind of checkpoint does, as the Hub's pipeline tag.
PIPELINE_TAGS = {"msvae": "reinforcement-learning", "follower": "reinforcement-learning",
                 "speaker-follower": "reinforcement-learning", "speaker": "text-generation"}


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_model_card(
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    training_command: str,
    dataset: str,
    model_kind: str,
    repo_id: str = "<repo_id>",
    tags: Sequence[str] = (),
    eval_results: Sequence[EvalResult] = (),
    base_models: Sequence[str] = (),
    hub_dataset: bool | None = None,
) -> ModelCard:
    """The model card of an MS-VAE, follower or speaker checkpoint (`model_kind`, see `MODEL_KINDS`).

    `metrics` fill the card's results table; `eval_results` (e.g. `run_eval_results`) go into its metadata as
    the Hub's `model-index`, under the model name `repo_id` without its namespace. The metadata also carries the
    package's license, the pipeline tag of what the checkpoint does (a follower acts: reinforcement-learning; a
    speaker writes: text-generation), `datasets` where `dataset` is a Hub id and `base_model`: the Hub ids of the
    checkpoints it was initialised from (MS-VAE: its baselines, App. D). ``hub_dataset`` says whether `dataset`
    names a Hub dataset; None reads it as ``load_demos`` would from here (:func:`~msvae_hf.hub.repo_ids.is_hub_repo_id`:
    a local folder first).
    """
    if model_kind not in MODEL_KINDS:
        raise ValueError(f"model_kind must be one of {sorted(MODEL_KINDS)}, got {model_kind!r}")
    for base in base_models:
        validate_repo_id(base)  # one line naming an id that is not one, before any card is made
    card_data = ModelCardData(
        library_name="transformers",
        license=LICENSE,
        pipeline_tag=PIPELINE_TAGS[model_kind],
        base_model=list(base_models) or None,
        tags=list(dict.fromkeys(["msvae", "babyai", "minigrid", "instruction-following", model_kind, *tags])),
        datasets=[dataset] if (is_hub_repo_id(dataset) if hub_dataset is None else hub_dataset) else None,
        metrics=[name for name in ("success_rate", "bleu") if name in metrics] or None,
        model_name=repo_id.split("/")[-1] if eval_results else None,
        eval_results=list(eval_results) or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path("model_card.md")),
        title=f"{MODEL_KINDS[model_kind][0]} for BabyAI (msvae-hf)",
        model_description=MODEL_KINDS[model_kind][1],
        repo_id=repo_id,
        dataset_id=dataset,
        training_command=training_command,
        config_json=json.dumps(dict(config), indent=2, sort_keys=True, default=str),
        results={name: _format(value) for name, value in metrics.items()},
    )




def _training_roots(run_dir: Path, train_config: Mapping[str, Any]) -> list[PurePath]:
    """The folders a run's absolute paths are shown relative to, first match first: the folder it was trained
    from (``output_dir`` less the run's place in its repository), then the repository that holds the run here
    (nearest parent with pyproject.toml or .git; else the run's parent folder)."""
    run = Path(os.path.abspath(run_dir))
    repo = next((p for p in run.parents if (p / "pyproject.toml").is_file() or (p / ".git").exists()), run.parent)
    place = run.relative_to(repo).parts
    out = PurePath(str(train_config.get("output_dir") or "."))
    roots: list[PurePath] = []
    if not out.is_absolute() and out.parts and run.parts[-len(out.parts):] == out.parts:
        roots.append(PurePath(*run.parts[:-len(out.parts)]))  # trained from the folder that holds it here
    elif out.is_absolute() and out.parts[-len(place):] == place:
        roots.append(PurePath(*out.parts[:-len(place)]))  # trained (maybe elsewhere) from output_dir's repository
    return [*roots, repo]


def _relative_path(path: str, roots: Sequence[PurePath]) -> str:
    """``path`` relative to the first root that holds it, else ``../``-relative to the first one; a path that
    shares nothing but the filesystem root with it becomes ``<local>/NAME``. A relative path is kept."""
    p = PurePath(path)
    if not p.is_absolute():
        return path
    for root in roots:
        if p == root or root in p.parents:
            return p.relative_to(root).as_posix()
    if os.path.commonpath([p, roots[0]]) != p.anchor:
        return PurePath(os.path.relpath(p, roots[0])).as_posix()
    return f"<local>/{p.name}"


def _relative_values(value: Any, roots: Sequence[PurePath]) -> Any:
    """``value`` (JSON) with every string that is an absolute path made relative (``_relative_path``)."""
    if isinstance(value, Mapping):
        return {key: _relative_values(item, roots) for key, item in value.items()}
    if isinstance(value, list):
        return [_relative_values(item, roots) for item in value]
    return _relative_path(value, roots) if isinstance(value, str) else value


def _relative_command(text: str, roots: Sequence[PurePath]) -> str:
    """Command line(s) with every absolute path argument (also ``--flag=PATH``) made relative; a line that
    shlex cannot split has each whitespace-separated absolute path made relative instead."""
    lines = []
    for line in text.splitlines():
        try:
            tokens = shlex.split(line)
        except ValueError:
            lines.append(" ".join(_relative_path(word, roots) for word in line.split(" ")))
            continue
        relative = []
        for token in tokens:
            key, eq, value = token.partition("=")
            relative.append(f"{key}={_relative_path(value, roots)}" if eq and not PurePath(key).is_absolute()
                            else _relative_path(token, roots))
        lines.append(line if relative == tokens else shlex.join(relative))
    return "\n".join(lines)


def _shown_config(run_dir: Path, train_config: Mapping[str, Any], dataset: str | None) -> dict[str, Any]:
    """``train_config`` as pushed: its follower named as the weights hold it (:func:`_trained_follower`), so that
    ``--config train_config.json`` builds that follower again, absolute paths relative (``_training_roots``),
    ``demos`` the Hub ``dataset`` id when given."""
    shown = _relative_values(_trained_follower(run_dir, train_config), _training_roots(run_dir, train_config))
    return {**shown, "demos": dataset} if dataset else shown


def _trained_follower(run_dir: Path, train_config: Mapping[str, Any]) -> dict[str, Any]:
    """``train_config`` with the follower fields of the weights it trained (``best/config.json``, read as
    :meth:`~msvae_hf.models.configuration_msvae.ModulesConfig.from_dict` reads it) where its file names none; a
    speaker's
    follower fields are no part of its model and stay as written."""
    path = run_dir / "best" / "config.json"
    if train_config.get("model_type") == "speaker" or not path.is_file():
        return dict(train_config)
    saved = json.loads(path.read_text(encoding="utf-8"))
    # a field config.json lacks was saved before it was a choice: FOLLOWER_FIELDS holds its value then
    held = {name: saved.get(name, default) for name, default in FOLLOWER_FIELDS.items()}
    return with_follower({**train_config, "model": {**held, **(train_config.get("model") or {})}}, saved=True)


def run_training_command(run_dir: str | Path) -> str:
    """The command line(s) that trained the run, as pushed (absolute paths made relative to the folder it was
    trained from): ``command.txt`` (one line per start or resume), or, for a run without it, the
    equivalent ``--config train_config.json`` call (that file is pushed too)."""
    run_dir = Path(run_dir)
    path = run_dir / "command.txt"
    if path.is_file() and path.read_text(encoding="utf-8").strip():
        config = json.loads((run_dir / "train_config.json").read_text(encoding="utf-8"))
        return _relative_command(path.read_text(encoding="utf-8").strip(), _training_roots(run_dir, config))
    return "# command.txt absent: the run's exact settings are in train_config.json (pushed with the model)\n" \
        "python scripts/train.py --config train_config.json"


#: Each validation metric that can choose a checkpoint, in words.
METRIC_WORDS = {"valid/bleu": "validation BLEU", "valid/success_rate": "validation SR",
                "valid/reading": "validation SR by reading (SR minus SR told another episode's mission)",
                "valid/demonstrated": "the share of validation trajectories that demonstrate their label"}


def _chosen_by(train_config: Mapping[str, Any], folder: str = "best") -> str:
    """The validation metric that chose the run's ``folder`` (``best``, MS-VAE's ``best_speaker``, or the folder of
    ``also_select``; :func:`~msvae_hf.utils.run_folder.selections`), in words."""
    chosen = selections(str(train_config.get("model_type")), str(train_config.get("speaker_metric", "bleu")),
                        str(train_config.get("follower_metric", "sr")), train_config.get("also_select"))
    return METRIC_WORDS[chosen[folder]]


def _test_sr_protocol(results: Mapping[str, Any], train_config: Mapping[str, Any]) -> str:
    """How the test success rate of ``results.json`` was measured, in words."""
    episodes = results["test"]["episodes"]
    return (f"test success rate, {episodes} greedy episodes of {results.get('level')}, seeds {TEST_SEED_START}.."
            f"{TEST_SEED_START + episodes - 1}, best checkpoint by {_chosen_by(train_config)}")


def _valid_sr_protocol(train_config: Mapping[str, Any]) -> str:
    """How the paper-protocol validation success rate of ``results.json`` was measured (App. D), in words."""
    return (f"validation success rate, max of the 5-evaluation moving average (App. D), "
            f"{train_config.get('eval_episodes')} greedy episodes per evaluation, seeds from {VALID_SEED_START}")


def _test_bleu_protocol(train_config: Mapping[str, Any]) -> str:
    """How the test BLEU of ``results.json`` was measured, in words: the first ``bleu_examples`` test pairs."""
    pairs = f"up to {train_config.get('bleu_examples')}"
    stats = _demo_stats(str(train_config.get("demos")))
    if stats and "test" in stats.get("splits", {}) and train_config.get("bleu_examples") is not None:
        pairs = str(min(int(train_config["bleu_examples"]), int(stats["splits"]["test"]["episodes"])))
    return (f"test BLEU-4 (sacrebleu corpus BLEU), greedy decoding, {pairs} pairs of the test split, "
            f"best checkpoint by {_chosen_by(train_config)}")


#: A follower's test numbers beside its SR that say whether it reads (msvae_hf.evaluation.metrics.follower_summary),
#: with what
#: each is; they go into the card's table and its model-index.
READING_METRICS = {
    "success_rate_other_mission": "success rate told another episode's mission, judged by its own",
    "reading": "success rate minus success rate told another episode's mission: what the instruction adds",
    "success_rate_same_room": "success rate told, and judged by, another mission of the same room",
    "spl": "success weighted by path length against the bot",
}


def run_metrics(results: Mapping[str, Any], train_config: Mapping[str, Any]) -> dict[str, Any]:
    """The card's results table from a run's ``results.json``: test SR with its protocol, the paper-protocol
    smoothed max of validation SR, test BLEU."""
    metrics: dict[str, Any] = {}
    test = results.get("test")
    if test:
        metrics["success_rate"] = test["success_rate"]
        metrics["success_rate protocol"] = _test_sr_protocol(results, train_config)
        for key in (*READING_METRICS, "mean_steps", "bot_mean_steps", "mean_reward"):
            if key in test:
                metrics[f"test {key}"] = test[key]
    if results.get("paper_protocol_valid_sr") is not None:
        metrics["paper-protocol valid SR (max of 5-eval moving average)"] = results["paper_protocol_valid_sr"]
    if results.get("test_bleu") is not None:
        # the card describes the pushed weights (best/); MS-VAE also keeps best_speaker/, its speaker's choice
        metrics["bleu"] = results.get("test_bleu_of_best", results["test_bleu"])
        metrics["bleu protocol"] = _test_bleu_protocol(train_config)
        if "test_bleu_of_best" in results:
            chosen = _chosen_by(train_config, "best_speaker")
            metrics[f"bleu of the run's best_speaker/ checkpoint (best by {chosen})"] = results["test_bleu"]
    if results.get("best"):
        metrics["best validation step"] = results["best"]["step"]
    if also := results.get("also_selected"):  # the same training's other choice, kept beside best/ (not pushed)
        about = (f"of the run's {also['folder']}/ checkpoint (best by {_chosen_by(train_config, also['folder'])}, "
                 f"update {also['best']['step']})")
        for key in ("success_rate", "reading"):
            if key in also["test"]:
                metrics[f"test {key} {about}"] = also["test"][key]
    metrics["updates"] = results.get("updates")
    return metrics


def run_eval_results(results: Mapping[str, Any], train_config: Mapping[str, Any],
                     hub_dataset: str | None = None) -> list[EvalResult]:
    """The pushed weights' (``best/``) metrics as model-index entries, so the Hub shows them with the model.

    A follower's (and MS-VAE's) success rate on rollouts of the level, test and App. D's validation protocol;
    a speaker's (and MS-VAE's) BLEU on the test split of the demonstrations: the Hub dataset ``hub_dataset``, or
    (None: a local folder, which names no dataset on the Hub) the level's. Each ``metric_name`` states its
    protocol.
    """
    level = str(results.get("level"))
    entries = []
    rollouts = {"task_type": "reinforcement-learning", "task_name": "Instruction following",
                "dataset_type": level, "dataset_name": level, "metric_type": "success_rate"}
    if results.get("test"):
        entries.append(EvalResult(**rollouts, dataset_split="test", metric_value=results["test"]["success_rate"],
                                  metric_name=_test_sr_protocol(results, train_config)))
        for key, what in READING_METRICS.items():  # what the follower does with its words, on the same episodes
            if key in results["test"]:
                entries.append(EvalResult(**{**rollouts, "metric_type": key}, dataset_split="test",
                                          metric_value=results["test"][key],
                                          metric_name=f"{what}; {_test_sr_protocol(results, train_config)}"))
    if results.get("paper_protocol_valid_sr") is not None:
        entries.append(EvalResult(**rollouts, dataset_split="validation",
                                  metric_value=results["paper_protocol_valid_sr"],
                                  metric_name=_valid_sr_protocol(train_config)))
    if results.get("test_bleu") is not None:
        entries.append(EvalResult(
            task_type="text-generation", task_name="Instruction generation (speaker)",
            dataset_type=hub_dataset or level,
            dataset_name=f"{level} bot demonstrations", dataset_split="test", metric_type="bleu",
            metric_value=results.get("test_bleu_of_best", results["test_bleu"]),
            metric_name=_test_bleu_protocol(train_config),
        ))
    return entries


def _demo_stats(demos: str) -> dict[str, Any] | None:
    """The ``stats.json`` that scripts/make_demos.py writes beside a demonstration set, if it is there."""
    path = Path(demos) / "stats.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _demos_section(demos: str, shown: str, roots: Sequence[PurePath]) -> str:
    """A short description of the run's demonstrations (``stats.json`` of scripts/make_demos.py beside the local
    ``demos``, if present), named ``shown``, with the absolute paths of their command made relative."""
    lines = ["", "## Demonstrations", "", f"Trained on `{shown}` (see its README.md dataset card)."]
    stats = _demo_stats(demos)
    if stats:
        lines += ["", f"Level {stats.get('level')}, dataset seed {stats.get('dataset_seed')}:", "",
                  "| split | episodes | mean steps | mean words |", "| --- | --- | --- | --- |"]
        for split, st in stats.get("splits", {}).items():
            lines.append(f"| {split} | {st.get('episodes')} | {_format(st.get('mean_steps', '-'))} | "
                         f"{_format(st.get('mean_words', '-'))} |")
        if stats.get("command"):
            lines += ["", "Generated with:", "", "```bash", _relative_command(str(stats["command"]), roots), "```"]
    return "\n".join(lines) + "\n"


def run_kind(train_config: Mapping[str, Any]) -> str:
    """The card's model kind of a run (a follower trained on pseudo-labels is a speaker-follower)."""
    kind = str(train_config.get("model_type"))
    return "speaker-follower" if kind == "follower" and train_config.get("pseudo_labels") else kind


def render_run_card(run_dir: str | Path, repo_id: str = "<repo_id>", dataset: str | None = None,
                    base_models: Sequence[str] = ()) -> ModelCard:
    """The model card of a finished run: metrics from results.json (as a table and as model-index metadata),
    config from train_config.json, the training command (command.txt), and the demonstrations (``dataset``
    names a Hub dataset id instead of the demos path). No local absolute path is shown: each is made relative
    to the folder the run was trained from (e.g. ``data/bosslocal_100k``). ``base_models``: the Hub ids of the
    pushed checkpoints the run was initialised from (its baselines), the card's ``base_model``."""
    run_dir = Path(run_dir)
    results = read_json(run_dir / "results.json", fix="train the run to its end again, or restore the file")
    config = read_json(run_dir / "train_config.json", fix="restore the file")
    kind = run_kind(config)
    model_config = json.loads((run_dir / "best" / "config.json").read_text(encoding="utf-8"))
    shown = _shown_config(run_dir, config, dataset)
    demos = str(config.get("demos"))
    hub = dataset or (demos if _trained_on_hub(demos, run_dir, config, results) else None)
    card = render_model_card(
        {"train_config": shown, "model_config": model_config}, run_metrics(results, config),
        run_training_command(run_dir), str(shown.get("demos")), kind, repo_id=repo_id,
        eval_results=run_eval_results(results, config, hub), base_models=base_models, hub_dataset=hub is not None,
    )
    card.text += _demos_section(str(config.get("demos")), str(shown.get("demos")), _training_roots(run_dir, config))
    return card


def _trained_on_hub(demos: str, run_dir: Path, train_config: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    """Whether a run's ``demos`` named a Hub dataset: as its ``results.json`` says (``demos_from_hub``, decided by
    the trainer where it loaded them), else a Hub id from every folder it may have been trained from
    (``_training_roots``; the loader's rule, :func:`~msvae_hf.hub.repo_ids.is_hub_repo_id`)."""
    if "demos_from_hub" in results:
        return bool(results["demos_from_hub"])
    return all(is_hub_repo_id(demos, root) for root in _training_roots(run_dir, train_config))


def stage_shown_extras(run_dir: Path, stage: Path, dataset: str | None) -> None:
    """Rewrite the staged copies of a run's extra files (``push.RUN_EXTRAS``) without local absolute paths (the
    run's own files stay)."""
    config = json.loads((run_dir / "train_config.json").read_text(encoding="utf-8"))
    roots = _training_roots(run_dir, config)
    (stage / "train_config.json").write_text(json.dumps(_shown_config(run_dir, config, dataset), indent=2),
                                             encoding="utf-8")
    results = json.loads((stage / "results.json").read_text(encoding="utf-8"))
    shown = _relative_values(results, roots)
    if json.dumps(shown) != json.dumps(results):  # rewritten only where it names a local absolute path
        (stage / "results.json").write_text(json.dumps(shown, indent=2), encoding="utf-8")
    if (stage / "command.txt").is_file():
        text = (stage / "command.txt").read_text(encoding="utf-8")
        (stage / "command.txt").write_text(_relative_command(text, roots) + "\n" * text.endswith("\n"),
                                           encoding="utf-8")


__all__ = [
    "MODEL_KINDS", "render_model_card", "render_run_card", "run_kind", "run_metrics", "run_eval_results",
    "run_training_command", "stage_shown_extras",
]
