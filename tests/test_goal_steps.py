"""The steps that complete a goal (envs.missions.goal_steps), their column and batch tensor, and the speaker that
learns to find them (SpeakerConfig.goal_steps_weight): judged against the verifier, closed forms and invariances."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from conftest import TINY_LEVEL, tiny_model, train_tiny
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel

from msvae_hf import MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.demos import load_demos, run_bot, with_goal_steps
from msvae_hf.data.prefetch import pad_batch
from msvae_hf.envs.missions import carries_out, goal_steps, goals, parse_mission
from msvae_hf.models.losses import goal_step_loss

GOTOSEQ = "BabyAI-GoToSeqLocal-v0"


def bot_episode(level: str, seed: int) -> tuple[str, list[int]]:
    """The bot's mission and actions in episode ``seed`` of ``level``."""
    env = gym.make(level)
    try:
        row = run_bot(env, seed)
    finally:
        env.close()
    return row["instruction"], list(row["actions"])


def test_each_goal_is_marked_where_its_part_alone_would_end_the_episode() -> None:
    """On "A, then B" the first marked step is the first at which A, made the episode's mission, is carried out
    (carries_out: the verifier ends the episode there), and the last marked step is the demonstration's last."""
    env = gym.make(GOTOSEQ)
    checked = 0
    for seed in range(200):
        mission, actions = bot_episode(GOTOSEQ, seed)
        if ", then " not in mission or " and " in mission:
            continue
        first, _ = mission.split(", then ")
        steps = goal_steps(env, seed, actions)
        ends = next(k for k in range(1, len(actions) + 1) if carries_out(env, seed, actions[:k], first))
        assert steps[0] == ends - 1 and steps[-1] == len(actions) - 1
        assert len(steps) == 2 or steps == [len(actions) - 1]  # both goals met by the last step at once
        checked += 1
    assert checked >= 5


def test_demonstrations_end_on_their_last_goal_and_count_their_goals(tiny_demos) -> None:
    """Every bot demonstration's last step completes its last goal; no more steps are marked than the mission has
    goals; without its last action the episode keeps its last goal unmarked."""
    paired = load_demos(tiny_demos)["paired"]
    env = gym.make(TINY_LEVEL)
    for seed, actions, mission in zip(paired["seed"], paired["actions"], paired["instruction"], strict=True):
        steps = goal_steps(env, seed, actions)
        assert steps[-1] == len(actions) - 1
        assert 1 <= len(steps) <= len(goals(parse_mission(mission)))
        assert goal_steps(env, seed, actions[:-1]) == steps[:-1]


def test_a_replay_longer_than_its_episode_is_refused() -> None:
    mission, actions = bot_episode(GOTOSEQ, 3)
    with pytest.raises(ValueError, match="ended at step"):
        goal_steps(gym.make(GOTOSEQ), 3, [*actions, 2])


def test_the_column_and_the_batch_tensor(tiny_demos, tok) -> None:
    """with_goal_steps adds each row's steps; the collator sets exactly those steps, pads with False, and a row's
    values do not depend on the rows batched with it."""
    paired = with_goal_steps(load_demos(tiny_demos)["paired"].select(range(6)))
    env = gym.make(TINY_LEVEL)
    assert paired["goal_steps"] == [goal_steps(env, s, a) for s, a in zip(paired["seed"], paired["actions"],
                                                                          strict=True)]
    collate = DemoCollator(tok)
    rows = list(paired)
    batch = collate(rows)
    for i, row in enumerate(rows):
        assert batch["goal_steps"][i].nonzero().flatten().tolist() == row["goal_steps"]
        alone = collate([row])["goal_steps"][0]
        assert torch.equal(batch["goal_steps"][i, : len(alone)], alone)
    assert not batch["goal_steps"][~batch["trajectory_mask"]].any()
    padded = pad_batch(batch, time_multiple=64)
    assert padded["goal_steps"].shape == padded["observations"].shape[:2]
    assert torch.equal(padded["goal_steps"][:, : batch["goal_steps"].shape[1]], batch["goal_steps"])


