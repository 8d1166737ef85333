"""MS-VAE in a Hugging Face Space (Gradio): follow an instruction in a BabyAI level and watch the rollout, read what
the speaker says of the same trajectory, or let the bot play a seed and hear the speaker describe it.

    pip install -e ".[space]"
    python app.py --model outputs/quickstart/msvae/best      # a saved model folder or a Hub id; needs no network
    python app.py --model outputs/quickstart/msvae/best --port 7861 --share   # a public link (Gradio's)

On a Space this file is the entry point (the Spaces convention); set ``MSVAE_MODEL`` to the model's Hub id.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from pathlib import Path

import gradio as gr
from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the Auto classes and the Local levels)
from msvae_hf.envs.levels import BOSS_LOCAL_ID, GOTOSEQ_LOCAL_ID, resolve_level
from msvae_hf.metrics import spl
from msvae_hf.render import save_episode_gif
from msvae_hf.rollout import BotPolicy, EpisodeResult, rollout

LEVELS = ["BossLocal", "GoToSeqLocal", "GoToLocal", "PickupLoc", "PutNextLocal"]
"""The levels offered: the paper's two (`msvae_hf.envs.levels`) and BabyAI's other one-room levels."""
assert resolve_level(LEVELS[0]) == BOSS_LOCAL_ID and resolve_level(LEVELS[1]) == GOTOSEQ_LOCAL_ID
DEFAULT_MODEL = os.environ.get("MSVAE_MODEL", "outputs/quickstart/msvae/best")


@functools.lru_cache(maxsize=4)
def load_model(source: str):
    """A saved MS-VAE, follower or speaker from a folder or a Hub id (with its tokenizer), in eval mode."""
    try:
        model = AutoModel.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise gr.Error(f"cannot load a model from {source!r}: {err}") from err
    if model.tokenizer is None:
        raise gr.Error(f"{source!r} has no tokenizer.json beside its weights: save it with its tokenizer")
    return model.eval()


def _speaker_says(model, episode: EpisodeResult) -> str:
    if not hasattr(model, "describe"):
        return "(this model is a follower: it does not speak)"
    return model.describe([episode.observations], [episode.directions], [episode.actions])[0]


def _show(episode: EpisodeResult, said: str, instruction: str, out_dir: str | None, name: str,
          bot_steps: int | None = None) -> tuple[str, str]:
    gif = save_episode_gif(episode.frames, Path(out_dir or tempfile.mkdtemp()) / f"{name}.gif", instruction,
                           caption=said)
    outcome = f"{'success' if episode.success else 'failure'} in {episode.steps} steps (judged by the mission)"
    if bot_steps is not None:  # SPL against the bot on this episode (msvae_hf.metrics.spl)
        outcome += f"; the bot takes {bot_steps} (SPL {spl(episode.success, episode.steps, bot_steps):.2f})"
    return str(gif), (f"mission: {episode.instruction}\ninstruction followed: {instruction}\n"
                      f"{outcome}\nthe speaker says: {said}")


def follow(source: str, level: str, seed: float, instruction: str, out_dir: str | None = None) -> tuple[str, str]:
    """Roll the model out on ``level``'s episode ``seed`` following ``instruction`` (empty: the env's mission);
    returns the rollout's GIF and what happened, with the speaker's description of the trajectory."""
    model = load_model(source)
    if not hasattr(model, "follow"):
        raise gr.Error("this model is a speaker: it cannot follow; use the Bot tab")
    given = {"instructions": [instruction.strip()]} if instruction.strip() else {}
    episode = model.follow(resolve_level(level), [int(seed)], record_frames=True, record_observations=True,
                           **given)[0]
    bot_steps = rollout(BotPolicy(), resolve_level(level), [int(seed)])[0].steps
    return _show(episode, _speaker_says(model, episode), instruction.strip() or episode.instruction, out_dir,
                 f"follow_{level}_{int(seed)}", bot_steps)


def bot(source: str, level: str, seed: float, out_dir: str | None = None) -> tuple[str, str]:
    """The bot plays ``level``'s episode ``seed``; returns its GIF and the speaker's description beside the
    mission."""
    model = load_model(source)
    episode = rollout(BotPolicy(), resolve_level(level), [int(seed)], record_frames=True, record_observations=True)[0]
    return _show(episode, _speaker_says(model, episode), episode.instruction, out_dir, f"bot_{level}_{int(seed)}")


def build(model: str = DEFAULT_MODEL) -> gr.Blocks:
    """The Space: a model field and two tabs (Follow, Bot), each a GIF and a text."""
    with gr.Blocks(title="MS-VAE: instruction following and speaking in BabyAI") as demo:
        gr.Markdown("# MS-VAE\nFollow an instruction in a BabyAI level, or let the bot play and the speaker describe "
                    "it (Akuzawa, Iwasawa, Matsuo, IJCAI 2022; package `msvae-hf`).")
        source = gr.Textbox(model, label="model (a saved folder or a Hub id)")
        with gr.Tab("Follow"):
            with gr.Row():
                level = gr.Dropdown(LEVELS, value=LEVELS[0], label="level")
                seed = gr.Number(1_000_000_000, precision=0, label="seed")
            instruction = gr.Textbox(label="instruction (empty: the episode's own mission)")
            run = gr.Button("Follow", variant="primary")
            with gr.Row():
                gif = gr.Image(label="rollout", type="filepath")
                text = gr.Textbox(label="what happened", lines=4)
            run.click(follow, [source, level, seed, instruction], [gif, text])
        with gr.Tab("Bot"):
            with gr.Row():
                bot_level = gr.Dropdown(LEVELS, value=LEVELS[0], label="level")
                bot_seed = gr.Number(1_000_000_000, precision=0, label="seed")
            play = gr.Button("Let the bot play", variant="primary")
            with gr.Row():
                bot_gif = gr.Image(label="the bot's episode", type="filepath")
                bot_text = gr.Textbox(label="the speaker's description", lines=4)
            play.click(bot, [source, bot_level, bot_seed], [bot_gif, bot_text])
    return demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a saved model folder or a Hub id ($MSVAE_MODEL)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also a public link through Gradio's servers")
    args = parser.parse_args()
    build(args.model).launch(server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
