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
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from fairseq_outlayers.value_checks import fmt


@dataclass(frozen=True)
class Option:
    """One option of a seam, declared once: its flag, its default, its help and its allowed values.

    The option gets no argparse default (a flag is off), so a preset tells it given from left out; ``default`` is
    what ``seam_options.fill_defaults`` gives it when it is left unset. The help ends with "(default: X)", written from
    ``default``, or from ``default_text`` where the default is a phrase ("the decoder output size"); an option
    whose default is None and has no ``default_text`` gets no such clause. ``range``: a ``value_checks.Range``, checked
    when the options are parsed. ``store_true``: a flag (argparse's ``store_true``), off unless given. ``file``: the
    option names a file read when training starts, and says what the checkpoint keeps of it ("its target-vector
    table"); the core records the file's fingerprint, and a resume with another file is refused
    (``fingerprints.check_resume``). ``example(src_dict, tgt_dict, path)``, with ``file``: writes a small valid file
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
    # options a resumed checkpoint must share, {dest: effective(args) or None (the value itself)}: those that fix a
    # parameter's shape (else fairseq cannot load it), and those that build a frozen table (else the checkpoint's
    # table silently replaces the one they ask for)
    shape_options: Dict[str, Optional[Callable]] = field(default_factory=dict)
    table_options: Dict[str, Optional[Callable]] = field(default_factory=dict)
    # how a trained entry leaves the package (``outlayers-export``): a function of the built module that returns
    # the plain tensors a stock fairseq model holds, or one sentence saying why it cannot; the registration must
    # give one or the other (``check_export``).
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
    say what the layer needs, so that ``models/seam_checks.py`` can check it."""
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


def check_export(kind: str, spec: SeamSpec):
    """A registration decides how its entry exports: a function, or a sentence saying why it cannot."""
    if callable(spec.export) or (isinstance(spec.export, str) and spec.export.strip()):
        return
    raise ValueError(f"{kind} '{spec.name}' must declare export=: a function of the built module that returns its "
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
        check_export("output layer", spec)
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
        check_export("embeddings", spec)
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
