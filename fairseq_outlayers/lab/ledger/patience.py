"""Resume a ledger run with fairseq's early-stopping count carried over.

fairseq keeps its ``--patience`` count in memory only (attributes of ``fairseq_cli.train.should_stop_early``),
so a run resumed from ``checkpoint_last.pt`` counts again from its first validation after the resume and can
train longer than the protocol says. The runner resumes through this entry point instead of ``fairseq-train``:

    python -m fairseq_outlayers.lab.ledger.patience BEST RUNS -- FAIRSEQ-TRAIN-ARGS...

which sets that count to what an uninterrupted run would hold (the best validation score so far and the
validations since it, read from the run's log by ``early_stopping_state``) and hands over to fairseq-train's main.
"""
import logging
import os
import sys
from typing import Optional, Tuple

from fairseq_outlayers.lab import fairseq_runs


def early_stopping_state(log_path: str, metric: str, upto_epoch: Optional[int] = None) -> Optional[Tuple[float, int]]:
    """(best score, validations since it) as fairseq's ``should_stop_early`` would hold them after the validations
    in a run's log (only a strictly better score counts as an improvement, so a tie does not reset the count);
    ``metric`` "bleu" is maximised, anything else minimised. ``upto_epoch``: the epochs the checkpoint resumed from
    has completed (a validation logged after it, by a run killed before its checkpoint was saved, is done again).
    None before the first validation."""
    scored = [v[metric] for v in fairseq_runs.validations(log_path)
              if metric in v and (upto_epoch is None or v["epoch"] <= upto_epoch)]
    if not scored:
        return None
    best, since = scored[0], 0
    for score in scored[1:]:
        if is_better(score, best, metric):
            best, since = score, 0
        else:
            since += 1
    return best, since


def is_better(score: float, best: float, metric: str) -> bool:
    """fairseq's ``should_stop_early`` test: strictly better, "bleu" maximised and anything else minimised."""
    return score > best if metric == "bleu" else score < best


def command(fairseq_train_cmd, state: Tuple[float, int]):
    """The resume command for a ``[fairseq-train, args...]`` command list."""
    return [sys.executable, "-m", "fairseq_outlayers.lab.ledger.patience", repr(float(state[0])), str(int(state[1])),
            "--", *fairseq_train_cmd[1:]]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) < 3 or argv[2] != "--":
        raise SystemExit("usage: python -m fairseq_outlayers.lab.ledger.patience BEST RUNS -- FAIRSEQ-TRAIN-ARGS...")
    from fairseq_cli import train

    import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

    # fairseq-train's log format (the ledger reads its logs): importing fairseq logged its first line, which
    # configured the root logger before fairseq_cli.train's own basicConfig could
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=os.environ.get("LOGLEVEL", "INFO").upper(), stream=sys.stdout, force=True)
    train.should_stop_early.best = float(argv[0])
    train.should_stop_early.num_runs = int(argv[1])
    sys.argv = ["fairseq-train", *argv[3:]]
    train.cli_main()


if __name__ == "__main__":
    main()
