"""One training update replayed as a CUDA graph: forward, backward, gradient clipping and Adam in one launch.

An eager MS-VAE update on a GPU launches about 3,000 small kernels and reads values on the host (packing, real
positions), so the card idles most of the time. :class:`CapturedUpdate` runs the model on the ``"static"`` backend
(:mod:`msvae_hf.backends.registry`), where no shape depends on the data and nothing is read on the host, and captures
the whole update once per batch shape (a *bucket*: batches padded to a multiple of a time step and a token count,
:mod:`msvae_hf.data.prefetch`, and their real frames, counted on the host, rounded up to :data:`FRAME_MULTIPLE` slots
for the observation encoder); each later update copies its batch into the graph's input tensors and replays it. Several
runs on one card each get their own :class:`CapturedUpdate` and CUDA stream, so their graphs overlap.

Nothing non-finite reaches the weights: the graph computes whether the loss and the gradient norm are finite and
fused Adam skips a non-finite update on the device (its ``found_inf``), keeping the first such update's number and
terms; :meth:`CapturedUpdate.check`, called wherever the loop reads numbers anyway (logging, validation,
checkpoints), raises :class:`~msvae_hf.utils.run_folder.NonFiniteError` naming them. Without CUDA (``capture=False``)
the same update runs eagerly, which is how the CPU tests check it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..utils.run_folder import NonFiniteError, scalar_terms
from .update import update

WARMUP_UPDATES = 2
"""Eager updates run (and undone) on a side stream before a capture, as ``torch.cuda.graphs`` asks."""

FRAME_MULTIPLE = 1024
"""The observation encoder's frame slots are the batch's real frames rounded up to this (one graph per count)."""

TIME_MULTIPLE, LENGTH_MULTIPLE = 32, 16
"""The buckets of the captured update's batches: trajectories padded to a multiple of 32 steps, instructions to a
multiple of 16 tokens (:func:`msvae_hf.data.prefetch.pad_batch`), so that few shapes, each one graph, occur."""


def captured_adam(parameters, learning_rate: float) -> torch.optim.Adam:
    """Adam as :class:`CapturedUpdate` steps it: fused (one kernel for all parameters), capturable (its step
    counts live on the device) and able to skip a non-finite update on the device. The same update as
    :func:`msvae_hf.utils.runtime.adam`'s, to rounding."""
    return torch.optim.Adam(parameters, lr=learning_rate, fused=True, capturable=True)


@dataclass
class _Graph:
    inputs: dict[str, torch.Tensor]
    graph: torch.cuda.CUDAGraph | None


