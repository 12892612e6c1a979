"""The documents' blocks rendered from the code: ``options`` (the registries' options, as ``outlayers-options``
prints them), ``cli`` (a console command's argparse parser) and ``archs`` (every ``--arch`` of the package). The
help and docstrings they copy are held to the docs' rules by the tests (tests/test_evidence_table.py).
"""
from typing import List

from fairseq_outlayers.errors import OutlayersConfigError


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _seam_row(flags: str, default: str, help_text: str):
    """A seam option whose choices are the registered methods, without the list: a layer added to the registry
    leaves the docs as they are (``outlayers-options`` and the method pages name each one)."""
    import re

    if "{" not in flags:
        return flags, default, help_text
    head = help_text.split(": ", 1)[0]
    return (re.sub(r"\{[^}]*\}", "NAME", flags), default,
            f"{head}; `outlayers-options` lists the registered ones, each with its page")


def _options_block(ctx, args: List[str]) -> List[str]:
    import fairseq_outlayers  # noqa: F401  (registers the methods and criterions)
    from fairseq_outlayers.tools.options import chosen, criterion_sections, method_sections, seam_options

    if not args:
        raise OutlayersConfigError("an options block names at least one word (e.g. joint, vmf_nll, seams)")
    seams = [("--output-layer / --embeddings", "", [_seam_row(*o) for o in seam_options()])] if "seams" in args else []
    words = [w for w in args if w != "seams"]
    sections = seams + (chosen(method_sections() + criterion_sections(), words) if words else [])
    if not sections:
        raise OutlayersConfigError(f"no section of outlayers-options matches {' '.join(args)}")
    lines = ["| option | default | what it does |", "| --- | --- | --- |"]
    for title, _text, opts in sections:
        if not opts:
            lines.append(f"| `{title}` | | (no options of its own) |")
        for flags, default, help_text in opts:
            lines.append(f"| `{flags}` | `{default}` | {_cell(help_text)} |")
    same = "the same, with every registered method" if seams else "the same"
    return [f"Generated from the registries (`outlayers-options {' '.join(args)}` prints {same})."
            , ""] + lines


def _pairing_parser():
    from fairseq_outlayers.tools.pairing.__main__ import build_parser

    return build_parser()


#: the console commands a ``cli`` block can show, each with the function that builds its parser: a fixed table, so
#: a document names a command and runs nothing else
CLI_PARSERS = {"outlayers-pairing": _pairing_parser}


def _cli_block(ctx, args: List[str]) -> List[str]:
    """The options of a console command's argparse parser: ``cli COMMAND``, a command of ``CLI_PARSERS``."""
    import argparse as _argparse

    from fairseq_outlayers.tools.options import _default_text, _flags

    if len(args) != 1 or args[0] not in CLI_PARSERS:
        raise OutlayersConfigError(f"a cli block names one command, one of {', '.join(CLI_PARSERS)}; not "
                                   f"'{' '.join(args)}'")
    parser = CLI_PARSERS[args[0]]()
    lines = [f"Generated from the parser of `{args[0]}` (its `--help` prints the same).", "",
             "| option | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if not action.option_strings or action.help == _argparse.SUPPRESS or "-h" in action.option_strings:
            continue
        default = "required" if action.required else _default_text(action, action.default)
        lines.append(f"| `{_flags(action)}` | `{default}` | {_cell(' '.join((action.help or '').split()))} |")
    return lines


def _archs_block(ctx, args: List[str]) -> List[str]:
    """Every ``--arch`` of the package with the first paragraph of its docstring (``outlayers-options presets``)."""
    import fairseq_outlayers  # noqa: F401
    from fairseq_outlayers.tools.options import arch_sections

    return (["Generated from the registries (`outlayers-options presets` prints the same).", "",
             "| `--arch` | model |", "| --- | --- |"]
            + [f"| `{name}` | {_cell(doc)} |" for name, doc in arch_sections()])
