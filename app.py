"""MS-VAE in a Hugging Face Space (Gradio): follow an instruction in a BabyAI level and watch the rollout, read what
the speaker says of the same trajectory, or let the bot play a seed and hear the speaker describe it.

    pip install -e ".[space]"
    python app.py --model outputs/quickstart/msvae/best      # saved model folders or Hub ids; needs no network
    python app.py --model runs/a/best runs/b/best --port 7861 --share   # two models, a public link (Gradio's)
    python app.py --allow-any-model                           # local use: a free field for any folder or Hub id

The Space serves only the models it was started with (a menu); a free model field only with --allow-any-model.
Instructions are read as the model reads them (lower case, surrounding punctuation dropped, at most
``MAX_INSTRUCTION_CHARS`` characters); a word outside its vocabulary is named in the page, with the words it knows.
A typed instruction is the episode's mission: the level's verifier judges the rollout by it
(``msvae_hf.envs.missions.set_mission``), and one outside the levels' grammar or naming nothing in the room is
refused before any rollout, listing the room's objects; the episode's own mission stays shown.
Requests are served one at a time, at most ``QUEUE_SIZE`` waiting. On a Space this file is the entry point (the
Spaces convention); set ``MSVAE_MODEL`` to the model's Hub id (several: separated by commas).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
from pathlib import Path

import gradio as gr
from huggingface_hub import ModelCard
from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the Auto classes and the Local levels)
from msvae_hf.envs import seeds
from msvae_hf.envs.levels import BOSS_LOCAL_ID, GOTOSEQ_LOCAL_ID, OTHER_ONE_ROOM_LEVELS, PAPER_LEVELS, resolve_level
from msvae_hf.envs.missions import InstructionError, regenerate_missions
from msvae_hf.envs.seeds import MAX_SEED
from msvae_hf.evaluation.metrics import spl
from msvae_hf.evaluation.render import save_episode_gif
from msvae_hf.evaluation.rollout import BotPolicy, EpisodeResult, rollout
from msvae_hf.hub.repo_ids import is_hub_repo_id

LEVELS = [*PAPER_LEVELS, *OTHER_ONE_ROOM_LEVELS]
"""The levels offered: the paper's two (`msvae_hf.envs.levels`) and BabyAI's other one-room levels."""
assert resolve_level(LEVELS[0]) == BOSS_LOCAL_ID and resolve_level(LEVELS[1]) == GOTOSEQ_LOCAL_ID
DEFAULT_MODELS = [m.strip() for m in os.environ.get("MSVAE_MODEL", "outputs/quickstart/msvae/best").split(",")
                  if m.strip()]
#: The longest instruction read (BabyAI's Local missions have at most 137 characters): time and memory of a
#: request grow with it.
MAX_INSTRUCTION_CHARS = 300
#: Requests waiting beyond the one being served; more are turned away with Gradio's "queue is full".
QUEUE_SIZE = 16
#: The Space's GIFs (a request without ``out_dir``): one folder, the newest KEPT_GIFS kept.
GIF_DIR = Path(tempfile.gettempdir()) / "msvae-space-gifs"
KEPT_GIFS = 64

#: What the page says judged the outcome: a typed instruction is the episode's mission (the level's verifier judges
#: by it: msvae_hf.envs.missions.set_mission); with nothing typed, the episode's own mission.
JUDGED = {True: "judged by the instruction typed", False: "judged by the episode's own mission"}


def load_model(source: str):
    """A saved MS-VAE, follower or speaker from a folder or a Hub id (with its tokenizer), in eval mode, one in
    memory however the folder is spelt (``best``, ``best/``, ``x/./best``: the cache is keyed by the resolved
    folder). A name that reads as a local path (``msvae_hf.hub.repo_ids.is_hub_repo_id``) and does not exist is refused
    at once."""
    if is_hub_repo_id(source):
        return _load_model(source)
    if not Path(source).exists():
        raise gr.Error(f"no such folder: {source!r} (a model is a saved folder or a Hub id, user/name)")
    return _load_model(str(Path(source).resolve()))


@functools.lru_cache(maxsize=4)
def _load_model(source: str):
    try:
        model = AutoModel.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise gr.Error(f"cannot load a model from {source!r}: {' '.join(str(err).split())}") from err
    if model.tokenizer is None:
        raise gr.Error(f"{source!r} has no tokenizer.json beside its weights: save it with its tokenizer")
    return model.eval()


def model_levels(source: str) -> list[str]:
    """``LEVELS`` with the level ``source`` was trained on first, where its run folder's results.json says."""
    results = Path(source).parent / "results.json"
    try:  # a run records its level as given: a short name (GoToSeqLocal) or a gymnasium id
        recorded = json.loads(results.read_text(encoding="utf-8")).get("level") if results.is_file() else None
        trained = resolve_level(recorded) if isinstance(recorded, str) else None
    except (OSError, ValueError):
        trained = None
    own = [name for name in LEVELS if trained and resolve_level(name) == trained]
    return own + [name for name in LEVELS if name not in own]


