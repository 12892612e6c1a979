"""``outlayers-export CHECKPOINT OUT --to TARGET``: a trained model that runs without this package.

At inference most of the package's layers are a plain linear map once their weights are computed, and its
embeddings are plain tables. Each registered output layer and embedding declares how (``export`` in
``core/registry.py``), or why it cannot. The export rebuilds the model as its architecture family's stock twin
(``FAMILIES``: fairseq's ``transformer`` or ``lstm``) holding those tensors, checks that both give the same
log-probabilities on a batch, and hands it to the target's writer (``TARGETS``):

* ``fairseq``: ``OUT/model.pt`` with its dictionaries (and ``bpecodes`` when the data has one). Stock
  ``fairseq-generate`` / ``fairseq-interactive`` load it with no ``--user-dir`` and torch's default weights-only
  loading: the file holds only tensors, dicts, lists and plain values.
* ``ctranslate2``: a CTranslate2 model directory made by CTranslate2's own fairseq converter (on a stock
  checkpoint written for it in a temporary directory), with ``--quantization`` passed on. CTranslate2's
  Transformer holds a bias for its output projection, so a layer with a per-word bias (``--output-bias``) exports
  there, which stock fairseq's Transformer cannot hold.

A new target is one ``Target`` entry (the families it takes, its options, its writer) and its writer function; a
new architecture family is one ``Family`` entry naming its stock twin.

OUT is written in a hidden folder beside it and takes its place in one step when complete (``outfiles.atomic_dir``);
an existing OUT is refused unless ``--force``, and OUT may never be, hold or lie inside an input: the checkpoint,
its folder, ``--data``, or the data folder recorded in the checkpoint when ``--data`` is not given.
"""
import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers.core.checkpoint_safety import check_finite, read
from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY
from fairseq_outlayers.errors import ExportRefused, OutlayersConfigError, one_line_errors
from fairseq_outlayers.outfiles import atomic_dir, check_leftovers
from fairseq_outlayers.tools.checkpoints import load_trained
from fairseq_outlayers.tools.stock import (FAMILIES, NOT_DECLARED, Family, build_stock, family_of,  # noqa: F401
                                           max_difference, stock_checkpoint)  # FAMILIES: the twins' table, here too

logger = logging.getLogger("fairseq_outlayers.export")

#: CTranslate2's weight types (``ct2-fairseq-converter --quantization``)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
#: the largest difference of a log-probability between the package's model and its stock rebuild that the export
#: accepts (float32 folding of a projection moves them by about 1e-6)
TOLERANCE = 1e-4
#: files of the data directory that a user needs beside the model to translate raw text
DATA_EXTRAS = ("bpecodes",)


def _write_dictionaries(task, options, directory: str):
    task.source_dictionary.save(os.path.join(directory, f"dict.{options.source_lang}.txt"))
    task.target_dictionary.save(os.path.join(directory, f"dict.{options.target_lang}.txt"))


def _languages(task, options):
    """The language pair the task inferred from the data (the options may leave it unset)."""
    cfg = getattr(task, "cfg", None)
    options.source_lang = getattr(cfg, "source_lang", None) or options.source_lang
    options.target_lang = getattr(cfg, "target_lang", None) or options.target_lang


def _copy_extras(data_dir: Optional[str], directory: str):
    for name in DATA_EXTRAS:
        path = os.path.join(data_dir or "", name)
        if data_dir and os.path.isfile(path):
            shutil.copyfile(path, os.path.join(directory, name))


@dataclass
class Job:
    """What a target's writer gets: the training state, the checked stock model and its options, the task, the data
    folder the export read, and the target's own option values."""
    state: dict
    stock_model: torch.nn.Module
    options: argparse.Namespace
    task: object
    data_dir: Optional[str]
    values: Dict[str, object]


def save(obj, path: str):
    """``torch.save`` to ``path``, a failed write raised as its ``OSError`` (torch reports a full disk as a
    ``RuntimeError`` "unexpected pos"), which ``outfiles.atomic_dir`` reports in one line."""
    with open(path, "wb") as f:
        try:
            torch.save(obj, f)
        except RuntimeError as e:
            cause = e.__cause__ or e.__context__
            if isinstance(cause, OSError):
                raise cause from None
            raise


def write_fairseq(job: Job, directory: str):
    """OUT/model.pt, its two dictionaries and the data's extras, for stock fairseq-generate/-interactive."""
    save(stock_checkpoint(job.state, job.stock_model, job.options), os.path.join(directory, "model.pt"))
    _write_dictionaries(job.task, job.options, directory)
    _copy_extras(job.data_dir, directory)


