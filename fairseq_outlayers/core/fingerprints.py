"""Fingerprints (sha256 and path) of what a model is built from: the source and target dictionaries, and the files
read when training starts (the options declared with ``Option(..., file=...)``, which the core passes in).

They are recorded in the model's arguments, so every checkpoint carries them, and compared

* when a checkpoint is rebuilt (``fairseq-generate``, ``-interactive``, ``-validate``): its dictionaries against
  those of the data directory given now (the files are not read then: their tables are in the checkpoint, so
  those files may be gone);
* when training resumes (``checkpoint_last.pt``, ``--restore-file``, ``--finetune-from-model``): every fingerprint
  of the checkpoint against the files and dictionaries given now, since the checkpoint's tables would silently
  replace the new ones; likewise the options that transform a frozen table (declared ``resume="table"``) and, always
  an error, those that fix a parameter's shape (``--output-layer``, those declared ``resume="shape"``:
  ``check_option_resume``).

A difference is an error naming both sides; ``--outlayers-allow-mismatch`` (training) or
``--model-overrides "{'outlayers_allow_mismatch': True}"`` (decoding) turns it into a warning. What a checkpoint
recorded no fingerprint of is not checked (a pairing's dictionary hashes stand in for those of its dictionaries).
Every build records its dictionaries' fingerprints, so a model's arguments that hold some when a build starts are a
checkpoint's (``core.built_from_checkpoint``).
"""
import hashlib
import logging
import os

from omegaconf import OmegaConf

from fairseq_outlayers import model_args
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.value_checks import fmt

logger = logging.getLogger(__name__)

ARG = "outlayers_fingerprints"
ALLOW = "outlayers_allow_mismatch"
ALLOW_TRAIN = "--outlayers-allow-mismatch"
ALLOW_DECODE = "--model-overrides \"{'outlayers_allow_mismatch': True}\""
#: {key: (what, what the checkpoint would keep whatever is given now)} of the dictionaries
DICTIONARIES = {"src_dict": ("the source dictionary", "embeddings indexed by its source dictionary"),
                "tgt_dict": ("the target dictionary", "embeddings and outputs indexed by its target dictionary")}


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dictionary_hash(dictionary) -> str:
    """SHA-256 of the dictionary's symbols in index order: what a model's rows and a pairing's index maps depend
    on (a pairing file records it too)."""
    return hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()


def dictionary_fingerprint(dictionary, path=None) -> dict:
    return {"sha256": dictionary_hash(dictionary), "path": path, "size": len(dictionary)}


def describe(fp: dict) -> str:
    size = f"{fp['size']} symbols, " if fp.get("size") is not None else ""
    where = fp.get("path") or "path not recorded"
    return f"{where} ({size}sha256 {fp['sha256'][:12]})"


def recorded(args) -> dict:
    """The fingerprints stored in ``args`` (a checkpoint's, or those of this build so far)."""
    value = getattr(args, ARG, None) or {}
    out = {k: dict(v) for k, v in (OmegaConf.to_container(value) if OmegaConf.is_config(value) else value).items()}
    # checkpoints older than fingerprints that were built from a pairing record the hashes of their dictionaries
    for key, old in (("src_dict", "shared_private_src_sha256"), ("tgt_dict", "shared_private_tgt_sha256")):
        if key not in out and getattr(args, old, None) and getattr(args, "shared_private_counts", None):
            out[key] = {"sha256": getattr(args, old), "path": None}
    return out


def kept(args, key: str) -> bool:
    """Whether ``args`` are a checkpoint's that recorded the file of option ``key`` (its dest): what the model read
    from that file is in the checkpoint, so a model rebuilt from it does not read the file again (it may be gone).
    A new run records its files only once its model is built (``core.build.check_checkpoint_match``)."""
    return key in recorded(args)


def record(args, key: str, fp: dict):
    fps = recorded(args)
    fps[key] = fp
    model_args.record(args, **{ARG: fps})


def note_file(args, key: str, path: str):
    """Record the fingerprint of a file read while building the model (``key``: the option's dest)."""
    record(args, key, {"sha256": file_sha256(path), "path": os.path.abspath(path)})


