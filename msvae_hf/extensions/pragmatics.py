"""Follower-rescored speaking: the speaker proposes, the follower checks (Fried et al. 2018's pragmatic speaker).

The speaker-follower model the paper builds on (Sec. 2.3; Table 3) rescores a speaker's candidate instructions
with the follower: among n candidates y for a trajectory tau = (a, o), pick

    argmax_y  lam * log p_S(y | a, o) + (1 - lam) * log p_F(a | y, o)

where p_S is the speaker (for MS-VAE, p(y|z) with z = mean of q(z|a,o), Eq. 6) and p_F the follower (for
MS-VAE, p(a|z,o) with z = mean of q(z|y), Eq. 5). ``lam = 1`` is the speaker alone; the follower term
prefers instructions under which the trajectory's own actions are likely, i.e. the objects it acted on.
MS-VAE is both models at once, so unpaired trajectories reach the speaker's output through the follower V
trains (Eq. 3). ``lam`` is chosen on validation pairs, never on the test pairs it is reported on.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset, load_from_disk

from ..evaluation.evaluate import evaluating, trajectory_batches

#: The speaker weights tried when lam is chosen on pairs: 0, 0.1, ..., 1.
LAMS = tuple(i / 10 for i in range(11))
#: Candidates a trajectory unless told otherwise (beam width).
NUM_CANDIDATES = 8
#: The file beside saved candidates (:meth:`Spoken.save`) that holds how they were batched.
SPOKEN_FILE = "spoken.json"


@dataclass
class Candidates:
    """n candidate instructions per trajectory with both models' log-likelihoods, each [B, n]."""

    texts: list[list[str]]
    speaker_scores: torch.Tensor
    follower_scores: torch.Tensor

    def choose(self, lam: float) -> list[str]:
        """The candidate maximising lam * speaker + (1 - lam) * follower for each trajectory."""
        check_lam(lam)
        score = lam * self.speaker_scores + (1.0 - lam) * self.follower_scores
        best = score.argmax(dim=1).tolist()
        return [texts[i] for texts, i in zip(self.texts, best)]


