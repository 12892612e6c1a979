"""User mistakes are exceptions with a one-line message that says what is wrong and what to do.

``OutlayersConfigError`` is raised by this package for a bad option or data (unknown output layer, a dictionary
that does not belong to the binarised data, a layer that needs a joined dictionary, ...), where the check is.
Called from Python, it is an ordinary ``ValueError``. Under fairseq's own CLIs (``fairseq-train --user-dir ...``)
it ends fairseq's usual traceback, whose last line is the message.

The package's own command-line entry points (``outlayers-train``/``-generate``/``-interactive``/``-validate``
and the package's tools) are wrapped with ``one_line_errors``: there a user mistake is printed as the single line
``fairseq_outlayers: error: MESSAGE`` and the exit status is 1. These count as user mistakes:

* ``OutlayersConfigError``;
* a ``FileNotFoundError`` raised while fairseq sets up the task (a missing or misspelt data directory or
  dictionary file);
* any error raised while fairseq loads a checkpoint (missing, empty, truncated, or a crafted pickle that the
  weights-only loader refused; ``load_error_message``), and a checkpoint whose weights do not fit the model that
  its options (changed by ``--model-overrides``) build.

The messages about checkpoints that cannot be loaded are written here (``describe_load_error``,
``load_error_message``), so that this module imports no other module of the package: ``checkpoint_safety``
imports it, never the other way.

Every other exception keeps its normal traceback. Importing the package changes nothing here: no
``sys.excepthook``.
"""
import functools
import os
import pickle
import re
import sys
import traceback

PREFIX = "fairseq_outlayers: error: "


class OutlayersConfigError(ValueError):
    """A user-facing configuration or data error; the message names the file/option and the fix."""


class ExportRefused(OutlayersConfigError):
    """A trained model, or one of its seams, that ``outlayers-export`` cannot write in a stock form exactly; the
    message says which part and why."""


_TASK_SETUP_FRAMES = {"setup_task", "load_dictionary", "infer_language_pair", "load_dataset", "load_langpair_dataset"}


def _global_named(exc: BaseException):
    """The ``module.name`` a refused pickle asked for, from torch's weights-only error, or None."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    return found.group(1) if found else None


def is_refused(exc: BaseException) -> bool:
    """True for torch's weights-only refusal of a pickle that names code a fairseq checkpoint never holds."""
    return isinstance(exc, pickle.UnpicklingError) and _global_named(exc) is not None


def describe_load_error(path: str, exc: BaseException) -> str:
    """One line for a checkpoint that could not be loaded: missing, empty, unsafe (a pickle that names code a
    fairseq checkpoint never holds; nothing of it ran) or damaged."""
    if not os.path.exists(path):
        return f"checkpoint '{path}' does not exist; pass the path of a .pt file written by fairseq-train"
    if os.path.isdir(path):
        return f"checkpoint '{path}' is a directory; pass the path of a .pt file in it (e.g. checkpoint_best.pt)"
    if os.path.getsize(path) == 0:
        return (f"checkpoint '{path}' is empty (0 bytes): an interrupted save? use another checkpoint of the run "
                "(e.g. checkpoint_best.pt or the newest checkpointN.pt)")
    if is_refused(exc):
        return (f"checkpoint '{path}' was refused and nothing in it was run: its pickle asks for "
                f"'{_global_named(exc)}', which no fairseq checkpoint holds (a crafted or tampered file?); use a "
                "checkpoint you trained or trust")
    text = " ".join(str(exc).split())
    cause = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|\. |$)", text)  # torch's weights-only boilerplate
    text = cause.group(1) if cause else re.split(r"(?<=[a-z])\. ", text)[0]
    reason = f"{type(exc).__name__}: {text}"[:160]
    return (f"checkpoint '{path}' cannot be read ({reason}); it is truncated, damaged or not a .pt file written by "
            "fairseq-train: use another checkpoint of the run")


def _saved_model_options(state):
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    model = model if model is not None else (state.get("args") if isinstance(state, dict) else None)
    return model if isinstance(model, dict) else vars(model) if model is not None else {}


