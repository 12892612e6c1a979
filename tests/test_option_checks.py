"""Option values checked when the options are parsed: every number option of the
package is finite and in its stated range, every size fits in memory, an option a variant ignores is refused, and a
resume whose options change a parameter's shape or a frozen table is one line naming the option and the
checkpoint's value. Most tests parse options in this process (no data, no training); a few run the commands."""
import argparse
import math
import os
import re

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary
from hypothesis import HealthCheck, example, given, settings, strategies as st

from fairseq_outlayers import value_checks
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, SEAM_DEFAULTS, layers_trained_by
from fairseq_outlayers.value_checks import Range, check_decoding_argv, check_fits
from harness import TINY_TRANSFORMER, USER_DIR, build_model, load_script, pairing_file, run, tool, train

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def parse(*extra, data="/nonexistent-data"):
    """fairseq-train's options as its command line parses them, then the checks of a new run that the model's
    ``build_model`` runs first, before it reads the data directory (none is read here)."""
    from fairseq import options

    from fairseq_outlayers.core.build import check_new_run

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [data, "--user-dir", USER_DIR] + TINY_TRANSFORMER + list(extra))
    check_new_run(args)
    return args


def refused(message_part, *extra):
    with pytest.raises(OutlayersConfigError) as e:
        parse(*extra)
    text = str(e.value)
    assert message_part in text, text
    assert "\n" not in text
    return text


# ---- the helper -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("allowed, text", [
    (Range(0, 1), "in [0, 1]"), (Range(0, 1, low_open=True), "in (0, 1]"), (Range(0, 1, high_open=True), "in [0, 1)"),
    (Range(0, low_open=True), "a finite number > 0"), (Range(high=3), "a finite number <= 3"),
    (Range(1, integer=True), "a positive integer"), (Range(0, integer=True), "a non-negative integer"),
    (Range(2, 9, integer=True), "an integer in [2, 9]"), (Range(), "a finite number"),
])
def test_range_describes_itself(allowed, text):
    assert allowed.describe() == text


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10 ** 20, 10 ** 20), st.booleans()),
       st.sampled_from([(0.0, 1.0, False, False), (0.0, 2.0, True, False), (-100.0, 100.0, False, False),
                        (0.0, None, True, False), (0.0, 1.0, False, True)]))
@example(float("nan"), (0.0, 1.0, False, False))
@example(float("inf"), (0.0, None, True, False))
@example(-0.0, (0.0, 1.0, False, False))
def test_range_contains_exactly_the_finite_values_within_its_bounds(value, bounds):
    low, high, low_open, high_open = bounds
    allowed = Range(low, high, low_open=low_open, high_open=high_open)
    expected = (not isinstance(value, bool) and math.isfinite(value)
                and (value > low if low_open else value >= low)
                and (high is None or (value < high if high_open else value <= high)))
    assert allowed.contains(value) == expected
    if not expected:
        with pytest.raises(OutlayersConfigError, match=re.escape(f"--x must be {allowed.describe()}, got ")):
            allowed.check("--x", value)
    else:
        assert allowed.check("--x", value) == value


