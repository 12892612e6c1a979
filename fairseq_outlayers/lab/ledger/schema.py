"""The schema of a ledger record (``ROW.seedN.json``): ``check_record`` and ``load_record`` refuse, in one line naming
the file and the field, a record that is not UTF-8 JSON, lacks a field, holds one of the wrong type, a score outside
0-100, a negative time, a part of the parameters above their total, a NaN or infinity anywhere, or a row and seed
other than its file name gives. ``records.py`` re-exports them.
"""
import json
import math
import os
import re
from typing import Dict

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import read_text


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _name(v) -> bool:
    """A file of the ledger named relative to it, inside it (no absolute path, no '..')."""
    return (isinstance(v, str) and bool(v) and not os.path.isabs(v)
            and ".." not in v.replace("\\", "/").split("/"))


_NUMBER_OR_NONE = (lambda v: v is None or _finite(v), "a finite number or null")
_SECONDS = (lambda v: _finite(v) and v >= 0, "a finite number >= 0")
_RATE_OR_NONE = (lambda v: v is None or (_finite(v) and v >= 0), "a finite number >= 0 or null")


def _bleu(v) -> bool:
    """A BLEU score: a finite number from 0 to 100."""
    return _finite(v) and 0.0 <= v <= 100.0


_BLEU = (_bleu, "a finite number from 0 to 100 (a BLEU score)")
_BLEU_OR_NONE = (lambda v: v is None or _bleu(v), "a finite number from 0 to 100 (a BLEU score) or null")
_INT = (_integer, "an integer")
_COUNT = (lambda v: _integer(v) and v >= 0, "an integer >= 0")
_TEXT = (lambda v: isinstance(v, str), "a string")
_TEXT_OR_NONE = (lambda v: v is None or isinstance(v, str), "a string or null")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_OBJECT = (lambda v: isinstance(v, dict), "an object")
_FILE = (_name, "a file name inside the ledger directory")

#: field -> (check, what it must be, required): what render, compare, status and run read from a record
SCHEMA = {
    "row": ((lambda v: isinstance(v, str) and bool(v.strip())), "a row name", True),
    "seed": (*_INT, True),
    "table": ((lambda v: isinstance(v, str) and bool(v)), "a table name", True),
    "options": ((lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)),
                "a list of strings (the fairseq-train options)", True),
    "test": (*_OBJECT, True),
    "params": (*_OBJECT, True),
    "validation": (*_OBJECT, True),
    "device": (*_TEXT, True),
    "commit": (*_TEXT, True),
    "epochs": (*_COUNT, True),
    "updates": (*_COUNT, True),
    "best_epoch": (*_COUNT, True),
    "training_seconds": (*_SECONDS, True),
    "method": (*_TEXT, False), "baseline": (*_TEXT_OR_NONE, False), "row_file": (*_TEXT, False),
    "description": (*_TEXT, False), "command": (*_TEXT, False), "machine": (*_TEXT, False),
    "preparation": (*_TEXT, False), "finished": (*_TEXT, False),
    "data_digest": (*_TEXT_OR_NONE, False),
    "file_digests": ((lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
                     "an object of file digests (strings)", False),
    "best_updates": (*_COUNT, False), "wall_seconds": (*_SECONDS, False),
    "tokens_per_second": (*_RATE_OR_NONE, False), "resumed": (*_BOOL, False), "lowercase": (*_BOOL, False),
    "curve": ((lambda v: isinstance(v, list) and all(
        isinstance(c, dict) and _integer(c.get("epoch"))
        and all(c.get(k) is None or _finite(c[k]) for k in ("num_updates", "loss", "nll_loss"))
        and (c.get("bleu") is None or _bleu(c["bleu"])) for c in v)),
              "a list of objects with an integer 'epoch' and numbers (BLEU from 0 to 100)", False),
    "decoding": (*_OBJECT, False),
    "after": (*_OBJECT, False),
    "teacher": ((lambda v: isinstance(v, dict) and isinstance(v.get("row"), str)
                 and isinstance(v.get("vectors_digest"), str)),
                "an object naming the teacher 'row' and the 'vectors_digest' of its export", False),
    "decodes": ((lambda v: isinstance(v, dict) and all(
        isinstance(d, dict) and all(_bleu(x) for x in d.values()) for d in v.values())),
                "an object of test sets, each {decode: sacreBLEU from 0 to 100}", False),
}
PARAMS = {"total": (*_COUNT, True), "trained": (*_COUNT, True), "embedding": (*_COUNT, True),
          "output": (*_COUNT, False), "frozen": (*_COUNT, False), "output_trained": (*_COUNT, False)}
VALIDATION = {"metric": ((lambda v: v in ("bleu", "loss", "budget")),
                         "'bleu' or 'loss' (early stopping) or 'budget' (a quick row)", True),
              "best": (*_NUMBER_OR_NONE, False), "patience": (*_COUNT, False), "max_epoch": (*_COUNT, False),
              "reason": (*_TEXT, False), "budget": (*_COUNT, False), "bleu": (*_BLEU_OR_NONE, False)}
