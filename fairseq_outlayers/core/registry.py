"""Registries behind the model core's two seams: how embeddings are built and which output layer is used.

A method plugs in by registering a builder here; the models never name a method. Each entry may declare its own
command-line options (``options``: one ``Option`` each, with its default, help and range) and what it needs from
the data (a joined dictionary) so that a bad combination fails before any tensor is allocated, with a message that
says what to change.

The builders' contract, the same for both architectures (``core.build_core_output_layer`` /
``core.build_core_embeddings`` call them with these keywords):

* output layer: ``build(args, task, *, decoder_embed_tokens, input_dim) -> OutputLayer``;
* embeddings: ``build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding) -> (encoder_embed,
  decoder_embed)``, where ``make_embedding(dictionary, dim)`` is the architecture's own learned embedding.

The seams' command-line options and their defaults are here too: ``add_core_args`` adds ``--output-layer``,
``--embeddings``, ``--output-bias`` and every registered method's own options; ``fill_defaults`` is what the
architecture functions call: it only fills the options left unset, as fairseq's architecture functions do (the
checks run when the model is built: ``core/build.py``).
"""
import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from fairseq_outlayers import model_args
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.value_checks import fmt

from . import fingerprints

@dataclass(frozen=True)
class Option:
    """One option of a seam, declared once: its flag, its default, its help and its allowed values.

    The option gets no argparse default (a flag is off), so a preset tells it given from left out; ``default`` is
    what ``core.registry.fill_defaults`` gives it when it is left unset. The help ends with "(default: X)", written from
    ``default``, or from ``default_text`` where the default is a phrase ("the decoder output size"); an option
    whose default is None and has no ``default_text`` gets no such clause. ``range``: a ``value_checks.Range``, checked
    when the options are parsed. ``store_true``: a flag (argparse's ``store_true``), off unless given. ``file``: the
    option names a file read when training starts, and says what the checkpoint keeps of it ("its target-vector
    table"); the core records the file's fingerprint, and a resume with another file is refused
    (``fingerprints.check_file_resume``). ``example(src_dict, tgt_dict, path)``, with ``file``: writes a small valid file
    for two dictionaries, what the registry-driven tests train with."""
    flag: str
    default: Any = None
    help: str = ""
    type: Optional[Callable] = None
    metavar: Optional[str] = None
    choices: Optional[Sequence[str]] = None
    store_true: bool = False
    range: Any = None
    default_text: Optional[str] = None
    file: Optional[str] = None
    example: Optional[Callable] = None
    resume: Optional[str] = None
    effective: Optional[Callable] = None

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    def help_text(self) -> str:
        if self.default_text is not None:
            text = self.default_text
        elif isinstance(self.default, bool):
            text = "on" if self.default else "off"
        else:
            text = None if self.default is None else fmt(self.default)
        return self.help if text is None else f"{self.help} (default: {text})"

    def add_to(self, parser):
        if self.store_true:
            parser.add_argument(self.flag, action="store_true", help=self.help_text())
            return
        kwargs = {k: v for k, v in (("type", self.type), ("metavar", self.metavar), ("choices", self.choices))
                  if v is not None}
        parser.add_argument(self.flag, help=self.help_text(), **kwargs)


@dataclass
class SeamSpec:
    """What both seams' entries have: the builder, the help, the options and their checks."""
    name: str
    build: Callable
    help: str
    options: Tuple[Option, ...] = ()  # the entry's own options, one ``Option`` each
    set_defaults: Optional[Callable] = None  # set_defaults(args): options derived from others (after the defaults)
    # check_args(args, num_words): checks across options (sizes that must fit in memory); num_words is None when
    # the options are parsed, the target vocabulary size at build time
    check_args: Optional[Callable] = None
    # how a trained entry leaves the package (``outlayers-export``): a function of the built module that returns
    # the plain tensors a stock fairseq model holds, or one sentence saying why it cannot (required: a registration
    # without one is refused).
    # Output layer: ``export(layer) -> (weight, bias or None)`` with the same log-probabilities as
    # ``log_softmax(F.linear(features, weight, bias))``; embeddings: ``export(embedding) -> (V, d) table`` with
    # ``embedding(tokens) == table[tokens]``. Either may raise ``errors.ExportRefused`` for one trained instance
    # (a setting of its options that has no stock form)
    export: Union[Callable, str, None] = None

    @property
    def add_args(self) -> Optional[Callable]:
        """``add_args(parser)``: adds ``options`` (None for an entry without options)."""
        if not self.options:
            return None

        def add_options(parser):
            for option in self.options:
                option.add_to(parser)

        return add_options

    def resume_options(self, kind: str) -> Dict[str, Optional[Callable]]:
        """{dest: effective or None} of the options declared ``resume=kind`` ("shape" or "table")."""
        return {o.dest: o.effective for o in self.options if o.resume == kind}

    @property
    def defaults(self) -> Dict[str, Any]:
        """{dest: default} for the options left unset (None)."""
        return {o.dest: o.default for o in self.options}

    @property
    def ranges(self) -> Dict[str, Any]:
        """{dest: value_checks.Range}, checked when the options are parsed."""
        return {o.dest: o.range for o in self.options if o.range is not None}


