"""Before fairseq-train starts: an unreadable ``checkpoint_last.pt`` falls back to the newest intact checkpoint.

fairseq writes ``checkpoint_last.pt`` by copying another checkpoint, not atomically: a run killed during the copy
leaves it empty or truncated, and the next run of the same command dies on it. ``outlayers-train`` and
``scripts/train.sh`` call :func:`restore_args` first: when ``SAVE_DIR/checkpoint_last.pt`` cannot be read, the
intact checkpoint with the most updates (``checkpoint_N.pt``, ``checkpoint_E_U.pt``, ``checkpoint_best.pt``, ...)
is passed to fairseq as ``--restore-file``, with a warning. A ``checkpoint_last.pt`` that the safe loader refused
(its pickle names code; a crafted or tampered file, not a damaged copy) is one line and no fallback. The unreadable file is left where it is (fairseq
replaces it at its next save). Nothing is done when the user gave ``--restore-file``, but a missing file named by
``--restore-file`` or ``--finetune-from-model`` is refused (fairseq would train from scratch or end in a traceback).
A resume whose architecture, optimizer, precision, criterion or learning-rate schedule is not the checkpoint's is one
line (:func:`check_training_state`; fairseq would build the model, then fail on an ``AssertionError``, a ``KeyError`` or
two tracebacks).

    python -m fairseq_outlayers.tools.resume FAIRSEQ-TRAIN-ARGS...   # prints the arguments to add, one per line
"""
import contextlib
import glob
import io
import os
import sys
from typing import List, Optional

from fairseq_outlayers.command_line import option_value
from fairseq_outlayers.core.fairseq_compat import restore_file, restore_path
from fairseq_outlayers.errors import OutlayersConfigError, describe_load_error, is_refused

PROG = "fairseq_outlayers"


def _load(path: str):
    """(state, None) of a checkpoint read with the safe loader (tensors mapped), or (None, the exception)."""
    import torch

    from fairseq_outlayers.core.checkpoint_safety import install

    install()  # the classes fairseq checkpoints hold (argparse.Namespace), allowed for the weights-only load

    error = None
    for kwargs in ({"mmap": True}, {}):
        try:
            return torch.load(path, map_location="cpu", weights_only=True, **kwargs), None
        except Exception as e:
            error = e
    return None, error


def updates(path: str) -> Optional[int]:
    """The number of updates a checkpoint holds, or None when it cannot be read (empty, truncated, refused, not
    one)."""
    state, _ = _load(path)
    if not isinstance(state, dict) or "model" not in state:
        return None
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0) or 0)


def restore_args(argv: List[str]) -> List[str]:
    """Extra fairseq-train arguments (``["--restore-file", PATH]`` or none); raises SystemExit with one line when
    ``checkpoint_last.pt`` is unreadable and no intact checkpoint is left."""
    finetune = option_value(argv, "--finetune-from-model")
    if finetune is not None and not os.path.isfile(finetune):
        raise SystemExit(f"{PROG}: error: --finetune-from-model '{finetune}' does not exist; pass the path of a "
                         "trained checkpoint")
    save_dir = option_value(argv, "--save-dir") or "checkpoints"
    restore = option_value(argv, "--restore-file")
    if restore is not None:
        path = restore_file(save_dir, restore, option_value(argv, "--checkpoint-suffix") or "")
        if restore != "checkpoint_last.pt" and not os.path.isfile(path):
            # fairseq would log "No existing checkpoint found" and train from scratch
            raise SystemExit(f"{PROG}: error: --restore-file '{path}' does not exist; pass the path of a checkpoint "
                             "to resume from, or leave the option out to start (or resume) in --save-dir")
        return []
    last = restore_file(save_dir)
    if not os.path.exists(last) or updates(last) is not None:
        return []

    _, error = _load(last)
    if error is not None and is_refused(error):  # not a damaged copy: a file someone else wrote
        raise SystemExit(f"{PROG}: error: {describe_load_error(last, error)}; move it away to resume from another "
                         "checkpoint of the run, or give a new --save-dir")
    found = []
    for path in glob.glob(os.path.join(save_dir, "checkpoint*.pt")):
        if os.path.abspath(path) != os.path.abspath(last):
            n = updates(path)
            if n is not None:
                # equal updates: a numbered checkpoint rather than checkpoint_best.pt (a copy of one of them)
                found.append((n, not os.path.basename(path).startswith("checkpoint_best"), os.path.getmtime(path),
                              path))
    size = os.path.getsize(last)
    if not found:
        raise SystemExit(f"{PROG}: error: {last} is unreadable ({size} bytes: a copy interrupted by a kill?) and "
                         f"{save_dir} holds no intact checkpoint; move it away to start training afresh")
    n, _, _, best = max(found)
    print(f"{PROG}: warning: {last} is unreadable ({size} bytes: a copy interrupted by a kill?); resuming from "
          f"{best} ({n} updates) with --restore-file; {last} is left as it is", file=sys.stderr)
    return ["--restore-file", best]