def test_range_as_an_argparse_type_names_the_option_in_one_line(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--k", type=Range(1, integer=True, fix="use e.g. 5"))
    assert parser.parse_args(["--k", "3"]).k == 3
    for bad, said in (("0", "got 0; use e.g. 5"), ("1.5", "got '1.5'"), ("nan", "got 'nan'")):
        with pytest.raises(SystemExit):
            parser.parse_args(["--k", bad])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("p: error: argument --k: must be a positive integer, ") and said in err, err


def test_check_fits_states_the_estimate_and_the_largest_value():
    check_fits("--n", 1000, per_unit=1024, what="x", fix="f", memory=2 ** 20)  # 1000 KiB < 1 MiB
    with pytest.raises(OutlayersConfigError) as e:
        check_fits("--n", 4096, per_unit=1024, what="its rows", fix="use less", fixed=1024, memory=2 ** 20)
    assert str(e.value) == ("--n 4096 needs about 4.0 MiB of memory for its rows, more than the 1.0 MiB this "
                            "machine has (the largest value that fits is 1,023); use less")
    assert value_checks.memory_bytes() > 2 ** 28  # this machine's memory is read


# ---- every number option of every seam and criterion ------------------------------------------------------------
def _seam_number_options():
    """[(spec, dest, flag, type)] of every int/float option the seams register."""
    out = []
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        if spec.add_args is None:
            continue
        parser = argparse.ArgumentParser(add_help=False)
        spec.add_args(parser)
        for action in parser._actions:
            if action.type in (int, float):
                out.append((spec, action.dest, action.option_strings[0], action.type))
    return out


def _criterion_number_options():
    """[(name, class, dest)] of every float option of the package's criterions, read from fairseq's registries."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY

    from fairseq_outlayers.value_checks import config_defaults

    out = []
    for name, cls in sorted(CRITERION_REGISTRY.items()):
        if cls.__module__.startswith("fairseq_outlayers.") and name in CRITERION_DATACLASS_REGISTRY:
            for dest, default in config_defaults(CRITERION_DATACLASS_REGISTRY[name]).items():
                if isinstance(default, float):
                    out.append((name, cls, dest))
    return out


def test_every_number_option_declares_its_range():
    seams = _seam_number_options()
    assert {dest for _, dest, _, _ in seams} >= {"joint_dim", "joint_dropout", "fixed_targets_range",
                                                  "fixed_targets_bias", "fixed_targets_dim", "continuous_dim",
                                                  "continuous_score_scale", "target_vectors_min_coverage"}
    for spec, dest, flag, kind in seams:
        assert dest in spec.ranges, f"{flag} ({spec.name}) has no declared range"
        assert spec.ranges[dest].integer == (kind is int), flag
    criterions = _criterion_number_options()
    assert {name for name, _, _ in criterions} >= {"vmf_nll", "max_margin", "sampled_softmax"}
    for name, cls, dest in criterions:
        assert dest in cls.option_ranges, f"--{dest} of {name} has no declared range"


def _selection(spec_name, dest):
    if spec_name == "continuous":
        return ["--output-layer", "continuous", "--criterion", "cosine"]
    if spec_name in OUTPUT_LAYER_REGISTRY:
        extra = ["--output-layer", spec_name]
        return extra + (["--fixed-targets-no-normalize"] if dest == "fixed_targets_range" else [])
    return ["--embeddings", spec_name, "--output-layer", "tied"]


VMF_VARIANT_OF = {"vmf_lambda1": "reg1", "vmf_lambda2": "reg2", "vmf_released_lambda": "released"}


def _layer_for(criterion_class):
    """An output layer the criterion trains: the default one where it can, as the registry says."""
    layers = layers_trained_by(criterion_class)
    return SEAM_DEFAULTS["output_layer"] if SEAM_DEFAULTS["output_layer"] in layers else layers[0]


def _outcome(extra):
    try:
        parse(*extra)
        return None
    except OutlayersConfigError as e:
        assert "\n" not in str(e)
        return str(e)


FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, -1.0, 1e30, 5e-324]))
INTS = st.one_of(st.integers(-5, 5), st.integers(10 ** 9, 10 ** 15), st.sampled_from([2 ** 63, 64]))


@FEW
@given(data=st.data())
def test_seam_options_parse_iff_finite_in_range_and_fitting(data):
    spec, dest, flag, kind = data.draw(st.sampled_from(_seam_number_options()), label="option")
    value = data.draw(INTS if kind is int else FLOATS, label="value")
    message = _outcome(_selection(spec.name, dest) + [f"{flag}={repr(value) if kind is float else value}"])
    allowed = spec.ranges[dest]
    if not allowed.contains(value):
        assert message and message.startswith(f"{flag} must be {allowed.describe()}, got "), message
    elif message is not None:  # in range, refused only for memory
        assert message.startswith(f"{flag} {value} needs about ") and "this machine has" in message, message
        assert value >= 10 ** 6


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e30"])
@pytest.mark.parametrize("option", [o[1] for o in _seam_number_options() if o[3] is float])
def test_each_class_of_bad_float_is_refused_per_seam_option(option, value):
    spec, dest, flag, _ = next(o for o in _seam_number_options() if o[1] == option)
    message = _outcome(_selection(spec.name, dest) + [f"{flag}={value}"])
    assert (message is None) == spec.ranges[dest].contains(float(value)), message
    if message:
        assert message.startswith(f"{flag} must be ") and f"got {value_checks.fmt(float(value))}" in message


@FEW
@given(data=st.data())
def test_criterion_options_parse_iff_in_range(data):
    name, cls, dest = data.draw(st.sampled_from(_criterion_number_options()), label="option")
    value = data.draw(FLOATS, label="value")
    extra = ["--output-layer", _layer_for(cls), "--criterion", name, f"--{dest.replace('_', '-')}={value!r}"]
    if name == "vmf_nll":
        extra += ["--vmf-variant", VMF_VARIANT_OF[dest]]
    message = _outcome(extra)
    flag = "--" + dest.replace("_", "-")
    assert (message is None) == cls.option_ranges[dest].contains(value), (value, message)
    if message:
        assert message.startswith(f"{flag} must be {cls.option_ranges[dest].describe()}, got ")


# ---- the issue's cases, each with its message ---------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--output-layer", "continuous", "--criterion", "max_margin", "--margin", "inf"],
     "--margin must be in (0, 2], got inf (the gap between two cosines is at most 2"),
    (["--output-layer", "continuous", "--criterion", "max_margin", "--margin-negative", "synthetic", "--margin", "1.5"],
     "--margin must be in (0, 1], got 1.5 (with --margin-negative synthetic the gap cos θ - sin θ is at most 1"),
    (["--output-layer", "continuous", "--criterion", "cosine", "--continuous-score-scale", "inf"],
     "--continuous-score-scale must be in (0, 10000], got inf"),
    (["--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-lambda1", "inf"],
     "--vmf-lambda1 must be in [0, 1), got inf"),
    (["--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-variant", "reg1", "--vmf-lambda1", "1"],
     "--vmf-lambda1 must be in [0, 1), got 1 (at 1 or more the κ-derivative"),
    (["--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-lambda2", "0.3"],
     "--vmf-lambda2 0.3 is read only by --vmf-variant reg2, reg1+reg2; --vmf-variant released would ignore it: "
     "drop --vmf-lambda2, or select --vmf-variant reg2"),
    (["--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-variant", "reg2", "--vmf-lambda1", "0.1"],
     "--vmf-lambda1 0.1 is read only by --vmf-variant reg1, reg1+reg2; --vmf-variant reg2 would ignore it"),
    (["--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-variant", "reg1",
      "--vmf-released-lambda", "0.3"], "--vmf-released-lambda 0.3 is read only by --vmf-variant released"),
    (["--output-layer", "fixed", "--fixed-targets-bias", "1e30"],
     "--fixed-targets-bias must be in [-100, 100], got 1e+30 (a constant shifts every logit equally"),
    (["--output-layer", "fixed", "--fixed-targets-range", "1e30", "--fixed-targets-no-normalize"],
     "--fixed-targets-range must be in (0, 1000], got 1e+30"),
    (["--output-layer", "fixed", "--fixed-targets-seed", "-1"], "--fixed-targets-seed must be an integer in [0, "),
    (["--output-layer", "joint", "--joint-dim", "1000000000"], "--joint-dim 1000000000 needs about "),
    (["--output-layer", "fixed", "--fixed-targets-dim", "100000000"], "--fixed-targets-dim 100000000 needs about "),
    (["--output-layer", "tied", "--criterion", "sampled_softmax", "--sample-ratio", "nan"],
     "--sample-ratio must be in (0, 1], got nan"),
    (["--output-layer", "tied", "--criterion", "sampled_softmax", "--label-smoothing=-inf"],
     "--label-smoothing must be in [0, 1), got -inf"),
    (["--output-layer", "continuous", "--criterion", "cosine", "--continuous-topk", "0"],
     "--continuous-topk must be a positive integer, got 0"),
    (["--output-layer", "tied", "--embeddings", "shared-private", "--shared-private-lambdas", "0.9,inf,0.5"],
     "--shared-private-lambdas must be three numbers in [0, 1]"),
])
def test_issue_cases_are_refused_when_parsed(extra, message):
    text = refused(message, *extra)
    if "needs about" in text:
        assert "this machine has" in text and "the largest value that fits is" in text


def test_the_defaults_and_the_papers_values_still_parse():
    parse("--output-layer", "joint", "--joint-dim", "64", "--joint-dropout", "0.1")
    parse("--output-layer", "fixed", "--fixed-targets-bias", "0.5", "--fixed-targets-range", "10",
          "--fixed-targets-seed", "7")
    parse("--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-variant", "reg1+reg2", "--vmf-lambda1",
          "0.02", "--vmf-lambda2", "0.1")
    parse("--output-layer", "continuous", "--criterion", "vmf_nll", "--vmf-released-lambda", "0.2")
    parse("--output-layer", "continuous", "--criterion", "max_margin", "--margin", "0.5",
          "--continuous-score-scale", "40")
    parse("--output-layer", "continuous", "--criterion", "max_margin", "--margin-negative", "synthetic",
          "--margin", "1")
    parse("--output-layer", "continuous", "--criterion", "max_margin", "--margin", "1.5")  # informative: up to 2
    parse("--output-layer", "tied", "--criterion", "sampled_softmax", "--sample-ratio", "0.05")


def test_sizes_are_checked_again_against_the_vocabulary_when_built(monkeypatch):
    """At parse time the vocabulary size is unknown; the build checks the |V| x D tables before allocating."""
    from fairseq_outlayers.methods.fixed.register import check_fixed_args
    from fairseq_outlayers.methods.joint.register import check_joint_args

    monkeypatch.setattr(value_checks, "memory_bytes", lambda: 2 ** 30)
    args = argparse.Namespace(fixed_targets_dim=4096, decoder_embed_dim=512, decoder_output_dim=512,
                              joint_structure="full", joint_dim=4096)
    check_fixed_args(args, None)  # 4096 x 512 x 16 bytes = 32 MiB
    with pytest.raises(OutlayersConfigError, match=r"--fixed-targets-dim 4096 needs about 1\.6 GiB of memory for "
                                                   r"the learned projection to it and the frozen 100,000 x D "
                                                   r"classifier, more than the 1\.0 GiB this machine has \(the "
                                                   r"largest value that fits is 2,630\)"):
        check_fixed_args(args, 100000)  # 4096 x (512 x 16 + 100,000 x 4) bytes
    check_joint_args(args, None)
    with pytest.raises(OutlayersConfigError, match=r"--joint-dim 4096 needs about 2\.4 GiB of memory for its "
                                                   r"projections U and V and the 50,000 x d_j output matrix"):
        check_joint_args(args, 50000)  # 4096 x ((512 + 512 + 2) x 16 + 50,000 x 12) bytes


def test_a_decoding_score_scale_from_model_overrides_is_checked_when_built(tiny_bin):
    """--continuous-score-scale is also set at decoding (--model-overrides): the build checks it again."""
    from fairseq_outlayers.methods.continuous.register import build_continuous

    args = argparse.Namespace(continuous_score_scale=float("inf"))
    with pytest.raises(OutlayersConfigError, match=r"--continuous-score-scale must be in \(0, 10000\], got inf"):
        build_continuous(args, None, None, 8)


# ---- outside fairseq-train's options ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--beam", "0"], "--beam must be a positive integer, got 0; use e.g. --beam 5"),
    (["--beam=-3"], "--beam must be a positive integer, got -3"),
    (["--nbest", "0"], "--nbest must be a positive integer, got 0"),
    (["--beam", "2", "--nbest", "3"], "--nbest 3 is more than the --beam 2 hypotheses kept"),
    (["--nbest", "6"], "--nbest 6 is more than the --beam 5 hypotheses kept"),
])
def test_decoding_sizes(argv, message):
    with pytest.raises(OutlayersConfigError, match=re.escape(message)):
        check_decoding_argv(["data", "--path", "m.pt"] + argv)


def test_decoding_sizes_that_are_fine_or_not_integers_are_left_to_fairseq():
    for argv in (["--beam", "5", "--nbest", "5"], ["--beam", "x"], ["--beam"], []):
        check_decoding_argv(["data"] + argv)


def test_outlayers_generate_refuses_beam_zero_in_one_line(tiny_bin, tmp_path):
    proc = run([tool("outlayers-generate"), tiny_bin, "--path", str(tmp_path / "none.pt"), "--beam", "0"],
               check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("fairseq_outlayers: error: --beam must be a positive integer, "
                                                    "got 0; use e.g. --beam 5 (or 1 for greedy decoding)")


def test_a_vectors_header_without_vectors_allocates_nothing(tmp_path):
    from fairseq_outlayers.methods.continuous.target_vectors import load_target_table

    d = Dictionary()
    for w in ("a", "b"):
        d.add_symbol(w)
    path = tmp_path / "h.vec"
    path.write_text("0 2000000000\n")
    with pytest.raises(OutlayersConfigError, match="the file holds no vectors"):
        load_target_table(d, str(path))


def test_a_vector_table_larger_than_memory_is_refused(tmp_path, monkeypatch):
    from fairseq_outlayers.methods.continuous.target_vectors import load_target_table

    d = Dictionary()
    d.add_symbol("a")
    path = tmp_path / "v.vec"
    path.write_text("1 4\na 1 2 3 4\n")
    monkeypatch.setattr(value_checks, "memory_bytes", lambda: 64)
    with pytest.raises(OutlayersConfigError, match=r"--target-vectors .*v\.vec: vector size 4 needs about 160 bytes "
                                                   r"of memory for the 5-word target table"):
        load_target_table(d, str(path))


@pytest.mark.parametrize("algorithm", ["fasttext", "word2vec"])
def test_train_target_vectors_refuses_a_dim_beyond_memory_before_training(tmp_path, monkeypatch, algorithm):
    """fastText's 2,000,000 n-gram buckets alone take 7.5 GiB per 1,000 dimensions; word2vec's tables scale with the
    words kept (5 here: 3.7 GiB at --dim 100000000, more than the 1 GiB this test gives the machine)."""
    monkeypatch.setattr(value_checks, "memory_bytes", lambda: 2 ** 30)
    ttv = load_script("train_target_vectors.py")
    text = tmp_path / "t.en"
    text.write_text("a b c\nb c d\n")
    with pytest.raises(SystemExit) as e:
        ttv.main(["--input", str(text), "--output", str(tmp_path / "v.vec"), "--dim", "100000000",
                  "--algorithm", algorithm])
    assert str(e.value.code).startswith("error: --dim 100000000 needs about ") and "\n" not in str(e.value.code)
    assert ("2,000,000 n-gram buckets" in str(e.value.code)) == (algorithm == "fasttext")
    assert "5 words" in str(e.value.code)  # a, b, c, d and </s>
    assert not (tmp_path / "v.vec").exists()


@pytest.mark.parametrize("argv, message", [
    (["--lr", "inf"], "--lr must be in (0, 10], got inf"),
    (["--lr", "1e30"], "--lr must be in (0, 10], got 1e+30"),
    (["--lr=-0.1"], "--lr must be in (0, 10], got -0.1"),
    (["--epochs", "0"], "--epochs must be >= 1, not 0"),
])
def test_fit_bias_options_are_refused_before_the_checkpoint_is_read(tmp_path, capsys, argv, message):
    from fairseq_outlayers.tools.fit_bias import main

    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(b"not read")
    with pytest.raises(SystemExit) as e:
        main([str(ckpt), "--out", str(tmp_path / "o.pt")] + argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_joint_neighbours_k_beyond_the_vocabulary(tiny_bin):
    jn = load_script("joint_neighbours.py")
    task, model = build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "tied"])
    d = task.target_dictionary
    word = d[d.nspecial]
    candidates = len(d) - d.nspecial - sum(w.startswith("madeupword") for w in d.symbols) - 1
    rows = jn.neighbour_table(model, d, [word], candidates)
    assert all(not math.isnan(s) for _, s in rows[0]["output"])
    with pytest.raises(OutlayersConfigError, match=rf"--k 100000 is more than the {candidates} neighbours a query "
                                                   rf"has in this {len(d)}-type target dictionary .*; use --k "
                                                   rf"{candidates} or less"):
        jn.neighbour_table(model, d, [word], 100000)


# ---- resuming with options that change a shape or a frozen table -----------------------------------------------
M = 8


def _vectors(tiny_bin, path):
    d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    rng = np.random.default_rng(0)
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {M}\n")
        for w in words:  # a common direction, so that centring changes the table
            f.write(w + " " + " ".join(f"{x + 3:.6f}" for x in rng.standard_normal(M)) + "\n")
    return str(path)


def _checkpoint(tiny_bin, save, extra):
    """A checkpoint as fairseq-train saves one (the model's options and state), built in this process."""
    os.makedirs(save, exist_ok=True)
    _, model = build_model(tiny_bin, TINY_TRANSFORMER, extra + ["--save-dir", save])
    torch.save({"cfg": {"model": model.outlayers_args}, "model": model.state_dict(),
                "optimizer_history": [{"num_updates": 1}]}, os.path.join(save, "checkpoint_last.pt"))
    return model


@pytest.fixture(scope="module")
def pairing(tiny_raw, tiny_bin, tmp_path_factory):
    return pairing_file(tiny_raw, tiny_bin, str(tmp_path_factory.mktemp("pairing") / "pairs.txt"))


@pytest.mark.parametrize("before, after, message", [
    (["--output-layer", "joint", "--joint-dim", "16"], ["--output-layer", "joint", "--joint-dim", "24"],
     "--joint-dim 24 differs from the 16 of {ckpt}: the model's parameters would have another shape and cannot be "
     "loaded; resume with --joint-dim 16, or train afresh with a new --save-dir"),
    (["--output-layer", "joint"], ["--output-layer", "tied"],
     "--output-layer tied differs from the joint of {ckpt}"),
    (["--output-layer", "joint"], ["--output-layer", "joint", "--joint-no-word-bias"],
     "--joint-no-word-bias is on but {ckpt} was trained with it off: the model's parameters would have another shape "
     "and cannot be loaded; drop --joint-no-word-bias to resume, or train afresh with a new --save-dir"),
    (["--output-layer", "tied"], ["--output-layer", "tied", "--output-bias"],
     "--output-bias is on but {ckpt} was trained with it off"),
    (["--output-layer", "fixed"], ["--output-layer", "fixed", "--fixed-targets-dim", "16"],
     "--fixed-targets-dim 16 differs from the 32 of {ckpt}"),
    (["--embeddings", "shared-private", "--output-layer", "tied", "--pairing", "{pairing}"],
     ["--embeddings", "shared-private", "--output-layer", "tied", "--pairing", "{pairing}",
      "--shared-private-lambdas", "0.5,0.5,0.5"],
     "--shared-private-lambdas 0.5,0.5,0.5 differs from the 0.9,0.7,0.5 of {ckpt}: the model's parameters would "
     "have another shape"),
    (["--output-layer", "fixed"], ["--output-layer", "fixed", "--fixed-targets-seed", "2"],
     "--fixed-targets-seed 2 differs from the 1 of {ckpt}: the checkpoint would keep the frozen table it was built "
     "with; resume with --fixed-targets-seed 1, use a new --save-dir, or add --outlayers-allow-mismatch to resume "
     "with the checkpoint's table"),
    (["--output-layer", "fixed", "--fixed-targets-no-normalize"],
     ["--output-layer", "fixed", "--fixed-targets-no-normalize", "--fixed-targets-range", "5"],
     "--fixed-targets-range 5 differs from the 10 of {ckpt}: the checkpoint would keep the frozen table"),
    (["--output-layer", "fixed"], ["--output-layer", "fixed", "--fixed-targets-bias", "0.5"],
     "--fixed-targets-bias 0.5 differs from the 0 of {ckpt}"),
])
def test_resume_with_a_changed_shape_or_table_option_names_it(tiny_bin, pairing, tmp_path, before, after, message):
    save = str(tmp_path / "save")
    _checkpoint(tiny_bin, save, [a.replace("{pairing}", pairing) for a in before])
    ckpt = os.path.join(save, "checkpoint_last.pt")
    with pytest.raises(OutlayersConfigError) as e:
        build_model(tiny_bin, TINY_TRANSFORMER, [a.replace("{pairing}", pairing) for a in after]
                    + ["--save-dir", save])
    assert message.format(ckpt=ckpt) in str(e.value) and "\n" not in str(e.value)
    build_model(tiny_bin, TINY_TRANSFORMER, [a.replace("{pairing}", pairing) for a in before] + ["--save-dir", save])


def test_options_that_change_neither_shape_nor_table_still_resume(tiny_bin, tmp_path):
    save = str(tmp_path / "save")
    _checkpoint(tiny_bin, save, ["--output-layer", "fixed"])
    # the range does not change normalised rows; the joint activation/dropout change no shape
    build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "fixed", "--fixed-targets-range", "5",
                                             "--save-dir", save])
    save2 = str(tmp_path / "save2")
    _checkpoint(tiny_bin, save2, ["--output-layer", "joint", "--joint-structure", "output"])
    build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "joint", "--joint-structure", "output",
                                             "--joint-dim", "64", "--joint-dropout", "0.2", "--save-dir", save2])


