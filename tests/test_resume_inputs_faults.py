"""Faults of the commands around a trained model, each one line before any work: a resume whose optimizer,
precision or criterion is not the checkpoint's (fairseq's ``AssertionError: Optimizer does not match``), NaN
weights under stock ``fairseq-generate --user-dir`` (``AssertionError: 5 < 5`` deep in the beam search), an
export that would write over the dictionary it reads (with ``--force``), and a vector header of non-ASCII digits.
One tiny model is trained once for the module (2 updates)."""
import os
import shutil
import sys

import pytest
import torch

from harness import TINY_LSTM, generate, train, train_args

from fairseq_outlayers.errors import PREFIX


@pytest.fixture(scope="module")
def trained(tiny_bin, tmp_path_factory):
    """A float32 Adam cross-entropy run (2 updates), a copy of it saved as if trained with --fp16, and one whose
    output bias holds a NaN."""
    folder = tmp_path_factory.mktemp("resume")
    save = str(folder / "run")
    train(tiny_bin, save, extra=["--output-layer", "tied", "--output-bias"], max_update=2)
    last = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(last, map_location="cpu", weights_only=False)
    state["cfg"]["common"]["fp16"] = True
    state["optimizer_history"][-1]["optimizer_name"] = "FP16Optimizer"
    torch.save(state, str(folder / "fp16.pt"))
    state = torch.load(last, map_location="cpu", weights_only=False)
    state["model"]["decoder.output_projection.bias"][3] = float("nan")
    torch.save(state, str(folder / "nan.pt"))
    return {"save": save, "last": last, "fp16": str(folder / "fp16.pt"), "nan": str(folder / "nan.pt"),
            "dir": folder}


def _one_line(capsys):
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and " | INFO | " not in x and not x.startswith("INFO:")
             and " | WARNING | " not in x]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _resume(monkeypatch, capsys, tiny_bin, save, extra):
    """outlayers-train resuming the run in ``save`` with the fixture's options and ``extra``: its one line."""
    from fairseq_outlayers.tools import wrappers

    argv = train_args(tiny_bin, save, extra=["--output-layer", "tied", "--output-bias"] + list(extra), max_update=3)
    monkeypatch.setattr(sys, "argv", ["outlayers-train"] + argv)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        wrappers.train()
    assert e.value.code == 1
    return _one_line(capsys)


AFTER = ("; to keep the new options, pass --reset-optimizer (the weights are kept; the optimizer state and "
         "learning-rate schedule start afresh) or give a new --save-dir")


@pytest.mark.parametrize("extra,what,way", [
    (["--optimizer", "sgd"], "--optimizer was adam, this run gives sgd", "give --optimizer adam"),
    (["--amp"], "precision was float32, this run gives --amp", "train in float32 (no precision option)"),
    (["--bf16"], "precision was float32, this run gives --bf16", "train in float32 (no precision option)"),
    (["--criterion", "label_smoothed_cross_entropy"],
     "--criterion was cross_entropy, this run gives label_smoothed_cross_entropy", "give --criterion cross_entropy"),
])
def test_a_changed_resume_is_one_line_naming_option_values_and_ways_out(trained, tiny_bin, monkeypatch, capsys,
                                                                        extra, what, way):
    """Before: fairseq's ``AssertionError: Optimizer does not match; please reset the optimizer
    (--reset-optimizer). FairseqAdam vs SGD`` after building the model, as a traceback."""
    before = {n: os.path.getmtime(os.path.join(trained["save"], n)) for n in os.listdir(trained["save"])}
    line = _resume(monkeypatch, capsys, tiny_bin, trained["save"], extra)
    assert line == (f"{PREFIX}'{trained['last']}' cannot be resumed with these options: {what}. To resume that run, "
                    f"{way}{AFTER}")
    assert {n: os.path.getmtime(os.path.join(trained["save"], n)) for n in os.listdir(trained["save"])} == before


