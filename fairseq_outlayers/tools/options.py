"""``outlayers-options`` (or ``python -m fairseq_outlayers options``): every option the package adds to fairseq.

fairseq 0.12's ``fairseq-train --help`` lists no model options, so this prints them: the two seams, each output
layer and embedding method with its own options, the options a package architecture adds, the package's
criterions, and the ``--arch`` presets. Each option comes with its default and help, read from the same
declarations fairseq parses (nothing here is written by hand).

    outlayers-options                 # everything
    outlayers-options joint fixed     # only the sections whose name contains one of the words
"""
import argparse
import dataclasses
import sys
from typing import List, Optional, Tuple

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers.core.registry import (EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, OutputLayerSpec, SEAM_DEFAULTS,
                                             add_core_args, apply_defaults)

#: one printed option: (flags, default as text, help)
Option = Tuple[str, str, str]


def _default_text(action: argparse.Action, value) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) and value in (None, False, True):
        return "on" if value else "off"
    if value is None:
        return "-"
    return str(value)


def _flags(action: argparse.Action) -> str:
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    if action.choices:
        return f"{flags} {{{','.join(str(c) for c in action.choices)}}}"
    return f"{flags} {action.metavar or action.dest.upper()}"


def _parser_options(add_args, defaults: Optional[argparse.Namespace] = None, skip=()) -> List[Option]:
    """The options ``add_args(parser)`` declares, with their defaults (from ``defaults`` where it has the option,
    else argparse's own), leaving out hidden ones and the flags in ``skip``."""
    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    add_args(parser)
    out = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.option_strings[0] in skip:
            continue
        value = getattr(defaults, action.dest, action.default) if defaults is not None else action.default
        out.append((_flags(action), _default_text(action, value), " ".join((action.help or "").split())))
    return out


def seam_options() -> List[Option]:
    """The options of the two seams themselves (``--output-layer``, ``--embeddings``, ...), without the methods'."""
    method_flags = set()
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        method_flags.update(flags.split(" ")[0].rstrip(",") for flags, _, _ in _spec_options(spec))
    # the seams' own defaults are filled by core.registry.fill_defaults (SEAM_DEFAULTS)
    defaults = argparse.Namespace(**SEAM_DEFAULTS, outlayers_allow_mismatch=False)
    return _parser_options(add_core_args, defaults, skip=method_flags)


def _spec_options(spec) -> List[Option]:
    """A registered output layer's or embedding method's own options, with the defaults it applies."""
    if spec.add_args is None:
        return []

    is_layer = isinstance(spec, OutputLayerSpec)
    defaults = argparse.Namespace(output_layer=spec.name if is_layer else "softmax",
                                  embeddings="standard" if is_layer else spec.name)
    probe = argparse.ArgumentParser(add_help=False)
    spec.add_args(probe)
    for action in probe._actions:
        if action.option_strings:
            setattr(defaults, action.dest, action.default)
    try:
        apply_defaults(spec, defaults)
    except Exception:  # a derived default that needs the model's sizes: show the declared ones
        pass
    return _parser_options(spec.add_args, defaults)


def method_sections() -> List[Tuple[str, str, List[Option]]]:
    """(title, help, options) per registered output layer, then per embedding method."""
    out = []
    for spec in OUTPUT_LAYER_REGISTRY.values():
        out.append((f"--output-layer {spec.name}", spec.help, _spec_options(spec)))
    for spec in EMBEDDING_REGISTRY.values():
        opts = _spec_options(spec)
        note = spec.help + (f" (also reads the options of --output-layer {spec.options_from})"
                            if spec.options_from else "")
        out.append((f"--embeddings {spec.name}", note, opts))
    return out


def _package_models():
    from fairseq.models import MODEL_REGISTRY

    return {name: cls for name, cls in MODEL_REGISTRY.items() if cls.__module__.startswith("fairseq_outlayers.")}


def model_sections() -> List[Tuple[str, str, List[Option]]]:
    """The options a package model adds to the fairseq model it extends, besides the seams' and methods'."""
    core = argparse.ArgumentParser(add_help=False)
    add_core_args(core)
    core_flags = {a.option_strings[0] for a in core._actions if a.option_strings}
    out = []
    for name, cls in sorted(_package_models().items()):
        base = next(c for c in cls.__mro__[1:] if c.__module__.startswith("fairseq.") and hasattr(c, "add_args"))
        fairseq_parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
        base.add_args(fairseq_parser)
        fairseq_flags = {a.option_strings[0] for a in fairseq_parser._actions if a.option_strings}
        opts = _parser_options(cls.add_args, skip=core_flags | fairseq_flags)
        if opts:
            out.append((f"--arch {name} (and its presets)", f"options added to fairseq's {base.__name__}", opts))
    return out


