"""Speaking and following: ``generate()`` of MS-VAE and the baselines.

Speaker side: greedy, beam search, sampling with a seed and max_new_tokens through transformers'
GenerationMixin, on tiny models briefly overfit (150 Adam steps) to three fixed (trajectory, instruction)
pairs so that they emit eos; cached and uncached decoding must agree token for token.
Follower side: rollouts on real BabyAI Local envs through ``follow(envs, seeds)`` and the step-by-step
policy API, with results checked by replaying the actions in a fresh env.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from model_helpers import played_batch, real_batch

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.data.demos import replay_episode
from msvae_hf.evaluation.rollout import EpisodeResult
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

TINY = dict(
    hidden_size=32, latent_dim=32, obs_channels=16, decoder_ffn_dim=64, word_embed_dim=32, prior_hidden_size=32,
    obs_embed_dim=8, action_embed_dim=8,
)
INSTRUCTIONS = ["go to the red ball", "pick up a blue key", "open the yellow door , then go to a grey box"]
LEVEL = "BabyAI-GoToSeqLocal-v0"


def pairs(tok: MSVAETokenizer) -> dict[str, torch.Tensor]:
    """Three fixed (trajectory, instruction) pairs: real GoToLocal frames and fixed action sequences."""
    return played_batch(tok, [[2, 2, 0, 2], [1, 2, 2], [0, 0, 2, 2, 1]], [0, 1, 2], INSTRUCTIONS)


def trajectory(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("observations", "directions", "actions", "trajectory_mask")}


def overfit(model, batch: dict[str, torch.Tensor], steps: int = 150):
    """A few Adam steps on the fixed batch (MS-VAE: the paired objective), then eval mode."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained(tok: MSVAETokenizer) -> dict[str, torch.nn.Module]:
    batch = pairs(tok)
    torch.manual_seed(0)
    msvae = MSVAEModel(MSVAEConfig(vocab_size=len(tok), **TINY))
    torch.manual_seed(0)
    speaker = SpeakerModel(SpeakerConfig(vocab_size=len(tok), **TINY))
    models = {"msvae": overfit(msvae, batch), "speaker": overfit(speaker, batch)}
    for model in models.values():
        model.tokenizer = tok
    return models


def assert_valid(ids: torch.Tensor, model) -> None:
    """bos first, ids in the vocabulary, and each sequence ends with eos followed only by pad."""
    cfg = model.config
    assert ids.dtype == torch.long
    assert (ids[:, 0] == cfg.bos_token_id).all()
    assert ids.min() >= 0 and ids.max() < cfg.vocab_size
    for row in ids.tolist():
        assert cfg.eos_token_id in row, row
        end = row.index(cfg.eos_token_id)
        assert all(t == cfg.pad_token_id for t in row[end + 1 :]), row
        assert cfg.bos_token_id not in row[1:end] and cfg.pad_token_id not in row[1:end], row


# ------------------------------------------------------------------------------------------------ speaker
@pytest.mark.parametrize("kind", ["msvae", "speaker"])
def test_greedy_reproduces_training_instructions(kind: str, trained: dict, tok: MSVAETokenizer) -> None:
    model = trained[kind]
    batch = pairs(tok)
    ids = model.generate(**trajectory(batch))
    assert_valid(ids, model)
    assert tok.batch_decode(ids, skip_special_tokens=True) == tok.batch_decode(
        batch["input_ids"], skip_special_tokens=True
    )
    assert model.describe(**trajectory(batch)) == tok.batch_decode(ids, skip_special_tokens=True)
    # per-episode arrays, as scripts/evaluate.py passes a rollout's observations, go through the cell codes
    episodes = {k: [batch[k][i][mask] for i, mask in enumerate(batch["trajectory_mask"])]
                for k in ("observations", "directions", "actions")}
    assert model.describe(**episodes) == tok.batch_decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("kind", ["msvae", "speaker"])
def test_beam_search_returns_valid_sequences(kind: str, trained: dict, tok: MSVAETokenizer) -> None:
    model = trained[kind]
    batch = pairs(tok)
    ids = model.generate(**trajectory(batch), num_beams=3, num_return_sequences=2)
    assert ids.shape[0] == 2 * len(INSTRUCTIONS)
    assert_valid(ids, model)
    # the best beam of each trajectory is its instruction (the model was overfit to it)
    best = tok.batch_decode(ids[::2], skip_special_tokens=True)
    assert best == tok.batch_decode(batch["input_ids"], skip_special_tokens=True)