@pytest.mark.parametrize("extra,what", [
    ([], "precision was --fp16, this run gives float32"),
    (["--amp"], "precision was --fp16, this run gives --amp"),
])
def test_a_resume_of_a_half_precision_checkpoint_in_another_precision(trained, tiny_bin, monkeypatch, capsys,
                                                                      extra, what):
    save = str(trained["dir"] / "fp16-run")
    os.makedirs(save, exist_ok=True)
    shutil.copy(trained["fp16"], os.path.join(save, "checkpoint_last.pt"))
    line = _resume(monkeypatch, capsys, tiny_bin, save, extra)
    assert f"cannot be resumed with these options: {what}. To resume that run, give --fp16;" in line


def test_the_resume_module_that_train_sh_runs_says_the_same(trained, tiny_bin, capsys):
    from fairseq_outlayers.tools import resume

    argv = train_args(tiny_bin, trained["save"], extra=["--output-layer", "tied", "--output-bias", "--optimizer",
                                                         "sgd"])
    with pytest.raises(SystemExit) as e:
        resume.main(argv)
    assert str(e.value.code).startswith(f"fairseq_outlayers: error: '{trained['last']}' cannot be resumed with these "
                                        "options: --optimizer was adam, this run gives sgd.")
    resume.main(argv[:-2])  # the run's own options: nothing to add, nothing refused
    assert capsys.readouterr().out == ""


def test_the_same_options_or_a_reset_optimizer_pass_the_check(trained, tiny_bin):
    from fairseq import options

    from fairseq_outlayers.tools.resume import check_training_state

    def args(*extra):
        argv = train_args(tiny_bin, trained["save"], extra=["--output-layer", "tied", "--output-bias"] + list(extra))
        return options.parse_args_and_arch(options.get_training_parser(), argv)

    check_training_state(args())  # the run's own options
    check_training_state(args("--optimizer", "sgd", "--reset-optimizer"))
    check_training_state(args("--optimizer", "sgd", "--save-dir", str(trained["dir"] / "new")))  # a new run
    # the same class of optimizer (fp16 and bf16 both wrap in FP16Optimizer): fairseq resumes it, so does the check
    fp16 = args("--bf16", "--restore-file", trained["fp16"])
    check_training_state(fp16)


AFTER_SCHEDULE = ("; to keep the new options, pass --reset-lr-scheduler (the weights and the optimizer state are "
                  "kept; the learning-rate schedule starts afresh) or give a new --save-dir")
AFTER_ARCH = ("; to keep the new options, give a new --save-dir (the weights of one architecture do not fit another, "
              "and fairseq has no option to leave them out)")


def test_a_resume_with_another_learning_rate_schedule_is_the_same_one_line(trained, tiny_bin, monkeypatch, capsys):
    """Before: fairseq's ``KeyError: 'best'`` (the fixed schedule's state has no best loss), after building the
    model, as a traceback."""
    before = {n: os.path.getmtime(os.path.join(trained["save"], n)) for n in os.listdir(trained["save"])}
    line = _resume(monkeypatch, capsys, tiny_bin, trained["save"], ["--lr-scheduler", "inverse_sqrt"])
    assert line == (f"{PREFIX}'{trained['last']}' cannot be resumed with these options: --lr-scheduler was fixed, "
                    f"this run gives inverse_sqrt. To resume that run, give --lr-scheduler fixed{AFTER_SCHEDULE}")
    # with another optimizer too: both named, and --reset-optimizer (which resets the schedule as well) is the way
    line = _resume(monkeypatch, capsys, tiny_bin, trained["save"], ["--lr-scheduler", "inverse_sqrt", "--optimizer",
                                                                    "sgd"])
    assert line == (f"{PREFIX}'{trained['last']}' cannot be resumed with these options: --optimizer was adam, this "
                    "run gives sgd; --lr-scheduler was fixed, this run gives inverse_sqrt. To resume that run, give "
                    f"--optimizer adam and give --lr-scheduler fixed{AFTER}")
    assert {n: os.path.getmtime(os.path.join(trained["save"], n)) for n in os.listdir(trained["save"])} == before


