"""Unit tests of the model core: output layers, tying, parameter counts, Luong attention, bad options."""
import argparse
import ast
import copy
import os

import pytest
import torch

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.modules import LearnedSoftmaxOutput, LuongAttention, TiedSoftmaxOutput
from fairseq_outlayers.parameter_counts import parameter_report
from harness import TINY_LSTM, TINY_TRANSFORMER, build_model

D = 32  # the tiny models' embedding / decoder output size


def _sample(task, n=3):
    ds_src, ds_tgt = task.source_dictionary, task.target_dictionary
    src = torch.randint(ds_src.nspecial, len(ds_src), (n, 5))
    prev = torch.randint(ds_tgt.nspecial, len(ds_tgt), (n, 4))
    prev[:, 0] = ds_tgt.eos()
    return src, torch.full((n,), 5), prev


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
@pytest.mark.parametrize("layer", ["softmax", "tied"])
def test_log_probs_sum_to_one_over_the_dictionary(tiny_bin, arch, layer):
    task, model = build_model(tiny_bin, arch, ["--output-layer", layer])
    model.eval()
    src, lengths, prev = _sample(task)
    net_output = model(src, lengths, prev)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    assert lprobs.shape == (3, 4, len(task.target_dictionary))
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(3, 4), atol=1e-5, rtol=0)
    probs = model.get_normalized_probs(net_output, log_probs=False)
    torch.testing.assert_close(probs, lprobs.exp(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_parameter_counts_match_closed_form(tiny_bin, arch):
    task, untied = build_model(tiny_bin, arch, ["--output-layer", "softmax"])
    _, tied = build_model(tiny_bin, arch, ["--output-layer", "tied"])
    _, tied_bias = build_model(tiny_bin, arch, ["--output-layer", "tied", "--output-bias"])
    v_src, v_tgt = len(task.source_dictionary), len(task.target_dictionary)
    ru, rt, rb = parameter_report(untied), parameter_report(tied), parameter_report(tied_bias)
    assert ru["embedding"] == rt["embedding"] == (v_src + v_tgt) * D
    assert ru["output"] == ru["output_trained"] == v_tgt * D
    assert rt["output"] == 0 and rb["output"] == v_tgt
    assert ru["total"] - rt["total"] == v_tgt * D
    assert rb["total"] - rt["total"] == v_tgt
    assert ru["trained"] == ru["total"] == sum(p.numel() for p in untied.parameters())
    assert rt["frozen"] == 0


def test_tied_weight_is_one_tensor(tiny_bin):
    _, model = build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "tied"])
    out = model.decoder.output_projection
    assert isinstance(out, TiedSoftmaxOutput)
    assert out.target_weights()[0] is model.decoder.embed_tokens.weight
    assert not any(True for _ in out.parameters())  # the tied matrix is not registered twice
    names = [n for n, _ in model.named_parameters()]
    assert "decoder.output_projection.weight" not in names and "decoder.embed_tokens.weight" in names
    with torch.no_grad():
        model.decoder.embed_tokens.weight[5].fill_(0.25)  # an update of the embedding is an update of the output
    feats = torch.ones(1, 1, D)
    assert torch.allclose(out(feats)[0, 0, 5], torch.tensor(0.25 * D))
    # held unregistered (modules/output_layer.py, TiedReference): saved once, under the embedding's name ...
    assert not any(k.startswith("decoder.output_projection.") for k in model.state_dict())
    # ... and it follows the embedding when the model is converted or copied
    model.double()
    assert out.target_weights()[0] is model.decoder.embed_tokens.weight and out(feats.double()).dtype == torch.float64
    twin = copy.deepcopy(model)
    assert twin.decoder.output_projection.tied_embedding is twin.decoder.embed_tokens


