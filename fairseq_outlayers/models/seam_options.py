"""The seams' command-line options and their defaults.

``add_core_args`` adds ``--output-layer``, ``--embeddings``, ``--output-bias`` and every registered method's own
options; ``fill_defaults`` is what the architecture functions call: it only fills the options left unset, as
fairseq's architecture functions do (checks run when the model is built: ``models/seam_checks.py``).
"""
import argparse

from fairseq_outlayers import fingerprints, model_args
from fairseq_outlayers.errors import OutlayersConfigError

from .registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, get_embedding_spec, get_output_layer_spec

#: the seams' own defaults (``--output-layer``, ``--embeddings``, ``--output-bias``), filled by ``fill_defaults``
#: (no argparse default: a preset tells an option given from one left out)
SEAM_DEFAULTS = {"output_layer": "softmax", "embeddings": "standard", "output_bias": False}

#: the core's own options that fix a parameter's shape
CORE_SHAPE_OPTIONS = (("output_layer", "--output-layer"), ("embeddings", "--embeddings"),
                      ("output_bias", "--output-bias"))


def all_specs():
    return list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values())


def add_core_args(parser):
    """Options of the two seams, plus every registered method's own options."""
    parser.add_argument(
        "--output-layer", metavar="NAME", choices=sorted(OUTPUT_LAYER_REGISTRY),
        help="output layer turning decoder features into scores: "
        + "; ".join(f"{s.name}: {s.help}" for s in OUTPUT_LAYER_REGISTRY.values())
        + f" (default: {SEAM_DEFAULTS['output_layer']})",
    )
    parser.add_argument(
        "--embeddings", metavar="NAME", choices=sorted(EMBEDDING_REGISTRY),
        help="how input embeddings are built: "
        + "; ".join(f"{s.name}: {s.help}" for s in EMBEDDING_REGISTRY.values())
        + f" (default: {SEAM_DEFAULTS['embeddings']})",
    )
    parser.add_argument("--output-bias", action="store_true",
                        help="learn a per-word bias in softmax/tied output layers (fairseq's default has none)")
    parser.add_argument("--outlayers-allow-mismatch", action="store_true",
                        help="resume or decode although a dictionary, or a file that a method's option names, differs "
                        "from the checkpoint's (a warning instead of an error; the checkpoint's tables are kept)")
    for spec in all_specs():
        if spec.add_args is not None:
            spec.add_args(parser)


def apply_defaults(spec, args):
    """A seam's declared ``defaults`` for the options left unset (missing or None), then its derived options."""
    for dest, value in spec.defaults.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
    if spec.set_defaults is not None:
        spec.set_defaults(args)


def fill_defaults(args):
    """Fill the seams' options left unset (called from every named architecture, for a new run and for a model
    rebuilt from a checkpoint alike)."""
    for dest, value in SEAM_DEFAULTS.items():
        setattr(args, dest, getattr(args, dest, None) or value)
    model_args.record(args, **{fingerprints.ALLOW: bool(getattr(args, fingerprints.ALLOW, False))})
    for spec in all_specs():
        apply_defaults(spec, args)
    for spec in OUTPUT_LAYER_REGISTRY.values():  # an option of a layer that selects its input embeddings
        for dest, embeddings in spec.selects.items():
            if not getattr(args, dest, False) or args.embeddings == embeddings:
                continue
            if args.embeddings != SEAM_DEFAULTS["embeddings"]:
                flag = "--" + dest.replace("_", "-")
                raise OutlayersConfigError(f"{flag} replaces the decoder input embeddings; it cannot be combined "
                                           f"with --embeddings {args.embeddings}")
            args.embeddings = embeddings


def spec_options(spec):
    """{dest: (flag, default)} of the options a seam registers; a default derived by ``set_defaults`` included."""
    defaults = argparse.Namespace(output_layer=spec.name, embeddings=SEAM_DEFAULTS["embeddings"])
    apply_defaults(spec, defaults)
    return {o.dest: (o.flag, getattr(defaults, o.dest, None)) for o in spec.options}


def given_options(args):
    """[(dest, value)] of every seam option set in ``args`` to a value other than None, off or its default."""
    out = []
    for spec in all_specs():
        for dest, (_flag, default) in spec_options(spec).items():
            value = getattr(args, dest, None)
            if value is not None and value is not False and value != default:
                out.append((dest, value))
    if getattr(args, "output_bias", False):
        out.append(("output_bias", True))
    return out


def file_options(specs):
    """{dest: Option} of the options of ``specs`` that name a file (``Option.file``)."""
    return {o.dest: o for spec in specs for o in spec.options if o.file}


def selected_specs(args):
    """The specs whose options the selected seams read: the output layer's, the embeddings', and the output
    layer's whose options the embeddings read (``options_from``)."""
    out_spec, emb_spec = get_output_layer_spec(args.output_layer), get_embedding_spec(args.embeddings)
    specs = [out_spec, emb_spec]
    if emb_spec.options_from and emb_spec.options_from != out_spec.name:
        specs.append(get_output_layer_spec(emb_spec.options_from))
    return specs


def decoder_output_dim(args) -> int:
    """The size of the decoder features the output layer reads (Transformer or LSTM), from the options."""
    for name in ("decoder_output_dim", "decoder_out_embed_dim", "decoder_embed_dim"):
        value = getattr(args, name, None)
        if value:
            return int(value)
    return 512


def resume_options(args):
    """([(dest, flag, effective)] that fix a parameter's shape, [...] that build a frozen table) of the selected
    seams, for ``fingerprints.check_resume_options``; ``effective(args)`` gives the value that matters (or None:
    the option's value)."""
    shape, table = [(dest, flag, None) for dest, flag in CORE_SHAPE_OPTIONS], []
    for spec in selected_specs(args):
        flags = {dest: flag for dest, (flag, _default) in spec_options(spec).items()}
        shape += [(dest, flags[dest], f) for dest, f in spec.shape_options.items()]
        table += [(dest, flags[dest], f) for dest, f in spec.table_options.items()]
    return shape, table
