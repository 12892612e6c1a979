"""Row files -- the one row format of every experiment table (the results ledger, ``make demo``, the continuous
sweep) -- and the fairseq-train command built from them.

A row file holds ``fairseq-train`` options (text after ``#`` is a comment); its comment lines may hold directives
``# key: value``::

    # fixed random targets on the attention LSTM (Shalev et al. 2021, Table 2)
    # baseline: lstm-softmax
    # method: fixed
    --data-bin work/multi30k/data-bin/de-en-word --arch outlayers_lstm_luong_2x2 --output-layer fixed ...

* ``baseline: NAME``: the row it is compared with (a paired bootstrap test per table); absent for a baseline;
* ``method: NAME``: the ``make demo`` row it stands for (default: the row's own name);
* ``table: NAME``: the table it belongs to (default: the name of the folder holding the row file);
* ``validate: bleu`` (default) or ``validate: loss -- REASON``: the early-stopping metric; loss needs a reason;
* ``beam: N``: the beam of this row's validation BLEU and test translations (default: the runner's ``--beam``), for
  a method whose recipe decodes otherwise (continuous outputs: beam 1, the nearest neighbour of each vector);
* ``patience: N``: this row's early-stopping patience, in validations (default: the runner's ``--patience``), for a
  table registered with a longer one than the ledger's default (give every row of the table the same);
* ``after: STEP [OPTIONS]``: a step applied to the trained checkpoint before the test (``steps.py``: e.g.
  ``fit-output-bias --train-sentences 10000``);
* ``from: ROW``: with ``after``, the row is ROW's trained models with the step: it has no options line of its own
  (ROW's, a row file of the same folder, are used) and shares ROW's run directories, so each seed is trained once
  and the two rows' records are the same model before and after the step;
* ``base: FILE``: options shared by several rows (``configs/demo-base.args``, read from the working directory),
  under the row's own (``merge_args``: a row that picks its own ``--criterion`` drops the base criterion's options);
* ``budget: N``: a quick row: N updates, no early stopping, the last checkpoint tested (the demo and the sweep);
  without it the row runs the converged protocol (``protocol_options``);
* ``decodes: B B@S ...``: further test decodes recorded beside the row's own (``decodes`` in the record): beam B,
  and for a continuous-output row beam B with ``--continuous-score-scale S``;
* ``test-beam: N``: the beam of the record's test translations when it differs from the validation beam of
  ``beam:`` (a continuous-output row: early stopping on nearest-neighbour decoding, tested at beam 5);
* ``scales: none S ...``: a continuous-output row's score scale at the test beam, chosen on the validation split
  among these (``none``: the model's own; S: ``--continuous-score-scale S``); the record keeps the choice and the
  validation score of each (``decoding.scale``, ``decoding.scale_validation``); the test is decoded once;
* ``teacher: ROW [--matrix output|input] [--random-below N] [--center]``: the row's vectors option, given as
  ``@teacher`` (``directives.py``), is ROW's trained model of the same seed (``outlayers-vectors export`` of its ``checkpoint_best.pt``; with
  ``--random-below N`` a mixed table drawn with the run's seed). ROW is a row file of the same folder; the runner
  trains it first, or reuses its checkpoint, and records the vectors' digest (``teacher.py``).

The first comment line that is not a directive describes the row. The options (with the base's) are complete
(architecture, optimiser, criterion, data): the runner adds only the protocol, the seed and paths.
"""
import json
import os
import re
import glob
import shlex
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import read_lines, read_text
from fairseq_outlayers.lab.ledger.steps import parse_step
from fairseq_outlayers.lab.ledger.directives import (  # noqa: F401  (read from here too)
    TEACHER_VECTORS, Teacher, check_teacher, decode_key, parse_decodes, parse_scales, parse_teacher, teacher_vectors,
    with_vectors)

DIRECTIVES = ("baseline", "method", "table", "validate", "beam", "patience", "after", "from", "base", "budget",
              "decodes", "test-beam", "scales", "teacher")
DIRECTIVE = re.compile(r"^#\s*([a-z-]+)\s*:\s*(.*?)\s*$")
#: base options that belong to the base criterion (each takes one value)
CRITERION_OPTIONS = ("--criterion", "--label-smoothing")