@dataclass
class OutputLayerSpec(SeamSpec):
    """``--output-layer NAME``; ``build(args, task, *, decoder_embed_tokens, input_dim) -> OutputLayer``. The flags
    say what the layer needs, so that ``core/build.py`` can check it."""
    requires_joined_dictionary: bool = False
    shares_all_embeddings: bool = False  # encoder, decoder and output use one matrix
    ties_decoder_embedding: bool = False  # reads the decoder input embedding weight
    embedding_sized_input: bool = False  # multiplies the decoder output with the embedding matrix itself
    output_bias: bool = False  # honours --output-bias (a learned per-word bias)
    refuses_tying: Optional[str] = None  # why fairseq's tying flags contradict the layer (checked by the core)
    # True: the layer scores a softmax over the target dictionary (logits), the one meaning of "softmax-type".
    # False: it predicts something else (a word vector) and trains only with criterions that declare
    # ``softmax_type = False`` (``criterion_trains``)
    softmax_type: bool = True
    selects: Dict[str, str] = field(default_factory=dict)  # {dest: NAME}: the option, set, selects --embeddings NAME
    # the dest of the decoding option that a ledger row's "# decodes: B@S" sets to S (``--model-overrides``); None:
    # the layer has no such scale, and those decodes are not made for it
    decode_scale: Optional[str] = None


@dataclass
class EmbeddingSpec(SeamSpec):
    """``--embeddings NAME``; ``build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding) -> (enc,
    dec)``."""
    options_from: Optional[str] = None  # also reads the options of this output layer (e.g. its vector file)
    #: why the decoder's input embedding has no (V, d) word matrix that an output layer could tie to, or None
    no_word_matrix: Optional[str] = None


RESUME_KINDS = ("shape", "table", "free")


def check_declared(kind: str, name: str, options, export):
    """A registration decides what each option does on a resume and how the entry leaves the package: refused, in
    one line naming the entry, when it leaves either open."""
    for option in options:
        if option.resume not in RESUME_KINDS:
            raise ValueError(f"{kind} '{name}': option {option.flag} declares no resume= (one of "
                             f"{', '.join(RESUME_KINDS)}): say whether a resume with another value would change a "
                             "parameter's shape or a saved buffer, a frozen table, or nothing saved")
    if not (callable(export) or (isinstance(export, str) and export.strip())):
        raise ValueError(f"{kind} '{name}' must declare export=: a function of the built module that returns its "
                         "plain tensors (e.g. folded_linear, lookup_table), or a sentence saying why it cannot export")


OUTPUT_LAYER_REGISTRY: Dict[str, OutputLayerSpec] = {}
EMBEDDING_REGISTRY: Dict[str, EmbeddingSpec] = {}


def register_output_layer(name: str, help: str, options=(), **flags):
    """Decorator registering ``build(args, task, *, decoder_embed_tokens, input_dim)`` as ``--output-layer NAME``.
    ``options=(Option(...), ...)`` declares the layer's own options, each with the default that fills it when the
    user leaves it unset; ``set_defaults(args)`` only derives options from others. The options' ranges and
    ``check_args(args, num_words)`` are checked by the core when the options are parsed, before any data is read;
    the layer's module checks its arguments again when built. ``flags``: the other fields of ``OutputLayerSpec``;
    ``export=`` is required (a function or a sentence saying why not)."""

    def wrapper(build):
        if name in OUTPUT_LAYER_REGISTRY:
            raise ValueError(f"output layer '{name}' is registered twice")
        spec = OutputLayerSpec(name, build, help, tuple(options), **flags)
        check_declared("output layer", name, spec.options, spec.export)
        OUTPUT_LAYER_REGISTRY[name] = spec
        return build

    return wrapper