# the keys of the checkpoints written by release 2026-11 outside fairseq's own Transformer layers: a checkpoint of
# that release loads only while these stay as they are
RELEASE_KEYS = {
    "softmax": ["decoder.output_projection.weight"],
    "tied": ["decoder.output_projection.bias"],  # with --output-bias
    "joint": ["decoder.output_projection.bias", "decoder.output_projection.ctx_proj.bias",
              "decoder.output_projection.ctx_proj.weight", "decoder.output_projection.out_proj.bias",
              "decoder.output_projection.out_proj.weight"],
    "fixed": ["decoder.output_projection.bias", "decoder.output_projection.weight"],
}


@pytest.mark.parametrize("layer", sorted(RELEASE_KEYS))
def test_state_dict_keys_are_the_release_ones(tiny_bin, layer):
    extra = ["--output-bias"] if layer == "tied" else []
    _, model = build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", layer] + extra)
    keys = sorted(k for k in model.state_dict() if ".layers." not in k and "layer_norm" not in k)
    assert keys == sorted(RELEASE_KEYS[layer] + ["decoder.embed_tokens.weight", "decoder.version",
                                                 "encoder.embed_tokens.weight", "encoder.version"])


def test_three_way_tying_shares_one_matrix(tiny_bin_joined):
    _, model = build_model(tiny_bin_joined, TINY_TRANSFORMER, ["--output-layer", "tied-all"])
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    assert model.decoder.output_projection.target_weights()[0] is model.encoder.embed_tokens.weight
    assert parameter_report(model)["embedding"] == len(model.decoder.dictionary) * D


def test_sampled_logits_are_the_selected_columns():
    torch.manual_seed(0)
    layer = LearnedSoftmaxOutput(50, 8, bias=True)
    with torch.no_grad():
        layer.bias.normal_()
    h = torch.randn(2, 3, 8)
    ids = torch.tensor([7, 3, 41])
    torch.testing.assert_close(layer.sampled_logits(h, ids), layer(h)[..., ids])


def test_luong_attention_dot_and_general():
    torch.manual_seed(0)
    src = torch.randn(6, 2, 8)  # srclen x bsz x dim
    mask = torch.zeros(6, 2, dtype=torch.bool)
    mask[4:, 1] = True
    q = torch.randn(2, 8)
    dot = LuongAttention(8, 8, 8, score="dot")
    out, w = dot(q, src, mask)
    expected_w = torch.softmax(torch.einsum("sbd,bd->sb", src, q).masked_fill(mask, float("-inf")), dim=0)
    torch.testing.assert_close(w, expected_w)
    assert torch.all(w[4:, 1] == 0)
    ctx = torch.einsum("sb,sbd->bd", expected_w, src)
    torch.testing.assert_close(out, torch.tanh(dot.output_proj(torch.cat([ctx, q], 1))))
    general = LuongAttention(8, 8, 8, score="general")
    _, wg = general(q, src, None)
    torch.testing.assert_close(wg, torch.softmax(torch.einsum("sbd,bd->sb", src, general.input_proj(q)), dim=0))
    with pytest.raises(ValueError, match="dot attention needs"):
        LuongAttention(8, 16, 8, score="dot")


def test_lstm_decoder_output_size_independent_of_embedding(tiny_bin):
    _, model = build_model(tiny_bin, TINY_LSTM, ["--output-layer", "softmax", "--decoder-out-embed-dim", "24"])
    assert model.decoder.output_projection.weight.shape[1] == 24
    assert model.decoder.embed_tokens.weight.shape[1] == D
    assert model.encoder.bidirectional


LSTM_VMF_SIZES = ["--arch", "outlayers_lstm_vmf", "--encoder-embed-dim", "32", "--encoder-hidden-size", "16",
                  "--decoder-embed-dim", "32", "--decoder-hidden-size", "48", "--dropout", "0.0"]


@pytest.mark.parametrize("layer", ["tied", "tied-all"])
def test_lstm_vmf_ties_through_a_projection(tiny_bin, tiny_bin_joined, layer):
    """The vMF paper's LSTM (decoder state wider than the embeddings) with a tied output layer: the decoder output
    defaults to the embedding size, reached through fairseq's extra projection (the wmt16-word tied and
    shared-private recipes did not build before)."""
    task, model = build_model(tiny_bin if layer == "tied" else tiny_bin_joined, LSTM_VMF_SIZES,
                              ["--output-layer", layer])
    assert model.decoder.additional_fc.weight.shape == (32, 48)
    assert model.decoder.output_projection.target_weights()[0] is model.decoder.embed_tokens.weight
    src, lengths, prev = _sample(task)
    lprobs = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(lprobs.shape[:2]))