def _import_ctranslate2():
    """CTranslate2's fairseq converter; one line when the package is missing or does not load."""
    try:
        from ctranslate2.converters.fairseq import FairseqConverter
    except ImportError:
        raise OutlayersConfigError("--to ctranslate2 needs the ctranslate2 package: pip install "
                                   "'fairseq_outlayers[serve]' (or pip install ctranslate2)") from None
    except OSError as e:  # a shared library that is missing or broken
        raise OutlayersConfigError(f"--to ctranslate2: the ctranslate2 package does not load ({e}); reinstall it: "
                                   "pip install --force-reinstall ctranslate2") from None
    return FairseqConverter


def write_ctranslate2(job: Job, directory: str):
    """A CTranslate2 model directory, made by CTranslate2's own fairseq converter from a stock checkpoint written
    for it; an output bias that the stock Transformer cannot hold is set on CTranslate2's output projection."""
    FairseqConverter = _import_ctranslate2()
    weights = job.stock_model.state_dict()
    bias = weights.pop("decoder.output_projection.bias", None)

    class Converter(FairseqConverter):
        def _load(self):
            spec = super()._load()
            if bias is not None:
                spec.decoder.projection.bias = bias.detach().float().numpy()
            return spec

    # beside the output (in the export's hidden work folder, on OUT's disk), not in the system's temporary directory
    with tempfile.TemporaryDirectory(prefix="ct2-input-", dir=os.path.dirname(os.path.abspath(directory))) as work:
        # a checkpoint of our own making, read back by CTranslate2's converter: its legacy Namespace is trusted
        checkpoint = os.path.join(work, "model.pt")
        saved = stock_checkpoint(job.state, job.stock_model, job.options, namespace=True)
        saved["model"] = weights
        save(saved, checkpoint)
        _write_dictionaries(job.task, job.options, work)
        converter = Converter(checkpoint, work, source_lang=job.options.source_lang,
                              target_lang=job.options.target_lang, unsafe_deserialization=True)
        try:
            converter.convert(directory, quantization=job.values.get("quantization"), force=True)
        except ValueError as e:  # CTranslate2's list of what its Transformer cannot hold ("- Option ... ")
            reasons = [line[2:] for line in str(e).splitlines() if line.startswith("- ")]
            if not reasons:
                raise
            raise ExportRefused(f"--to ctranslate2: CTranslate2 cannot hold this model ({'; '.join(reasons)}); "
                                "use --to fairseq") from None
    _copy_extras(job.data_dir, directory)


# -- the targets ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetOption:
    """A command-line option of one target."""
    flag: str
    help: str
    choices: Optional[Tuple[str, ...]] = None

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


@dataclass(frozen=True)
class Target:
    """Where ``--to NAME`` writes: the architecture families it takes (the others refused with ``refuses``), its
    options, its writer ``writer(job, directory)`` and what the report calls its output."""
    name: str
    label: str
    families: Tuple[str, ...]
    writer: Callable
    wrote: str
    help: str
    options: Tuple[TargetOption, ...] = ()
    refuses: str = ""  # why another family is refused ("CTranslate2 converts fairseq Transformers only")
    output_bias: bool = False  # holds a per-word output bias even where the family's stock twin has none
    ready: Optional[Callable] = None  # checked before any data is read (its package imports)

    def describe(self, values: Dict[str, object]) -> str:
        given = [f"{v}" for o in self.options for v in [values.get(o.dest)] if v is not None]
        return self.wrote + (f" ({', '.join(given)})" if given else "")


TARGETS: Tuple[Target, ...] = (
    Target("fairseq", "stock fairseq", ("transformer", "lstm"), write_fairseq,
           "stock fairseq checkpoint (model.pt)",
           "OUT/model.pt and its dictionaries for stock fairseq-generate/-interactive"),
    Target("ctranslate2", "CTranslate2", ("transformer",), write_ctranslate2, "CTranslate2 model",
           "a CTranslate2 model directory (needs pip install ctranslate2)",
           options=(TargetOption("--quantization", "the weight type CTranslate2 stores (default: float32, as "
                                 "trained)", QUANTIZATIONS),),
           refuses="CTranslate2 converts fairseq Transformers only", output_bias=True, ready=_import_ctranslate2),
)