def read_options(path: str) -> List[str]:
    """The options of an ``.args`` file: its lines without ``#`` comments, split as the shell would."""
    lines = read_lines(path, "an options file is UTF-8 text (re-encode it, e.g. iconv -t utf-8)")
    return shlex.split(" ".join(line.split("#", 1)[0] for line in lines))


def read_row(path: str) -> Tuple[str, List[str]]:
    """(row name: the file name without its ``NN-`` prefix, the row's own options)."""
    name = re.sub(r"^\d+-", "", os.path.splitext(os.path.basename(path))[0])
    return name, read_options(path)


def row_data_bin(row_args: List[str], default: Optional[str]) -> Tuple[Optional[str], List[str]]:
    """A row's own ``--data-bin PATH`` (taken out of its fairseq-train options), else ``default``."""
    rest, data_bin = [], default
    args = iter(row_args)
    for arg in args:
        if arg == "--data-bin":
            data_bin = next(args, None)
            if data_bin is None:
                raise SystemExit("rows: --data-bin in a row file needs a path")
        elif arg.startswith("--data-bin="):
            data_bin = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return data_bin, rest


def _is_flag(arg: str) -> bool:
    """``--name``, ``--name=value`` or a short option such as ``-s`` (not a negative number)."""
    return arg.startswith("--") or bool(re.match(r"^-[A-Za-z]", arg))


def merge_args(base_args: List[str], row_args: List[str]) -> List[str]:
    """Row options on top of the base ones: an option the row gives replaces the base's (with its values), so each
    option is given once; a row that picks its own ``--criterion`` drops the base criterion's options too (the label
    smoothing of the cross-entropy criterion means nothing to a continuous loss)."""
    own = {a.split("=", 1)[0] for a in row_args if _is_flag(a)}
    drop = own | (set(CRITERION_OPTIONS) if "--criterion" in own else set())
    merged, dropping = [], False
    for arg in base_args:
        if _is_flag(arg):
            dropping = arg.split("=", 1)[0] in drop
        if not dropping:
            merged.append(arg)
    return merged + list(row_args)


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
    patience: Optional[int] = None
    after: List[str] = field(default_factory=list)
    trained_as: Optional[str] = None  # the row whose trained checkpoints this one uses (``from:``)
    base_args: List[str] = field(default_factory=list)  # the ``# base:`` file's options, under ``train_args``
    budget: Optional[int] = None  # updates of a quick row (no early stopping); None: the converged protocol
    decodes: List[Tuple[int, Optional[float]]] = field(default_factory=list)
    test_beam: Optional[int] = None  # ``# test-beam:``: the beam of the test translations (default: ``beam``)
    scales: List[Optional[float]] = field(default_factory=list)  # ``# scales:``: chosen on validation
    teacher: Optional[Teacher] = None  # ``# teacher:``: target vectors from that row's model of the same seed

    def options(self) -> List[str]:
        """The row's fairseq-train options after its data directory: the base's, then its own."""
        return merge_args(self.base_args, self.train_args)

    def training_name(self) -> str:
        """The name of the run directories this row trains in (``work/NAME.seedN``)."""
        return self.trained_as or self.name

    def decoding_beam(self, default: int) -> int:
        return self.beam or default

    def testing_beam(self, default: int) -> int:
        """The beam of the record's test translations."""
        return self.test_beam or self.decoding_beam(default)

    def stopping_patience(self, default: int) -> int:
        return self.patience or default

    def languages(self) -> Tuple[Optional[str], Optional[str]]:
        """(source, target) named by the row's ``--source-lang``/``-s`` and ``--target-lang``/``-t`` (a row that
        trains the other direction of its data directory), else (None, None): the data directory's pair."""
        found = {}
        options = self.options()
        for i, arg in enumerate(options[:-1]):
            key = {"-s": "src", "--source-lang": "src", "-t": "tgt", "--target-lang": "tgt"}.get(arg)
            if key:
                found[key] = options[i + 1]
        if len(found) == 1:
            raise OutlayersConfigError(f"{self.path}: give both --source-lang and --target-lang (or neither)")
        return found.get("src"), found.get("tgt")