def test_bad_goal_steps_are_one_line(tiny_demos, tok) -> None:
    paired = load_demos(tiny_demos)["paired"]
    row = dict(paired[0])
    with pytest.raises(ValueError, match=f"row 0: goal step {len(row['actions'])} is outside its"):
        DemoCollator(tok)([{**row, "goal_steps": [len(row["actions"])]}])
    with pytest.raises(ValueError, match="empty dataset"):
        with_goal_steps(paired.select([]))
    with pytest.raises(ValueError, match=r"lacks \['seed'\]"):
        with_goal_steps(paired.remove_columns("seed"))
    cut_short = paired.select([0]).map(lambda row: {"actions": row["actions"][:-1]})  # its mission left undone
    with pytest.raises(ValueError, match=r"row 0: episode of seed \d+: its \d+ actions do not complete its mission"):
        with_goal_steps(cut_short)
    # a multi-goal pair's steps up to its first goal: a goal completed at the last step, the mission not
    steps = list(with_goal_steps(paired)["goal_steps"])
    i = next(i for i, found in enumerate(steps) if len(found) > 1)
    first_part = paired.select([i]).map(lambda row: {"actions": row["actions"][: steps[i][0] + 1]})
    with pytest.raises(ValueError, match="row 0: .* do not complete its mission"):
        with_goal_steps(first_part)


def test_goal_step_loss_against_the_closed_form() -> None:
    logits = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, 9.0]])
    targets = torch.tensor([[True, False, True], [False, True, False]])
    mask = torch.tensor([[True, True, True], [True, True, False]])

    def bce(x: float, y: bool) -> float:
        p = 1 / (1 + math.exp(-x))
        return -math.log(p if y else 1 - p)

    rows = [[bce(x, y) for x, y, m in zip(lr, tr, mr, strict=True) if m]
            for lr, tr, mr in zip(logits.tolist(), targets.tolist(), mask.tolist(), strict=True)]
    summed = goal_step_loss(logits, targets, mask, "sum")
    assert summed.tolist() == pytest.approx([sum(r) for r in rows], rel=1e-6)
    assert goal_step_loss(logits, targets, mask, "mean").tolist() == pytest.approx([sum(r) / len(r) for r in rows],
                                                                                 rel=1e-6)


def speaker_batch(tiny_demos, tok, count: int = 5) -> dict[str, torch.Tensor]:
    return DemoCollator(tok)(list(with_goal_steps(load_demos(tiny_demos)["paired"].select(range(count)))))


def tiny_speaker(tok, weight: float, seed: int = 0) -> SpeakerModel:
    torch.manual_seed(seed)
    model = SpeakerModel(SpeakerConfig(**tiny_model("speaker"), goal_steps_weight=weight)).eval()
    model.tokenizer = tok
    return model


def test_the_speakers_loss_adds_the_weighted_goal_step_term(tiny_demos, tok) -> None:
    """loss = -log p(y | a, o) + w * BCE(read-out of h_tau, goal steps), per trajectory; with w = 0 the speaker has
    no read-out and its loss is the paper's."""
    batch = speaker_batch(tiny_demos, tok)
    plain = tiny_speaker(tok, 0.0)
    assert plain.goal_step_head is None
    out = plain(**batch, reduction="none")
    assert out.goal_step_loss is None and torch.equal(out.loss, -out.log_likelihood)
    speaker = tiny_speaker(tok, 0.5)
    out = speaker(**batch, reduction="none")
    memory, mask = speaker.trajectory_memory(batch["observations"], batch["directions"], batch["actions"],
                                             batch["trajectory_mask"])
    expected = goal_step_loss(speaker.goal_step_head(memory).squeeze(-1), batch["goal_steps"], mask)
    assert torch.allclose(out.goal_step_loss, expected)
    assert torch.allclose(out.loss, -out.log_likelihood + 0.5 * expected)
    mean = speaker(**batch)
    assert torch.allclose(mean.loss, out.loss.mean()) and torch.allclose(mean.goal_step_loss, expected.mean())


def test_the_goal_step_term_does_not_depend_on_padding_or_batch(tiny_demos, tok) -> None:
    batch = speaker_batch(tiny_demos, tok)
    speaker = tiny_speaker(tok, 1.0)
    together = speaker(**batch, reduction="none").goal_step_loss
    collate = DemoCollator(tok)
    rows = list(with_goal_steps(load_demos(tiny_demos)["paired"].select(range(5))))
    for i, row in enumerate(rows):
        alone = speaker(**collate([row]), reduction="none").goal_step_loss
        assert torch.allclose(alone, together[i : i + 1], atol=1e-5)