def get_target(name: str) -> Target:
    for target in TARGETS:
        if target.name == name:
            return target
    raise OutlayersConfigError(f"--to '{name}' is unknown; choose one of: {', '.join(t.name for t in TARGETS)}")


def _check_family(target: Target, family: Family):
    if family.name not in target.families:
        others = [t.name for t in TARGETS if family.name in t.families]
        fix = f"use --to {' or --to '.join(others)}" if others else "no target takes it"
        raise ExportRefused(f"--to {target.name}: {target.refuses}, not the {family.name}; {fix}")


def _check_options(target: Target, values: Dict[str, object]):
    known = {option.dest for t in TARGETS for option in t.options}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"export() got options that no target declares: {', '.join(unknown)}")
    for other in TARGETS:
        for option in other.options:
            if values.get(option.dest) is not None and option not in target.options:
                raise OutlayersConfigError(f"{option.flag} is {other.label}'s; it needs --to {other.name}")


# -- what the export reads, and OUT ---------------------------------------------------------------------------
def _section(state: dict, name: str) -> dict:
    cfg = state.get("cfg")
    section = cfg.get(name) if isinstance(cfg, dict) else None
    if section is None and state.get("args") is not None:
        section = vars(state["args"])
    return section if isinstance(section, dict) else {}


def recorded_inputs(state: dict, data_dir: Optional[str]) -> List[Tuple[str, str, bool]]:
    """(what, path, read as a whole folder) of the inputs that the checkpoint names and the export reads: the data
    folder it records (unless ``--data`` replaces it; each of a ``:``-separated list) and the files of its file
    options."""
    found = []
    if not data_dir:
        data = _section(state, "task").get("data") or _section(state, "model").get("data")
        for path in str(data).split(os.pathsep) if data else []:
            if path:
                found.append(("the data folder recorded in the checkpoint", path, True))
    model = _section(state, "model")
    for registry in (OUTPUT_LAYER_REGISTRY, EMBEDDING_REGISTRY):
        for spec in registry.values():
            for option in spec.options:
                value = model.get(option.dest)
                if option.file and isinstance(value, str) and value:
                    found.append((f"the file of {option.flag} recorded in the checkpoint", value, False))
    return found


def _holds(directory: str, path: str) -> bool:
    """``path`` is ``directory`` or lies under it (both resolved: links followed)."""
    a, b = os.path.realpath(directory), os.path.realpath(path)
    return a == b or b.startswith(a.rstrip(os.sep) + os.sep)


def check_out_name(out: str):
    """OUT names a directory that may be written: not empty, not the current directory nor one above it."""
    if not out or not out.strip():
        raise OutlayersConfigError("OUT is empty; give the directory to write, e.g. serve/model")
    if _holds(out, os.getcwd()):
        raise OutlayersConfigError(f"OUT '{out}' is the current directory or holds it; give a new directory for the "
                                   "export, e.g. serve/model")


def check_inputs(out: str, inputs: List[Tuple[str, Optional[str], bool]]):
    """OUT is not an input and does not hold one (links followed), and does not lie inside a data folder, which
    the export reads as a whole. OUT may lie inside the checkpoint's folder (``checkpoints/NAME/serve``): the
    export writes nothing else there."""
    for what, given, folder in inputs:
        if not given:
            continue
        if _holds(out, given) or (folder and os.path.isdir(given) and _holds(given, out)):
            raise OutlayersConfigError(f"OUT '{out}' is, holds or lies inside an input of this export ({what} "
                                       f"'{given}'); choose another OUT (--force never replaces an input)")


def _check_out(out: str, force: bool):
    """OUT exists only with --force and as a directory; no earlier write left a work folder; its parent is
    writable."""
    check_leftovers(out)
    if os.path.lexists(out) and not force:
        raise OutlayersConfigError(f"OUT '{out}' exists; choose another path or pass --force to replace it")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutlayersConfigError(f"OUT '{out}' exists and is not a directory; choose another path")
    existing = os.path.dirname(os.path.abspath(out))
    while not os.path.isdir(existing):  # missing directories above OUT are made when it is written
        if os.path.lexists(existing):
            raise OutlayersConfigError(f"OUT '{out}': '{existing}' is not a directory; choose another path")
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK):
        raise OutlayersConfigError(f"OUT '{out}': cannot write in '{existing}'; choose a writable directory")


