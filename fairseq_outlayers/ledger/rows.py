"""Ledger row files and the converged-protocol fairseq-train command built from them.

A row file is a ``configs/demo/*.args`` file (the options after ``#`` are ignored by fairseq) whose comment lines
may hold directives ``# key: value``::

    # fixed random targets on the attention LSTM (Shalev et al. 2021, Table 2)
    # baseline: lstm-softmax
    # method: fixed
    --data-bin work/multi30k/data-bin/de-en-word --arch outlayers_lstm_luong_2x2 --output-layer fixed ...

* ``baseline: NAME``: the row it is compared with (a paired bootstrap test per table); absent for a baseline;
* ``method: NAME``: the ``make demo`` row it stands for (default: the row's own name);
* ``table: NAME``: the table it belongs to (default: the name of the folder holding the row file);
* ``validate: bleu`` (default) or ``validate: loss -- REASON``: the early-stopping metric; loss needs a reason;
* ``beam: N``: the beam of this row's validation BLEU and test translations (default: the runner's ``--beam``), for
  a method whose recipe decodes otherwise (continuous outputs: beam 1, the nearest neighbour of each vector).

The first comment line that is not a directive describes the row. The options line is complete (architecture,
optimiser, criterion, data): the runner adds only the protocol (``protocol_options``), the seed and paths.
"""
import json
import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from fairseq_outlayers.cli.compare import read_row, row_data_bin
from fairseq_outlayers.errors import OutlayersConfigError

DIRECTIVES = ("baseline", "method", "table", "validate", "beam")
DIRECTIVE = re.compile(r"^#\s*([a-z]+)\s*:\s*(.*?)\s*$")


@dataclass
class LedgerRow:
    name: str
    path: str
    data_bin: str
    train_args: List[str]
    description: str = ""
    baseline: Optional[str] = None
    method: str = ""
    table: str = ""
    validate: str = "bleu"
    validate_reason: str = ""
    beam: Optional[int] = None

    def decoding_beam(self, default: int) -> int:
        return self.beam or default

    def languages(self) -> Tuple[Optional[str], Optional[str]]:
        """(source, target) named by the row's ``--source-lang``/``-s`` and ``--target-lang``/``-t`` (a row that
        trains the other direction of its data directory), else (None, None): the data directory's pair."""
        found = {}
        for i, arg in enumerate(self.train_args[:-1]):
            key = {"-s": "src", "--source-lang": "src", "-t": "tgt", "--target-lang": "tgt"}.get(arg)
            if key:
                found[key] = self.train_args[i + 1]
        if len(found) == 1:
            raise OutlayersConfigError(f"{self.path}: give both --source-lang and --target-lang (or neither)")
        return found.get("src"), found.get("tgt")


def read_ledger_row(path: str, default_data: Optional[str] = None) -> LedgerRow:
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"row file '{path}' does not exist")
    name, args = read_row(path)
    found, description = {}, ""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text.startswith("#"):
                continue
            m = DIRECTIVE.match(text)
            if m and m.group(1) in DIRECTIVES:
                if m.group(1) in found:
                    raise OutlayersConfigError(f"{path}:{lineno}: '# {m.group(1)}:' is given twice; keep one")
                found[m.group(1)] = (m.group(2), lineno)
            elif not description:
                description = text.lstrip("#").strip()
    try:
        data_bin, train_args = row_data_bin(args, default_data)
    except SystemExit:
        raise OutlayersConfigError(f"{path}: --data-bin needs a path") from None
    if data_bin is None:
        raise OutlayersConfigError(f"{path}: the row names no --data-bin and no --data was given; add "
                                   "'--data-bin DIR' to the row")
    row = LedgerRow(name, path, data_bin, train_args, description)
    row.baseline = found.get("baseline", (None,))[0] or None
    row.method = found.get("method", (name,))[0] or name
    row.table = found.get("table", ("",))[0] or os.path.basename(os.path.dirname(os.path.abspath(path)))
    if "validate" in found:
        value, lineno = found["validate"]
        metric, _, reason = value.partition(" ")
        reason = reason.strip().lstrip("-—:").strip()
        if metric not in ("bleu", "loss"):
            raise OutlayersConfigError(f"{path}:{lineno}: '# validate: {value}': the metric must be 'bleu' or "
                                       "'loss -- REASON'")
        if metric == "loss" and not reason:
            raise OutlayersConfigError(f"{path}:{lineno}: '# validate: loss' needs the reason BLEU validation "
                                       "is not used, e.g. '# validate: loss -- ...'")
        row.validate, row.validate_reason = metric, reason
    if "beam" in found:
        value, lineno = found["beam"]
        if not value.isdigit() or int(value) < 1:
            raise OutlayersConfigError(f"{path}:{lineno}: '# beam: {value}': the beam must be a positive integer")
        row.beam = int(value)
    return row


def target_is_bpe(data_bin: str) -> bool:
    """Joint BPE codes beside the data (scripts/prepare-*.sh): the target side is BPE'd too."""
    return os.path.isfile(os.path.join(data_bin, "bpecodes"))


def protocol_options(row: LedgerRow, patience: int, max_epoch: int, beam: int) -> List[str]:
    """Early stopping with fairseq's own ``--patience`` (validations without improvement) on validation BLEU
    (or loss), within ``--max-epoch``; ``checkpoint_best.pt`` is the selected model."""
    opts = ["--patience", str(patience), "--max-epoch", str(max_epoch)]
    if row.validate == "loss":
        return opts + ["--best-checkpoint-metric", "loss"]
    opts += ["--eval-bleu", "--eval-bleu-args", json.dumps({"beam": row.decoding_beam(beam), "max_len_a": 1.2,
                                                           "max_len_b": 10}),
             "--eval-bleu-detok", "moses"]
    if target_is_bpe(row.data_bin):
        opts.append("--eval-bleu-remove-bpe")
    return opts + ["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]


def row_options(row: LedgerRow, seed: int, patience: int, max_epoch: int, beam: int) -> List[str]:
    """The machine-independent part of the run's fairseq-train command (what a record is checked against)."""
    return [row.data_bin, *row.train_args, *protocol_options(row, patience, max_epoch, beam), "--seed", str(seed)]


def check_rows(rows: List[LedgerRow]) -> List[str]:
    """Row names must be unique (an error); returns a warning for each named baseline that is not among the rows
    (it may be recorded already, or run later: the table shows it as missing)."""
    seen = {}
    for row in rows:
        if row.name in seen:
            raise OutlayersConfigError(f"{row.path} and {seen[row.name]} have the same row name '{row.name}' "
                                       "(the file name after its NN- prefix); rename one")
        seen[row.name] = row.path
    tables = {(r.table, r.name) for r in rows}
    return [f"{row.path}: its baseline '{row.baseline}' is not among --rows (table '{row.table}'); its p-values "
            "need the baseline's records" for row in rows if row.baseline and (row.table, row.baseline) not in tables]