def _package_criterions():
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY

    out = []
    for name, cls in CRITERION_REGISTRY.items():
        if cls.__module__.startswith("fairseq_outlayers."):
            out.append((name, cls, CRITERION_DATACLASS_REGISTRY.get(name)))
    return out


def criterion_sections() -> List[Tuple[str, str, List[Option]]]:
    """Each package criterion's options (its dataclass fields), leaving out those it reads from fairseq's own
    sections (``${optimization.sentence_avg}`` and the like)."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    out = []
    for name, cls, dc in _package_criterions():
        opts: List[Option] = []
        if dc is not None:
            own = {f.name for f in dataclasses.fields(dc)
                   if not (isinstance(f.default, str) and f.default.startswith("${"))}
            parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
            gen_parser_from_dataclass(parser, dc())
            for action in parser._actions:
                if action.option_strings and action.dest in own:
                    default = action.default
                    opts.append((_flags(action), _default_text(action, default),
                                 " ".join((action.help or "").split())))
        elif hasattr(cls, "add_args"):
            opts = _parser_options(cls.add_args)
        out.append((f"--criterion {name}", _first_paragraph(cls.__doc__), opts))
    return out


def arch_sections() -> List[Tuple[str, str]]:
    """(name, first line of its doc) of every ``--arch`` of the package's models."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    models = set(_package_models().values())
    out = []
    for arch, model_cls in ARCH_MODEL_REGISTRY.items():
        if model_cls in models:
            doc = _first_paragraph(ARCH_CONFIG_REGISTRY[arch].__doc__)
            out.append((arch, doc or "fairseq's sizes of the same name"))
    return out


def _first_paragraph(doc: Optional[str]) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _format(title: str, text: str, opts: List[Option]) -> List[str]:
    lines = [title + (f": {text}" if text else "")]
    if not opts:
        lines.append("    (no options of its own)")
    for flags, default, help in opts:
        lines.append(f"    {flags}  [default: {default}]")
        if help:
            lines.append(f"        {help}")
    return lines


def _name(title: str) -> str:
    """The name a section is about: ``--criterion NAME`` -> ``name``."""
    parts = title.split()
    return parts[1].lower() if len(parts) > 1 and title.startswith("--") and parts[1][0].isalnum() else ""


def chosen(sections, words: List[str], heading: str = "", names=None):
    """The sections ``words`` pick. A word that is a section's name (one of ``names``, by default those of
    ``sections``) picks only the sections of that name, not those whose name merely contains it. Any other word
    picks the sections whose title, or whose group ``heading``, contains it (``criterion``, ``seams``)."""
    names = {_name(s[0]) for s in sections} - {""} if names is None else names

    def picks(word, title):
        word = word.lower()
        if word in names:
            return _name(title) == word
        return word in title.lower() or word in heading.lower()

    return [s for s in sections if not words or any(picks(w, s[0]) for w in words)]


def render(words: Optional[List[str]] = None) -> str:
    """The whole listing, or the sections ``words`` pick (:func:`chosen`)."""
    def wanted(*texts):
        return not words or any(w.lower() in t.lower() for w in words for t in texts)

    blocks = []
    groups = [
        ("Seams (every --arch outlayers_*; add to fairseq-train)",
         [("--output-layer / --embeddings", "the two seams", seam_options())]),
        ("Methods (options apply with the method selected; otherwise they are errors)", method_sections()),
        ("Architectures", model_sections()),
        ("Criterions", criterion_sections()),
    ]
    every_name = {_name(s[0]) for _, sections in groups for s in sections} - {""}
    for heading, sections in groups:
        picked = chosen(sections, words or [], heading, every_name)
        if not picked:
            continue
        blocks.append(f"== {heading}")
        for title, text, opts in picked:
            blocks.append("\n".join(_format(title, text, opts)))
    archs = [a for a in arch_sections() if wanted("--arch presets", a[0])]
    if archs:
        width = max(len(a) for a, _ in archs)
        blocks.append("== --arch presets\n" + "\n".join(f"    {a.ljust(width)}  {doc}" for a, doc in archs))
    if not blocks:
        return ""
    return "\n\n".join(blocks) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="outlayers-options", description=__doc__.strip().splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", nargs="*", help="show only the sections these words pick: a method's or criterion's name "
                        "picks its section (e.g. joint, cosine); another word, the sections whose title contains it "
                        "(e.g. vmf, criterion, arch)")
    args = parser.parse_args(argv)
    text = render(args.words)
    if not text.strip():
        print(f"outlayers-options: error: no section matches {' '.join(args.words)}; run without words to see "
              "them all", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
