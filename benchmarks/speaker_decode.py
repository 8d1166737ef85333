"""Sequences/s of greedy instruction decoding, with and without the KV cache, for MS-VAE and the speaker.

    python benchmarks/speaker_decode.py [--batch-size 128] [--max-new-tokens 20] [--repeats 3] [--tiny]
                                        [--model-dir DIR] [--out results/speaker_decode.json]

Both models decode the SAME batch of real BabyAI trajectories (GoToSeqLocal bot episodes generated here;
`--level` to change). An untrained model would stop at a random eos, so to time a FIXED length the
decoders are forced to run exactly `--max-new-tokens` steps: `min_new_tokens = max_new_tokens` (eos is
suppressed until then). A trained `--model-dir` is decoded the same way. Cached decoding feeds one new
token per step through a transformers DynamicCache; uncached decoding re-runs the whole prefix at every
step. The sequences of both modes are checked to be identical; the ratio cached / uncached is reported.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch
from report import write_report
from train_step import TIMED_FOLLOWER

import msvae_hf  # noqa: F401  (registers the Local levels and Auto classes)
from msvae_hf import MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.data.collator import DemoCollator, for_loader
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

TINY = dict(hidden_size=32, latent_dim=32, obs_channels=16, decoder_ffn_dim=64, word_embed_dim=32,
            prior_hidden_size=32, obs_embed_dim=8, action_embed_dim=8)


def trajectories(level: str, n: int, tok: MSVAETokenizer) -> dict[str, torch.Tensor]:
    """n bot episodes of `level` as padded trajectory tensors."""
    import tempfile

    from msvae_hf.data.demos import generate_split

    with tempfile.TemporaryDirectory() as cache:
        ds, _ = generate_split(level, "valid", n, cache_dir=cache)
        rows = list(for_loader(ds.flatten_indices()))
    batch = DemoCollator(tok)(rows)
    return {k: batch[k] for k in ("observations", "directions", "actions", "trajectory_mask")}


@torch.no_grad()
def time_decode(model, batch: dict, new_tokens: int, use_cache: bool, repeats: int) -> tuple[float, torch.Tensor]:
    """Best-of-`repeats` seconds of one greedy generate() over the batch, and its sequences."""
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=use_cache, do_sample=False)
    ids = model.generate(**batch, **kwargs)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        ids = model.generate(**batch, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level", default="BabyAI-GoToSeqLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny random models (a smoke run)")
    parser.add_argument("--model-dir", action="append", default=[], help="trained checkpoints to time instead")
    parser.add_argument("--out", default="results/speaker_decode.json")
    args = parser.parse_args()

    torch.manual_seed(0)
    tok = MSVAETokenizer.from_grammar()
    batch = trajectories(args.level, args.batch_size, tok)
    if args.model_dir:
        from transformers import AutoModel

        models = {"/".join(Path(d).parts[-2:]): AutoModel.from_pretrained(d) for d in args.model_dir}
    else:
        extra = {**(TINY if args.tiny else {}), "vocab_size": len(tok), **TIMED_FOLLOWER}
        models = {"msvae": MSVAEModel(MSVAEConfig(**extra)), "speaker": SpeakerModel(SpeakerConfig(**extra))}
    results: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "device": "cpu", "torch": torch.__version__, "level": args.level, "batch_size": args.batch_size,
        "new_tokens": args.max_new_tokens, "tiny": args.tiny, "decoding": "greedy, fixed length", "models": {},
    }
    for name, model in models.items():
        model.eval()
        cached_s, cached_ids = time_decode(model, batch, args.max_new_tokens, True, args.repeats)
        uncached_s, uncached_ids = time_decode(model, batch, args.max_new_tokens, False, args.repeats)
        n = batch["actions"].shape[0]
        results["models"][name] = {
            "sequences_per_s_cached": n / cached_s, "sequences_per_s_uncached": n / uncached_s,
            "speedup_cached_over_uncached": uncached_s / cached_s,
            "decoded_length": int(cached_ids.shape[1]),
            "identical_sequences": bool(torch.equal(cached_ids, uncached_ids)),
        }
    write_report(results, args.out)


if __name__ == "__main__":
    main()
