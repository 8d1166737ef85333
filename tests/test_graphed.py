"""CapturedUpdate (msvae_hf.training.graphed) on the CPU, where it runs the update it would capture eagerly: the same
updates as the default training step, a non-finite update skipped on the device and named by ``check``, and the
whole update free of host reads (it runs on the meta device, where any read of a value fails)."""

from __future__ import annotations

import pytest
import torch
from model_helpers import build, key_bias_rows, real_batch, unpaired
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from msvae_hf.training.graphed import CapturedUpdate, captured_adam
from msvae_hf.utils.run_folder import NonFiniteError


def _batches(tok, count: int = 3) -> list[dict[str, torch.Tensor]]:
    return [{**real_batch(tok, seed=s), **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=10 + s))}
            for s in range(count)]


@pytest.mark.parametrize("max_grad_norm", [None, 0.5])
def test_captured_update_makes_the_default_steps_updates(tok, max_grad_norm):
    batches = _batches(tok)
    reference = build("msvae", tok).train()
    model = build("msvae", tok).train()
    model.load_state_dict(reference.state_dict())
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3, fused=True)
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        optimizer.zero_grad(set_to_none=True)
        reference(**batch).loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), max_grad_norm)
        optimizer.step()
    update = CapturedUpdate(model, captured_adam(model.parameters(), 1e-3), max_grad_norm=max_grad_norm)
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        terms = update(batch)
    assert update.names[0] == "loss" and update.names[-1] == "grad_norm" and terms.shape == (len(update.names),)
    update.check()
    assert int(update.updates) == 3
    for (name, want), got in zip(reference.named_parameters(), model.parameters()):
        keep = ~key_bias_rows(name, want)  # moved by rounding noise only (see key_bias_rows)
        torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-5, msg=name)


def test_a_non_finite_update_is_skipped_and_named(tok):
    model = build("msvae", tok).train()
    update = CapturedUpdate(model, captured_adam(model.parameters(), 1e-3))
    batches = _batches(tok)
    update(batches[0])
    before = [p.detach().clone() for p in model.parameters()]
    model.config.gamma = float("nan")  # update 2: V's weight is NaN, so the loss is
    update(batches[1])
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)  # skipped on the device: no weight moved
    model.config.gamma = 100.0
    update(batches[2])  # later updates go on until the loop reads the flag
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    with pytest.raises(NonFiniteError, match=r"^update 2: non-finite loss.*grad_norm; the update was skipped"):
        update.check()


def test_captured_update_needs_fused_capturable_adam(tok):
    model = build("msvae", tok)
    with pytest.raises(ValueError, match="fused=True and capturable=True"):
        CapturedUpdate(model, torch.optim.Adam(model.parameters()))
    with pytest.raises(ValueError, match="capture needs the model on a CUDA device"):
        CapturedUpdate(model, captured_adam(model.parameters(), 1e-3), capture=True)


class HostTensors(TorchDispatchMode):
    """Records each operator that reads a host tensor (not a 0-dim scalar) beside device ones, or copies a host
    tensor (any) to the device: during a capture each is a copy from pageable host memory, which CUDA refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        out = func(*args, **(kwargs or {}))
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        copy = func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)
        if any(t.device.type == "meta" for t in tensors + outputs) and any(t.device.type == "cpu" and (t.dim() or copy)
                                                                          for t in tensors):
            self.found.append(str(func))  # mixed in, or copied over (``.to(device)``)
        return out


@pytest.mark.parametrize("unpaired_lengths", [(2, 6, 3, 1), (2, 6, 3)], ids=["as-many-unpaired", "fewer-unpaired"])
def test_the_update_reads_no_value_on_the_host(tok, unpaired_lengths):
    """On the meta device every read of a value (``.item()``, ``nonzero``, a tensor's truth) raises, and no
    operator may mix in a host tensor: the update a graph captures runs there whole, clipping and the finiteness
    bookkeeping included, all but the optimiser's step (fused Adam has no meta kernel; on CUDA it is one kernel that
    reads ``found_inf`` on the device). Nor may a host tensor be copied over (``.to(device)``), which a capture
    refuses from pageable memory."""
    model = build("msvae", tok, prior="autoregressive", share_observation_encoder=False).train().to("meta")
    # fewer unpaired than paired trajectories (an epoch's last batch): D' merges two quantile functions' steps
    batch = {**real_batch(tok), **unpaired(real_batch(tok, lengths=unpaired_lengths, seed=10))}
    batch = {k: v.to("meta") for k, v in batch.items()}
    update = CapturedUpdate(model, captured_adam(model.parameters(), 1e-3), max_grad_norm=1.0)
    update.optimizer.step = lambda: None
    update.frames = lambda batch: 32  # counted on the host from host tensors; these are on meta
    update.check_values = lambda batch: None  # likewise checked on the host
    with HostTensors() as mode:
        assert update(batch).device.type == "meta"
    assert mode.found == []
    with pytest.raises(NotImplementedError):  # the default layout reads values (the check can fail)
        model(**batch)


def test_the_static_updates_operator_count_does_not_grow_with_length(tok, monkeypatch):
    """benchmarks/update_ops.py: the captured update's operators (each a GPU kernel at least; a recurrence as
    cuDNN's two) are the same at 16 and at 48 padded steps, where the default layout's grow with the length."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from update_ops import batch_of, count_update

    model = build("msvae", tok).train()
    counts = {}
    for length in (16, 48):
        batch = batch_of(tok, 8, length, words=12)
        for static in (False, True):
            def run(batch=batch, static=static):
                with model.using_backend("static" if static else "default"):
                    return model(**batch).loss
            counts[static, length] = count_update(run)["operators"]
    assert counts[True, 16] == counts[True, 48]
    assert counts[False, 48] > counts[False, 16]  # the check can fail: the default layout's count does grow