def test_a_speaker_that_trains_on_goal_steps_refuses_a_batch_without_them(tiny_demos, tok) -> None:
    batch = speaker_batch(tiny_demos, tok)
    del batch["goal_steps"]
    speaker = tiny_speaker(tok, 1.0).train()
    with pytest.raises(ValueError, match="its batches need goal_steps"):
        speaker(**batch)
    speaker.eval()  # scoring and labelling read the trajectory alone
    assert speaker(**batch).goal_step_loss is None


def test_save_load_round_trip_and_msvae_from_it(tiny_demos, tok, tmp_path) -> None:
    """The read-out travels with the speaker exactly; MS-VAE built from it keeps the trajectory encoder and has
    neither the field nor the read-out."""
    speaker = tiny_speaker(tok, 2.0, seed=3)
    speaker.save_pretrained(tmp_path / "speaker")
    loaded = SpeakerModel.from_pretrained(tmp_path / "speaker").eval()
    assert loaded.config.goal_steps_weight == 2.0
    for (name, a), (_, b) in zip(speaker.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    batch = speaker_batch(tiny_demos, tok)
    assert torch.equal(speaker(**batch).loss, loaded(**batch).loss)
    msvae = MSVAEModel.from_baselines(speaker=loaded, **tiny_model("msvae"))
    assert not hasattr(msvae.config, "goal_steps_weight")
    assert not any("goal_step" in name for name in msvae.state_dict())
    assert torch.equal(msvae.trajectory_encoder.state_dict()["gru.weight_ih_l0"],
                       loaded.trajectory_encoder.state_dict()["gru.weight_ih_l0"])


def test_a_speaker_trains_on_goal_steps_of_the_pairs_alone_and_logs_them(tiny_demos, tmp_path, monkeypatch) -> None:
    """Training replays the pairs' episodes for their goal steps and never an unpaired trajectory's (a level
    refuses to reset on an unpaired seed); the term is logged at every update; the speaker saves its weight."""
    unpaired = set(load_demos(tiny_demos)["unpaired"]["seed"])
    reset = RoomGridLevel.reset

    def refusing_reset(self, *, seed=None, **kwargs):
        if seed in unpaired:
            raise AssertionError(f"a level was reset on unpaired seed {seed} during training")
        return reset(self, seed=seed, **kwargs)

    monkeypatch.setattr(RoomGridLevel, "reset", refusing_reset)
    run = tmp_path / "speaker"
    results = train_tiny("speaker", run, tiny_demos, model={"goal_steps_weight": 1.0})
    assert SpeakerModel.from_pretrained(run / "best").config.goal_steps_weight == 1.0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((run / "tb").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    logged = events.Scalars("train/goal_step_loss")
    assert len(logged) == results["updates"] and all(math.isfinite(e.value) and e.value > 0 for e in logged)


class _Oracle(torch.nn.Module):
    """A goal-step read-out that reads each step's answer from a table: +1 where ``steps`` (one set a trajectory,
    in the order the batches bring them) marks the step, and with ``last`` at each batch's last position, padded or
    not; -1 elsewhere."""

    def __init__(self, steps: list[set[int]], last: bool = True) -> None:
        super().__init__()
        self.steps, self.last = steps, last
        self.calls = 0

    def forward(self, memory: torch.Tensor) -> torch.Tensor:
        out = -torch.ones(*memory.shape[:2], 1)
        if self.last:  # the batch's last position: a padded step for all but its longest trajectories
            out[:, -1] = 1.0
        for row in range(memory.shape[0]):
            for step in self.steps[self.calls + row]:
                out[row, step] = 1.0
        self.calls += memory.shape[0]
        return out


def test_goal_step_accuracy_scores_the_read_out_against_the_verifiers_steps(tiny_demos, tok) -> None:
    """A read-out that marks exactly the verifier's steps scores 1 everywhere; one that also marks step 0 of every
    trajectory whose first step completes no goal loses exactly those trajectories and that much precision; one
    that marks nothing finds no step; padded steps are never predicted (-inf), whatever the batch."""
    from msvae_hf.evaluation.evaluate import goal_step_accuracy

    valid = load_demos(tiny_demos)["valid"]
    truth = [set(steps) for steps in with_goal_steps(valid)["goal_steps"]]
    speaker = tiny_speaker(tok, 1.0)
    speaker.goal_step_head = _Oracle(truth)
    perfect = goal_step_accuracy(speaker, valid, batch_size=3)
    assert {k: perfect[k] for k in ("exact", "count", "last_step", "precision", "recall")} == dict.fromkeys(
        ("exact", "count", "last_step", "precision", "recall"), 1.0)
    assert perfect["trajectories"] == len(valid)
    counts = sorted({len(t) for t in truth})
    assert perfect["by_goal_steps"] == {str(k): {"trajectories": sum(len(t) == k for t in truth), "exact": 1.0}
                                        for k in counts}
    extra = [t | {0} for t in truth]
    speaker.goal_step_head = _Oracle(extra)
    wrong = sum(0 not in t for t in truth)
    scores = goal_step_accuracy(speaker, valid, batch_size=4)
    assert scores["exact"] == pytest.approx(1 - wrong / len(valid)) and scores["recall"] == 1.0
    assert scores["precision"] == pytest.approx(sum(map(len, truth)) / sum(map(len, extra)))
    assert scores["by_goal_steps"] == {  # grouped by the verifier's count, not the predicted one
        str(k): {"trajectories": sum(len(t) == k for t in truth),
                 "exact": pytest.approx(sum(len(t) == k and 0 in t for t in truth) / sum(len(t) == k for t in truth))}
        for k in counts}
    speaker.goal_step_head = _Oracle(extra)
    assert goal_step_accuracy(speaker, valid, batch_size=4, truth=[sorted(t) for t in truth]) == scores  # given
    speaker.goal_step_head = _Oracle([set() for _ in truth], last=False)
    nothing = goal_step_accuracy(speaker, valid)
    assert nothing["recall"] == 0.0 and nothing["precision"] == 0.0 and nothing["last_step"] == 0.0


def test_goal_step_logits_are_refused_without_a_read_out_and_pad_to_minus_infinity(tiny_demos, tok) -> None:
    from msvae_hf.evaluation.evaluate import goal_step_accuracy

    batch = speaker_batch(tiny_demos, tok)
    inputs = [batch[k] for k in ("observations", "directions", "actions", "trajectory_mask")]
    with pytest.raises(ValueError, match="no goal-step read-out"):
        tiny_speaker(tok, 0.0).goal_step_logits(*inputs)
    logits = tiny_speaker(tok, 1.0).goal_step_logits(*inputs)
    real = batch["trajectory_mask"].bool()
    assert (logits[~real] == float("-inf")).all() and torch.isfinite(logits[real]).all()
    valid = load_demos(tiny_demos)["valid"]
    with pytest.raises(ValueError, match="empty dataset"):
        goal_step_accuracy(tiny_speaker(tok, 1.0), valid.select([]))
    with pytest.raises(ValueError, match="no goal-step read-out"):
        goal_step_accuracy(tiny_speaker(tok, 0.0), valid)
    with pytest.raises(ValueError, match="one each"):
        goal_step_accuracy(tiny_speaker(tok, 1.0), valid, truth=[[0]])


def test_predicted_goal_steps_are_the_read_outs_positive_logits_for_any_batch(tiny_demos, tok) -> None:
    """Each trajectory's predicted steps are where its read-out's logit is above 0, padding never, whatever the
    batch; a speaker without a read-out is refused."""
    from msvae_hf.evaluation.evaluate import predicted_goal_steps

    rows = load_demos(tiny_demos)["paired"].select(range(5))
    speaker = tiny_speaker(tok, 1.0)
    with torch.no_grad():
        speaker.goal_step_head.bias.fill_(0.1)  # some steps predicted, not all of them
    expected = []
    for row in rows:
        batch = DemoCollator(tok)([row])
        with torch.no_grad():
            logits = speaker.goal_step_logits(batch["observations"], batch["directions"], batch["actions"],
                                              batch["trajectory_mask"])[0]
        expected.append([t for t in range(len(row["actions"])) if logits[t] > 0])
    assert predicted_goal_steps(speaker, rows, batch_size=2) == predicted_goal_steps(speaker, rows) == expected
    assert any(expected) and all(max(s, default=-1) < len(a) for s, a in zip(expected, rows["actions"], strict=True))
    with pytest.raises(ValueError, match="no goal-step read-out"):
        predicted_goal_steps(tiny_speaker(tok, 0.0), rows)
