"""Episode GIFs: the rendered frames with the instruction (and a caption) written under each frame.

`render_rollouts` runs a policy with recording on and writes one GIF per episode."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .rollout import EpisodeResult, RolloutPolicy, rollout


def wrap_text(text: str, font: ImageFont.ImageFont, width: int) -> list[str]:
    """Greedy word wrap so that every line fits in `width` pixels (a single long word stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and font.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines or [""]


def annotate_frame(frame: np.ndarray, texts: Sequence[str], font_size: int = 12) -> np.ndarray:
    """Return `frame` (H, W, 3 uint8) with a white band below it holding the wrapped `texts`."""
    font = ImageFont.load_default(size=font_size)
    height, width = frame.shape[:2]
    margin, line_height = 4, font_size + 3
    lines = [line for text in texts for line in wrap_text(text, font, width - 2 * margin)]
    canvas = Image.new("RGB", (width, height + len(lines) * line_height + 2 * margin), "white")
    canvas.paste(Image.fromarray(np.asarray(frame, dtype=np.uint8)), (0, 0))
    draw = ImageDraw.Draw(canvas)
    for k, line in enumerate(lines):
        draw.text((margin, height + margin + k * line_height), line, fill="black", font=font)
    return np.asarray(canvas)


def save_episode_gif(
    frames: Sequence[np.ndarray],
    path: str | Path,
    instruction: str,
    caption: str | None = None,
    fps: float = 4,
) -> Path:
    """Write `frames` as a looping GIF at `path` with the instruction (and `caption`, e.g. the
    speaker's description of the trajectory) and a step counter drawn under every frame; returns the
    path. The counter also keeps identical frames (e.g. after a `done` action) distinct, so GIF writers do
    not merge them and the GIF has exactly `len(frames)` frames."""
    if not frames:
        raise ValueError("save_episode_gif needs at least one frame")
    texts = [f"instruction: {instruction}"] + ([f"speaker: {caption}"] if caption is not None else [])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    last = len(frames) - 1
    annotated = [annotate_frame(f, [*texts, f"step {t}/{last}"]) for t, f in enumerate(frames)]
    imageio.mimsave(path, annotated, duration=1000 / fps, loop=0)
    return path


def render_rollouts(
    policy: RolloutPolicy,
    level: str,
    seeds: Sequence[int],
    out_dir: str | Path,
    describe: Callable[[list[EpisodeResult]], list[str]] | None = None,
    fps: float = 4,
) -> list[Path]:
    """Roll `policy` out on `seeds` with recording on and write one GIF per episode to `out_dir`, named
    `<seed>_<success|failure>.gif`; `describe(episodes)` (e.g. a speaker) supplies the captions."""
    episodes = rollout(policy, level, seeds, record_frames=True, record_observations=True)
    captions = describe(episodes) if describe is not None else [None] * len(episodes)
    return [
        save_episode_gif(
            episode.frames,
            Path(out_dir) / f"{episode.seed}_{'success' if episode.success else 'failure'}.gif",
            episode.instruction,
            caption=caption,
            fps=fps,
        )
        for episode, caption in zip(episodes, captions, strict=True)
    ]