def measured_test(source: str) -> tuple[dict[str, float], str] | None:
    """The served model's test numbers and where they come from: its run's ``results.json`` (a run folder's
    ``best/``), else its card's model-index (``README.md`` in the folder, or the Hub card of an id); None if neither
    holds a test success rate."""
    local = not is_hub_repo_id(source) or Path(source).exists()
    results = Path(source).parent / "results.json"
    if local and results.is_file():
        try:
            test = json.loads(results.read_text(encoding="utf-8")).get("test") or {}
        except (OSError, ValueError):
            test = {}
        if "success_rate" in test:
            return test, f"its run's {results.name}"
    card = Path(source) / "README.md"
    try:
        data = ModelCard.load(card if local else source, ignore_metadata_errors=True).data
    except Exception:  # no card here or on the Hub (offline, missing, unreadable): nothing measured to show
        return None
    test = {r.metric_type: r.metric_value for r in (data.eval_results or []) if r.dataset_split == "test"}
    return (test, "its model card") if "success_rate" in test else None


def measured(source: str) -> str:
    """The page's line of what the served model was measured to do (SR, SR told another episode's mission, SR on
    another mission of the same room, SPL), or that it was not measured."""
    found = measured_test(source)
    if found is None:
        return (f"**{source}**: not measured (no results.json beside it, no test success rate in its card): "
                "what it does here says nothing of how often it succeeds")
    test, where = found
    parts = [f"SR {100 * test['success_rate']:.1f} %"]
    for key, words in (("success_rate_other_mission", "told another episode's mission"),
                       ("success_rate_same_room", "told another mission of its room")):
        if key in test:
            parts.append(f"{words} {100 * test[key]:.1f} %")
    if "spl" in test:
        parts.append(f"SPL {test['spl']:.3f}")
    episodes = f" over {test['episodes']} test episodes" if "episodes" in test else ""
    return f"**{source}**, measured{episodes} ({where}): {', '.join(parts)}"


def check_seed(seed: float | None) -> int:
    """A visitor's seed as an int in [0, MAX_SEED], or gr.Error saying what a seed is (the package's check)."""
    try:
        return seeds.check_seed(seed)
    except ValueError as err:
        raise gr.Error(str(err)) from None


def check_length(text: str) -> None:
    """gr.Error for an instruction over MAX_INSTRUCTION_CHARS, before any work is spent on it."""
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise gr.Error(f"the instruction has {len(text)} characters; at most {MAX_INSTRUCTION_CHARS} are read "
                       "(BabyAI's missions have fewer than 140)")


def read_instruction(text: str, tokenizer) -> str:
    """The typed instruction as the model reads it: at most MAX_INSTRUCTION_CHARS, lower case, surrounding
    punctuation and repeated spaces dropped; gr.Error naming the words outside the vocabulary and the ones in it."""
    check_length(text)
    text = " ".join(text.lower().split()).strip(" .!?;:'\"")
    specials = set(tokenizer.all_special_tokens)  # "<eos>" typed is no word: the model would read an end mid-text
    unknown = sorted(set(tokenizer.unknown_words(text)) | {w for w in text.split() if w in specials})
    if unknown:
        known = sorted(w for w in tokenizer.get_vocab() if w not in tokenizer.all_special_tokens)
        raise gr.Error(f"unknown words: {', '.join(unknown)}; this model knows: {', '.join(known)}")
    return text