TEST_SET = {"sacrebleu": (*_BLEU, True), "tokenized_bleu": (*_BLEU, True), "sacrebleu_signature": (*_TEXT, True),
            "hypotheses": (*_FILE, True), "reference": (*_FILE, True), "sentences": (*_COUNT, False),
            "tokenized_bleu_signature": (*_TEXT, False)}
AFTER = {"step": ((lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)),
                  "a non-empty list of strings (the step and its options)", True),
         "trained_in": (*_TEXT, False), "as_trained": (*_OBJECT, False), "parent_record_matches": (*_BOOL, False)}
AS_TRAINED = {"sacrebleu": (*_BLEU_OR_NONE, False), "hypotheses": (*_FILE, False), "reference": (*_FILE, False)}


def _shown(value) -> str:
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _key(name) -> str:
    """A key of the record as a message shows it: on one line, a newline or quote escaped as JSON writes it."""
    return json.dumps(str(name), ensure_ascii=False)[1:-1]


def _check_fields(path: str, obj: Dict, schema: Dict, prefix: str = ""):
    for key, (check, what, required) in schema.items():
        if key not in obj:
            if required:
                raise OutlayersConfigError(f"{path}: field '{prefix}{key}' is missing; a ledger record has it "
                                           f"({what}). {FIX}")
            continue
        if not check(obj[key]):
            raise OutlayersConfigError(f"{path}: field '{prefix}{key}' is {_shown(obj[key])}, expected {what}. "
                                       f"{FIX}")


def _non_finite(value, where: str = ""):
    """The first place (``a.b[2].c``) of ``value`` holding NaN or an infinity, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(the whole record)"
    if isinstance(value, dict):
        for k, v in value.items():
            found = _non_finite(v, f"{where}.{_key(k)}" if where else _key(k))
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return None


FIX = "Restore the record from git or move it out of the ledger directory (to rerun that run)"
RECORD_NAME = re.compile(r"^(?P<row>.+)\.seed(?P<seed>-?\d+)\.json$")


def check_record(path: str, record) -> Dict:
    """``record`` (parsed from ``path``) checked against the record schema: an ``OutlayersConfigError`` naming the
    file and the first field that is missing, of the wrong type or not a finite number, or a row and seed other
    than the file's name (``ROW.seedN.json``) gives."""
    if not isinstance(record, dict):
        raise OutlayersConfigError(f"{path}: not a ledger record (a JSON object), but {_shown(record)}. {FIX}")
    _check_fields(path, record, SCHEMA)
    _check_fields(path, record["params"], PARAMS, "params.")
    params = record["params"]
    for key in ("trained", "embedding", "output", "frozen", "output_trained"):
        if params.get(key, 0) > params["total"]:
            raise OutlayersConfigError(f"{path}: field 'params.{key}' is {params[key]}, more than 'params.total' "
                                       f"{params['total']}; a part of the model cannot outnumber it. {FIX}")
    _check_fields(path, record["validation"], VALIDATION, "validation.")
    if not record["test"]:
        raise OutlayersConfigError(f"{path}: field 'test' holds no test set. {FIX}")
    for name, entry in record["test"].items():
        if not isinstance(entry, dict):
            raise OutlayersConfigError(f"{path}: field 'test.{_key(name)}' is {_shown(entry)}, expected an object. "
                                       f"{FIX}")
        _check_fields(path, entry, TEST_SET, f"test.{_key(name)}.")
    if "after" in record:
        _check_fields(path, record["after"], AFTER, "after.")
        for name, entry in (record["after"].get("as_trained") or {}).items():
            if not isinstance(entry, dict):
                raise OutlayersConfigError(f"{path}: field 'after.as_trained.{_key(name)}' is {_shown(entry)}, "
                                           f"expected an object. {FIX}")
            _check_fields(path, entry, AS_TRAINED, f"after.as_trained.{_key(name)}.")
    where = _non_finite(record)
    if where:
        raise OutlayersConfigError(f"{path}: field '{where}' is not a number (NaN or infinite); a record holds "
                                   f"finite figures only. {FIX}")
    m = RECORD_NAME.match(os.path.basename(path))
    if m and (m.group("row"), int(m.group("seed"))) != (record["row"], record["seed"]):
        raise OutlayersConfigError(
            f"{path}: the record is of row '{record['row']}' seed {record['seed']} but its file name says row "
            f"'{m.group('row')}' seed {m.group('seed')}; a record is named ROW.seedN.json after its own row and "
            "seed: restore it from git, or rename the file to what the record holds")
    return record


def load_record(path: str) -> Dict:
    """A record read and checked (``check_record``); every problem is one line naming the file (and the field)."""
    text = read_text(path, f"a record is UTF-8 JSON. {FIX}", unreadable=FIX)
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise OutlayersConfigError(f"{path}:{e.lineno}: not valid JSON ({e.msg}). {FIX}") from None
    except RecursionError:
        raise OutlayersConfigError(f"{path}: nested too deeply to be a ledger record. {FIX}") from None
    return check_record(path, record)