def _dict_path(task, lang):
    data = getattr(getattr(task, "cfg", None), "data", None)
    if not data or not lang:
        return None
    return os.path.abspath(os.path.join(str(data).split(os.pathsep)[0], f"dict.{lang}.txt"))


def mismatch(args, key: str, checkpoint: dict, given: dict, message: str):
    """Raise ``message`` (or log it when the user allowed mismatches)."""
    if checkpoint["sha256"] == given["sha256"]:
        return
    if getattr(args, ALLOW, False):
        logger.warning(f"{message} (allowed by {ALLOW_TRAIN})")
        return
    raise OutlayersConfigError(message)


def check_dictionaries(args, task):
    """Compare the task's dictionaries with those a checkpoint recorded (decoding), then record them."""
    fps = recorded(args)
    for key, side, dictionary, lang in (
        ("src_dict", "source", task.source_dictionary, getattr(task.cfg, "source_lang", None)),
        ("tgt_dict", "target", task.target_dictionary, getattr(task.cfg, "target_lang", None)),
    ):
        given = dictionary_fingerprint(dictionary, _dict_path(task, lang))
        if key in fps:
            mismatch(args, key, fps[key], given,
                     f"the {side} dictionary {describe(given)} differs from the one this checkpoint was trained with "
                     f"({describe(fps[key])}): its words would get other words' rows; give the data-bin directory "
                     f"of training, or add {ALLOW_DECODE} to decode anyway")
        record(args, key, given)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(fmt(v) for v in value)
    return fmt(value)


def check_option_resume(args, checkpoint_path: str, checkpoint_args, shape, table):
    """Training: the options that fix a parameter's shape or build a frozen table, against the checkpoint's.
    ``shape``/``table``: [(dest, flag, effective or None)], ``effective(args)`` being the value that matters. A
    changed shape is an error (fairseq could not load the parameters); a changed table too, unless mismatches are
    allowed: then the checkpoint's value is recorded, since its table is what the model holds from now on.
    Options the checkpoint does not record (older versions) are not compared."""
    for kind, options in (("shape", shape), ("table", table)):
        for dest, flag, effective in options:
            if not hasattr(checkpoint_args, dest):
                continue
            ours, theirs = ((effective(a) if effective else getattr(a, dest, None)) for a in (args, checkpoint_args))
            if ours == theirs:
                continue
            if isinstance(theirs, bool):  # a flag
                given = f"{flag} is {_shown(ours)} but {checkpoint_path} was trained with it {_shown(theirs)}"
                resume = f"{'add' if theirs else 'drop'} {flag} to resume"
            else:
                given = f"{flag} {_shown(ours)} differs from the {_shown(theirs)} of {checkpoint_path}"
                resume = f"resume with {flag} {_shown(theirs)}"
            if kind == "shape":
                raise OutlayersConfigError(f"{given}: the model's parameters would have another shape and cannot be "
                                           f"loaded; {resume}, or train afresh with a new --save-dir")
            message = (f"{given}: the checkpoint would keep the frozen table it was built with; {resume}, use a new "
                       f"--save-dir, or add {ALLOW_TRAIN} to resume with the checkpoint's table")
            if not getattr(args, ALLOW, False):
                raise OutlayersConfigError(message)
            logger.warning(f"{message} (allowed by {ALLOW_TRAIN})")
            model_args.record(args, **{dest: getattr(checkpoint_args, dest)})


def check_file_resume(args, checkpoint_path: str, checkpoint_args, files):
    """Training: the fingerprints of this build (``args``) against those of the checkpoint fairseq will load.
    ``files``: {dest: (flag, what the checkpoint keeps)} of the options that name a file."""
    theirs, ours = recorded(checkpoint_args), recorded(args)
    for key, (what, kept) in {**files, **DICTIONARIES}.items():
        if key not in theirs or key not in ours:
            continue
        mismatch(args, key, theirs[key], ours[key],
                 f"{what} {describe(ours[key])} differs from the one {checkpoint_path} was trained with, "
                 f"{describe(theirs[key])}, and the checkpoint would keep {kept}; give the training run's file, use "
                 f"a new --save-dir, or add {ALLOW_TRAIN} to resume with the checkpoint's")
        if key in files:  # allowed: the checkpoint's table is what the model holds from now on
            record(args, key, theirs[key])