def _keys_in(text: str, what: str):
    found = re.search(what + r' key\(s\) in state_dict: (.*?)\.\s*(?:\n|$|Unexpected|size mismatch)', text, re.S)
    return re.findall(r'"([^"]+)"', found.group(1)) if found else []


def describe_mismatch(path: str, exc: BaseException, overrides) -> str:
    """One line for a checkpoint whose weights do not fit the model its saved options build (changed by
    ``--model-overrides``, whose options that differ from the saved ones are named)."""
    text = str(exc)
    missing, unexpected = _keys_in(text, "Missing"), _keys_in(text, "Unexpected")
    shapes = re.findall(r"size mismatch for ([\w.]+)", text)
    parts = [f"{len(keys)} {what} (e.g. {keys[0]})" for keys, what in (
        (missing, "missing"), (unexpected, "unexpected"), (shapes, "of another shape")) if keys]
    changed = []
    saved = {}
    try:
        import torch

        saved = _saved_model_options(torch.load(path, map_location="cpu", weights_only=True, mmap=True))
    except Exception:  # the file loaded a moment ago; without its options the message names every override
        pass
    for key, value in dict(overrides or {}).items():
        if key in saved and saved[key] != value:
            changed.append(f"{key}={value!r} (trained with {saved[key]!r})")
        elif key not in saved and key in ("output_layer", "embeddings"):
            changed.append(f"{key}={value!r}")
    fix = (f"drop {', '.join(changed)} from --model-overrides: it changes the model, not only its decoding"
           if changed else "decode it with the options it was trained with (no --model-overrides)")
    weights = "; ".join(parts) or text.splitlines()[0][:120]
    return f"checkpoint '{path}' does not fit the model its options build (weights: {weights}); {fix}"


def load_error_message(exc: BaseException):
    """The one line for an exception raised while fairseq loaded a checkpoint (inside its
    ``checkpoint_utils.load_checkpoint_to_cpu``, or its "Model file not found", or a state dict that does not fit
    the model built in ``load_model_ensemble_and_task``), or None for any other."""
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        if not frame.f_code.co_filename.replace("\\", "/").endswith("fairseq/checkpoint_utils.py"):
            continue
        local = frame.f_locals
        if frame.f_code.co_name == "load_checkpoint_to_cpu" and isinstance(local.get("path"), str):
            return describe_load_error(local["path"], exc)
        if isinstance(exc, OSError) and "Model file not found" in str(exc) and isinstance(local.get("filename"), str):
            return describe_load_error(local["filename"], exc)
        if (frame.f_code.co_name == "load_model_ensemble_and_task" and isinstance(exc, RuntimeError)
                and "loading state_dict" in str(exc) and isinstance(local.get("filename"), str)):
            return describe_mismatch(local["filename"], exc, local.get("arg_overrides"))
    return None


def explain(exc: BaseException):
    """The one-line message for a user mistake, or None for any other exception."""
    if isinstance(exc, OutlayersConfigError):
        return str(exc)
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OutlayersConfigError) and str(exc).startswith("Cannot load model parameters"):
        return str(cause)  # fairseq's trainer re-raises what the model's load_state_dict refused (NaN weights)
    message = load_error_message(exc)  # a missing, damaged or unsafe checkpoint that fairseq was loading
    if message is not None:
        return message
    if isinstance(exc, FileNotFoundError):
        frames = {frame.f_code.co_name for frame, _ in traceback.walk_tb(exc.__traceback__)}
        if frames & _TASK_SETUP_FRAMES:
            path = getattr(exc, "filename", None) or str(exc)
            return (f"data path '{path}' does not exist: the first argument must be the --destdir written by "
                    "fairseq-preprocess (check its spelling), holding dict.*.txt and the binarised splits")
    return None


def one_line_errors(main):
    """Decorate a command-line entry point: a user mistake (``explain``) is printed as one line on stderr and
    exits with status 1; anything else propagates unchanged."""

    @functools.wraps(main)
    def entry_point(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except Exception as e:
            message = explain(e)
            if message is None:
                raise
            sys.stdout.flush()
            print(PREFIX + message, file=sys.stderr)
            sys.stderr.flush()
            raise SystemExit(1) from None

    return entry_point