def check_lam(lam: float) -> None:
    """ValueError unless ``lam`` (the speaker's weight) lies in [0, 1]."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")


def lam_on_pairs(
    candidates: Candidates, instructions: Sequence[str], lams: tuple[float, ...] = LAMS
) -> tuple[float, dict[float, float]]:
    """The lam of ``lams`` whose choices equal most of the pairs' own ``instructions`` (word for word), and the
    share each lam matches; a tie goes to the larger lam (the nearer to the speaker alone)."""
    if len(instructions) != len(candidates.texts):
        raise ValueError(f"{len(instructions)} instructions for {len(candidates.texts)} candidate lists")
    truth = [text.split() for text in instructions]
    shares = {lam: sum(chosen.split() == words for chosen, words in zip(candidates.choose(lam), truth))
              / len(truth) for lam in lams}
    return max(lams, key=lambda lam: (shares[lam], lam)), shares


def _repeat(batch: dict[str, torch.Tensor], n: int) -> dict[str, torch.Tensor]:
    return {k: v.repeat_interleave(n, dim=0) for k, v in batch.items()}


@torch.no_grad()
def speaker_log_likelihood(speaker: Any, trajectories: dict[str, torch.Tensor], input_ids, attention_mask):
    """log p_S(y | a, o) summed over tokens, teacher forced: one value per row [N]."""
    memory, memory_mask = speaker.trajectory_memory(
        trajectories["observations"], trajectories["directions"], trajectories["actions"],
        trajectories["trajectory_mask"],
    )
    return speaker.instruction_log_likelihood(input_ids, attention_mask, memory, memory_mask)[0]


@torch.no_grad()
def follower_log_likelihood(follower: Any, trajectories: dict[str, torch.Tensor], input_ids, attention_mask):
    """log p_F(a | y, o) summed over steps (Eq. 5), teacher forced: one value per row [N]."""
    return follower.action_log_likelihood(
        input_ids, attention_mask, trajectories["observations"], trajectories["directions"],
        trajectories["actions"].long(), trajectories["trajectory_mask"],
    )[0]


def check_same_vocabulary(speaker: Any, follower: Any) -> None:
    """Candidates are scored as token ids, so both models must read the same vocabulary."""
    vocab_s = speaker._resolve_tokenizer(None).get_vocab()
    vocab_f = follower._resolve_tokenizer(None).get_vocab()
    if vocab_s != vocab_f:
        raise ValueError(
            f"the speaker and the follower have different vocabularies ({len(vocab_s)} and {len(vocab_f)} "
            "tokens): rescoring needs models trained with the same tokenizer"
        )


@dataclass
class Spoken:
    """A speaker's ``num_candidates`` instructions for each trajectory of a dataset, before any follower scores
    them: the texts, the token ids of each batch of ``batch_size`` trajectories as ``generate`` returned them
    ([trajectories * n, length], padded with ``pad_token_id``; int32 on the CPU), and log p_S of each, [B, n]
    (float32). :func:`rescore_candidates` adds a follower's scores; saved (:meth:`save`), one speaker's candidates
    serve every follower that rescores them."""

    texts: list[list[str]]
    ids: list[torch.Tensor]
    speaker_scores: torch.Tensor
    batch_size: int
    pad_token_id: int

    @property
    def num_candidates(self) -> int:
        """Candidates a trajectory."""
        return self.speaker_scores.shape[1]

    def save(self, folder: str | os.PathLike, **info: Any) -> None:
        """The candidates as a ``datasets`` folder, one row a trajectory (``candidates``; ``candidate_ids``, the row's
        ids [n, length] flattened; ``speaker_scores``), with ``batch_size``, the number of candidates, the pad id and
        ``info`` in its ``spoken.json``. Built from the tensors' buffers, without a Python list of ids."""
        n = self.num_candidates
        row_lengths = np.concatenate([np.full(ids.shape[0] // n, n * ids.shape[1]) for ids in self.ids])
        ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(row_lengths)]), pa.int32()),
                                       pa.array(np.concatenate([ids.numpy().ravel() for ids in self.ids])))
        rows = len(self.texts)
        scores = pa.ListArray.from_arrays(pa.array(np.arange(0, rows * n + 1, n), pa.int32()),
                                          pa.array(self.speaker_scores.numpy().ravel()))
        Dataset.from_dict({"candidates": self.texts, "candidate_ids": ids, "speaker_scores": scores}).save_to_disk(
            str(folder))
        info = {"batch_size": self.batch_size, "num_candidates": n, "pad_token_id": self.pad_token_id, **info}
        (Path(folder) / SPOKEN_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")

    @classmethod
    def load(cls, folder: str | os.PathLike, key: str | None = None) -> Spoken:
        """What :meth:`save` wrote at ``folder``, each batch's ids as ``generate`` padded them; one ValueError where
        its ``spoken.json`` holds another ``key`` or its files cannot be read as saved candidates."""
        try:  # a cache read: whatever fails means the folder is not saved candidates
            info = json.loads((Path(folder) / SPOKEN_FILE).read_text())
            if not isinstance(info, dict):
                raise TypeError(f"{SPOKEN_FILE} holds a {type(info).__name__}, not an object")
        except Exception as err:  # noqa: BLE001
            raise _unreadable(folder, err) from err
        if key is not None and info.get("key") != key:
            raise ValueError(f"{folder} holds candidates of another speaker or other trajectories (its key is not "
                             "this labelling's): delete it and rerun")
        try:
            n, size = int(info["num_candidates"]), int(info["batch_size"])
            data = load_from_disk(str(folder)).data
            ids = data.column("candidate_ids").combine_chunks()
            offsets, values = ids.offsets.to_numpy(), torch.tensor(ids.values.to_numpy())
            batches = []
            for start in range(0, len(ids), size):
                end = min(start + size, len(ids))
                width = int(offsets[start + 1] - offsets[start]) // n
                batch = values[offsets[start] : offsets[end]]
                if width < 1 or batch.numel() != (end - start) * n * width:
                    raise ValueError(f"the rows of the batch from row {start} differ in length")
                batches.append(batch.view(-1, width))
            scores = torch.tensor(data.column("speaker_scores").combine_chunks().values.to_numpy()).view(-1, n)
            texts = data.column("candidates").to_pylist()
            if not len(texts) == len(scores) == len(ids):
                raise ValueError("its columns differ in length")
            pad = int(info["pad_token_id"])
        except Exception as err:  # noqa: BLE001
            raise _unreadable(folder, err) from err
        return cls(texts, batches, scores, size, pad)


def _unreadable(folder: str | os.PathLike, err: BaseException) -> ValueError:
    """The one line for saved candidates at ``folder`` that cannot be read, with what went wrong."""
    return ValueError(f"{folder} holds candidates that cannot be read ({type(err).__name__}: "
                      f"{' '.join(str(err).split())}): delete it and rerun")


@torch.no_grad()
def speak_candidates(
    speaker: Any,
    dataset: Any,
    num_candidates: int = NUM_CANDIDATES,
    batch_size: int = 64,
    do_sample: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> Spoken:
    """Beam search (or sampling) gives ``num_candidates`` instructions per trajectory, each with log p_S(y|a,o).

    ``dataset`` holds trajectories (observations, directions, actions); an ``instruction`` column is ignored.
    """
    if len(dataset) == 0:
        raise ValueError("speak_candidates got an empty dataset: no trajectories to speak for")
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be >= 1, got {num_candidates}")
    tokenizer = speaker._resolve_tokenizer(None)
    generate_kwargs: dict[str, Any] = {"num_return_sequences": num_candidates}
    if do_sample:
        generate_kwargs.update(do_sample=True)
        torch.manual_seed(seed)
    else:
        generate_kwargs.update(num_beams=num_candidates)
    texts: list[list[str]] = []
    ids: list[torch.Tensor] = []
    scores: list[torch.Tensor] = []
    with evaluating(speaker):
        for batch in trajectory_batches(speaker, dataset, batch_size, "candidates" if progress else None):
            batch_ids = speaker.generate(
                batch["observations"], batch["directions"], batch["actions"], batch["trajectory_mask"],
                **generate_kwargs,
            )
            mask = (batch_ids != speaker.config.pad_token_id).long()
            scores.append(speaker_log_likelihood(speaker, _repeat(batch, num_candidates), batch_ids, mask))
            ids.append(batch_ids.to("cpu", torch.int32))
            flat = tokenizer.batch_decode(batch_ids, skip_special_tokens=True)
            texts += [flat[i : i + num_candidates] for i in range(0, len(flat), num_candidates)]
    return Spoken(texts, ids, torch.cat(scores).view(-1, num_candidates).cpu().float(), batch_size,
                  speaker.config.pad_token_id)


@torch.no_grad()
def rescore_candidates(spoken: Spoken, follower: Any, dataset: Any, progress: bool = False) -> Candidates:
    """``spoken``'s candidates for ``dataset``'s trajectories, each also scored by the follower's log p_F(a|y,o);
    the follower sees each batch as the speaker made it."""
    if len(dataset) != len(spoken.texts):
        raise ValueError(f"{len(spoken.texts)} trajectories' candidates for a dataset of {len(dataset)}")
    n, pad = spoken.num_candidates, spoken.pad_token_id
    scores: list[torch.Tensor] = []
    with evaluating(follower):
        batches = trajectory_batches(follower, dataset, spoken.batch_size, "rescoring" if progress else None)
        for batch, ids in zip(batches, spoken.ids, strict=True):
            ids = ids.to(follower.device, torch.long)
            scores.append(follower_log_likelihood(follower, _repeat(batch, n), ids, (ids != pad).long()))
    return Candidates(spoken.texts, spoken.speaker_scores, torch.cat(scores).view(-1, n).cpu())


@torch.no_grad()
def label_scores(speaker: Any, dataset: Any, rescorer: Any = None, lam: float = 1.0, batch_size: int = 64,
                 progress: bool = False) -> torch.Tensor:
    """Each row's own ``instruction`` scored as a pragmatic speaker chooses among candidates: lam * log p_S(y|a,o)
    + (1 - lam) * log p_F(a|y,o), the rescorer's term left out at lam = 1 (the speaker alone); float32 [N], on the
    CPU. A labelling's chosen labels scored with its own speaker, rescorer and lam rank its trajectories by how sure
    the labelling was of each."""
    check_lam(lam)
    if rescorer is None and lam != 1.0:
        raise ValueError(f"lam {lam:g} weighs a rescorer's log p_F(a|y,o): give the rescorer, or lam 1")
    if rescorer is not None:
        check_same_vocabulary(speaker, rescorer)
    if "instruction" not in dataset.column_names:
        raise ValueError("label_scores scores each row's instruction: the dataset has no 'instruction' column")
    scores: list[torch.Tensor] = []
    with evaluating(speaker), evaluating(rescorer) if rescorer is not None else contextlib.nullcontext():
        for batch in trajectory_batches(speaker, dataset, batch_size, "scoring" if progress else None,
                                        instructions=True):
            ids, mask = batch["input_ids"], batch["attention_mask"]
            score = lam * speaker_log_likelihood(speaker, batch, ids, mask)
            if lam < 1.0:
                moved = {k: v.to(rescorer.device) for k, v in batch.items()}
                score = score + (1.0 - lam) * follower_log_likelihood(
                    rescorer, moved, moved["input_ids"], moved["attention_mask"]).to(score.device)
            scores.append(score.float().cpu())
    return torch.cat(scores)


def score_candidates(
    speaker: Any,
    follower: Any,
    dataset: Any,
    num_candidates: int = NUM_CANDIDATES,
    batch_size: int = 64,
    do_sample: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> Candidates:
    """Beam search (or sampling) gives ``num_candidates`` instructions per trajectory; both models score them
    (:func:`speak_candidates`, then :func:`rescore_candidates`).

    ``dataset`` holds trajectories (observations, directions, actions); an ``instruction`` column is ignored.
    """
    check_same_vocabulary(speaker, follower)
    spoken = speak_candidates(speaker, dataset, num_candidates, batch_size, do_sample, seed, progress)
    return rescore_candidates(spoken, follower, dataset, progress)
