"""``outlayers-options``: every option the package registers is listed, with the default fairseq would use."""
import argparse
import dataclasses
import subprocess
import sys

from harness import REPO

from fairseq_outlayers.tools.options import chosen, main, render


def _lines_of(text, flag):
    """The option lines of ``flag`` (``--joint-dim N  [default: 512]``), not of a longer flag it begins."""
    return [line for line in text.splitlines() if line.startswith(f"    {flag}")
            and line[4 + len(flag)] in " {["]


def test_every_seam_and_method_option_is_listed_with_its_default():
    from fairseq_outlayers.core.registry import add_core_args, apply_defaults
    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    text = render()
    parser = argparse.ArgumentParser(add_help=False)
    add_core_args(parser)
    flags = [a.option_strings[0] for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]
    assert len(flags) > 20
    for flag in flags:
        assert _lines_of(text, flag), f"{flag} is not listed"
    # the defaults a method applies when the option is left out (not argparse's None)
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        for dest, value in spec.defaults.items():
            flag = "--" + dest.replace("_", "-")
            (line,) = _lines_of(text, flag)
            shown = {None: "-", False: "off", True: "on"}.get(value, value) if not isinstance(value, (int, float)) \
                or isinstance(value, bool) else value
            assert line.endswith(f"[default: {shown}]"), (flag, line)
    assert _lines_of(text, "--output-layer")[0].endswith("[default: softmax]")
    assert _lines_of(text, "--embeddings")[0].endswith("[default: standard]")
    assert _lines_of(text, "--joint-dim")[0].endswith("[default: 512]")
    assert _lines_of(text, "--fixed-targets-learned-scale")[0].endswith("[default: off]")
    # every registered method has its section
    for name in OUTPUT_LAYER_REGISTRY:
        assert f"\n--output-layer {name}: " in text
    for name in EMBEDDING_REGISTRY:
        assert f"\n--embeddings {name}: " in text
    assert _lines_of(text, "--attention-type")  # the LSTM's own option


def test_every_package_criterion_option_is_listed_with_its_default():
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY

    text = render(["criterion"])
    names = [n for n, c in CRITERION_REGISTRY.items() if c.__module__.startswith("fairseq_outlayers.")]
    assert {"sampled_softmax", "vmf_nll", "cosine", "l2", "max_margin"} <= set(names)
    for name in names:
        assert f"--criterion {name}: " in text
        dc = CRITERION_DATACLASS_REGISTRY.get(name)
        for f in dataclasses.fields(dc) if dc else ():
            if f.name.startswith("_") or isinstance(f.default, str) and f.default.startswith("${"):
                continue  # read from fairseq's own options (e.g. --sentence-avg)
            flag = "--" + f.name.replace("_", "-")
            lines = _lines_of(text, flag)
            assert lines, f"{flag} of --criterion {name} is not listed"
            default = f.default.value if hasattr(f.default, "value") else f.default
            if isinstance(default, bool):
                default = "on" if default else "off"
            assert any(line.endswith(f"[default: {default}]") for line in lines), (flag, lines)


def test_words_select_sections_and_an_unknown_word_is_an_error(capsys):
    assert main(["joint"]) == 0
    out = capsys.readouterr().out
    assert "--output-layer joint: " in out and "--output-layer fixed: " not in out and "--joint-dim" in out
    # a name picks its own section only: tied is not tied-all, softmax not sampled_softmax; other words are parts
    assert main(["tied", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "--output-layer tied: " in out and "--output-layer softmax: " in out, out
    assert "--output-layer tied-all: " not in out and "--criterion sampled_softmax: " not in out, out
    assert main(["vmf"]) == 0 and "--criterion vmf_nll: " in capsys.readouterr().out
    sections = [("--output-layer scaled-cosine", "", []), ("--criterion cosine", "", []), ("--criterion l2", "", [])]
    assert chosen(sections, ["cosine"]) == sections[1:2]
    assert chosen(sections, ["cos", "l2"]) == sections
    assert chosen(sections, ["criterion"], heading="Criterions") == sections
    assert main(["no-such-thing"]) == 1
    assert "no section matches no-such-thing" in capsys.readouterr().err


def test_the_command_line_entry():
    proc = subprocess.run([sys.executable, "-m", "fairseq_outlayers", "options", "presets"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "outlayers_transformer_tiny" in proc.stdout and "outlayers_lstm_luong_2x2_joint" in proc.stdout