def _directives(path: str):
    """({directive: (value, line number)}, description) of a row file."""
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
    return found, description


def _parent(path: str, parent: str, lineno: int) -> str:
    """The row file named ``parent`` in the folder of ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    matches = [p for p in sorted(glob.glob(os.path.join(folder, "*.args")))
               if re.sub(r"^\d+-", "", os.path.splitext(os.path.basename(p))[0]) == parent]
    if not matches:
        raise OutlayersConfigError(f"{path}:{lineno}: '# from: {parent}': no row file of that name in {folder}")
    return matches[0]


def _check_text(path: str):
    """A row file is UTF-8 text: an error naming the line otherwise."""
    text = read_text(path, "a row file is UTF-8 text (re-encode it, e.g. iconv -t utf-8)",
                     unreadable="give a row file: comment lines, then the fairseq-train options")
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise OutlayersConfigError(f"{path}:{line}: a NUL byte; a row file is text (comment lines, then the "
                                   "fairseq-train options)")


def _read_base(path: str, value: str, lineno: int) -> List[str]:
    if not os.path.isfile(value):
        raise OutlayersConfigError(f"{path}:{lineno}: '# base: {value}' does not exist (a base file is named from "
                                   "the working directory: run from the repository's root)")
    try:
        options = read_options(value)
    except ValueError as e:  # OutlayersConfigError too (not UTF-8)
        raise OutlayersConfigError(f"{path}:{lineno}: '# base: {value}' cannot be read as options ({e})") from None
    if any(a.split("=", 1)[0] == "--data-bin" for a in options):
        raise OutlayersConfigError(f"{path}:{lineno}: '# base: {value}' names --data-bin; a base holds the shared "
                                   "options only (give --data-bin in each row, or --data to the runner)")
    return options


def read_ledger_row(path: str, default_data: Optional[str] = None, budget: Optional[int] = None) -> LedgerRow:
    """The row of a row file; ``budget``: a quick run of N updates whatever the file says (``make demo`` at the
    updates it is given)."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"row file '{path}' does not exist")
    _check_text(path)
    try:
        name, args = read_row(path)
    except ValueError as e:  # shlex: an unclosed quotation
        raise OutlayersConfigError(f"{path}: its options cannot be split as the shell would ({e}); close the "
                                   "quotation") from None
    if not name or any(c.isspace() for c in name) or ".seed" in name:
        raise OutlayersConfigError(f"{path}: the row name '{name}' (the file name after its NN- prefix) must be "
                                   "non-empty, without spaces or '.seed'; rename the file")
    found, description = _directives(path)
    trained_as = None
    if "from" in found:
        parent, lineno = found["from"]
        if "after" not in found:
            raise OutlayersConfigError(f"{path}:{lineno}: '# from: {parent}' needs '# after: STEP' (without a "
                                       f"step the row is {parent} itself)")
        if args:
            raise OutlayersConfigError(f"{path}: a row with '# from: {parent}' trains with {parent}'s options; "
                                       "remove its options line")
        for key in ("validate", "beam", "patience", "base", "budget"):
            if key in found:
                raise OutlayersConfigError(f"{path}:{found[key][1]}: '# {key}:' of a row with '# from: {parent}' "
                                           f"is {parent}'s (the same training); remove it")
        source = read_ledger_row(_parent(path, parent, lineno), default_data)
        if source.trained_as:
            raise OutlayersConfigError(f"{path}:{lineno}: '# from: {parent}': {parent} is itself a step row "
                                       f"('# from: {source.trained_as}'); name {source.trained_as} and give both "
                                       "steps in one '# after:'")
        args, trained_as = ["--data-bin", source.data_bin, *source.options()], source.name
        found.setdefault("baseline", (parent, lineno))  # by default, compared with the same models before the step
        found.setdefault("method", (source.method, lineno))
    try:
        data_bin, train_args = row_data_bin(args, default_data)
    except SystemExit:
        raise OutlayersConfigError(f"{path}: --data-bin needs a path") from None
    if data_bin is None:
        raise OutlayersConfigError(f"{path}: the row names no --data-bin and no --data was given; add "
                                   "'--data-bin DIR' to the row")
    row = LedgerRow(name, path, data_bin, train_args, description, trained_as=trained_as)
    for key, parse, attr in (("after", parse_step, "after"), ("decodes", parse_decodes, "decodes"),
                             ("scales", parse_scales, "scales"), ("teacher", parse_teacher, "teacher")):
        if key in found:
            value, lineno = found[key]
            try:
                setattr(row, attr, parse(value))
            except ValueError as e:
                raise OutlayersConfigError(f"{path}:{lineno}: '# {key}: {value}': {e}") from None
    if "base" in found:
        row.base_args = _read_base(path, *found["base"])
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
    for key in ("beam", "patience", "budget", "test-beam"):
        if key in found:
            value, lineno = found[key]
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise OutlayersConfigError(f"{path}:{lineno}: '# {key}: {value}': the {key} must be a positive "
                                           "integer")
            setattr(row, key.replace("-", "_"), int(value))
    if row.budget is not None:
        for key in ("validate", "patience"):
            if key in found:
                raise OutlayersConfigError(f"{path}:{found[key][1]}: '# {key}:' is early stopping, which a row with "
                                           "'# budget:' does not do; remove one of the two")
    if trained_as:
        row.validate, row.validate_reason = source.validate, source.validate_reason
        row.beam, row.patience, row.budget = source.beam, source.patience, source.budget
        row.test_beam, row.scales, row.teacher = source.test_beam, source.scales, source.teacher
        if row.teacher is not None:
            raise OutlayersConfigError(f"{path}: '# from: {row.trained_as}': a step row of a row with '# teacher:' is "
                                       "not supported yet; give the step row its own options and teacher")
    else:
        check_teacher(row, path, found)
    if budget is not None:
        row.budget = budget
    return row


