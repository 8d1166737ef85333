"""The follower's variants (``follower_conditioning`` head | film, ``previous_action_input``) and the metrics that
say whether a follower follows: SR told another episode's mission, SPL against the bot, the bot's mean steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import build, move_film, pad_more, real_batch, select, unpaired
from test_graphed import assert_captured_update_is_the_eager_one

from msvae_hf.evaluation import evaluate as evaluation
from msvae_hf.evaluation.evaluate import bot_episodes, evaluate_follower
from msvae_hf.evaluation.metrics import follower_summary, spl
from msvae_hf.evaluation.rollout import BotPolicy, EpisodeResult, evaluate_policy

VARIANTS = [
    pytest.param({"follower_conditioning": "film", "previous_action_input": False}, id="film"),
    pytest.param({"follower_conditioning": "film", "previous_action_input": True}, id="film-prev"),
    pytest.param({"follower_conditioning": "head", "previous_action_input": False}, id="head"),
    pytest.param({"follower_conditioning": "film_recurrent", "previous_action_input": False}, id="film-recurrent"),
    pytest.param({"follower_conditioning": "film_recurrent", "previous_action_input": True},
                 id="film-recurrent-prev"),
    pytest.param({"follower_conditioning": "film_both", "previous_action_input": False}, id="film-both"),
    pytest.param({"follower_conditioning": "film", "previous_action_input": False, "film_layers": 1}, id="film-1"),
]
FILM = {"follower_conditioning": "film", "previous_action_input": False}
FILMS = [pytest.param(FILM, id="film"),
         pytest.param({"follower_conditioning": "film_recurrent", "previous_action_input": False}, id="film-recurrent"),
         pytest.param({"follower_conditioning": "film_both", "previous_action_input": False}, id="film-both"),
         pytest.param({**FILM, "film_layers": 1}, id="film-1"),
         pytest.param({"follower_conditioning": "film_recurrent", "previous_action_input": False, "film_layers": 1},
                      id="film-recurrent-1")]


def built(kind: str, tok, **overrides):
    """A tiny model whose FiLM (zero at initialisation: the identity) is moved off zero, as training moves it."""
    return move_film(build(kind, tok, **overrides))


# ------------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize("variant", VARIANTS)
def test_follower_loss_invariant_to_padding_and_batch(tok, variant):
    model = built("follower-attention", tok, **variant)
    batch = real_batch(tok)
    with torch.no_grad():
        padded = model(**pad_more(batch), reduction="none").loss
        for i in range(len(batch["actions"])):
            torch.testing.assert_close(padded[i], model(**select(batch, [i]), reduction="none").loss[0],
                                       atol=1e-5, rtol=0)


def test_film_puts_the_instruction_into_the_memory_lstm_and_head_does_not(tok):
    """With FiLM the LSTM's states h'_t change with the instruction; with the head alone they cannot."""
    batch = real_batch(tok)
    other = {**batch, "input_ids": batch["input_ids"].roll(1, 0), "attention_mask": batch["attention_mask"].roll(1, 0)}
    for conditioning, moves in (("film", True), ("film_recurrent", True), ("film_both", True), ("head", False)):
        model = built("follower-attention", tok, follower_conditioning=conditioning)
        states = []
        for inputs in (batch, other):
            memory, mask = model.instruction_memory(inputs["input_ids"], inputs["attention_mask"])
            frames = model.encode_frames(inputs["observations"], inputs["directions"], inputs["trajectory_mask"])
            states.append(model.action_decoder.run(frames, inputs["actions"], inputs["trajectory_mask"], memory, mask))
        assert (not torch.allclose(*states)) == moves, conditioning


@pytest.mark.parametrize("layout", [{"backend": "default"}, {"backend": "static"},
                                    {"backend": "static", "frames": 40}], ids=["real", "every", "slots"])
def test_the_first_rows_frames_finish_as_the_whole_batchs_do(tok, layout):
    """EncodedFrames.first_rows (MS-VAE's z_y pass on the paired rows) finishes the first rows' frames with their
    FiLM as the whole batch's frames finish them, in every frame layout, without running the trunk again."""
    model = built("follower-attention", tok, **FILM)
    batch = real_batch(tok)
    memory, mask = model.instruction_memory(batch["input_ids"], batch["attention_mask"])
    film = model.action_decoder.film_parameters(memory, mask)
    with torch.no_grad(), model.using_backend(**layout):
        frames = model.encode_frames(batch["observations"], batch["directions"], batch["trajectory_mask"])
        whole = frames.features(film)
        for rows in (1, 2, len(film)):
            first = frames.first_rows(rows)
            assert first.maps.data_ptr() == frames.maps.data_ptr()
            torch.testing.assert_close(first.features(film[:rows]), whole[:rows], atol=1e-6, rtol=0)


def test_film_recurrent_reads_the_instruction_by_the_lstms_state(tok):
    """film_recurrent's FiLM at step t depends on h'_{t-1}: the same memory gives other parameters in other states,
    where film's are one per episode."""
    model = built("follower-attention", tok, follower_conditioning="film_recurrent")
    batch = real_batch(tok)
    memory, mask = model.instruction_memory(batch["input_ids"], batch["attention_mask"])
    decoder = model.action_decoder
    assert decoder.film_parameters(memory, mask) is None
    h = torch.randn(1, len(memory), model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    first, later = decoder.step_film(memory, mask, None, None), decoder.step_film(memory, mask, None, (h, h))
    assert first.shape == (len(memory), 2 * model.config.obs_channels * model.config.film_layers)
    assert not torch.allclose(first, later)


def test_film_both_starts_as_film_and_moves_its_reading_with_the_state(tok):
    """film_both's keys start at zero: a fresh one given film's weights computes film's logits and the same FiLM at
    every step; with its keys moved off zero its FiLM changes with the state."""
    film = built("follower-attention", tok, **FILM)
    both = build("follower-attention", tok, follower_conditioning="film_both", previous_action_input=False)
    assert not both.action_decoder.film.key.weight.any() and not both.action_decoder.film.key.bias.any()
    missing, unexpected = both.load_state_dict(film.state_dict(), strict=False)
    assert missing == ["action_decoder.film.key.weight", "action_decoder.film.key.bias"] and not unexpected
    batch = real_batch(tok)
    with torch.no_grad():
        torch.testing.assert_close(both(**batch).logits, film(**batch).logits, atol=1e-5, rtol=1e-5)
    memory, mask = both.instruction_memory(batch["input_ids"], batch["attention_mask"])
    h = torch.randn(1, len(memory), both.config.hidden_size, generator=torch.Generator().manual_seed(3))
    per_episode = film.action_decoder.film_parameters(memory, mask)
    torch.testing.assert_close(both.action_decoder.step_film(memory, mask, None, (h, h)), per_episode)
    with torch.no_grad():
        both.action_decoder.film.key.weight.normal_(std=0.1)
    assert not torch.allclose(both.action_decoder.step_film(memory, mask, None, (h, h)), per_episode)


def test_a_saved_film_follower_loads_as_film_both_and_as_nothing_else_without_its_keys(tok, tmp_path):
    """from_pretrained(..., follower_conditioning="film_both") on a saved ``film`` follower grows the keys at zero
    and computes the saved follower's logits; as ``film_recurrent`` (no learned queries to start from) it is refused,
    naming the weights it lacks."""
    film = built("follower-attention", tok, **FILM)
    film.save_pretrained(tmp_path)
    both = type(film).from_pretrained(tmp_path, follower_conditioning="film_both")
    assert not both.action_decoder.film.key.weight.any()
    batch = real_batch(tok)
    with torch.no_grad():
        torch.testing.assert_close(both(**batch).logits, film(**batch).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not match FollowerModel's config.*action_decoder.film.key.bias"):
        type(film).from_pretrained(tmp_path, follower_conditioning="film_recurrent")


def test_without_the_previous_action_the_logits_do_not_read_it(tok):
    """previous_action_input=False: the teacher-forced logits are the same whatever actions were taken before."""
    batch = real_batch(tok)
    shuffled = {**batch, "actions": torch.randint_like(batch["actions"], 0, 3)}
    for reads, differ in ((False, False), (True, True)):
        model = built("follower-attention", tok, follower_conditioning="film", previous_action_input=reads)
        with torch.no_grad():
            a, b = model(**batch).logits, model(**shuffled).logits
        assert (not torch.allclose(a, b)) == differ


@pytest.mark.parametrize("variant", VARIANTS)
def test_policy_steps_give_the_teacher_forced_logits(tok, variant):
    """Step by step, as the policy acts, the decoder gives the logits of the teacher-forced pass."""
    model = built("follower-attention", tok, **variant)
    batch = real_batch(tok)
    with torch.no_grad():
        forced = model(**batch).logits
        memory, mask = model.instruction_memory(batch["input_ids"], batch["attention_mask"])
        film = model.action_decoder.film_parameters(memory, mask)
        state, previous = None, torch.full((len(batch["actions"]),), model.config.num_actions)
        for t in range(batch["actions"].shape[1]):
            step_film = model.action_decoder.step_film(memory, mask, film, state)
            features = model.obs_encoder(batch["observations"][:, t], batch["directions"][:, t], step_film)
            logits, state = model.action_decoder.step(features, previous, state, memory, mask)
            real = batch["trajectory_mask"][:, t]
            torch.testing.assert_close(logits[real], forced[real, t], atol=1e-5, rtol=1e-5)
            previous = batch["actions"][:, t]


@pytest.mark.parametrize("film", FILMS)
@pytest.mark.parametrize("kind", ["msvae", "follower-attention", "follower-bottleneck"])
def test_film_static_layout_gives_the_default_layouts_terms_and_gradients(tok, kind, film):
    model = built(kind, tok, **film)
    batch = real_batch(tok)
    padded = pad_more(batch, extra_t=4, extra_l=3)
    if kind == "msvae":
        batch = {**batch, **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=1))}
        padded = {**padded, **unpaired(pad_more(real_batch(tok, (2, 6, 3, 1), 1), 2))}
    results = []
    for inputs, static in ((batch, False), (padded, True)):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with model.using_backend("static" if static else "default", frames=40 if static else None):
            loss = model(**inputs).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss, grads), (static_loss, static_grads) = results
    torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == static_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(static_grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("film", FILMS)
@pytest.mark.parametrize("kind", ["msvae", "follower-attention"])
def test_film_captured_update_makes_the_eager_update(tok, kind, film):
    """The CUDA-graph update, run eagerly on the CPU's static layout, makes the default step's update."""
    batch = real_batch(tok)
    if kind == "msvae":
        batch = {**batch, **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=10))}
    assert_captured_update_is_the_eager_one(built(kind, tok, **film).train(), built(kind, tok, **film).train(), batch)