def test_resume_with_target_vectors_center_added(tiny_bin, tmp_path):
    """The checkpoint keeps its uncentred table: refused, or with --outlayers-allow-mismatch recorded as uncentred."""
    vec = _vectors(tiny_bin, tmp_path / "v.vec")
    save = str(tmp_path / "save")
    base = ["--output-layer", "continuous", "--criterion", "cosine", "--target-vectors", vec]
    _checkpoint(tiny_bin, save, base)
    ckpt = os.path.join(save, "checkpoint_last.pt")
    with pytest.raises(OutlayersConfigError) as e:
        build_model(tiny_bin, TINY_TRANSFORMER, base + ["--target-vectors-center", "--save-dir", save])
    assert str(e.value) == (
        f"--target-vectors-center is on but {ckpt} was trained with it off: the checkpoint would keep the frozen "
        "table it was built with; drop --target-vectors-center to resume, use a new --save-dir, or add "
        "--outlayers-allow-mismatch to resume with the checkpoint's table")
    _, model = build_model(tiny_bin, TINY_TRANSFORMER, base + ["--target-vectors-center", "--outlayers-allow-mismatch",
                                                               "--save-dir", save])
    assert model.outlayers_args.target_vectors_center is False  # the saved options describe the kept table
    # the table really differs: centring is not a no-op on these vectors
    _, centred = build_model(tiny_bin, TINY_TRANSFORMER, base + ["--target-vectors-center"])
    uncentred = torch.load(ckpt, weights_only=True)["model"]["decoder.output_projection.table"]
    assert not torch.allclose(centred.decoder.output_projection.table, uncentred, atol=1e-3)


