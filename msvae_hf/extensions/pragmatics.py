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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data.collator import DemoCollator, without_instructions
from ..evaluation.evaluate import iterate_batches

#: The speaker weights tried when lam is chosen on pairs: 0, 0.1, ..., 1.
LAMS = tuple(i / 10 for i in range(11))
#: Candidates a trajectory unless told otherwise (beam width).
NUM_CANDIDATES = 8


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


def _same_vocabulary(speaker: Any, follower: Any) -> None:
    """Candidates are scored as token ids, so both models must read the same vocabulary."""
    vocab_s = speaker._resolve_tokenizer(None).get_vocab()
    vocab_f = follower._resolve_tokenizer(None).get_vocab()
    if vocab_s != vocab_f:
        raise ValueError(
            f"the speaker and the follower have different vocabularies ({len(vocab_s)} and {len(vocab_f)} "
            "tokens): rescoring needs models trained with the same tokenizer"
        )


@torch.no_grad()
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
    """Beam search (or sampling) gives ``num_candidates`` instructions per trajectory; both models score them.

    ``dataset`` holds trajectories (observations, directions, actions); an ``instruction`` column is ignored.
    """
    if len(dataset) == 0:
        raise ValueError("score_candidates got an empty dataset")
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be >= 1, got {num_candidates}")
    _same_vocabulary(speaker, follower)
    tokenizer = speaker._resolve_tokenizer(None)
    collator = DemoCollator(tokenizer)
    modes = [(m, m.training) for m in (speaker, follower)]
    for m, _ in modes:
        m.eval()
    generate_kwargs: dict[str, Any] = {"num_return_sequences": num_candidates}
    if do_sample:
        generate_kwargs.update(do_sample=True)
        torch.manual_seed(seed)
    else:
        generate_kwargs.update(num_beams=num_candidates)
    texts: list[list[str]] = []
    s_scores, f_scores = [], []
    batches = iterate_batches(without_instructions(dataset), collator, batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, total=-(-len(dataset) // batch_size), desc="candidates")
    try:
        for batch in batches:
            batch = {k: v.to(speaker.device) for k, v in batch.items() if k != "input_ids"}
            ids = speaker.generate(
                batch["observations"], batch["directions"], batch["actions"], batch["trajectory_mask"],
                **generate_kwargs,
            )
            mask = (ids != speaker.config.pad_token_id).long()
            expanded = _repeat(batch, num_candidates)
            s_scores.append(speaker_log_likelihood(speaker, expanded, ids, mask))
            f_batch = {k: v.to(follower.device) for k, v in expanded.items()}
            f_ids, f_mask = ids.to(follower.device), mask.to(follower.device)
            f_scores.append(follower_log_likelihood(follower, f_batch, f_ids, f_mask))
            flat = tokenizer.batch_decode(ids, skip_special_tokens=True)
            texts += [flat[i : i + num_candidates] for i in range(0, len(flat), num_candidates)]
    finally:
        for m, training in modes:
            m.train(training)
    return Candidates(
        texts, torch.cat(s_scores).view(-1, num_candidates).cpu(), torch.cat(f_scores).view(-1, num_candidates).cpu()
    )
