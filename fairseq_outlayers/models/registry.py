"""Registries behind the model core's two seams: how embeddings are built and which output layer is used.

A method plugs in by registering a builder here; the models never name a method. Each entry may add its own
command-line options (``add_args``) and declare what it needs from the data (a joined dictionary) so that a bad
combination fails before any tensor is allocated, with a message that says what to change.

The builders' contract, the same for both architectures (``core.build_core_output_layer`` /
``core.build_core_embeddings`` call them with these keywords):

* output layer: ``build(args, task, *, decoder_embed_tokens, input_dim) -> OutputLayer``;
* embeddings: ``build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding) -> (encoder_embed,
  decoder_embed)``, where ``make_embedding(dictionary, dim)`` is the architecture's own learned embedding.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional


@dataclass
class OutputLayerSpec:
    name: str
    build: Callable  # build(args, task, *, decoder_embed_tokens, input_dim) -> OutputLayer
    help: str
    add_args: Optional[Callable] = None  # add_args(parser)
    set_defaults: Optional[Callable] = None  # set_defaults(args): options derived from others (after ``defaults``)
    defaults: Dict[str, Any] = field(default_factory=dict)  # {dest: value} for the options left unset (None)
    requires_joined_dictionary: bool = False
    shares_all_embeddings: bool = False  # encoder, decoder and output use one matrix
    ties_decoder_embedding: bool = False  # reads the decoder input embedding weight
    embedding_sized_input: bool = False  # multiplies the decoder output with the embedding matrix itself
    output_bias: bool = False  # honours --output-bias (a learned per-word bias)
    refuses_tying: Optional[str] = None  # why fairseq's tying flags contradict the layer (checked by the core)
    criterion_family: str = "softmax"  # "continuous": trained with the continuous-output criterions only
    selects: Dict[str, str] = field(default_factory=dict)  # {dest: NAME}: the option, set, selects --embeddings NAME
    ranges: Dict[str, Any] = field(default_factory=dict)  # {dest: checks.Range}: checked when options are parsed
    check_args: Optional[Callable] = None  # check_args(args, num_words): checks across options (sizes that must
    # fit in memory); num_words is None when the options are parsed, the target vocabulary size at build time
    # options a resumed checkpoint must share, {dest: effective(args) or None (the value itself)}: those that fix a
    # parameter's shape (else fairseq cannot load it), and those that build a frozen table (else the checkpoint's
    # table silently replaces the one they ask for)
    shape_options: Dict[str, Optional[Callable]] = field(default_factory=dict)
    table_options: Dict[str, Optional[Callable]] = field(default_factory=dict)


@dataclass
class EmbeddingSpec:
    name: str
    build: Callable  # build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding) -> (enc, dec)
    help: str
    add_args: Optional[Callable] = None
    set_defaults: Optional[Callable] = None
    options_from: Optional[str] = None  # also reads the options of this output layer (e.g. its vector file)
    defaults: Dict[str, Any] = field(default_factory=dict)
    ranges: Dict[str, Any] = field(default_factory=dict)
    check_args: Optional[Callable] = None
    shape_options: Dict[str, Optional[Callable]] = field(default_factory=dict)
    table_options: Dict[str, Optional[Callable]] = field(default_factory=dict)


OUTPUT_LAYER_REGISTRY: Dict[str, OutputLayerSpec] = {}
EMBEDDING_REGISTRY: Dict[str, EmbeddingSpec] = {}


def register_output_layer(name: str, help: str, add_args=None, set_defaults=None, **flags):
    """Decorator registering ``build(args, task, *, decoder_embed_tokens, input_dim)`` as ``--output-layer NAME``.
    ``defaults={dest: value}`` fills the options the user left unset; ``set_defaults(args)`` only derives options
    from others. ``ranges={dest: checks.Range}`` and ``check_args(args, num_words)`` are checked by the core when
    the options are parsed, before any data is read; the layer's module checks its arguments again when built."""

    def wrapper(build):
        if name in OUTPUT_LAYER_REGISTRY:
            raise ValueError(f"output layer '{name}' is registered twice")
        OUTPUT_LAYER_REGISTRY[name] = OutputLayerSpec(name, build, help, add_args, set_defaults, **flags)
        return build

    return wrapper


def register_embeddings(name: str, help: str, add_args=None, set_defaults=None, options_from=None, defaults=None,
                        ranges=None, check_args=None, shape_options=None, table_options=None):
    """Decorator registering ``build(args, task, *, encoder_dim, decoder_dim, share_all, make_embedding)`` as
    ``--embeddings NAME``."""

    def wrapper(build):
        if name in EMBEDDING_REGISTRY:
            raise ValueError(f"embeddings '{name}' are registered twice")
        EMBEDDING_REGISTRY[name] = EmbeddingSpec(name, build, help, add_args, set_defaults, options_from,
                                                 dict(defaults or {}), dict(ranges or {}), check_args,
                                                 dict(shape_options or {}), dict(table_options or {}))
        return build

    return wrapper


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