@pytest.mark.parametrize("film", FILMS)
def test_film_msvae_every_parameter_gets_a_gradient(tok, film):
    model = built("msvae", tok, **film).train()
    out = model(**real_batch(tok), **unpaired(real_batch(tok, lengths=(6, 2, 3), seed=2)))
    out.loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("film", FILMS)
def test_film_msvae_paired_terms_do_not_depend_on_the_unpaired_batch(tok, mean_z, film):
    """Each z FiLMs its own rows' frames: the paired terms are the same with or without unpaired rows."""
    model = built("msvae", tok, **film)
    batch = real_batch(tok)
    with torch.no_grad():
        alone = model(**batch, reduction="none")
        both = model(**batch, **unpaired(real_batch(tok, lengths=(6, 2, 3), seed=2)), reduction="none")
    for name in ("a_1", "a_2", "b_1", "b_2", "c_1", "c_2"):
        torch.testing.assert_close(getattr(both, name), getattr(alone, name), atol=1e-4, rtol=1e-5, msg=name)


def test_msvae_with_film_refuses_a_fixed_action_decoder(tok):
    with pytest.raises(ValueError, match="unpaired_trains_action_decoder=False .* use 'head'"):
        build("msvae", tok, follower_conditioning="film", unpaired_trains_action_decoder=False)
    with pytest.raises(ValueError, match="follower_conditioning must be one of"):
        build("follower-attention", tok, follower_conditioning="late")
    for layers in (0, 3, True, "2", 2.0):
        with pytest.raises(ValueError, match="film_layers must be 1 or 2"):
            build("follower-attention", tok, film_layers=layers)