# ---- through the commands: one line, before any data is read -----------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--output-layer", "continuous", "--target-vectors", "v.vec", "--criterion", "max_margin", "--margin", "inf"],
     "--margin must be in (0, 2], got inf"),
    (["--output-layer", "fixed", "--fixed-targets-bias", "1e30"], "--fixed-targets-bias must be in [-100, 100]"),
])
def test_outlayers_train_refuses_in_one_line_before_the_data(tiny_bin, tmp_path, extra, message):
    proc = train(tiny_bin, str(tmp_path / "s"), TINY_TRANSFORMER, extra, max_update=1, check=False,
                 cli="outlayers-train")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq_outlayers: error: ") and message in last, last
    assert "examples" not in proc.stdout + proc.stderr and not os.path.exists(tmp_path / "s")


def test_outlayers_train_resume_with_another_joint_dim(tiny_bin, tmp_path):
    save = str(tmp_path / "j")
    arch = TINY_TRANSFORMER
    train(tiny_bin, save, arch, ["--output-layer", "joint", "--joint-dim", "16"], max_update=1)
    proc = train(tiny_bin, save, arch, ["--output-layer", "joint", "--joint-dim", "24"], max_update=2, check=False,
                 cli="outlayers-train")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Cannot load" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"fairseq_outlayers: error: --joint-dim 24 differs from the 16 of {save}/checkpoint_last.pt: the model's "
        "parameters would have another shape and cannot be loaded; resume with --joint-dim 16, or train afresh with "
        "a new --save-dir")


