"""The backend seam (msvae_hf/backends/registry.py): a model runs on the backend its config names or ``set_backend``
gives it, held by the model and its layers, never by module-level state; the model files reach kernels only through
it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from model_helpers import build, pad_more, real_batch, unpaired

from msvae_hf import MSVAEModel
from msvae_hf.backends.registry import BACKENDS, Backend, get_backend
from msvae_hf.models.configuration_msvae import BACKEND_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "msvae_hf"
MODEL_FILES = ("models/modules.py", "models/modeling_utils.py", "models/modeling_baselines.py",
               "models/modeling_msvae.py", "models/losses.py", "evaluation/policy.py")


def layers_backends(model: torch.nn.Module) -> set[str]:
    return {module.backend.name for module in model.modules() if hasattr(type(module), "backend")}


def test_the_registry_holds_every_backend_a_config_can_name():
    assert tuple(BACKENDS) == BACKEND_NAMES
    assert all(BACKENDS[name].name == name for name in BACKENDS)


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_the_configs_backend_reaches_every_layer(tok, name):
    model = build("msvae", tok, backend=name)
    assert model.backend is BACKENDS[name] and layers_backends(model) == {name}


def test_a_backend_outside_the_registry_is_refused_by_name(tok):
    with pytest.raises(ValueError, match="MSVAEConfig.backend must be one of .*got 'cuda'"):
        build("msvae", tok, backend="cuda")
    with pytest.raises(TypeError, match="a backend is a name in"):
        get_backend(3)


def test_from_pretrained_takes_a_backend_and_keeps_the_weights(tok, tmp_path):
    """A model saved on one backend loads on the default one, or on another where asked (a config field kept out of
    config.json, as transformers' attn_implementation), with the same weights."""
    model = build("msvae", tok, backend="eager")
    model.save_pretrained(tmp_path)
    assert "backend" not in (tmp_path / "config.json").read_text()  # how a process runs it, not what it is
    loaded = MSVAEModel.from_pretrained(tmp_path, backend="static")
    assert loaded.config.backend == "static" and layers_backends(loaded) == {"static"}
    assert MSVAEModel.from_pretrained(tmp_path).backend.name == "default"
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_two_models_on_two_backends_side_by_side_give_the_same_terms(tok):
    """No module-level state: a static model and a default one built alike, run interleaved in one process, each
    on its own backend, give the same terms at real positions."""
    default, static = build("msvae", tok), build("msvae", tok, backend="static")
    batch = {**real_batch(tok), **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=1))}
    padded = {**pad_more(real_batch(tok), extra_t=4, extra_l=3),
              **unpaired(pad_more(real_batch(tok, (2, 6, 3, 1), 1), 2))}
    with torch.no_grad():
        torch.manual_seed(0)
        a = default(**batch)
        torch.manual_seed(0)
        b = static(**padded)
    assert default.backend.name == "default" and static.backend.name == "static"
    for name in ("loss", "j_bar", "v", "domain_distance"):
        torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5, msg=name)


def test_using_backend_restores_the_backend_it_found_even_on_an_error(tok):
    model = build("follower-attention", tok, backend="eager")
    with pytest.raises(RuntimeError, match="inside"), model.using_backend("static", frames=8):
        assert layers_backends(model) == {"static"} and model.backend.frames == 8
        raise RuntimeError("inside")
    assert model.backend is BACKENDS["eager"] and layers_backends(model) == {"eager"}


def test_a_backend_is_a_value_and_frames_belong_to_the_static_one():
    static = get_backend("static", frames=32)
    assert static.frames == 32 and BACKENDS["static"].frames is None  # the registry's entry is not changed
    with pytest.raises(ValueError, match="frames is the static backend's positive count"):
        Backend("eager", frames=4)
    with pytest.raises(AttributeError):
        static.static = False  # frozen


def _runtime_imports(path: Path) -> list[str]:
    """The modules ``path`` imports at run time (imports under ``if TYPE_CHECKING:`` left out), relative ones with
    their dots."""
    tree = ast.parse(path.read_text())
    type_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and getattr(block.test, "id", None) == "TYPE_CHECKING" for node in ast.walk(block)}
    names = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


@pytest.mark.parametrize("name", MODEL_FILES)
def test_the_model_files_reach_the_kernels_only_through_the_registry(name):
    imports = _runtime_imports(PACKAGE / name)
    kernels = [m for m in imports if m.startswith(("..backends", "msvae_hf.backends"))
               and m.rsplit(".", 1)[-1] != "registry"]
    assert not kernels and not [m for m in imports if m.startswith(("..training", "msvae_hf.training"))], imports


def test_no_module_holds_a_switch_stack():
    """The backend is the model's: no module-level list or context manager of the package picks what a model
    computes (the layout switches' former shape: a list pushed and popped by a context manager)."""
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for marker in ("_STATIC", "_LENGTH_GROUPS", "_ENABLED", "static_shapes", "onednn_linear("):
            assert marker not in text, (path.name, marker)


def test_no_layer_takes_a_layout_argument_of_the_kernels() -> None:
    """The layers see padded tensors, masks and, where a model gathered a batch to its real positions, the backend's
    layout of them, which only the backend's attention reads: no layer's method takes ``positions``, ``groups`` or
    ``copies``, and none builds length groups; the two that gather their own input to its real positions are the
    bottleneck (its keys, by its own mask) and the instruction decoder (its token embeddings, once, by the layout it
    is given)."""
    import inspect

    from msvae_hf.models import modules

    layers = [cls for _, cls in inspect.getmembers(modules, inspect.isclass)
              if issubclass(cls, torch.nn.Module) and cls.__module__ == modules.__name__]
    assert len(layers) >= 8
    for cls in layers:
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            taken = set(inspect.signature(method).parameters) & {"positions", "groups", "copies"}
            assert not taken, (cls.__name__, name, taken)
    source = (PACKAGE / "models" / "modules.py").read_text()
    assert ".groups" not in source and "grouped(" not in source and source.count(".gather(") == 2
