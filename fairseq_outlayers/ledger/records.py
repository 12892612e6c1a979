"""The files of the ledger (default ``docs/results/runs/``), all written atomically:

* ``ROW.seedN.json``: the record of one finished run (written last, so a record never lacks its files);
* ``ROW.seedN.SET.hyp``: its detokenised hypotheses of test set SET, one per line (``.hyp.gz`` above
  ``GZIP_ABOVE`` bytes, gzip with no time stamp so it is reproducible);
* ``refs/SHA.ref``: each reference text once, named by the start of its sha256, so scores and significance
  tests regenerate from the ledger alone.
"""
import glob
import gzip
import hashlib
import json
import os
from typing import Dict, List, Optional

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write, write_text

GZIP_ABOVE = 200_000
#: fields every record has (render relies on them)
REQUIRED = ("row", "seed", "table", "options", "test", "params")


def record_path(ledger: str, row: str, seed: int) -> str:
    return os.path.join(ledger, f"{row}.seed{seed}.json")


def _text(lines: List[str]) -> str:
    return "".join(x + "\n" for x in lines)


def write_lines(ledger: str, name: str, lines: List[str]) -> str:
    """Write ``lines`` as ``ledger/name`` (gzipped as ``name.gz`` when large); returns the name written."""
    data = _text(lines).encode("utf-8")
    if len(data) > GZIP_ABOVE:
        name += ".gz"
        data = gzip.compress(data, mtime=0)
    with atomic_write(os.path.join(ledger, name), "wb") as f:
        f.write(data)
    return name


def read_lines(ledger: str, name: str) -> List[str]:
    path = os.path.join(ledger, name)
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"{path} is missing (named by a record in {ledger}); restore it from git or "
                                   "remove the record to rerun that run")
    data = open(path, "rb").read()
    text = (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def store_reference(ledger: str, lines: List[str]) -> str:
    """The reference text in ``ledger/refs/`` (once per content); returns its name relative to the ledger."""
    digest = hashlib.sha256(_text(lines).encode("utf-8")).hexdigest()[:16]
    os.makedirs(os.path.join(ledger, "refs"), exist_ok=True)
    name = os.path.join("refs", f"{digest}.ref")
    for existing in (name, name + ".gz"):
        if os.path.exists(os.path.join(ledger, existing)):
            return existing
    return write_lines(ledger, name, lines)


def write_record(ledger: str, record: Dict, hypotheses: Dict[str, List[str]], references: Dict[str, List[str]]):
    """Hypotheses and references first, then the record naming them."""
    os.makedirs(ledger, exist_ok=True)
    stem = f"{record['row']}.seed{record['seed']}"
    for set_name, lines in hypotheses.items():
        record["test"][set_name]["hypotheses"] = write_lines(ledger, f"{stem}.{set_name}.hyp", lines)
        record["test"][set_name]["reference"] = store_reference(ledger, references[set_name])
    write_text(record_path(ledger, record["row"], record["seed"]), json.dumps(record, indent=2) + "\n")


def load_record(path: str) -> Dict:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except json.JSONDecodeError as e:
        raise OutlayersConfigError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); restore it from git or remove "
                                   "it to rerun that run") from None
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise OutlayersConfigError(f"{path}: not a ledger record (no {', '.join(missing)}); move it out of the "
                                   "ledger directory")
    return record


def read_records(ledger: str) -> List[Dict]:
    """Every record of the ledger, in file-name order."""
    if not os.path.isdir(ledger):
        raise OutlayersConfigError(f"ledger directory '{ledger}' does not exist; run 'python -m "
                                   "fairseq_outlayers.ledger run' first or give --ledger DIR")
    return [load_record(p) for p in sorted(glob.glob(os.path.join(ledger, "*.seed*.json")))]


def recorded(ledger: str, row: str, seed: int, options: List[str], row_file: str) -> Optional[Dict]:
    """The record of this run when it exists; an error when it was made with other options."""
    path = record_path(ledger, row, seed)
    if not os.path.exists(path):
        return None
    record = load_record(path)
    if record["options"] != options:
        raise OutlayersConfigError(
            f"{path} was run with `{' '.join(record['options'])}` but {row_file} now gives "
            f"`{' '.join(options)}`; rename the row (a new experiment) or move the record away (to rerun it)")
    return record