# ---- the package's tools: every size and number option typed, so argparse refuses a bad value in one line ---------
def _tool_mains():
    from fairseq_outlayers.lab import compare
    from fairseq_outlayers.tools import synthetic
    from fairseq_outlayers.tools.evaluation import score_raw

    return {"compare": compare.main, "score_raw": score_raw.main, "synthetic": synthetic.main,
            "tune_continuous_decoding": load_script("tune_continuous_decoding.py").main,
            "vmf_sweep": load_script("vmf_sweep.py").main,
            "probe_output_bias": load_script("probe_output_bias.py").main}


@pytest.mark.parametrize("tool_name, option, value, said", [
    ("compare", "--beam", "0", "must be a positive integer, got 0"),
    ("compare", "--lenpen", "nan", "must be a finite number, got nan"),
    ("compare", "--batch-size", "-5", "must be a positive integer, got -5"),
    ("compare", "--max-update", "0", "must be a positive integer, got 0"),
    ("score_raw", "--beam", "0", "must be a positive integer, got 0; use e.g. 5"),
    ("score_raw", "--lenpen", "inf", "must be a finite number, got inf"),
    ("score_raw", "--batch-size", "0", "must be a positive integer, got 0"),
    ("synthetic", "--vocab", "0", "must be a positive integer, got 0"),
    ("tune_continuous_decoding", "--lenpens", "nan", "must be a finite number, got nan"),
    ("tune_continuous_decoding", "--beam", "-1", "must be a positive integer, got -1"),
    ("vmf_sweep", "--max-update", "0", "must be a positive integer, got 0"),
    ("vmf_sweep", "--jobs", "0", "must be a positive integer, got 0"),
    ("probe_output_bias", "--lr", "inf", "must be in (0, 10], got inf (Adam moves each value"),
    ("probe_output_bias", "--epochs", "0", "must be a positive integer, got 0"),
])
def test_tool_options_are_refused_by_argparse_in_one_line(capsys, tool_name, option, value, said):
    with pytest.raises(SystemExit) as e:
        _tool_mains()[tool_name]([f"{option}={value}"])
    assert e.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: argument {option}: {said}" in last, last