def test_lstm_vmf_output_size_otherwise(tiny_bin):
    """Untied, the arch's 1024-d decoder output stays; a size given is kept, and a wrong one for tying is refused
    naming the LSTM's own flag."""
    _, model = build_model(tiny_bin, LSTM_VMF_SIZES, ["--output-layer", "softmax"])
    assert model.decoder.output_projection.weight.shape[1] == 1024
    _, model = build_model(tiny_bin, LSTM_VMF_SIZES, ["--output-layer", "tied", "--decoder-out-embed-dim", "32"])
    assert model.decoder.output_projection.target_weights()[0] is model.decoder.embed_tokens.weight
    with pytest.raises(OutlayersConfigError, match="--decoder-out-embed-dim of the LSTM"):
        build_model(tiny_bin, LSTM_VMF_SIZES, ["--output-layer", "tied", "--decoder-out-embed-dim", "40"])


def test_bad_options_fail_early(tiny_bin):
    with pytest.raises(OutlayersConfigError, match="joined dictionary"):
        build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "tied-all"])
    with pytest.raises(OutlayersConfigError, match="use --output-layer tied"):
        build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "softmax", "--share-decoder-input-output-embed"])
    with pytest.raises(OutlayersConfigError, match="decoder output dim"):
        build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "tied", "--decoder-output-dim", "16"])
    with pytest.raises(SystemExit):  # argparse: invalid choice
        build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "nonsense"])
    # fairseq's own Transformer checks, kept by the package's build_model
    with pytest.raises(OutlayersConfigError, match="--share-all-embeddings requires a joined dictionary"):
        build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "tied", "--share-all-embeddings"])
    with pytest.raises(OutlayersConfigError, match="--merge-src-tgt-embed is not supported"):
        build_model(tiny_bin, TINY_TRANSFORMER, ["--merge-src-tgt-embed"])


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
@pytest.mark.parametrize("option", ["--bf16", "--memory-efficient-bf16"])
def test_bf16_is_refused_before_fairseq_looks_for_a_tpu(tiny_bin, arch, option):
    """fairseq 0.12's command line sets --tpu for --bf16; without torch_xla its Trainer fails on a None module
    (seen on an H200, 2026-11-26). The model's build says so first and names the options that work on a GPU."""
    with pytest.raises(OutlayersConfigError, match=r"--bf16 / --memory-efficient-bf16 makes fairseq 0\.12 train on a "
                       r"TPU .* use --fp16, --memory-efficient-fp16 or --amp"):
        build_model(tiny_bin, arch, [option])


def test_fairseq_transformer_options_reach_the_model(tiny_bin):
    """build_model applies fairseq's own option handling (here: offloading implies activation checkpointing)."""
    _, model = build_model(tiny_bin, TINY_TRANSFORMER + ["--decoder-layers", "2", "--offload-activations"])
    assert len(model.decoder.layers) == 2 and model.cfg.checkpoint_activations
    assert model.encoder.max_source_positions == 1024 and model.decoder.max_target_positions == 1024


def test_lstm_decoder_deeper_than_encoder(tiny_bin):
    """The vMF paper's shape (1-layer encoder, 2-layer decoder): extra decoder layers start from the last
    encoder layer's final state."""
    task, model = build_model(tiny_bin, TINY_LSTM, ["--encoder-layers", "1", "--decoder-layers", "2",
                                                    "--encoder-hidden-size", "16", "--decoder-hidden-size", "32"])
    src, lengths, prev = _sample(task)
    _outs, hiddens, cells, _mask = model.encoder(src, lengths)
    assert hiddens.shape[0] == 2 and torch.equal(hiddens[1], hiddens[0]) and torch.equal(cells[1], cells[0])
    lprobs = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
    assert lprobs.shape == (3, 4, len(task.target_dictionary))


MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_outlayers", "models")
def _models_modules():
    """{module name: parsed tree} of every file in fairseq_outlayers/models/."""
    out = {}
    for name in sorted(os.listdir(MODELS_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(MODELS_DIR, name)) as f:
                out[name[:-3]] = ast.parse(f.read(), name)
    return out


def _registers_a_model(tree):
    """True for an architecture file: one that registers a fairseq model (``@register_model(...)``)."""
    return any(isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) ==
               "register_model" for node in ast.walk(tree))


def _imported_models_modules(tree):
    """The names of the sibling modules of fairseq_outlayers/models/ that a file imports, in any spelling."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["fairseq_outlayers", "models"] and len(parts) > 2:
                    out.add(parts[2])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 or module.startswith("fairseq_outlayers.models") and node.level == 0:
                rest = module[len("fairseq_outlayers.models"):].lstrip(".") if node.level == 0 else module
                if rest:
                    out.add(rest.split(".")[0])
                else:  # from . import transformer / from fairseq_outlayers.models import lstm
                    out.update(alias.name for alias in node.names)
    return out


def _registering_files():
    """The files of fairseq_outlayers/models/ that register an output layer or embeddings, read from the registries."""
    from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    modules = {spec.build.__module__ for spec in list(OUTPUT_LAYER_REGISTRY.values()) +
               list(EMBEDDING_REGISTRY.values())}
    assert all(m.startswith("fairseq_outlayers.models.") for m in modules), modules
    return {m.rsplit(".", 1)[1] for m in modules}


def test_methods_are_leaves():
    """A method's registration file imports the registry, the core and its own modules, never an architecture;
    presets.py is the one file that imports both (and only __init__.py imports presets.py)."""
    trees = _models_modules()
    architectures = {name for name, tree in trees.items() if _registers_a_model(tree)}
    assert {"transformer", "lstm"} <= architectures and "presets" not in architectures
    methods = set(trees) - architectures - {"__init__", "presets", "registry", "core"}
    assert _registering_files() <= methods
    for name in sorted(methods):
        wrong = _imported_models_modules(trees[name]) & (architectures | {"presets"})
        assert not wrong, f"models/{name}.py imports {sorted(wrong)}: register its --arch presets in presets.py"
    assert {"transformer", "lstm"} <= _imported_models_modules(trees["presets"])
    importers = sorted(n for n, t in trees.items() if n not in ("__init__", "presets")
                       and "presets" in _imported_models_modules(t))
    assert importers == []


def test_each_seam_option_is_declared_once():
    """A seam's argparse options, its defaults and its ranges all come from its ``Option`` declarations, and the
    help's "(default: X)" is written from the default; there is no other way to declare them."""
    from fairseq_outlayers.value_checks import Range
    from fairseq_outlayers.models.registry import (EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, Option, OutputLayerSpec,
                                                   register_output_layer)

    spec = OutputLayerSpec("x", None, "x", options=(
        Option("--x-size", 8, type=int, metavar="N", help="size", range=Range(1, integer=True)),
        Option("--x-scale", 10.0, type=float, help="scale"), Option("--x-off", False, store_true=True, help="flag"),
        Option("--x-file", None, metavar="F", help="file"), Option("--x-dim", None, help="dim", default_text="d")))
    defaults, ranges = spec.defaults, spec.ranges
    parser = argparse.ArgumentParser(add_help=False)
    spec.add_args(parser)
    assert {a.dest: a.help for a in parser._actions} == {
        "x_size": "size (default: 8)", "x_scale": "scale (default: 10)", "x_off": "flag (default: off)",
        "x_file": "file", "x_dim": "dim (default: d)"}
    assert vars(parser.parse_args([])) == {"x_size": None, "x_scale": None, "x_off": False, "x_file": None,
                                           "x_dim": None}  # no argparse default: the architecture fills them
    assert defaults == {"x_size": 8, "x_scale": 10.0, "x_off": False, "x_file": None, "x_dim": None}
    assert list(ranges) == ["x_size"]
    from fairseq_outlayers.models.seam_options import spec_options

    assert spec_options(spec) == {"x_size": ("--x-size", 8), "x_scale": ("--x-scale", 10.0), "x_off": ("--x-off", False),
                                  "x_file": ("--x-file", None), "x_dim": ("--x-dim", None)}  # read from the Options

    assert OutputLayerSpec("y", None, "y").add_args is None  # no options, nothing to add
    with pytest.raises(TypeError):  # the keywords of the first releases are gone
        register_output_layer("y", help="y", add_args=lambda parser: None)(lambda *args, **kwargs: None)
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        assert spec.defaults == {o.dest: o.default for o in spec.options}, spec.name
        assert spec.ranges == {o.dest: o.range for o in spec.options if o.range is not None}, spec.name
    models = os.path.join(os.path.dirname(__file__), "..", "fairseq_outlayers", "models")
    for name in sorted(_registering_files()):
        with open(os.path.join(models, name + ".py"), encoding="utf-8") as f:
            text = f.read()
        assert "(default:" not in text and "DEFAULTS" not in text and "RANGES" not in text, name


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_a_build_runs_the_architecture_function_once(tiny_bin, arch, monkeypatch):
    """fairseq's ``models.build_model`` runs it; the model's ``build_model`` does not run it again."""
    import importlib

    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [tiny_bin] + arch)
    task = tasks.setup_task(args)
    model_file = importlib.import_module("fairseq_outlayers.models." + args.arch.split("_")[1])
    calls = []
    real = model_file.fill_defaults  # what every architecture function of the model ends with
    monkeypatch.setattr(model_file, "fill_defaults", lambda a: calls.append(1) or real(a))
    task.build_model(args)
    assert len(calls) == 1