@pytest.mark.parametrize("kind", ["speaker", "follower-none", "follower-attention", "follower-bottleneck"])
def test_the_baselines_update_reads_no_value_on_the_host_either(tok, kind):
    """The baselines train on the captured path too (``--cuda-graphs``): each one's update runs whole on the meta
    device with no host tensor mixed in, and on the CPU it makes the default step's update."""
    batch = real_batch(tok)
    model = build(kind, tok).train().to("meta")
    update = CapturedUpdate(model, captured_adam(model.parameters(), 1e-3), max_grad_norm=1.0)
    update.optimizer.step = lambda: None
    update.frames = lambda batch: 16
    update.check_values = lambda batch: None
    on_meta = {k: v.to("meta") for k, v in batch.items()}  # the loader's copy to the device, outside the update
    with HostTensors() as mode:
        update(on_meta)
    assert mode.found == []
    assert_captured_update_is_the_eager_one(build(kind, tok).train(), build(kind, tok).train(), batch)


def assert_captured_update_is_the_eager_one(reference, model, batch: dict[str, torch.Tensor]) -> None:
    """One default Adam step of ``reference`` and one CapturedUpdate of ``model`` (the same weights) move the weights
    alike (the key biases' rows aside: rounding noise only, see key_bias_rows)."""
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3, fused=True)
    torch.manual_seed(0)
    reference(**batch).loss.backward()
    optimizer.step()
    torch.manual_seed(0)
    CapturedUpdate(model, captured_adam(model.parameters(), 1e-3))(batch)
    for (name, want), got in zip(reference.named_parameters(), model.parameters(), strict=True):
        keep = ~key_bias_rows(name, want)
        torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("name", "value"), [("input_ids", 10_000), ("unpaired_actions", 7), ("observations", 200),
                                            ("directions", -1)])
def test_values_out_of_range_are_named_on_the_host(tok, name, value):
    """The captured update skips the device's value checks: each batch is checked on the host, one line naming the
    input, before anything runs (the weights are untouched)."""
    model = build("msvae", tok).train()
    batch = _batches(tok, 1)[0]
    batch[name] = batch[name].clone()
    batch[name].view(-1)[0] = value  # the first row's first step / token is real in every batch here
    update = CapturedUpdate(model, captured_adam(model.parameters(), 1e-3))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"^{name} must be in \[0, \d+\), got values in"):
        update(batch)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_an_eager_runs_optimiser_state_is_refused_at_capture(tok):
    """An eager run's Adam state (foreach, not capturable) loaded over the captured one is named, not stepped."""
    model = build("msvae", tok).train()
    optimizer = captured_adam(model.parameters(), 1e-3)
    update = CapturedUpdate(model, optimizer)
    eager = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    optimizer.load_state_dict(eager.state_dict())
    with pytest.raises(ValueError, match="resume it without cuda_graphs"):
        update._capture(_batches(tok, 1)[0], None)
