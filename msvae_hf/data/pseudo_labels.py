"""Speaker-follower data augmentation (Sec. 2.3; Table 3): a speaker labels the unpaired trajectories.

The result is the ``unpaired`` split plus an ``instruction`` column written by the speaker, saved with
``save_to_disk`` beside a ``pseudo_labels.json`` that records which speaker made it, how, the command, how long the
labelling took and on what (commit, machine), and a ``checksums.json`` (the demos' format: the sha256 of each arrow
file). A follower trains on paired + pseudo-paired data with ``scripts/train.py --pseudo-labels DIR``, which reads it
with :func:`load_pseudo_labels` (a run's results.json keeps the labels' record).

The record also scores the labels against the truth (:func:`label_accuracy`): every unpaired trajectory keeps its
seed, from which its level regenerates the mission the bot carried out. Only this scoring reads those missions;
nothing that trains does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, DatasetDict

from ..envs.missions import (
    REPLAY_FIELDS,
    regenerate_missions,
    replay_each,
    rows_by_goal_count,
    score_labels,
)
from ..evaluation.evaluate import describe_dataset
from ..extensions.pragmatics import (
    NUM_CANDIDATES,
    Spoken,
    check_lam,
    check_same_vocabulary,
    label_scores,
    lam_on_pairs,
    rescore_candidates,
    speak_candidates,
)
from ..models.loading import vocab_digest
from ..utils.run_folder import read_json, write_json, writing
from ..utils.runtime import check_output_folder, code_digest, machine, provenance
from .collator import with_pseudo_labels
from .demos import (
    CHECKSUMS_FILE,
    SKIP_CHECKSUMS_ENV,
    check_demo_columns,
    checksums_skipped,
    load_checked,
    load_demos,
    require_cell_codes,
    write_checksums,
)

#: What label_unpaired writes beside the labelled rows: the speaker, the decoding, the command, the seconds from
#: reading the demonstrations to the labels written (the speaker's loading not counted) with the commit and machine
#: (:func:`~msvae_hf.utils.runtime.provenance`), the sha256 of each arrow file (the labels it describes), the labels'
#: accuracy against the true missions (:func:`label_accuracy`) and, for a pragmatic speaker's labels, ``rescoring``
#: (the rescorer, the number of candidates, lam and how it was chosen: :func:`rescored_labels`).
RECORD_FILE = "pseudo_labels.json"

logger = logging.getLogger(__name__)


def label_unpaired(
    speaker: Any,
    demos: str | os.PathLike,
    out: str | os.PathLike,
    batch_size: int = 256,
    do_sample: bool = False,
    num_unpaired: int | None = None,
    overwrite: bool = False,
    speaker_path: str | None = None,
    progress: bool = True,
    command: str | None = None,
    rescorer: Any = None,
    num_candidates: int = NUM_CANDIDATES,
    lam: float | None = None,
    rescorer_path: str | None = None,
    candidates_cache: str | os.PathLike | None = None,
) -> Any:
    """Write one speaker instruction per unpaired trajectory (greedy, or sampled with ``do_sample``); ``command``,
    the command line, is recorded so that a damaged set can be written again.

    With a ``rescorer`` (a follower or MS-VAE) the speaker proposes ``num_candidates`` instructions a trajectory
    (beam search, or samples) and each trajectory gets the one maximising lam * log p_S(y|a,o) + (1 - lam) *
    log p_F(a|y,o) (:mod:`~msvae_hf.extensions.pragmatics`); ``lam`` None chooses it on the ``valid`` pairs, as the
    lam whose choices are most often the pairs' own instructions. ``batch_size`` counts candidates then. With a
    ``candidates_cache`` folder the speaker's candidates are kept there (:func:`spoken_candidates`): a later
    labelling of the same trajectories by the same speaker, rescored by another follower (the next round), reads
    them and runs only the follower."""
    out = Path(out)
    check_num_unpaired(num_unpaired)
    if rescorer is not None:
        check_rescorer(rescorer, num_candidates, lam)
    check_output_folder(out, demos=demos, speaker=speaker_path, rescorer=rescorer_path)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty: pass overwrite=True (--overwrite) to replace it")
    started = time.perf_counter()
    unpaired = load_demos(demos).get("unpaired")
    if unpaired is None or len(unpaired) == 0:
        raise ValueError(f"{demos} has no unpaired trajectories to label")
    if num_unpaired is not None:
        unpaired = unpaired.select(range(min(num_unpaired, len(unpaired))))
    if rescorer is None:
        texts = describe_dataset(speaker, unpaired, batch_size=batch_size, progress=progress, do_sample=do_sample)
        rescoring = None
    else:
        texts, rescoring = rescored_labels(speaker, rescorer, demos, unpaired, num_candidates, lam,
                                           max(1, batch_size // num_candidates), do_sample, progress,
                                           candidates_cache)
        rescoring["rescorer"] = rescorer_path
    labelled = with_pseudo_labels(unpaired, texts)
    accuracy, scoring = scored(labelled)
    info = {
        "speaker": speaker_path, "speaker_type": speaker.config.model_type, "demos": str(demos),
        "decoding": ("sampled" if do_sample else "greedy") if rescorer is None else
                    f"{num_candidates} {'sampled' if do_sample else 'beam'} candidates, chosen at lam "
                    f"{rescoring['lam']:g} (1: by the speaker alone)",
        "rescoring": rescoring, "num_labelled": len(labelled), "command": command,
        "wall_time_s": time.perf_counter() - started - scoring, **provenance(speaker.device),
    }
    write_labels(labelled, out, info, accuracy)
    return labelled


def scored(labelled: Any) -> tuple[dict[str, Any], float]:
    """:func:`label_accuracy` of labels about to be written, and the seconds it took: a failure costs a line in
    their record (``error``), never the labels."""
    started = time.perf_counter()
    try:
        accuracy = label_accuracy(labelled)
    except Exception as err:  # noqa: BLE001
        accuracy = {"error": f"{type(err).__name__}: {' '.join(str(err).split())}"}
    return accuracy, time.perf_counter() - started


def write_labels(labelled: Any, out: Path, info: dict[str, Any], accuracy: dict[str, Any]) -> None:
    """Save ``labelled`` at ``out`` with its record (``info``, the arrow files' sha256 and the labels'
    ``accuracy``), through a temp folder renamed into place: labels replaced stay whole until the new ones are in."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with writing(tmp, then=f"{out} is as it was: free space, then rerun"):
        labelled.save_to_disk(str(tmp))
        digests = write_checksums(tmp)
        # sha256: which labels this record describes (as checksums.json); the accuracy is scoring, outside the
        # wall time
        write_json(tmp / RECORD_FILE, {**info, "sha256": digests, "label_accuracy": accuracy})
    old = out.with_name(out.name + ".old")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def check_fraction(fraction: float) -> None:
    """ValueError unless ``fraction`` (the share of labels kept) lies in (0, 1]."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"--fraction must be in (0, 1], got {fraction}")


def confident_rows(scores: list[float], fraction: float) -> list[int]:
    """The rows of the ``round(fraction * N)`` highest ``scores`` (at least one; of tied rows, the first), in row
    order."""
    check_fraction(fraction)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return sorted(order[:max(1, round(fraction * len(scores)))])


def keep_confident(
    labels: str | os.PathLike,
    out: str | os.PathLike,
    fraction: float,
    speaker: Any,
    rescorer: Any = None,
    lam: float = 1.0,
    batch_size: int = 64,
    overwrite: bool = False,
    command: str | None = None,
    progress: bool = True,
) -> Any:
    """Write the share ``fraction`` of the pseudo-labels at ``labels`` that their labelling was surest of: each
    trajectory's label scored as it was chosen (:func:`~msvae_hf.extensions.pragmatics.label_scores`: lam *
    log p_S(y|a,o) + (1 - lam) * log p_F(a|y,o), with the labelling's own speaker, rescorer and lam), the
    ``round(fraction * N)`` highest kept in their order (:func:`confident_rows`). The record keeps the source's
    speaker, decoding and rescoring; its command, wall time, commit and machine are the keeping's, and ``kept`` names
    the source (path, sha256, command, wall time), the fraction, lam and the lowest score kept (``threshold``: a
    label scoring it may be left out, where more tie at it than there is room for). The kept labels are scored
    against the true missions as any labels are (:func:`label_accuracy`); nothing reads those missions to choose."""
    out = Path(out)
    check_fraction(fraction)
    check_output_folder(out, labels=labels)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty: pass overwrite=True (--overwrite) to replace it")
    source = pseudo_labels_record(labels)
    if source.get("kept"):
        raise ValueError(f"{labels} holds labels kept from {source['kept'].get('from')}: keep from those")
    if source.get("speaker"):  # scored as they were chosen, or not at all
        _, rescored_by, chosen_at = labelling_models(labels)
        if lam != chosen_at or (rescorer is None) != (rescored_by is None):
            how = f"at lam {chosen_at:g} with a rescorer" if rescored_by else "by the speaker alone"
            raise ValueError(f"{labels} were chosen {how}: score them so (given lam {lam:g} and "
                             f"{'a' if rescorer is not None else 'no'} rescorer)")
    labelled = load_pseudo_labels(labels)
    started = time.perf_counter()
    scores = label_scores(speaker, labelled, rescorer, lam, batch_size, progress).tolist()
    top = confident_rows(scores, fraction)
    kept = labelled.select(top)
    accuracy, scoring = scored(kept)
    inherited = {k: v for k, v in source.items() if k not in ("sha256", "label_accuracy", "unreadable")}
    info = {
        **inherited, "num_labelled": len(kept), "command": command,
        "wall_time_s": time.perf_counter() - started - scoring, **provenance(speaker.device),
        "kept": {"from": str(labels), "from_sha256": source.get("sha256"), "from_command": source.get("command"),
                 "from_wall_time_s": source.get("wall_time_s"), "fraction": fraction, "num_kept": len(kept),
                 "of": len(labelled), "lam": lam, "score": "lam * log p_S(y|a,o) + (1 - lam) * log p_F(a|y,o)",
                 "threshold": min(scores[i] for i in top)},
    }
    write_labels(kept, out, info, accuracy)
    return kept


def check_rescorer(rescorer: Any, num_candidates: int, lam: float | None) -> None:
    """ValueError unless ``rescorer`` can score actions, ``num_candidates`` >= 1 and ``lam`` is None or in [0, 1]."""
    if not hasattr(rescorer, "action_log_likelihood"):
        raise ValueError(f"the rescorer is a {rescorer.config.model_type} model, which cannot follow: rescore with "
                         "a follower or an MS-VAE")
    if num_candidates < 1:
        raise ValueError(f"num_candidates (--num-candidates) must be at least 1, got {num_candidates}")
    if lam is not None:
        check_lam(lam)


def rescored_labels(
    speaker: Any, rescorer: Any, demos: str | os.PathLike, unpaired: Any, num_candidates: int, lam: float | None,
    batch_size: int, do_sample: bool, progress: bool, candidates_cache: str | os.PathLike | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Each unpaired trajectory's candidate that the speaker and the follower together score best, and the record
    of the choice: lam, given or chosen on the ``valid`` pairs (with the share of them each lam gets right), and
    where the speaker's candidates came from (:func:`spoken_candidates`; ``valid_candidates`` for the valid pairs')."""
    check_same_vocabulary(speaker, rescorer)
    record: dict[str, Any] = {"num_candidates": num_candidates, "lam": lam, "lam_chosen_on": "given"}
    speaking = {"demos": demos, "num_candidates": num_candidates, "batch_size": batch_size, "do_sample": do_sample,
                "candidates_cache": candidates_cache}
    if lam is None:
        valid = load_demos(demos).get("valid")
        if valid is None or len(valid) == 0:
            raise ValueError(f"{demos} has no valid pairs to choose lam on: give lam (--lam)")
        spoken, record["valid_candidates"] = spoken_candidates(speaker, valid, "valid", **speaking)
        lam, shares = lam_on_pairs(rescore_candidates(spoken, rescorer, valid), list(valid["instruction"]))
        record.update(lam=lam, lam_chosen_on=f"valid ({len(valid)} pairs)", valid_exact_by_lam=shares)
    spoken, record["candidates"] = spoken_candidates(speaker, unpaired, "unpaired", progress=progress, **speaking)
    return rescore_candidates(spoken, rescorer, unpaired, progress=progress).choose(lam), record