def _check_given(checkpoint: str, data_dir: Optional[str]):
    if not os.path.isfile(checkpoint):
        what = "is a directory" if os.path.isdir(checkpoint) else "does not exist"
        raise OutlayersConfigError(f"checkpoint '{checkpoint}' {what}; pass the path of a .pt file written by "
                                   "fairseq-train")
    if data_dir is not None and not os.path.isdir(data_dir):
        what = "is not a directory" if os.path.exists(data_dir) else "does not exist"
        raise OutlayersConfigError(f"--data '{data_dir}' {what}; give the data directory that holds the "
                                   "dictionaries (dict.SRC.txt, dict.TGT.txt)")


def load(checkpoint: str, data_dir: Optional[str] = None, state: Optional[dict] = None):
    """(model, model options, task, checkpoint state) through the package's safe loader; a model of stock fairseq
    (or of another plugin) is refused in one line."""
    state = read(checkpoint) if state is None else state
    check_finite(checkpoint, state)
    model, _cfg, task = load_trained(checkpoint, data_dir)
    family_of(model)
    return model, model.outlayers_args, task, state


def export(checkpoint: str, out: str, to: str, data_dir: Optional[str] = None, quantization: Optional[str] = None,
           force: bool = False, **options) -> str:
    """Write ``checkpoint`` as a stock model to ``out`` through the target ``to``; returns a one-line report.
    ``quantization`` and ``options``: the targets' options by dest (each refused for a target without it)."""
    target = get_target(to)
    values = dict(options, quantization=quantization)
    _check_options(target, values)
    check_out_name(out)
    _check_given(checkpoint, data_dir)
    if target.ready is not None:
        target.ready()
    inputs = [("the checkpoint", checkpoint, False), ("--data", data_dir, True),
              ("the checkpoint's folder", os.path.dirname(os.path.abspath(checkpoint)), False),
              ("the checkpoint's folder", os.path.dirname(os.path.realpath(checkpoint)), False)]
    check_inputs(out, inputs)  # before the checkpoint is read, the inputs on the command line
    state = read(checkpoint)
    inputs += recorded_inputs(state, data_dir)
    check_inputs(out, inputs)
    _check_out(out, force)
    model, args, task, state = load(checkpoint, data_dir, state)
    family = family_of(model)
    _check_family(target, family)
    stock_model, stock_options = build_stock(model, args, task, output_bias=target.output_bias,
                                             bias_targets=[(t.name, t.families) for t in TARGETS if t.output_bias])
    _languages(task, stock_options)
    difference = max_difference(model, stock_model, task)
    if not difference <= TOLERANCE:
        raise ExportRefused(f"the stock {family.name} gives log-probabilities up to {difference:.3g} away from this "
                            f"model's (more than {TOLERANCE:g}); nothing was written")
    data = getattr(task.cfg, "data", None) if hasattr(task, "cfg") else None
    data = data_dir or (str(data).split(os.pathsep)[0] if data else None)
    job = Job(state, stock_model, stock_options, task, data, values)
    notes: List[str] = []
    with atomic_dir(out, "OUT", notes) as new:
        target.writer(job, new)
    kind = "an LSTM" if family.name == "lstm" else "a Transformer"
    return "; ".join([f"wrote {out}: a {target.describe(values)} of {kind} with --output-layer {args.output_layer}, "
                      f"--embeddings {args.embeddings}; largest log-probability difference to the package's model "
                      f"{difference:.2g}"] + notes)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="outlayers-export",
        description="Write a checkpoint of this package as a model that stock fairseq (no --user-dir) or CTranslate2 "
        "translates with, after checking that both give the same log-probabilities.")
    p.add_argument("checkpoint", help="a checkpoint written by fairseq-train --user-dir fairseq_outlayers")
    p.add_argument("out", help="the directory to write (refused if it exists, unless --force)")
    p.add_argument("--to", required=True, choices=[t.name for t in TARGETS],
                   help="; ".join(f"{t.name}: {t.help}" for t in TARGETS))
    for target in TARGETS:
        for option in target.options:
            p.add_argument(option.flag, choices=option.choices, help=f"--to {target.name}: {option.help}")
    p.add_argument("--data", metavar="DIR", help="the data directory with the dictionaries, if it moved since "
                   "training")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (never an input)")
    return p


@one_line_errors
def main(argv=None):
    logging.basicConfig(format="%(message)s", level=logging.WARNING)
    args = vars(parser().parse_args(argv))
    checkpoint, out, to, data, force = (args.pop(k) for k in ("checkpoint", "out", "to", "data", "force"))
    print(export(checkpoint, out, to, data, force=force, **args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