def _speaker_says(model, episode: EpisodeResult) -> str:
    if not hasattr(model, "describe"):
        return "(this model is a follower: it does not speak)"
    return model.describe([episode.observations], [episode.directions], [episode.actions])[0]


def gif_path(out_dir: str | None, name: str) -> Path:
    """Where a request's GIF goes: ``out_dir`` when given, else the Space's one GIF folder, where only the newest
    ``KEPT_GIFS`` stay (the page shows one at a time: older ones are gone once a visitor's page moved on), so that
    a public Space's disk does not fill with its visitors' GIFs."""
    if out_dir is not None:
        return Path(out_dir) / f"{name}.gif"
    GIF_DIR.mkdir(parents=True, exist_ok=True)
    kept = sorted(GIF_DIR.glob("*.gif"), key=lambda p: p.stat().st_mtime)
    for old in kept[: max(0, len(kept) - KEPT_GIFS + 1)]:
        old.unlink(missing_ok=True)
    handle, path = tempfile.mkstemp(suffix=f"_{name}.gif", dir=GIF_DIR)  # a name no other request has
    os.close(handle)
    return Path(path)


def _show(episode: EpisodeResult, said: str, mission: str, out_dir: str | None, name: str,
          bot_steps: int | None = None) -> tuple[str, str]:
    """The GIF and the page's words; ``mission`` is the episode's own, ``episode.instruction`` what judged it."""
    gif = save_episode_gif(episode.frames, gif_path(out_dir, name), episode.instruction, caption=said)
    typed = episode.instruction != mission
    outcome = f"{'success' if episode.success else 'failure'} in {episode.steps} steps ({JUDGED[typed]})"
    if bot_steps is not None:  # SPL against the bot on this episode (msvae_hf.evaluation.metrics.spl)
        outcome += f"; the bot takes {bot_steps} (SPL {spl(episode.success, episode.steps, bot_steps):.2f})"
    return str(gif), (f"mission: {mission}\ninstruction followed: {episode.instruction}\n"
                      f"{outcome}\nthe speaker says: {said}")


def follow(source: str, level: str, seed: float, instruction: str, out_dir: str | None = None) -> tuple[str, str]:
    """Roll the model out on ``level``'s episode ``seed`` following ``instruction`` (empty: the env's mission);
    returns the rollout's GIF and what happened, with the speaker's description of the trajectory."""
    seed = check_seed(seed)
    check_length(instruction or "")
    model = load_model(source)
    if not hasattr(model, "follow"):
        raise gr.Error("this model is a speaker: it cannot follow; use the Bot tab")
    typed = read_instruction(instruction or "", model.tokenizer)
    given = {"missions": [typed]} if typed else {}
    level_id = resolve_level(level)
    try:  # a typed instruction the level cannot judge, or naming nothing in the room, is refused at reset
        bot_steps = rollout(BotPolicy(), level_id, [seed], **given)[0].steps
    except InstructionError as err:
        raise gr.Error(str(err)) from None
    except Exception as err:  # noqa: BLE001  (the bot's own planner failing on a mission it cannot plan)
        raise gr.Error(f"the bot cannot carry out {typed or 'this mission'!r} here ({type(err).__name__}), so "
                       "there is no path to compare with: try another instruction or seed") from None
    episode = model.follow(level_id, [seed], record_frames=True, record_observations=True, **given)[0]
    return _show(episode, _speaker_says(model, episode), regenerate_missions(level_id, [seed])[0], out_dir,
                 f"follow_{level}_{seed}", bot_steps)


def bot(source: str, level: str, seed: float, out_dir: str | None = None) -> tuple[str, str]:
    """The bot plays ``level``'s episode ``seed``; returns its GIF and the speaker's description beside the
    mission."""
    seed = check_seed(seed)
    model = load_model(source)
    episode = rollout(BotPolicy(), resolve_level(level), [seed], record_frames=True, record_observations=True)[0]
    return _show(episode, _speaker_says(model, episode), episode.instruction, out_dir, f"bot_{level}_{seed}")