def spoken_candidates(
    speaker: Any, rows: Any, split: str, demos: str | os.PathLike, num_candidates: int, batch_size: int,
    do_sample: bool, candidates_cache: str | os.PathLike | None, progress: bool = False,
) -> tuple[Spoken, str]:
    """The speaker's candidates for ``rows`` (the first of ``demos``' ``split``) and where they came from. With a
    ``candidates_cache`` folder they are read from its ``<split>-<key>`` folder where a labelling before this one
    kept them, else spoken and kept there (a failed write costs a warning, not the labelling); the key
    (:func:`candidates_key`) changes with anything that changes them."""
    if candidates_cache is None:
        return speak_candidates(speaker, rows, num_candidates, batch_size, do_sample, progress=progress), "spoken"
    key = candidates_key(speaker, demos, split, len(rows), num_candidates, batch_size, do_sample)
    folder = Path(candidates_cache) / f"{split}-{key[:16]}"
    if folder.is_dir():
        return Spoken.load(folder, key), f"read from {folder}"
    spoken = speak_candidates(speaker, rows, num_candidates, batch_size, do_sample, progress=progress)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")  # one a writer
    try:
        with writing(tmp, then="the labelling goes on without keeping its candidates"):
            tmp.mkdir(parents=True)
            spoken.save(tmp, key=key, split=split, demos=str(demos), **provenance(speaker.device))
            os.replace(tmp, folder)
    except Exception as err:  # noqa: BLE001  another writer's (the same) candidates in place first, no space, ...
        shutil.rmtree(tmp, ignore_errors=True)
        if folder.is_dir():
            return spoken, f"spoken, as kept in {folder}"
        logger.warning("the candidates were not kept in %s: %s", folder, " ".join(str(err).split()))
        return spoken, "spoken, not kept"
    return spoken, f"spoken, kept in {folder}"