@pytest.mark.parametrize("kind", ["msvae", "speaker"])
def test_cached_and_uncached_decoding_agree(kind: str, trained: dict, tok: MSVAETokenizer) -> None:
    model = trained[kind]
    traj = trajectory(pairs(tok))
    for kwargs in ({}, {"num_beams": 3, "num_return_sequences": 2}):
        cached = model.generate(**traj, use_cache=True, **kwargs)
        uncached = model.generate(**traj, use_cache=False, **kwargs)
        assert torch.equal(cached, uncached), kwargs
    torch.manual_seed(5)
    sampled_cached = model.generate(**traj, do_sample=True, use_cache=True)
    torch.manual_seed(5)
    sampled_uncached = model.generate(**traj, do_sample=True, use_cache=False)
    assert torch.equal(sampled_cached, sampled_uncached)


@pytest.mark.parametrize("kind", ["msvae", "speaker"])
def test_sampling_with_seed_and_max_new_tokens(kind: str, tok: MSVAETokenizer) -> None:
    """On an untrained (random) model: sampling is reproducible under a seed; max_new_tokens caps length."""
    torch.manual_seed(0)
    cls, config = (MSVAEModel, MSVAEConfig) if kind == "msvae" else (SpeakerModel, SpeakerConfig)
    model = cls(config(vocab_size=len(tok), **TINY)).eval()
    traj = trajectory(pairs(tok))
    torch.manual_seed(11)
    first = model.generate(**traj, do_sample=True, max_new_tokens=6)
    torch.manual_seed(11)
    second = model.generate(**traj, do_sample=True, max_new_tokens=6)
    assert torch.equal(first, second)
    assert first.shape[1] <= 7 and (first[:, 0] == model.config.bos_token_id).all()
    assert first.max() < model.config.vocab_size
    greedy = model.generate(**traj, max_new_tokens=3)
    assert greedy.shape == (3, 4)
    assert model.generate(**traj, max_new_tokens=1).shape == (3, 2)
    beams = model.generate(**traj, max_new_tokens=4, num_beams=3, num_return_sequences=2)
    assert beams.shape[0] == 6 and beams.shape[1] <= 5


def test_generate_needs_inputs(tok: MSVAETokenizer) -> None:
    model = SpeakerModel(SpeakerConfig(vocab_size=len(tok), **TINY))
    with pytest.raises(ValueError, match="trajectory"):
        model.generate()
    with pytest.raises(ValueError, match="speaker"):
        model.generate(envs=LEVEL, seeds=[0], tokenizer=tok)
    follower = FollowerModel(FollowerConfig(vocab_size=len(tok), **TINY))
    for call in (follower.generate, MSVAEModel(MSVAEConfig(vocab_size=len(tok), **TINY)).generate):
        with pytest.raises(ValueError, match=r"generate\(envs, seeds\) rolls|roll out as model.follow\(envs, seeds\)"):
            call()
        with pytest.raises(ValueError, match="pass seeds"):
            call(envs=LEVEL)
        with pytest.raises(ValueError, match=r"got \['num_beams'\]: decoding arguments belong"):
            call(envs=LEVEL, seeds=[0], tokenizer=tok, num_beams=3)
    traj = real_batch(tok, lengths=(2, 3))
    with pytest.raises(ValueError, match="does not speak"):
        follower.generate(traj["observations"])
    msvae = MSVAEModel(MSVAEConfig(vocab_size=len(tok), **TINY))
    with pytest.raises(ValueError, match="seeds go with envs"):
        msvae.generate(traj["observations"], traj["directions"], traj["actions"], seeds=[0])
    with pytest.raises(ValueError, match="tokenizer"):
        follower.follow(LEVEL, [0])


# ------------------------------------------------------------------------------------------------ follower
def followers(tok: MSVAETokenizer) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    models = [MSVAEModel(MSVAEConfig(vocab_size=len(tok), **TINY)).eval()]
    for attention in ("none", "attention", "bottleneck"):
        torch.manual_seed(0)
        models.append(FollowerModel(FollowerConfig(vocab_size=len(tok), follower_attention=attention, **TINY)).eval())
    return models


def check_results(results: list[EpisodeResult], seeds: list[int], max_steps: int, level: str = LEVEL) -> None:
    """Seed order, step caps, success == reward > 0, and the reward that replaying the actions gives."""
    assert [r.seed for r in results] == seeds
    for r in results:
        assert isinstance(r, EpisodeResult)
        assert 1 <= r.steps <= max_steps and r.steps == len(r.actions)
        assert all(0 <= a < 7 for a in r.actions)
        assert r.success == (r.reward > 0)
        replay = replay_episode(level, r.seed, r.actions)
        assert replay.instruction == r.instruction and replay.reward == pytest.approx(r.reward)


