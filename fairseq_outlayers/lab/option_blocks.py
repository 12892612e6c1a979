"""The documents' blocks rendered from the code: ``options`` (the registries' options, as ``outlayers-options``
prints them), ``cli`` (a console command's argparse parser), ``archs`` (every ``--arch`` of the package) and
``exports`` (how each output layer and embedding of the package exports, as its registration declares it). The
help and docstrings they copy are held to the docs' rules by the tests (tests/test_evidence_table.py).
"""
import argparse as _argparse
import re
import sys
from typing import Dict, List, Tuple

from fairseq_outlayers.errors import OutlayersConfigError


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _seam_row(flags: str, default: str, help_text: str):
    """A seam option whose choices are the registered methods, without the list: a layer added to the registry
    leaves the docs as they are (``outlayers-options`` and the method pages name each one)."""
    if "{" not in flags:
        return flags, default, help_text
    head = help_text.split(": ", 1)[0]
    return (re.sub(r"\{[^}]*\}", "NAME", flags), default,
            f"{head}; `outlayers-options` lists the registered ones, each with its page")


def _options_block(ctx, args: List[str]) -> List[str]:
    import fairseq_outlayers.models  # noqa: F401  (registers the methods and criterions)
    from fairseq_outlayers.tools.options import chosen, criterion_sections, method_sections, seam_options

    if not args:
        raise OutlayersConfigError("an options block names at least one word (seams, or a method's or criterion's name)")
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
    import fairseq_outlayers.models  # noqa: F401
    from fairseq_outlayers.tools.options import arch_sections

    return (["Generated from the registries (`outlayers-options presets` prints the same).", "",
             "| `--arch` | model |", "| --- | --- |"]
            + [f"| `{name}` | {_cell(doc)} |" for name, doc in arch_sections()])


def _methods_block(ctx, args: List[str]) -> List[str]:
    """The README's table of methods: every registration module (``methods/*/register.py``) or loss of the package
    that declares ``ABOUT`` (summary, paper, page), oldest paper first, with the options it registers."""
    import fairseq_outlayers.models  # noqa: F401  (registers the methods and losses)
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    if args:
        raise OutlayersConfigError(f"a methods block takes no arguments, not '{' '.join(args)}'")
    rows = []
    for name, module in sorted(sys.modules.items()):
        about = getattr(module, "ABOUT", None)
        if not name.startswith("fairseq_outlayers.") or not isinstance(about, dict):
            continue
        layers = [n for n, s in OUTPUT_LAYER_REGISTRY.items() if s.build.__module__ == name]
        embeddings = [n for n, s in EMBEDDING_REGISTRY.items() if s.build.__module__ == name]
        criterions = [n for n, c in CRITERION_REGISTRY.items() if getattr(c, "__module__", None) == name]
        flag, names = next((f, n) for f, n in (("--output-layer", layers), ("--embeddings", embeddings),
                                                ("--criterion", criterions)) if n)
        option = " / ".join([f"`{flag} {names[0]}`"] + [f"`{n}`" for n in names[1:]])
        year = int(re.search(r"\d{4}", about["paper"]).group(0))
        page = about["page"]
        rows.append((year, f"| {option} | {_cell(about['summary'])} | {about['paper']} | "
                           f"[{page[:-3]}](docs/{page}) |"))
    return (["| option | what it is | paper | docs |", "| --- | --- | --- | --- |"]
            + [row for _year, row in sorted(rows, key=lambda r: r[0])])


def _first_sentence(doc: str) -> str:
    """The first sentence of a docstring, on one line, with reST's double backticks as Markdown's single ones."""
    text = " ".join((doc or "").split()).replace("``", "`")
    return re.split(r"(?<=[.?!])\s+(?=[A-Z`(])", text, maxsplit=1)[0]


def export_cells(export) -> Tuple[str, str]:
    """(export, how) of a registration's ``export``: a function exports (how: its name and the first sentence of
    its docstring), a sentence says why not, and nothing declared is refused as ``outlayers-export`` says."""
    from fairseq_outlayers.tools.stock import NOT_DECLARED

    if callable(export):
        summary = _first_sentence(export.__doc__)
        summary = summary[:1].lower() + summary[1:] if summary[1:2].islower() else summary  # "The" -> "the"
        return "yes", f"`{export.__name__}`: {summary or 'a function of the built module'}"
    if isinstance(export, str):
        return "no", export
    return "not declared", f"`outlayers-export` refuses it: it {NOT_DECLARED}"


def _exports_block(ctx, args: List[str]) -> List[str]:
    """How the output layers and embeddings of the named method folders (``methods/NAME/``) export
    (``SeamSpec.export``), in the registries' order; entries that export alike share a row. A method's own page
    holds the block of its folder, so a method added in its folder changes no other page."""
    import fairseq_outlayers.models  # noqa: F401  (registers the methods)
    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    folders = {spec.build.__module__.split(".")[2] for spec in list(OUTPUT_LAYER_REGISTRY.values())
               + list(EMBEDDING_REGISTRY.values()) if spec.build.__module__.startswith("fairseq_outlayers.methods.")}
    unknown = sorted(set(args) - folders)
    if not args or unknown:
        raise OutlayersConfigError(f"an exports block names method folders (of: {', '.join(sorted(folders))}), not "
                                   f"'{' '.join(unknown or args)}'")
    lines = ["Generated from the registries (`export=` of each registration).", "",
             "| option | export | how |", "| --- | --- | --- |"]
    for flag, registry in (("--output-layer", OUTPUT_LAYER_REGISTRY), ("--embeddings", EMBEDDING_REGISTRY)):
        rows: Dict[Tuple[str, str], List[str]] = {}
        for name, spec in registry.items():
            if spec.build.__module__.split(".")[2:3] in ([a] for a in args):
                rows.setdefault(export_cells(spec.export), []).append(name)
        for (export, how), names in rows.items():
            options = ", ".join([f"`{flag} {names[0]}`"] + [f"`{n}`" for n in names[1:]])
            lines.append(f"| {options} | {export} | {_cell(how)} |")
    return lines