def test_a_model_rebuilt_from_a_checkpoint_is_told_from_a_new_run(tiny_bin, tmp_path, monkeypatch):
    """A build from a command line runs a new run's checks; fairseq's rebuild of a checkpoint
    (``load_model_ensemble_and_task``, what fairseq-generate calls) does not, and reads no file again: told from
    the arguments, which hold the fingerprints of the checkpoint's build, not from the call stack."""
    from fairseq import checkpoint_utils

    from fairseq_outlayers.models import core
    from harness import REPO, train

    train(tiny_bin, str(tmp_path), max_update=1)
    calls = []
    real = core.check_new_run
    monkeypatch.setattr(core, "check_new_run", lambda args: calls.append(args) or real(args))
    build_model(tiny_bin, TINY_TRANSFORMER)
    assert len(calls) == 1
    [model], cfg, _ = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "checkpoint_last.pt")],
                                                                   arg_overrides={"data": tiny_bin})
    assert len(calls) == 1 and core.built_from_checkpoint(cfg.model) and model.outlayers_args is cfg.model
    assert not core.built_from_checkpoint(argparse.Namespace(output_layer="softmax"))
    for name in ("models/core.py", "fairseq_compat.py"):
        with open(os.path.join(REPO, "fairseq_outlayers", name), encoding="utf-8") as f:
            assert "_getframe" not in f.read(), name