def test_a_follower_that_ignores_its_instruction_is_found_out(tok, tiny_demos):
    """instruction_use (logged at every validation) scores a follower whose instruction path is cut the same with
    any instruction; the default follower's actions depend on the words it reads."""
    from msvae_hf.data.demos import load_demos

    valid = load_demos(tiny_demos)["valid"]
    model = built("follower-attention", tok, **FILM)
    model.tokenizer = tok
    use = evaluation.instruction_use(model, valid, batch_size=8)
    assert use["nll_own"] != pytest.approx(use["nll_other"], abs=1e-4)
    with torch.no_grad():  # cut every path from the instruction: FiLM and the head's attention see nothing
        model.action_decoder.film.out.weight.zero_()
        model.action_decoder.attention.memory_proj.weight.zero_()
        model.action_decoder.attention.memory_proj.bias.zero_()
    deaf = evaluation.instruction_use(model, valid, batch_size=8)
    assert deaf["nll_own"] == pytest.approx(deaf["nll_other"], abs=1e-6)
    assert deaf["accuracy_own"] == deaf["accuracy_other"]


# ------------------------------------------------------------------------------------------------ the metrics
def _episode(seed: int, steps: int, success: bool) -> EpisodeResult:
    return EpisodeResult(seed=seed, instruction="", actions=[0] * steps, steps=steps, reward=float(success),
                         success=success)