class CapturedUpdate:
    """``update(batch)``: one optimiser update of ``model`` on ``batch`` (a dict of the model's inputs); returns
    the update's scalar terms as one device tensor (``names`` orders them) without waiting for the device.

    ``optimizer`` must be :func:`captured_adam`'s. ``max_grad_norm`` clips the gradients' total norm as
    ``clip_grad_norm_`` does. ``capture`` (default: on CUDA) captures one graph per batch shape; ``stream``
    (CUDA) is where this run's copies and replays go (default: the current stream), so that several runs
    overlap; reading numbers back (``check``, ``last_terms``) waits for it. ``start``: the updates the run made
    before (a resumed run), so that errors name the run's own update. Each batch's values are checked on the host
    (token ids, actions, observation values and directions in the model's ranges): the device skips those checks.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float | None = None,
                 capture: bool | None = None, stream: torch.cuda.Stream | None = None,
                 frame_multiple: int | None = FRAME_MULTIPLE, start: int = 0) -> None:
        _check_optimizer(optimizer)
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        self.params = [p for p in model.parameters() if p.requires_grad]
        device = self.params[0].device
        self.capture = device.type == "cuda" if capture is None else capture
        if self.capture and device.type != "cuda":
            raise ValueError(f"capture needs the model on a CUDA device, got {device}")
        self.stream = stream
        self.frame_multiple = frame_multiple
        self.names: list[str] | None = None
        self._graphs: dict[tuple, _Graph] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None
        zero = torch.zeros((), device=device)
        self.updates = zero.clone().long() + start  # updates run so far, counted on the device
        self.first_bad = zero.clone().long() - 1  # the first non-finite update (1-based), -1: none
        self._found_inf = zero.clone()
        self.optimizer.found_inf = self._found_inf  # fused Adam skips the update where this is 1
        self.terms: torch.Tensor | None = None  # the last update's terms
        self.bad_terms: torch.Tensor | None = None  # the first non-finite update's terms

    # ------------------------------------------------------------------------------------------ one update
    def frames(self, batch: Mapping[str, torch.Tensor]) -> int | None:
        """The frame slots of ``batch``'s update: its real frames (read on the host) rounded up to
        ``frame_multiple``; None (every frame encoded) without a multiple."""
        if not self.frame_multiple:
            return None
        real = sum(int(t.sum()) for name, t in batch.items() if name.endswith("trajectory_mask"))
        return max(1, -(-real // self.frame_multiple)) * self.frame_multiple

    def _update(self, inputs: Mapping[str, torch.Tensor], frames: int | None) -> None:
        """The update itself (:func:`msvae_hf.training.update.update` on the static layout), eager or being captured:
        nothing in it waits for the device. Its terms and gradient norm (before clipping) are kept on the device;
        a non-finite one sets fused Adam's ``found_inf``, so that the step is skipped."""
        def forward() -> Any:
            with self.model.using_backend("static", frames):
                return self.model(**inputs)

        norm = None

        def check(output: Any) -> None:
            nonlocal norm
            grads = [p.grad for p in self.params if p.grad is not None]
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            terms = scalar_terms(output)
            if self.names is None:
                self.names = [*terms, "grad_norm"]
            values = torch.stack([*(t.detach().float() for t in terms.values()), norm.detach().float()])
            bad = ~torch.isfinite(values).all()
            self._found_inf.copy_(bad.float())
            first = bad & (self.first_bad < 0)
            self.first_bad.copy_(torch.where(first, self.updates + 1, self.first_bad))
            if self.terms is None:
                self.terms, self.bad_terms = torch.zeros_like(values), torch.zeros_like(values)
            self.bad_terms.copy_(torch.where(first, values, self.bad_terms))
            self.terms.copy_(values)

        def clip(parameters: list[torch.Tensor], max_norm: float) -> None:  # by the norm check() computed
            torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)

        update(forward, self.optimizer, self.max_grad_norm, check=check, clip=clip)
        self.updates.add_(1)

    def check_values(self, batch: Mapping[str, torch.Tensor]) -> None:
        """ValueError naming the first input outside the model's ranges (host tensors; what the default layout
        checks on the device, and an out-of-range index would otherwise corrupt or kill the captured update)."""
        config = self.model.config
        limits = {key: getattr(config, attribute, None) for key, attribute in (
            ("input_ids", "vocab_size"), ("observations", "obs_num_values"), ("directions", "num_directions"),
            ("actions", "num_actions"))}
        for name, t in batch.items():
            limit = limits.get(name.removeprefix("unpaired_"))
            if name.endswith("actions"):  # padding holds 0; only the real steps count
                t = t[batch[name.replace("actions", "trajectory_mask")].bool()]
            if limit is None or not t.numel():
                continue
            low, high = int(t.min()), int(t.max())
            if low < 0 or high >= limit:
                raise ValueError(f"{name} must be in [0, {limit}), got values in [{low}, {high}]")

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Run one update on ``batch`` (host tensors, pinned for an asynchronous copy, or device tensors)."""
        self.check_values(batch)
        frames = self.frames(batch)
        if not self.capture:
            self._zero_grad()
            self._update({k: v.to(self.params[0].device) for k, v in batch.items()}, frames)
            return self.terms
        key = (frames, *((name, tuple(t.shape), t.dtype) for name, t in sorted(batch.items())))
        if self.stream is not None:  # what the current stream did to the weights (e.g. loading them) comes first
            self.stream.wait_stream(torch.cuda.current_stream(self.params[0].device))
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            entry = self._graphs.get(key)
            if entry is None:
                entry = self._graphs[key] = self._capture(batch, frames)
            for name, t in batch.items():
                entry.inputs[name].copy_(t, non_blocking=True)
            entry.graph.replay()
        return self.terms

    # ------------------------------------------------------------------------------------------ capture
    def _capture(self, batch: Mapping[str, torch.Tensor], frames: int | None) -> _Graph:
        """Warm up on a side stream (undoing the warm-up's updates), then capture one update of this shape."""
        _check_optimizer(self.optimizer)  # e.g. an eager run's Adam state loaded over it since
        device = self.params[0].device
        inputs = {name: torch.empty_like(t, device=device) for name, t in batch.items()}
        for name, t in batch.items():
            inputs[name].copy_(t)
        saved = self._snapshot()
        rng = torch.cuda.get_rng_state(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_UPDATES):
                self._zero_grad()
                self._update(inputs, frames)
        torch.cuda.current_stream(device).wait_stream(side)
        self._restore(saved)
        torch.cuda.set_rng_state(rng, device)
        graph = torch.cuda.CUDAGraph()
        self._zero_grad()
        with torch.cuda.graph(graph, pool=self._pool, stream=self.stream, capture_error_mode="thread_local"):
            self._update(inputs, frames)
        return _Graph(inputs, graph)

    def _zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _snapshot(self) -> dict:
        """Copies of the weights, the optimiser's state and the device counters, to undo warm-up updates."""
        state = {p: {k: v.clone() for k, v in self.optimizer.state[p].items()} for p in self.params
                 if p in self.optimizer.state}
        counters = [self.updates.clone(), self.first_bad.clone()]
        return {"params": [p.detach().clone() for p in self.params], "state": state, "counters": counters}

    def _restore(self, saved: dict) -> None:
        """Put the snapshot back in place (the same tensors, so a captured graph's addresses stay valid)."""
        with torch.no_grad():
            for p, value in zip(self.params, saved["params"]):
                p.copy_(value)
            for p in self.params:
                for k, v in self.optimizer.state.get(p, {}).items():
                    before = saved["state"].get(p, {}).get(k)
                    v.copy_(before) if before is not None else v.zero_()  # state made by the warm-up: fresh
            self.updates.copy_(saved["counters"][0])
            self.first_bad.copy_(saved["counters"][1])

    # ------------------------------------------------------------------------------------------ reading back
    def check(self) -> None:
        """Raise NonFiniteError if an update so far was not finite (it was skipped on the device): one sync."""
        self._wait()
        first = int(self.first_bad)
        if first < 0:
            return
        bad = [name for name, value in zip(self.names, self.bad_terms.tolist()) if not math.isfinite(value)]
        raise NonFiniteError(
            f"update {first}: non-finite {', '.join(bad)}; the update was skipped and no later weights were saved: "
            "lower the learning rate or clip gradients (max_grad_norm), then resume from the last checkpoint"
        )

    def last_terms(self) -> dict[str, float]:
        """The last update's terms as numbers (one sync)."""
        self._wait()
        return dict(zip(self.names, self.terms.tolist())) if self.terms is not None else {}

    def _wait(self) -> None:
        """The current stream waits for this run's stream (its replays write the numbers read back)."""
        if self.stream is not None:
            torch.cuda.current_stream(self.params[0].device).wait_stream(self.stream)


def _check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    if not all(group.get("fused") and group.get("capturable") for group in optimizer.param_groups):
        raise ValueError("CapturedUpdate needs Adam with fused=True and capturable=True (captured_adam); an "
                         "optimiser state saved by an eager run does not have them: resume it without cuda_graphs")