def candidates_key(speaker: Any, demos: str | os.PathLike, split: str, num_rows: int, num_candidates: int,
                   batch_size: int, do_sample: bool) -> str:
    """sha256 of what decides a speaker's candidates: its weights, dtype, config (where it was loaded from left out),
    generation config and vocabulary; the demonstrations (their checksums, checked as they were loaded), the split and
    the number of its rows labelled; the decoding and batching; this package's code and the versions of
    transformers and torch; the device, the instruction set a CPU dispatches to and the threads (which decide
    rounding, and so which beams survive)."""
    import transformers

    if checksums_skipped():
        raise ValueError(f"kept candidates are matched to their trajectories by the demonstrations' checksums, which "
                         f"{SKIP_CHECKSUMS_ENV}=1 skips: label without a candidates cache, or check the checksums")
    code = code_digest()
    if code is None:
        raise ValueError("this package's code has no Python source to tell one version from another, so kept "
                         "candidates cannot be matched to it: label without a candidates cache")
    checksums = Path(demos) / CHECKSUMS_FILE
    if not checksums.is_file():
        raise ValueError(f"{demos} has no {CHECKSUMS_FILE}, by which kept candidates are matched to their "
                         "trajectories: label without a candidates cache, or write the demonstrations again")
    digest = hashlib.sha256()
    for name, tensor in sorted(speaker.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    config = {k: v for k, v in speaker.config.to_dict().items() if k != "_name_or_path"}
    host = machine(speaker.device)
    described = {"config": config, "generation": speaker.generation_config.to_dict(), "dtype": str(speaker.dtype),
                 "vocabulary": vocab_digest(speaker._resolve_tokenizer(None)),
                 "demos": checksums.read_text(), "split": split, "rows": num_rows, "num_candidates": num_candidates,
                 "batch_size": batch_size, "do_sample": do_sample, "code": code,
                 "versions": [transformers.__version__, torch.__version__],
                 "machine": [host[k] for k in ("device", "cpu_capability", "torch_threads")]}
    digest.update(json.dumps(described, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def label_accuracy(labelled: Any) -> dict[str, Any]:
    """:func:`scored_labels` of a labelled set's ``instruction`` column against each row's true mission, which its
    ``level`` regenerates from its ``seed`` (:func:`true_missions`), and the seconds the scoring took."""
    started = time.perf_counter()
    scores = scored_labels(labelled, list(labelled["instruction"]), true_missions(labelled))
    return {**scores, "seconds": round(time.perf_counter() - started, 1)}


def scored_labels(rows: Any, labels: list[str], missions: list[str]) -> dict[str, Any]:
    """``labels[i]`` of ``rows[i]`` (trajectories with their ``level``, ``seed`` and ``actions``) against its true
    mission ``missions[i]``: :func:`~msvae_hf.envs.missions.score_labels`; the shares of trajectories that carry out
    and that demonstrate their label (:func:`label_replays`); and all of these again, with the trajectories' share
    and mean steps, for the trajectories of each number of goals in their true mission (``by_goal_count``, a string
    key for each number present, in order)."""
    if not len(rows) == len(labels) == len(missions):
        raise ValueError(f"{len(rows)} trajectories, {len(labels)} labels and {len(missions)} missions: one each")
    replays = label_replays(rows, labels)
    steps = [len(actions) for actions in rows["actions"]]
    by_count = {str(n): {"share": len(at) / len(labels), "mean_steps": sum(steps[i] for i in at) / len(at),
                         **score_labels([labels[i] for i in at], [missions[i] for i in at]),
                         **replay_shares([replays[i] for i in at])}
                for n, at in rows_by_goal_count(missions).items()}
    return {**score_labels(labels, missions), **replay_shares(replays), "by_goal_count": by_count}


def replay_shares(replays: list[dict[str, bool]]) -> dict[str, float]:
    """The shares of ``replays`` (:func:`label_replays`) that carry out and that demonstrate their label."""
    return {key: sum(replay[key] for replay in replays) / len(replays) for key in REPLAY_FIELDS}


def label_replays(rows: Any, labels: list[str]) -> list[dict[str, bool]]:
    """Of ``rows`` (trajectories with their ``level``, ``seed`` and ``actions``), whether each trajectory's actions,
    replayed in its episode, carry out ``labels[i]`` as the level's verifier judges it, done at the last action
    (``carried_out``: :func:`~msvae_hf.envs.missions.carries_out`), and do so in as few steps as the bot told the
    label (``demonstrated``: :func:`~msvae_hf.envs.missions.demonstrates`). Where a label names the goals otherwise
    than the mission did ("the red ball" for "a ball", the red one being the ball the bot went to) it still counts;
    same-mission accuracy does not count it."""
    if len(rows) != len(labels):
        raise ValueError(f"{len(labels)} labels for {len(rows)} trajectories: one each")
    columns = rows.select_columns(["level", "seed", "actions"])
    levels, seeds, actions = list(columns["level"]), list(columns["seed"]), list(columns["actions"])
    replays: dict[int, dict[str, bool]] = {}
    for level, at in rows_of_each_level(levels).items():
        replays.update(zip(at, replay_each(level, [seeds[i] for i in at], [actions[i] for i in at],
                                           [labels[i] for i in at]), strict=True))
    return [replays[i] for i in range(len(labels))]


def true_missions(rows: Any) -> list[str]:
    """Each row's mission as its ``level`` regenerates it from its ``seed`` (a demonstration's ``instruction``)."""
    columns = rows.select_columns(["level", "seed"])
    levels, seeds = list(columns["level"]), list(columns["seed"])
    missions: list[str] = [""] * len(seeds)
    for level, at in rows_of_each_level(levels).items():
        for i, mission in zip(at, regenerate_missions(level, [seeds[i] for i in at]), strict=True):
            missions[i] = mission
    return missions


def rows_of_each_level(levels: list[str]) -> dict[str, list[int]]:
    """Each level of ``levels`` (one a row), in name order, with the indices of its rows: one env a level."""
    return {level: [i for i, name in enumerate(levels) if name == level] for level in sorted(set(levels))}


def check_num_unpaired(num_unpaired: int | None) -> None:
    """ValueError unless ``num_unpaired`` (how many unpaired trajectories to label) is None or at least 1."""
    if num_unpaired is not None and num_unpaired < 1:
        raise ValueError(f"num_unpaired (--num-unpaired) must be at least 1, got {num_unpaired}")


def pseudo_labels_record(path: str | os.PathLike) -> dict[str, Any]:
    """What :func:`label_unpaired` recorded beside the labels at ``path``: empty where it wrote no record, the
    problem where the record cannot be read (the labels themselves are checked by :func:`load_pseudo_labels`)."""
    record = Path(path) / RECORD_FILE
    try:
        return read_json(record) if record.is_file() else {}
    except (OSError, ValueError) as err:
        return {"unreadable": str(err)}


def labelling_models(labels: str | os.PathLike) -> tuple[str, str | None, float]:
    """The speaker, rescorer (None: none) and lam that chose the pseudo-labels at ``labels``, from their record."""
    record = pseudo_labels_record(labels)
    if "unreadable" in record:
        raise ValueError(f"{labels}: its record cannot be read ({record['unreadable']})")
    if not record.get("speaker"):
        raise ValueError(f"{labels} has no record naming the speaker that labelled it: label again with "
                         "scripts/label_unpaired.py")
    rescoring = record.get("rescoring") or {}
    if rescoring and not rescoring.get("rescorer"):
        raise ValueError(f"{labels}: its record names no rescorer for its rescored labels")
    return record["speaker"], rescoring.get("rescorer"), float(rescoring.get("lam", 1.0))


def relabel_command(path: str | os.PathLike) -> str:
    """The command that writes the pseudo-labels at ``path`` again: the one their record holds (with --overwrite),
    else a template."""
    command = str(pseudo_labels_record(path).get("command") or "")
    if not command:
        return f"python scripts/label_unpaired.py --speaker SPEAKER --demos DEMOS --out {path} --overwrite"
    return command if "--overwrite" in command.split() else f"{command} --overwrite"


def load_pseudo_labels(path: str | os.PathLike, verify: bool = True) -> Dataset:
    """The pseudo-paired rows :func:`label_unpaired` wrote at ``path``, checked as demonstrations are (checksums
    unless ``verify`` is False or ``MSVAE_SKIP_DEMO_CHECKSUMS=1``, readable files, cell codes, columns and
    ranges): one ValueError or FileNotFoundError naming the folder or file at fault and the command that writes
    it again."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no pseudo-labels at {path}: write them with scripts/label_unpaired.py")
    again = relabel_command(path)
    data = load_checked(path, verify, regenerate=again, hint="; pseudo-labels are written by scripts/label_unpaired.py")
    if isinstance(data, DatasetDict):
        raise ValueError(f"{path} holds a DatasetDict (splits {', '.join(data)}), not pseudo-labels: --pseudo-labels "
                         "takes the single Dataset scripts/label_unpaired.py writes (demonstrations go in --demos)")
    require_cell_codes(data, path)
    check_demo_columns(data, "pseudo-labelled", path, with_instruction=True, regenerate=again)
    if not len(data):
        raise ValueError(f"{path} holds no pseudo-labelled rows; label a dataset with an unpaired split")
    return data