# --- a resume whose optimizer, precision or criterion is not the checkpoint's --------------------------------------

#: the precision options, most specific first, as fairseq reads them (``--memory-efficient-*`` sets ``fp16``/``bf16``)
PRECISIONS = (("amp", "--amp"), ("memory_efficient_bf16", "--memory-efficient-bf16"), ("bf16", "--bf16"),
              ("memory_efficient_fp16", "--memory-efficient-fp16"), ("fp16", "--fp16"))
FLOAT32 = "float32"


def precision(get) -> str:
    """The precision option a run was given (``get(name)``: its value of a fairseq option), or "float32"."""
    return next((flag for name, flag in PRECISIONS if get(name)), FLOAT32)


def optimizer_class(optimizer: str, given_precision: str) -> Optional[str]:
    """The class name fairseq's trainer gives the optimizer of a run (what a checkpoint's ``optimizer_name``
    holds): a precision wrapper, or the optimizer's own class; None for an optimizer not registered."""
    if given_precision == "--amp":
        return "AMPOptimizer"
    if given_precision.startswith("--memory-efficient"):
        return "MemoryEfficientFP16Optimizer"
    if given_precision != FLOAT32:
        return "FP16Optimizer"
    from fairseq.optim import OPTIMIZER_REGISTRY

    cls = OPTIMIZER_REGISTRY.get(optimizer)
    return None if cls is None else cls.__name__


def resumed_checkpoint(args, weights: bool = False) -> Optional[str]:
    """The checkpoint whose optimizer state fairseq-train will load (as ``checkpoint_utils.load_checkpoint``
    chooses it), or None: a new run, ``--reset-optimizer``, or a fine-tuning start (which resets the optimizer).
    ``weights``: the checkpoint whose weights it will load, ``--reset-optimizer`` or not."""
    if getattr(args, "reset_optimizer", False) and not weights:
        return None
    return restore_path(args, fine_tune=False)


def _name(section) -> Optional[str]:
    """The registered name (``_name``) of a section of a checkpoint's configuration."""
    if isinstance(section, dict):
        return section.get("_name")
    return getattr(section, "_name", None)


def _saved(state) -> Optional[dict]:
    """{"optimizer", "criterion", "precision", "optimizer_class", "criterion_class", "lr_scheduler", "arch"} of a
    checkpoint's training run, or None when it holds no optimizer history or configuration (then fairseq's own
    check stands)."""
    history = state.get("optimizer_history") if isinstance(state, dict) else None
    cfg = state.get("cfg") if isinstance(state, dict) else None
    if not history or not isinstance(history[-1], dict):
        return None
    if isinstance(cfg, dict):
        common = cfg.get("common") or {}
        get, optimizer, criterion = common.get, _name(cfg.get("optimizer")), _name(cfg.get("criterion"))
        lr_scheduler, model = _name(cfg.get("lr_scheduler")), cfg.get("model")
        # a model of the legacy registry keeps its options as an argparse.Namespace (with .arch), a dataclass
        # model as a dictionary (its _name)
        arch = model.get("arch") or model.get("_name") if isinstance(model, dict) else getattr(model, "arch", None)
    elif state.get("args") is not None:
        args = state["args"]

        def get(name):
            return getattr(args, name, False)

        optimizer, criterion = getattr(args, "optimizer", None), getattr(args, "criterion", None)
        lr_scheduler, arch = getattr(args, "lr_scheduler", None), getattr(args, "arch", None)
    else:
        return None
    return {"optimizer": optimizer, "criterion": criterion, "precision": precision(get),
            "optimizer_class": history[-1].get("optimizer_name"), "criterion_class": history[-1].get("criterion_name"),
            "lr_scheduler": lr_scheduler if isinstance(lr_scheduler, str) else None,
            "arch": arch if isinstance(arch, str) else None}


def _way(option: str, value: str) -> str:
    if option == "precision":
        return "train in float32 (no precision option)" if value == FLOAT32 else f"give {value}"
    return f"give {option} {value}"