def served_only(models: list[str], allow_any: bool):
    """A check of a request's model: one of ``models`` (the Space's), unless ``allow_any``; gr.Error otherwise,
    naming the models served (never a path the visitor typed)."""
    def check(source: str) -> str:
        if not allow_any and source not in models:
            raise gr.Error(f"this Space serves only {', '.join(models)}")
        return source
    return check


def build(models: list[str] | str = DEFAULT_MODELS, allow_any: bool = False) -> gr.Blocks:
    """The Space: a menu of ``models`` (a free model field with ``allow_any``, for local use) and two tabs (Follow,
    Bot), each a GIF and a text; one request at a time, at most QUEUE_SIZE waiting."""
    models = [models] if isinstance(models, str) else list(models)
    if not models:
        raise ValueError("no model to serve: give at least one --model")
    check = served_only(models, allow_any)
    levels = model_levels(models[0])

    def follow_served(source: str, level: str, seed: float, instruction: str) -> tuple[str, str]:
        return follow(check(source), level, seed, instruction)

    def bot_served(source: str, level: str, seed: float) -> tuple[str, str]:
        return bot(check(source), level, seed)

    with gr.Blocks(title="MS-VAE: instruction following and speaking in BabyAI") as demo:
        gr.Markdown("# MS-VAE\nFollow an instruction in a BabyAI level, or let the bot play and the speaker describe "
                    "it (Akuzawa, Iwasawa, Matsuo, IJCAI 2022; package `msvae-hf`). A typed instruction becomes the "
                    "episode's mission, and the level judges success by it (one naming nothing in the room is "
                    "refused, with what the room holds); with nothing typed, the episode's own mission. One request "
                    f"is served at a time, at most {QUEUE_SIZE} wait.")
        if allow_any:
            source = gr.Textbox(models[0], label="model (a saved folder or a Hub id)")
        else:
            source = gr.Dropdown(models, value=models[0], label="model")
        numbers = gr.Markdown(measured(models[0]))
        with gr.Tab("Follow"):
            with gr.Row():
                level = gr.Dropdown(levels, value=levels[0], label="level (the model's own first)")
                seed = gr.Number(1_000_000_000, precision=0, minimum=0, maximum=MAX_SEED, label="seed")
            instruction = gr.Textbox(label="instruction (empty: the episode's own mission)",
                                     max_length=MAX_INSTRUCTION_CHARS)
            run = gr.Button("Follow", variant="primary")
            with gr.Row():
                gif = gr.Image(label="rollout", type="filepath")
                text = gr.Textbox(label="what happened", lines=4)
            run.click(follow_served, [source, level, seed, instruction], [gif, text], api_name="follow",
                      concurrency_id="rollout", concurrency_limit=1)
        with gr.Tab("Bot"):
            with gr.Row():
                bot_level = gr.Dropdown(levels, value=levels[0], label="level (the model's own first)")
                bot_seed = gr.Number(1_000_000_000, precision=0, minimum=0, maximum=MAX_SEED, label="seed")
            play = gr.Button("Let the bot play", variant="primary")
            with gr.Row():
                bot_gif = gr.Image(label="the bot's episode", type="filepath")
                bot_text = gr.Textbox(label="the speaker's description", lines=4)
            play.click(bot_served, [source, bot_level, bot_seed], [bot_gif, bot_text], api_name="bot",
                       concurrency_id="rollout", concurrency_limit=1)  # one rollout at a time, of either tab

        def relevel(chosen: str):
            order = model_levels(chosen)
            return gr.update(choices=order, value=order[0]), gr.update(choices=order, value=order[0])

        source.change(relevel, source, [level, bot_level], api_name=False)
        # a menu changes once a choice is made; a free field only once the visitor leaves it (not at every key)
        (source.blur if allow_any else source.change)(lambda chosen: measured(check(chosen)), source, numbers,
                                                      api_name=False)
    return demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", nargs="+", default=DEFAULT_MODELS,
                        help="the saved model folders or Hub ids served ($MSVAE_MODEL, comma-separated)")
    parser.add_argument("--allow-any-model", action="store_true",
                        help="a free model field: any folder on this machine or Hub id (local use only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also a public link through Gradio's servers")
    args = parser.parse_args()
    build(args.model, allow_any=args.allow_any_model).launch(server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