@pytest.fixture(scope="module")
def lstm_run(tiny_bin, tmp_path_factory):
    """An LSTM run (2 updates) with the options of ``trained``."""
    save = str(tmp_path_factory.mktemp("lstm"))
    train(tiny_bin, save, arch_args=TINY_LSTM, extra=["--output-layer", "tied", "--output-bias"], max_update=2)
    return save


@pytest.mark.parametrize("reset", [[], ["--reset-optimizer"]])
def test_a_resume_with_another_architecture_is_the_same_one_line(lstm_run, tiny_bin, monkeypatch, capsys, reset):
    """Before: two tracebacks (the LSTM's weights do not fit the Transformer), after building the model;
    ``--reset-optimizer`` keeps the weights, so it is refused the same way."""
    last = os.path.join(lstm_run, "checkpoint_last.pt")
    line = _resume(monkeypatch, capsys, tiny_bin, lstm_run, reset)
    assert line == (f"{PREFIX}'{last}' cannot be resumed with these options: --arch was outlayers_lstm, this run "
                    f"gives outlayers_transformer. To resume that run, give --arch outlayers_lstm{AFTER_ARCH}")


def test_a_reset_schedule_or_a_new_run_passes_the_schedule_and_architecture_checks(trained, lstm_run, tiny_bin):
    from fairseq import options

    from fairseq_outlayers.tools.resume import check_training_state

    def args(save, *extra):
        argv = train_args(tiny_bin, save, extra=["--output-layer", "tied", "--output-bias"] + list(extra))
        return options.parse_args_and_arch(options.get_training_parser(), argv)

    check_training_state(args(trained["save"], "--lr-scheduler", "inverse_sqrt", "--reset-lr-scheduler"))
    check_training_state(args(trained["save"], "--lr-scheduler", "inverse_sqrt", "--reset-optimizer"))
    check_training_state(args(str(trained["dir"] / "new-run")))  # nothing to resume: the Transformer starts afresh
    check_training_state(args(trained["save"], "--arch", "outlayers_transformer"))  # the run's own architecture


def test_another_architecture_from_a_named_restore_file_points_to_finetuning(trained, lstm_run, tiny_bin):
    """A new --save-dir does not help there: the --restore-file is loaded all the same."""
    from fairseq import options

    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.tools.resume import check_training_state

    last = os.path.join(lstm_run, "checkpoint_last.pt")
    argv = train_args(tiny_bin, str(trained["dir"] / "finetune"), extra=["--restore-file", last, "--reset-optimizer"])
    with pytest.raises(OutlayersConfigError) as e:
        check_training_state(options.parse_args_and_arch(options.get_training_parser(), argv))
    assert str(e.value) == (f"'{last}' cannot be resumed with these options: --arch was outlayers_lstm, this run "
                            "gives outlayers_transformer. To resume that run, give --arch outlayers_lstm; to keep the "
                            "new options, drop --restore-file to train from scratch, or start from these weights "
                            "with --finetune-from-model (where they fit the new architecture)")


def test_nan_weights_under_stock_fairseq_generate_are_the_plugins_line(trained, tiny_bin):
    """Before: ``AssertionError: 5 < 5`` from the beam search (the NaN check covered the outlayers-* commands)."""
    proc, _ = generate(tiny_bin, trained["nan"], ["--cpu"], check=False)
    last = [x for x in proc.stderr.splitlines() if x.strip()][-1]
    assert proc.returncode != 0 and "AssertionError" not in proc.stderr
    assert last.endswith(f"checkpoint '{trained['nan']}': tensor 'decoder.output_projection.bias' holds 1 NaN or "
                         "infinite value(s) of " + last.split("value(s) of ")[1]) and "training diverged" in last