@pytest.mark.parametrize("index", range(4), ids=["msvae", "follower-none", "follower-attention", "follower-bottleneck"])
def test_follower_generate_on_local_envs(index: int, tok: MSVAETokenizer) -> None:
    """follow(level id) and follow([env, ...]) give the same EpisodeResults."""
    model = followers(tok)[index]
    seeds, max_steps = list(range(8)), 6
    by_id = model.follow(LEVEL, seeds, tokenizer=tok, max_steps=max_steps)
    check_results(by_id, seeds, max_steps)
    envs = [gym.make(LEVEL) for _ in range(3)]
    by_list = model.follow(envs, seeds, tokenizer=tok, max_steps=max_steps)
    assert [r.to_dict() for r in by_list] == [r.to_dict() for r in by_id]
    # generate() with envs rolls out: the same episodes, by keyword or with the level as its first argument
    assert [r.to_dict() for r in model.generate(envs=LEVEL, seeds=seeds, tokenizer=tok, max_steps=max_steps,
                                                batch_size=3)] == [r.to_dict() for r in by_id]
    told = model.generate(LEVEL, seeds[:2], tokenizer=tok, max_steps=max_steps, instructions=["go to a box"] * 2)
    assert [r.to_dict() for r in told] == [r.to_dict() for r in model.follow(
        LEVEL, seeds[:2], tokenizer=tok, max_steps=max_steps, instructions=["go to a box"] * 2)]
    model.tokenizer = tok  # the attached tokenizer is used when none is passed
    assert [r.actions for r in model.follow(LEVEL, seeds[:2], max_steps=max_steps)] == [
        r.actions for r in by_id[:2]
    ]


def test_follower_on_boss_local_has_some_reward_cases(tok: MSVAETokenizer) -> None:
    """The bot's own actions, fed through the policy protocol, succeed: success flags are not all False by
    construction. (A scripted policy that replays the bot's episode.)"""
    from msvae_hf.data.demos import run_bot
    from msvae_hf.evaluation.rollout import rollout

    env = gym.make("BabyAI-BossLocal-v0")
    seeds = [0, 1, 2]
    plans = {i: run_bot(env, s)["actions"] for i, s in enumerate(seeds)}

    class Replayer:
        def reset(self, instructions):
            self.t = np.zeros(len(instructions), dtype=int)

        def act(self, observations, directions, env_ids):
            out = np.array([plans[i][self.t[i]] for i in env_ids])
            self.t[env_ids] += 1
            return out

    results = rollout(Replayer(), "BabyAI-BossLocal-v0", seeds)
    assert all(r.success and r.reward > 0 for r in results)
    check_results(results, seeds, max_steps=10**6, level="BabyAI-BossLocal-v0")


@pytest.mark.parametrize("index", [0, 2], ids=["msvae", "follower-attention"])
def test_step_by_step_policy_matches_rollout(index: int, tok: MSVAETokenizer) -> None:
    """policy(tok).reset / act, one env at a time by hand, chooses the actions the batched rollout chose."""
    model = followers(tok)[index]
    seeds, max_steps = [3, 4, 5], 6
    batched = model.follow(LEVEL, seeds, tokenizer=tok, max_steps=max_steps)
    policy = model.policy(tok)
    for seed, result in zip(seeds, batched, strict=True):
        env = gym.make(LEVEL)
        obs, _ = env.reset(seed=seed)
        policy.reset([obs["mission"]])
        actions = []
        for _ in range(max_steps):
            a = int(policy.act(obs["image"][None], np.array([obs["direction"]]), np.array([0]))[0])
            actions.append(a)
            obs, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                break
        assert actions == result.actions, seed


def test_follow_with_given_instructions_reads_them() -> None:
    """`follow(envs, seeds, instructions=[...])` feeds the caller's text to the model, wave after wave."""
    tok = msvae_hf.MSVAETokenizer.from_grammar()
    model = msvae_hf.FollowerModel(msvae_hf.FollowerConfig(vocab_size=len(tok), hidden_size=32, latent_dim=32,
                                                          obs_channels=8, decoder_ffn_dim=32)).eval()
    seen: list[str] = []
    original = msvae_hf.evaluation.policy.FollowerPolicy.reset

    def spy(self, instructions):
        seen.extend(instructions)
        return original(self, instructions)

    msvae_hf.evaluation.policy.FollowerPolicy.reset = spy
    try:
        texts = ["go to the red ball", "go to a key", "pick up the blue box"]
        results = model.follow("BabyAI-GoToLocal-v0", [1, 2, 3], tokenizer=tok, instructions=texts, max_steps=3,
                               batch_size=2)
    finally:
        msvae_hf.evaluation.policy.FollowerPolicy.reset = original
    assert seen == texts and len(results) == 3
    with pytest.raises(ValueError, match="2 instructions for 3 seeds"):
        model.follow("BabyAI-GoToLocal-v0", [1, 2, 3], tokenizer=tok, instructions=texts[:2])