def register_embeddings(name: str, help: str, options=(), **flags):
    """Decorator registering ``build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding)`` as
    ``--embeddings NAME``; its options as for ``register_output_layer``. ``no_word_matrix``: why the decoder
    embedding has no (V, d) word matrix, so that a layer that ties to one is refused with it."""

    def wrapper(build):
        if name in EMBEDDING_REGISTRY:
            raise ValueError(f"embeddings '{name}' are registered twice")
        spec = EmbeddingSpec(name, build, help, tuple(options), **flags)
        check_declared("embeddings", name, spec.options, spec.export)
        EMBEDDING_REGISTRY[name] = spec
        return build

    return wrapper


def criterion_trains(criterion_class, spec: OutputLayerSpec) -> bool:
    """Whether ``criterion_class`` (a class of fairseq's ``CRITERION_REGISTRY``) trains the output layer ``spec``.
    A criterion declares ``softmax_type``: True when it scores a softmax over the vocabulary, False when it trains
    the layers that are not softmax-type. fairseq's own criterions declare nothing and score a softmax."""
    return bool(getattr(criterion_class, "softmax_type", True)) == spec.softmax_type


def layers_trained_by(criterion_class) -> List[str]:
    """The registered output layers that ``criterion_class`` trains, by name."""
    return sorted(name for name, spec in OUTPUT_LAYER_REGISTRY.items() if criterion_trains(criterion_class, spec))


def declared_criterions(spec: OutputLayerSpec) -> List[str]:
    """The criterions that declare ``softmax_type`` (those of this package and of a user dir) and train ``spec``."""
    from fairseq.criterions import CRITERION_REGISTRY

    return sorted(name for name, cls in CRITERION_REGISTRY.items()
                  if isinstance(cls, type) and hasattr(cls, "softmax_type") and criterion_trains(cls, spec))


def unregister_output_layer(name: str) -> OutputLayerSpec:
    """Remove ``--output-layer NAME`` and return its spec: a layer registered for one test, or by a user dir that is
    unloaded. A parser built afterwards no longer offers it (the options are read at parse time)."""
    if name not in OUTPUT_LAYER_REGISTRY:
        raise ValueError(f"output layer '{name}' is not registered")
    return OUTPUT_LAYER_REGISTRY.pop(name)


def unregister_embeddings(name: str) -> EmbeddingSpec:
    """Remove ``--embeddings NAME`` and return its spec (as ``unregister_output_layer``)."""
    if name not in EMBEDDING_REGISTRY:
        raise ValueError(f"embeddings '{name}' are not registered")
    return EMBEDDING_REGISTRY.pop(name)


def get_output_layer_spec(name: str) -> OutputLayerSpec:
    if name not in OUTPUT_LAYER_REGISTRY:
        raise ValueError(
            f"unknown --output-layer '{name}'; choose one of: {', '.join(sorted(OUTPUT_LAYER_REGISTRY))}"
        )
    return OUTPUT_LAYER_REGISTRY[name]


def get_embedding_spec(name: str) -> EmbeddingSpec:
    if name not in EMBEDDING_REGISTRY:
        raise ValueError(f"unknown --embeddings '{name}'; choose one of: {', '.join(sorted(EMBEDDING_REGISTRY))}")
    return EMBEDDING_REGISTRY[name]

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
    seams, for ``fingerprints.check_option_resume``; ``effective(args)`` gives the value that matters (or None:
    the option's value)."""
    shape, table = [(dest, flag, None) for dest, flag in CORE_SHAPE_OPTIONS], []
    for spec in selected_specs(args):
        flags = {dest: flag for dest, (flag, _default) in spec_options(spec).items()}
        shape += [(dest, flags[dest], f) for dest, f in spec.resume_options("shape").items()]
        table += [(dest, flags[dest], f) for dest, f in spec.resume_options("table").items()]
    return shape, table