def test_every_preset_is_registered_from_presets_py():
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    from fairseq_outlayers.models import presets

    from fairseq_outlayers.models.seam_options import SEAM_DEFAULTS

    # every outlayers_* architecture that fixes a seam to other than its default is a preset of presets.py
    fixing = {}
    for name, arch in ARCH_CONFIG_REGISTRY.items():
        if name.startswith("outlayers_"):
            args = argparse.Namespace()
            arch(args)
            fixed = [getattr(args, seam) for seam in ("output_layer", "embeddings") if getattr(args, seam) !=
                     SEAM_DEFAULTS[seam]]
            if fixed:
                fixing[name] = fixed
    assert sorted(entry[1] for entry in presets.PRESETS) == sorted(fixing) and len(fixing) >= 5
    for model, name, base, doc, choices, defaults in presets.PRESETS:
        assert ARCH_MODEL_NAME_REGISTRY[name] == model, name
        assert ARCH_CONFIG_REGISTRY[name].__doc__ == doc
        base_names = [n for n, fn in ARCH_CONFIG_REGISTRY.items() if fn is base]  # a registered architecture
        assert base_names and all(ARCH_MODEL_NAME_REGISTRY[n] == model for n in base_names), name
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[name](args)
        method = {**choices, **(defaults or {})}.get("embeddings") or choices["output_layer"]
        assert name.endswith("_" + method.replace("-", "_")) and method in fixing[name], name  # named after it
        assert all(getattr(args, key) == value for key, value in {**choices, **(defaults or {})}.items()), name
        base_args = argparse.Namespace(**{**choices, **(defaults or {})})
        base(base_args)
        assert vars(args) == vars(base_args), name  # a preset only fixes seam options on its base architecture


#: package files that still name a method outside its own files (a ratchet: the list only shrinks; each entry fails
#: once its file is clean, so it leaves the list), and the tools and benchmarks that serve one method
NAMING_A_METHOD = {
    # a method's tools, benchmarks and readers: its own files, though no registration imports them
    "lab/bench/continuous_layer.py": "own", "lab/bench/continuous_loss_timing.py": "own",
    "lab/bench/continuous_models.py": "own", "lab/bench/continuous_probes.py": "own",
    "lab/bench/continuous_report.py": "own", "lab/bench/continuous_tables.py": "own",
    "tools/vectors.py": "own",
    "tools/pairing/__init__.py": "own", "tools/pairing/__main__.py": "own", "word_pairs/__init__.py": "own",
    "modules/nn_search.py": "own",
    "modules/continuous_output.py": "own (imported by the layer's registration and its criterions)",
    # generic files that still name a method
    "models/presets.py": "presets name methods",
    "lab/ledger/rows.py": "a format example",
}


def _method_names():
    """(names, flags, seam defaults) of the package's registered output layers, embeddings and criterions."""
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY
    from fairseq_outlayers.models.seam_options import SEAM_DEFAULTS

    criterions = [n for n, c in CRITERION_REGISTRY.items() if c.__module__.startswith("fairseq_outlayers.")]
    names = sorted(set(OUTPUT_LAYER_REGISTRY) | set(EMBEDDING_REGISTRY) | set(criterions))
    flags = {o.flag for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values())
             for o in spec.options}
    return names, flags, {v for v in SEAM_DEFAULTS.values() if isinstance(v, str)}


def _own_files():
    """The package files that are a method's own, read from the registries: each registration module and each
    criterion's, and the package modules one of them imports that no other method's imports."""
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    package = os.path.dirname(MODELS_DIR)
    modules = {spec.build.__module__ for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(
        EMBEDDING_REGISTRY.values())} | {c.__module__ for c in CRITERION_REGISTRY.values()}
    modules = {m for m in modules if m.startswith("fairseq_outlayers.")}
    imported = {}
    for module in modules:
        path = os.path.join(os.path.dirname(package), *module.split(".")) + ".py"
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("fairseq_outlayers")):
                base = module.rsplit(".", node.level)[0] + "." + node.module if node.level else node.module
                imported.setdefault(base, set()).add(module)
    own = modules | {m for m, importers in imported.items() if len(importers) == 1}
    files = set()
    for module in own:
        rel = module.split(".", 1)[1].replace(".", os.sep)
        files |= {p for p in (rel + ".py", os.path.join(rel, "__init__.py"))
                  if os.path.isfile(os.path.join(package, p))}
    return files


def _named(text, names, flags, defaults):
    """The method names and option flags that ``text`` (a Python file) names; the plain words (softmax, fixed) only
    as a string of their own or after --output-layer / --embeddings / --criterion, not in prose."""
    import re

    strings = {node.value for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Constant)}
    found = {flag for flag in flags if re.search(rf"{re.escape(flag)}(?![\w-])", text)}
    for name in names:
        if (name in strings and name not in defaults) or re.search(
                rf"--(output-layer|embeddings|criterion)[ =]{re.escape(name)}(?![\w-])", text) or (
                re.search(r"[-_]", name) and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)):
            found.add(name)
    return found