def test_select_action_steps_a_gymnasium_vector_env_as_follow_rolls_out(tok: MSVAETokenizer) -> None:
    """policy().select_action on a vector env's observations as they come: the actions follow() takes on the same
    seeds, and an env whose episode starts again gets the actions a fresh policy would take there."""
    import gymnasium as gym

    seeds, steps = [3, 5, 8], 6
    for model in followers(tok)[:2]:
        model.tokenizer = tok
        expected = [r.actions for r in model.follow("BabyAI-GoToLocal-v0", seeds, max_steps=steps)]
        envs = gym.make_vec("BabyAI-GoToLocal-v0", num_envs=len(seeds), vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        observation, _ = envs.reset(seed=seeds)
        policy, taken, start = model.policy(), [], None
        for _ in range(steps):
            actions = policy.select_action(observation, start)
            taken.append(actions)
            observation, _, terminated, truncated, _ = envs.step(actions)
            start = terminated | truncated
        for i, actions in enumerate(expected):
            assert [int(a[i]) for a in taken[:len(actions)]] == actions
        restart = np.array([True, False, False])  # env 0 starts again on its current observation
        fresh = model.policy().select_action({k: v[:1] for k, v in observation.items()})
        assert policy.select_action(observation, restart)[0] == fresh[0]
        envs.close()


@pytest.mark.parametrize("mode", ["SAME_STEP", "NEXT_STEP"])
def test_select_action_starts_each_new_episode_afresh_under_either_autoreset_mode(tok: MSVAETokenizer,
                                                                                  mode: str) -> None:
    """Episodes cut at 3 steps: with ``episode_start`` as select_action's docstring says for the vector env's
    autoreset mode (this step's ``terminated | truncated`` under SAME_STEP, the previous step's under NEXT_STEP),
    the first action of every new episode is a fresh policy's on that observation."""
    import gymnasium as gym

    model = followers(tok)[0]
    model.tokenizer = tok
    envs = gym.make_vec("BabyAI-GoToLocal-v0", num_envs=3, vectorization_mode="sync", max_steps=3,
                        vector_kwargs={"autoreset_mode": getattr(gym.vector.AutoresetMode, mode)})
    observation, _ = envs.reset(seed=[3, 5, 8])
    policy, start, done, firsts = model.policy(), None, np.zeros(3, dtype=bool), 0
    for step in range(1, 10):
        actions = policy.select_action(observation, start)
        for i in range(3) if step > 1 else ():
            if envs.envs[i].unwrapped.step_count:  # not a new episode's first frame
                continue
            fresh = model.policy()
            assert actions[i] == fresh.select_action({k: v[i:i + 1] for k, v in observation.items()})[0]
            # the state a step leaves: a fresh one's (batched and single-env sums round apart)
            assert torch.allclose(policy.h[:, i], fresh.h[:, 0], atol=1e-5)
            assert torch.allclose(policy.c[:, i], fresh.c[:, 0], atol=1e-5)
            assert policy.previous[i] == fresh.previous[0]
            firsts += 1
        observation, _, terminated, truncated, _ = envs.step(actions)
        start, done = (terminated | truncated, None) if mode == "SAME_STEP" else (done, terminated | truncated)
    assert firsts == 6  # two new episodes an env (at steps 4 and 7 under SAME_STEP, 5 and 9 under NEXT_STEP)
    envs.close()


def test_the_generation_config_sets_the_length_and_travels_with_the_model(tok: MSVAETokenizer, tmp_path) -> None:
    """max_new_tokens comes from the model's GenerationConfig (saved in generation_config.json), a call's own
    argument overrides it, as in transformers."""
    torch.manual_seed(0)
    model = MSVAEModel(MSVAEConfig(vocab_size=len(tok), **TINY)).eval()
    assert model.generation_config.max_new_tokens == model.config.max_instruction_length - 1
    traj = trajectory(pairs(tok))
    model.generation_config.max_new_tokens = 2
    assert model.generate(**traj).shape[1] <= 3  # <bos> and at most 2 new tokens
    assert model.generate(**traj, max_new_tokens=4, min_new_tokens=4).shape[1] == 5
    model.tokenizer = tok
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "generation_config.json").read_text())["max_new_tokens"] == 2
    assert MSVAEModel.from_pretrained(tmp_path).generation_config.max_new_tokens == 2