def teacher_path(row: LedgerRow) -> str:
    """The row file of ``row``'s teacher: a row file of the same folder."""
    return _parent(row.path, row.teacher.row, 0)


def target_is_bpe(data_bin: str) -> bool:
    """Joint BPE codes beside the data (scripts/prepare-*.sh): the target side is BPE'd too."""
    return os.path.isfile(os.path.join(data_bin, "bpecodes"))


def protocol_options(row: LedgerRow, patience: int, max_epoch: int, beam: int) -> List[str]:
    """Early stopping with fairseq's own ``--patience`` (validations without improvement; the row's own when it
    gives one) on validation BLEU (or loss), within ``--max-epoch``; ``checkpoint_best.pt`` is the selected model.
    A row with a budget: ``--max-update N`` alone, and its last checkpoint is tested."""
    if row.budget is not None:
        return ["--max-update", str(row.budget)]
    opts = ["--patience", str(row.stopping_patience(patience)), "--max-epoch", str(max_epoch)]
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
    return [row.data_bin, *row.options(), *protocol_options(row, patience, max_epoch, beam), "--seed", str(seed)]


def check_rows(rows: List[LedgerRow]) -> List[str]:
    """Row names must be unique (an error); returns a warning for each named baseline that is not among the rows
    (it may be recorded already, or run later: the table shows it as missing) and for each row stopped by another
    ``# patience:`` than its baseline (the comparison would mix two protocols)."""
    seen = {}
    for row in rows:
        if row.name in seen:
            raise OutlayersConfigError(f"{row.path} and {seen[row.name]} have the same row name '{row.name}' "
                                       "(the file name after its NN- prefix); rename one")
        seen[row.name] = row.path
    tables = {(r.table, r.name): r for r in rows}
    warnings = []
    for row in rows:
        base = tables.get((row.table, row.baseline))
        if row.baseline and base is None:
            warnings.append(f"{row.path}: its baseline '{row.baseline}' is not among --rows (table '{row.table}'); "
                            "its p-values need the baseline's records")
        elif base is not None and base.patience != row.patience:
            warnings.append(f"{row.path}: '# patience: {row.patience or 'the runner default'}' but its baseline "
                            f"{base.path} has '# patience: {base.patience or 'the runner default'}'; give the "
                            "rows of one table the same")
    return warnings