def test_a_file_names_no_method_but_its_own():
    """Only the registries know a method: a package file (plugin, tools and lab) names a registered output layer,
    embeddings or criterion of the package, or a method's own option, only when it is that method's own file
    (``_own_files``: read from the registries) or still listed in ``NAMING_A_METHOD``. Checked on the text: no
    such name as a string of its own or after --output-layer / --embeddings / --criterion, no compound name
    (tied-all, vmf_nll) and no method's option flag anywhere. The plain words (softmax, fixed) may still appear in
    prose ("scores a softmax"), and ``seam_options.SEAM_DEFAULTS`` names the seams' defaults."""
    names, flags, defaults = _method_names()
    assert len(names) >= 15 and {"--joint-dim", "--pairing"} <= flags, names
    package = os.path.dirname(MODELS_DIR)
    own, naming = _own_files(), {}
    assert {"models/continuous.py", "modules/joint_output.py", "word_pairs/pairs.py"} <= own, sorted(own)
    assert "modules/output_layer.py" not in own and "value_checks.py" not in own  # shared by several methods
    for root, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.relpath(os.path.join(root, name), package)
            if name.endswith(".py") and path not in own:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    found = _named(f.read(), names, flags, defaults)
                if found:
                    naming[path] = sorted(found)
    assert {p: n for p, n in naming.items() if p not in NAMING_A_METHOD} == {}
    assert sorted(p for p in NAMING_A_METHOD if p not in naming) == []  # clean now: remove it from the list


def test_the_tools_and_the_lab_read_a_method_from_the_registries(monkeypatch):
    """The ledger's "B@S" decodes set the output layer's declared ``decode_scale``; the vectors export counts every
    file option (``Option.file``) among a model's inputs; both follow a layer registered later."""
    from fairseq_outlayers.lab.ledger.runner import decode_scale
    from fairseq_outlayers.models.registry import OUTPUT_LAYER_REGISTRY, Option, register_output_layer
    from fairseq_outlayers.tools.vectors import model_inputs

    scaled = sorted(n for n, spec in OUTPUT_LAYER_REGISTRY.items() if spec.decode_scale)
    assert scaled and decode_scale(["--output-layer", scaled[0]]) == OUTPUT_LAYER_REGISTRY[scaled[0]].decode_scale
    assert decode_scale(["--output-layer", "softmax"]) is None and decode_scale([]) is None
    from fairseq_outlayers.models import registry, seam_options

    layers = dict(OUTPUT_LAYER_REGISTRY)  # the layer registered below leaves with the test
    monkeypatch.setattr(registry, "OUTPUT_LAYER_REGISTRY", layers)
    monkeypatch.setattr(seam_options, "OUTPUT_LAYER_REGISTRY", layers)
    register_output_layer("later", help="x", decode_scale="later_scale", export="a test layer", options=(
        Option("--later-table", None, metavar="FILE", file="its table"),))(lambda *a, **k: None)
    assert decode_scale(["--output-layer", "later"]) == "later_scale"
    cfg = argparse.Namespace(task=argparse.Namespace(data="d1:d2"), model=argparse.Namespace(later_table="t.txt"))
    assert model_inputs(cfg) == ["d1", "d2", "t.txt"]


def test_no_two_files_share_a_name():
    """A name says one job: no two modules or folders of the package share a stem (``__init__`` and ``__main__``
    aside), and no two differ only by the order of their words (fit_bias / bias_fit)."""
    package = os.path.dirname(MODELS_DIR)
    seen = {}
    for root, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        names = [d for d in dirs] + [f[:-3] for f in files if f.endswith(".py") and f[:-3] not in ("__init__",
                                                                                                    "__main__")]
        for name in names:
            key = tuple(sorted(name.split("_")))
            path = os.path.relpath(os.path.join(root, name), package)
            assert key not in seen, f"{path} and {seen[key]} share a name"
            seen[key] = path
    assert len(seen) > 60