def test_a_resume_from_nan_weights_is_refused_by_the_model(trained, tiny_bin, tmp_path, monkeypatch, capsys):
    """outlayers-train: the plugin's one line. Stock fairseq-train re-raises it as "Cannot load model parameters
    ... please ensure that the architectures match", with the plugin's line as the cause in its traceback."""
    save = str(tmp_path / "run")
    os.makedirs(save)
    shutil.copy(trained["nan"], os.path.join(save, "checkpoint_last.pt"))
    line = _resume(monkeypatch, capsys, tiny_bin, save, [])
    assert line.startswith(f"{PREFIX}checkpoint '{save}/checkpoint_last.pt': tensor 'decoder.output_projection.bias' "
                           "holds 1 NaN or infinite value(s) of ")
    proc = train(tiny_bin, save, extra=["--output-layer", "tied", "--output-bias"], max_update=3, check=False)
    assert proc.returncode != 0 and f"checkpoint '{save}/checkpoint_last.pt': tensor " in proc.stderr


# ---- inputs are never outputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_data", [True, False], ids=["--data", "recorded-data"])
def test_export_never_writes_over_the_dictionary_it_reads(trained, tiny_bin, tmp_path, capsys, with_data):
    """Before: ``outlayers-vectors export CKPT D/dict.en.txt --data D --force`` replaced the dictionary with the
    vectors (the file then started '43 128'); the same without --data, D being the checkpoint's data folder."""
    from fairseq_outlayers.tools.vectors import main

    data = str(tmp_path / "data")
    shutil.copytree(tiny_bin, data)
    dictionary = os.path.join(data if with_data else tiny_bin, "dict.en.txt")
    before = open(dictionary, "rb").read()
    argv = ["export", trained["last"], dictionary, "--force"] + (["--data", data] if with_data else [])
    capsys.readouterr()
    assert main(argv) == 1
    line = _one_line(capsys)
    assert line.startswith(f"{PREFIX}OUTPUT '{dictionary}' is also an input of this command (a file of ")
    assert "--force never overwrites an input" in line
    assert open(dictionary, "rb").read() == before
    # a new file is still written
    assert main(["export", trained["last"], str(tmp_path / "out.vec")]) == 0


def test_score_raw_never_writes_among_its_inputs(trained, tiny_bin, tmp_path, capsys):
    from fairseq_outlayers.tools.evaluation.score_raw import main

    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    src, ref = out / "t" / "src.de", out / "t" / "hyp.detok"
    src.write_text("ein test\n")
    ref.write_text("a test\n")
    capsys.readouterr()
    assert main(["--checkpoint", trained["last"], "--data", tiny_bin, "--test-set", f"t={src},{ref}",
                 "--out", str(out)]) != 0
    assert f"the folder of set 't' ('{out}/t') would write among an input of this command" in \
        capsys.readouterr().err
    assert ref.read_text() == "a test\n"


def test_scoring_never_writes_over_a_reference_inside_out(tmp_path):
    from fairseq_outlayers.tools.evaluation.score_translations import main

    (tmp_path / "generate.out").write_text("")
    ref = tmp_path / "ref.tok"
    ref.write_text("a test\n")
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path), "--tok-ref", str(ref)])
    assert "ref.tok is written by the scoring but is also an input" in str(e.value.code)
    assert ref.read_text() == "a test\n"


# ---- the vector header ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ["47 \u00b2", "\u0663 4", "2 \u0664"])
def test_a_header_of_non_ascii_digits_is_not_a_header(tmp_path, capsys, header):
    """Before: '47 ²' passed the header check (str.isdigit) and then failed in int() with a traceback."""
    from fairseq_outlayers.tools.vectors import main

    vec = tmp_path / "v.vec"
    vec.write_text(f"{header}\nthe 0.1 0.2\n", encoding="utf-8")
    capsys.readouterr()
    dictionary = tmp_path / "dict.en.txt"
    dictionary.write_text("the 5\n")
    assert main(["report", str(dictionary), str(vec)]) == 1
    line = _one_line(capsys)
    assert line.startswith(f"{PREFIX}{vec}") and "Traceback" not in line