def test_spl_against_a_closed_form():
    own = [_episode(0, 10, True), _episode(1, 20, True), _episode(2, 5, False), _episode(3, 4, True)]
    bot = [_episode(0, 10, True), _episode(1, 8, True), _episode(2, 5, True), _episode(3, 6, True)]
    other = [_episode(0, 9, False), _episode(1, 7, True), _episode(2, 5, False), _episode(3, 128, False)]
    summary = follower_summary(own, other, bot)
    assert "success_rate_same_room" not in summary
    assert follower_summary(own, other, bot, other[::-1])["success_rate_same_room"] == 0.25
    assert summary["spl"] == pytest.approx((1 + 8 / 20 + 0 + 1) / 4)  # a shorter path than the bot's counts 1
    assert summary["success_rate"] == 0.75 and summary["success_rate_other_mission"] == 0.25
    assert summary["reading"] == 0.5  # SR minus SR told another mission
    ten = [_episode(s, 5, s < 3) for s in range(10)], [_episode(s, 5, s < 2) for s in range(10)]
    assert follower_summary(*ten, ten[0])["reading"] == 0.1  # from the counts: 0.3 - 0.2 is not 0.1 in floats
    assert "reading" not in follower_summary(own, [], bot)  # not measured without the other missions
    assert summary["mean_steps"] == pytest.approx(39 / 4) and summary["bot_mean_steps"] == pytest.approx(29 / 4)
    assert spl(False, 3, 3) == 0 and spl(True, 0, 0) == 0  # no division by zero
    with pytest.raises(ValueError, match="one episode per seed"):
        follower_summary(own, other, bot[:3])


def test_the_bots_own_path_has_spl_one():
    bot = list(bot_episodes("BabyAI-GoToSeqLocal-v0", 12, 10**9))
    again = evaluate_policy(BotPolicy(), "GoToSeqLocal", 12, 10**9, batch_size=5)
    summary = follower_summary(again, again, bot[:-1])
    assert summary["spl"] == 1.0 and summary["success_rate"] == 1.0
    assert summary["bot_mean_steps"] == summary["mean_steps"] == pytest.approx(np.mean([b.steps for b in again]))


class _Recorder:
    """A model stand-in whose policy records the instructions it is told and walks forward."""

    training = False

    def __init__(self) -> None:
        self.told: list[str] = []

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def policy(self, tokenizer=None):
        recorder = self

        class Policy:
            def reset(self, instructions):
                recorder.told.extend(instructions)

            def act(self, observations, directions, env_ids):
                return np.full(len(env_ids), 2)

        return Policy()


def test_evaluate_follower_tells_each_seed_the_next_seeds_mission():
    model = _Recorder()
    summary, own = evaluate_follower(model, "GoToSeqLocal", 7, 10**9, batch_size=3)
    missions = [b.instruction for b in bot_episodes("BabyAI-GoToSeqLocal-v0", 7, 10**9)]
    same_room = [e.instruction for e in evaluate_policy(BotPolicy(), "GoToSeqLocal", 7, 10**9, missions="same_room")]
    # own missions, then seed s told seed s + 1's, then each told another mission of its room
    assert model.told == missions[:7] + missions[1:8] + same_room
    assert [r.instruction for r in own] == missions[:7]
    assert set(summary) >= {"success_rate", "success_rate_other_mission", "success_rate_same_room", "spl",
                            "mean_steps", "bot_mean_steps"}
    # batch-independent: another wave size gives the same numbers
    assert evaluate_follower(_Recorder(), "GoToSeqLocal", 7, 10**9, batch_size=7)[0] == summary
    with pytest.raises(ValueError, match="episodes must be at least 1"):
        evaluate_follower(model, "GoToSeqLocal", 0)