def test_embeddings_without_a_word_matrix_name_the_layers_they_work_with():
    """An output layer that ties to the decoder embedding, with embeddings that have no word matrix, is refused
    naming the layers that do not tie (read from the registry), never an empty list."""
    import argparse

    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY
    from fairseq_outlayers.models.seam_checks import check_seams, layer_names

    untied = layer_names(lambda s: not s.ties_decoder_embedding)
    assert untied
    tying = sorted(n for n, s in OUTPUT_LAYER_REGISTRY.items() if s.ties_decoder_embedding)
    for name, spec in EMBEDDING_REGISTRY.items():
        if not spec.no_word_matrix:
            continue
        with pytest.raises(OutlayersConfigError) as e:
            check_seams(argparse.Namespace(output_layer=tying[0], embeddings=name), None)
        assert f"{spec.no_word_matrix}; use --output-layer {untied} with them" in str(e.value)


def test_tests_name_no_work_item():
    """A test says its subject, not the work item that brought it: no "issue N" in a test file."""
    import re

    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                found = re.search(r"\b[Ii]ssues? #?\d+|\bissue_?\d+", f.read())
            assert found is None, (name, found.group(0))


def test_user_documents_name_no_work_item():
    """The README, the docs (results, benchmarks and notes included), the configs' row descriptions and every text
    the package prints name no work item of this project ("issue N"): a reader cannot look it up."""
    import re

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pattern = re.compile(r"(?<!fairseq )\b[Ii]ssues? #?\d+")  # fairseq's own issues may be cited
    found = []
    for top in ("docs", "configs", "fairseq_outlayers", "scripts"):
        for root, dirs, files in os.walk(os.path.join(repo, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "runs")]  # records keep what they were run with
            for name in files:
                if name.endswith((".md", ".args", ".yaml", ".py", ".sh")):
                    with open(os.path.join(root, name), encoding="utf-8") as f:
                        found += [f"{os.path.relpath(os.path.join(root, name), repo)}: {m.group(0)}"
                                  for m in pattern.finditer(f.read())]
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        found += [f"README.md: {m.group(0)}" for m in pattern.finditer(f.read())]
    assert not found, found


#: registration modules of models/ that register a group rather than one name
GROUP_MODULES = {"baselines": "fairseq's usual embeddings and the softmax baselines"}


def test_a_registration_module_is_named_after_what_it_registers():
    """``models/<name>.py`` registers ``--output-layer``/``--embeddings`` ``<name>`` (``-`` as ``_``), or is a named
    group (``GROUP_MODULES``)."""
    from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    registered = {}
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        module = spec.build.__module__
        if module.startswith("fairseq_outlayers.models."):
            registered.setdefault(module.rpartition(".")[2], set()).add(spec.name.replace("-", "_"))
    assert registered
    wrong = {module: names for module, names in registered.items()
             if module not in names and module not in GROUP_MODULES}
    assert not wrong, f"rename each module after one name it registers: {wrong}"


def test_test_files_name_their_subject_first():
    """``test_<subject>_robust.py``, never ``test_robust_<subject>.py``: a subject's tests sort together."""
    folder = os.path.dirname(os.path.abspath(__file__))
    assert not [n for n in os.listdir(folder) if n.startswith("test_robust_")]

#: package files allowed over the size limit: a numerical kernel of one job
OVER_THE_LIMIT = {"modules/bessel.py": "kernel"}


def test_no_package_file_is_over_400_lines():
    """A file over 400 lines holds more than one job: split it (``OVER_THE_LIMIT`` lists the exceptions)."""
    package = os.path.dirname(MODELS_DIR)
    sizes = {}
    for folder, _dirs, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    sizes[os.path.relpath(path, package)] = sum(1 for _ in f)
    over = {path: n for path, n in sizes.items() if n > 400}
    assert set(over) <= set(OVER_THE_LIMIT), {p: n for p, n in over.items() if p not in OVER_THE_LIMIT}