#: what keeps the new options, by the kind of change (the first that applies)
KEEP_NEW = (
    ("--arch", "give a new --save-dir (the weights of one architecture do not fit another, and fairseq has no "
               "option to leave them out)"),
    ("optimizer", "pass --reset-optimizer (the weights are kept; the optimizer state and learning-rate schedule "
                  "start afresh) or give a new --save-dir"),
    ("--lr-scheduler", "pass --reset-lr-scheduler (the weights and the optimizer state are kept; the learning-rate "
                       "schedule starts afresh) or give a new --save-dir"),
)


def check_training_state(args):
    """Before fairseq-train builds anything: a resume whose architecture, optimizer, precision, criterion or
    learning-rate schedule differs from the checkpoint it resumes (fairseq's ``AssertionError: Optimizer/Criterion
    does not match`` after building the model, a ``KeyError`` from the schedule's state, or two tracebacks from
    weights that do not fit) is one line naming the option, the saved and the given value, and the two ways out.
    Raises ``OutlayersConfigError``; a checkpoint that cannot be read is left to the checks that read it. The
    architecture is checked whenever the checkpoint's weights are loaded (``--reset-optimizer`` too), the schedule
    unless ``--reset-optimizer`` or ``--reset-lr-scheduler`` leaves its state out."""
    path = resumed_checkpoint(args, weights=True)
    if path is None:
        return
    state, _ = _load(path)
    saved = _saved(state)
    if saved is None:
        return
    changed = []  # (option, saved value, given value, kind)
    given_arch = getattr(args, "arch", None)
    if saved["arch"] and given_arch and saved["arch"] != given_arch:
        changed.append(("--arch", saved["arch"], given_arch, "--arch"))
    if not getattr(args, "reset_optimizer", False):
        from fairseq.criterions import CRITERION_REGISTRY

        given = {"optimizer": getattr(args, "optimizer", None), "criterion": getattr(args, "criterion", None),
                 "precision": precision(lambda name: getattr(args, name, False))}
        criterion_cls = CRITERION_REGISTRY.get(given["criterion"])
        # fully sharded training wraps half precision otherwise (fairseq's trainer): its optimizer is left to fairseq
        fsdp = getattr(args, "ddp_backend", None) == "fully_sharded"
        optimizer_cls = None if fsdp else optimizer_class(given["optimizer"], given["precision"])
        if criterion_cls is not None and saved["criterion_class"] not in (None, criterion_cls.__name__):
            changed.append(("--criterion", saved["criterion"] or saved["criterion_class"], given["criterion"],
                            "optimizer"))
        if optimizer_cls is not None and saved["optimizer_class"] not in (None, optimizer_cls):
            optimizer = [(option, old, new, "optimizer") for option, old, new in (
                ("precision", saved["precision"], given["precision"]),
                ("--optimizer", saved["optimizer"], given["optimizer"])) if old and old != new]
            changed += optimizer or [("--optimizer", saved["optimizer_class"], given["optimizer"], "optimizer")]
        given_schedule = getattr(args, "lr_scheduler", None)
        if (not getattr(args, "reset_lr_scheduler", False) and saved["lr_scheduler"] and given_schedule
                and saved["lr_scheduler"] != given_schedule):
            changed.append(("--lr-scheduler", saved["lr_scheduler"], given_schedule, "--lr-scheduler"))
    if not changed:
        return
    what = "; ".join(f"{option} was {old}, this run gives {new}" for option, old, new, _ in changed)
    ways = " and ".join(_way(option, old) for option, old, _, _ in changed)
    kinds = {kind for _, _, _, kind in changed}
    keep = next(text for kind, text in KEEP_NEW if kind in kinds)
    if "--arch" in kinds and getattr(args, "restore_file", "checkpoint_last.pt") != "checkpoint_last.pt":
        keep = ("drop --restore-file to train from scratch, or start from these weights with --finetune-from-model "
                "(where they fit the new architecture)")
    raise OutlayersConfigError(
        f"'{path}' cannot be resumed with these options: {what}. To resume that run, {ways}; to keep the new "
        f"options, {keep}")


def check_training_state_argv(argv: List[str]):
    """``check_training_state`` on fairseq-train arguments (``scripts/train.sh`` runs this module before fairseq-train):
    arguments fairseq cannot parse are left to fairseq-train, which names them."""

    from fairseq import options

    import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = options.parse_args_and_arch(options.get_training_parser(), list(argv))
    except (SystemExit, Exception):
        return
    check_training_state(args)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = restore_args(argv)
    try:
        check_training_state_argv(list(argv) + extra)
    except OutlayersConfigError as e:
        raise SystemExit(f"{PROG}: error: {e}") from None
    for a in extra:
        print(a)


if __name__ == "__main__":
    main()