def test_msvae_from_a_film_follower_keeps_its_film(tok):
    from msvae_hf import MSVAEModel

    follower = built("follower-bottleneck", tok, **FILM)
    follower.tokenizer = tok
    model = MSVAEModel.from_baselines(follower)
    assert model.config.follower_conditioning == "film" and not model.config.previous_action_input
    for name, tensor in follower.action_decoder.state_dict().items():
        torch.testing.assert_close(model.action_decoder.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


def test_film_starts_as_the_identity_and_keeps_the_frames_scale(tok):
    """At initialisation FiLM leaves the map as it is (gamma = beta = 0); whatever (gamma, beta) become, the FiLMed
    map is normalised per frame, so the features the memory LSTM reads keep their scale (FiLM on the last map)."""
    model = build("follower-attention", tok, **FILM, film_layers=1)
    batch = real_batch(tok)
    mask = batch["trajectory_mask"].bool()
    encoder = model.obs_encoder
    maps, directions = encoder.trunk(batch["observations"][mask]), batch["directions"][mask]
    assert not model.action_decoder.film.out.weight.any()
    zero = torch.zeros(len(maps), 2 * maps.shape[1])
    torch.testing.assert_close(encoder.head(maps, directions, zero),
                               encoder.head(encoder.film_norm(maps), directions))
    huge = torch.cat([torch.full_like(zero[:, : maps.shape[1]], 1e4), torch.full_like(zero[:, maps.shape[1]:], 1e4)], 1)
    torch.testing.assert_close(encoder.head(maps, directions, huge), encoder.head(maps, directions, huge / 1e2),
                               rtol=1e-3, atol=1e-3)


def test_film_on_both_maps_modulates_the_first_before_the_second_convolution(tok):
    """film_layers = 2: (gamma_1, beta_1) FiLM the first convolution's map, then the ReLU and the second convolution,
    then (gamma_2, beta_2) FiLM its map, computed here from the encoder's weights by torch.nn.functional; without
    FiLM parameters the encoder is the one-layer FiLM encoder, and FiLM at zero is each map's norm alone."""
    import torch.nn.functional as F

    two = built("follower-attention", tok, **FILM, film_layers=2)
    one = build("follower-attention", tok, **FILM, film_layers=1)
    one.obs_encoder.load_state_dict({k: v for k, v in two.obs_encoder.state_dict().items() if "first_" not in k})
    batch = real_batch(tok)
    mask = batch["trajectory_mask"].bool()
    obs, directions = batch["observations"][mask], batch["directions"][mask]
    encoder, channels = two.obs_encoder, two.config.obs_channels
    film = torch.randn(len(obs), 4 * channels, generator=torch.Generator().manual_seed(3))
    (g1, b1), (g2, b2) = [(g[..., None, None], b[..., None, None]) for g, b in
                          (part.chunk(2, dim=1) for part in film.chunk(2, dim=1))]
    conv1, conv2 = encoder.conv[0], encoder.conv[2]
    x = F.conv2d(encoder.embed_cells(obs.long()).permute(0, 3, 1, 2), conv1.weight, conv1.bias, padding=1)
    x = F.group_norm(x * (1 + g1) + b1, 1, encoder.first_film_norm.weight, encoder.first_film_norm.bias)
    x = F.conv2d(F.relu(x), conv2.weight, conv2.bias, padding=1)
    x = F.group_norm(x * (1 + g2) + b2, 1, encoder.film_norm.weight, encoder.film_norm.bias)
    expected = F.relu(encoder.proj(F.relu(F.max_pool2d(x, 2)).flatten(1)) + encoder.direction_embedding(directions))
    with torch.no_grad():
        torch.testing.assert_close(encoder(obs, directions, film), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(encoder(obs, directions), one.obs_encoder(obs, directions), atol=0, rtol=0)
        second_only = one.obs_encoder(obs, directions, film[:, 2 * channels:])
        assert not torch.allclose(encoder(obs, directions, film), second_only)
    assert tuple(two.action_decoder.film.out.weight.shape)[0] == 4 * channels


def test_a_config_saved_before_film_layers_loads_with_one_modulated_map(tok, tmp_path):
    """config.json written before ``film_layers`` was a field names a FiLM follower without it: it modulated one map,
    and loads so (with its weights) whatever the default; a config that names the layers keeps them."""
    import json

    from msvae_hf import FollowerModel
    from msvae_hf.models.configuration_msvae import FollowerConfig

    model = built("follower-attention", tok, **FILM, film_layers=1)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["film_layers"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = FollowerModel.from_pretrained(tmp_path)
    assert loaded.config.film_layers == 1
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    assert FollowerConfig.from_dict({**saved, "film_layers": 2}).film_layers == 2
    no_follower = {k: v for k, v in saved.items() if k != "follower_conditioning"}
    assert FollowerConfig.from_dict(no_follower).film_layers == FollowerConfig().film_layers
