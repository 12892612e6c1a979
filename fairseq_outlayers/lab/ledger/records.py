"""The files of the ledger (default ``docs/results/runs/``), all written atomically:

* ``ROW.seedN.json``: the record of one finished run (written last, so a record never lacks its files);
* ``ROW.seedN.SET.hyp``: its detokenised hypotheses of test set SET, one per line (``.hyp.gz`` above
  ``GZIP_ABOVE`` bytes, gzip with no time stamp so it is reproducible);
* ``refs/SHA.ref``: each reference text once, named by the start of its sha256, so scores and significance
  tests regenerate from the ledger alone.

A record keeps the digest of the data it was trained on (``data_digest``) and of every file its options name
(``file_digests``: a pairing file, target vectors); ``check_data`` and ``check_files`` stop a run whose data
directory now holds something else than the records of its table were trained on, or a file it names something else
than the recorded seeds of its row were trained with, so seeds of different data are never averaged together; a
row whose named file differs from another row's is allowed, and every comparison between the two says so.
"""
import glob
import gzip
import hashlib
import json
import os
import re
from typing import Dict, List, Optional

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write, write_text
from fairseq_outlayers.textfiles import read_lines as read_text_lines

from .schema import FIX, RECORD_NAME, SCHEMA, check_record, load_record  # noqa: F401  (the record schema)

GZIP_ABOVE = 200_000


#: the files of a data directory that are its data: what fairseq-preprocess writes (dictionaries, binarised splits)
#: and the BPE codes the preparation scripts keep beside them. Not its log or hidden markers (paths, dates), nor
#: files added later (a pairing file, which a row names and ``file_digests`` covers, or a user's notes).
DATA_FILE = re.compile(r"dict\.[^/]+\.txt|bpecodes(\.[^/]+)?|[^/]+\.(bin|idx)")


def data_digest(data_bin: str) -> str:
    """The first 16 hex digits of a sha256 over a data directory's data files (``DATA_FILE``: dictionaries, BPE
    codes, binarised splits), name and content, in name order. Equal digests: the runs saw the same data."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(data_bin)):
        path = os.path.join(data_bin, name)
        if not DATA_FILE.fullmatch(name) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            content = f.read()
        h.update(f"{name}\0{len(content)}\0".encode() + content)
    return h.hexdigest()[:16]


def check_data(records: List[Dict], table: str, data_bin: str, digest: str, row_file: str):
    """An error when a record of ``table`` trained on ``data_bin`` saw data of another digest (records made before
    digests were kept are not checked)."""
    other = sorted((r["data_digest"], f"{r['row']} seed {r['seed']}") for r in records
                   if r["table"] == table and r["options"][0] == data_bin
                   and r.get("data_digest") not in (None, digest))
    if other:
        raise OutlayersConfigError(
            f"{row_file}: '{data_bin}' now holds other data (digest {digest}) than the records of table '{table}' "
            f"were trained on ({', '.join(f'{run}: digest {d}' for d, run in other)}); the data was prepared "
            "again differently (other corpus, case, tokeniser or BPE merges). Prepare it as those runs did (their records' \"preparation\"), "
            "or give the rows a table of their own (another directory under configs/ledger)")


def file_digest(path: str) -> str:
    """The first 16 hex digits of the sha256 of a file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def file_digests(options: List[str]) -> Dict[str, str]:
    """{path: file_digest} of every file a run's options name (the value of a ``--flag`` that is an existing file:
    a pairing file, target vectors, ...), by the path as the options give it."""
    return {value: file_digest(value) for flag, value in zip(options, options[1:])
            if flag.startswith("--") and not value.startswith("-") and os.path.isfile(value)}


def check_files(records: List[Dict], table: str, row: str, digests: Dict[str, str], row_file: str) -> List[str]:
    """An error when a record of ``row`` (in ``table``) was trained with a file of ``digests`` whose content was
    another: seeds of one row are averaged, so they must share it (records made before file digests were kept are
    not checked). Other rows of the table that were trained with another content are allowed -- their comparisons
    with the row's baseline do not involve the file -- and returned as warnings; ``files_differ`` marks every
    comparison between two such rows."""
    def other(same_row):
        return sorted((path, r["file_digests"][path], f"{r['row']} seed {r['seed']}") for r in records
                      if r["table"] == table and (r["row"] == row) == same_row for path in digests
                      if r.get("file_digests", {}).get(path) not in (None, digests[path]))

    mine = other(True)
    if mine:
        path = mine[0][0]
        raise OutlayersConfigError(
            f"{row_file}: '{path}' now holds another file (digest {digests[path]}) than the recorded seeds of row "
            f"'{row}' were trained with ({', '.join(f'{run}: digest {d}' for p, d, run in mine if p == path)}); "
            "it was made again differently (other data, options, a random seed, other package versions, or "
            "train_target_vectors.py --blas-core native on another CPU). Restore the file those runs "
            "used, or give the row another name (a new row file) so that seeds of different files are never "
            "averaged together")
    return [f"{row_file}: '{path}' (digest {digests[path]}) differs from the file {run} of table '{table}' was "
            f"trained with (digest {d}); the row's comparisons with that row will say so"
            for path, d, run in other(False)]


def files_differ(a: List[Dict], b: List[Dict]) -> List[str]:
    """The files named by records of both ``a`` and ``b`` (two rows' records) whose digests differ between them:
    a comparison of the two rows then mixes the files with the methods. ``path (digest, ... vs digest, ...)``."""
    def named(runs):
        out: Dict[str, set] = {}
        for r in runs:
            for path, digest in (r.get("file_digests") or {}).items():
                out.setdefault(path, set()).add(digest)
        return out

    da, db = named(a), named(b)
    return [f"{path} ({', '.join(sorted(da[path]))} vs {', '.join(sorted(db[path]))})"
            for path in sorted(set(da) & set(db)) if da[path] != db[path]]


def read_json(path: str):
    """The JSON value of a small bookkeeping file (a run directory's options.json, file_digests.json), or None
    when it cannot be read as UTF-8 JSON."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


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
    """The lines of a hypothesis or reference file of the ledger (gzipped when its name ends in .gz); a missing,
    damaged or non-UTF-8 file is one line naming it (and the line)."""
    path = os.path.join(ledger, name)
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"{path} is missing (named by a record in {ledger}); restore it from git or "
                                   "remove the record to rerun that run")
    return read_text_lines(path, "the ledger's texts are UTF-8: restore it from git or remove the record naming it to "
                           "rerun that run", unreadable="restore it from git or remove the record naming it to rerun "
                           "that run")


def store_reference(ledger: str, lines: List[str]) -> str:
    """The reference text in ``ledger/refs/`` (once per content); returns its name relative to the ledger."""
    digest = hashlib.sha256(_text(lines).encode("utf-8")).hexdigest()[:16]
    os.makedirs(os.path.join(ledger, "refs"), exist_ok=True)
    name = os.path.join("refs", f"{digest}.ref")
    for existing in (name, name + ".gz"):
        if os.path.exists(os.path.join(ledger, existing)):
            return existing
    return write_lines(ledger, name, lines)


def write_record(ledger: str, record: Dict, hypotheses: Dict[str, List[str]], references: Dict[str, List[str]],
                 as_trained: Optional[Dict[str, List[str]]] = None):
    """Hypotheses and references first, then the record naming them. ``as_trained``: a step row's hypotheses of
    its checkpoint before the step ({test set: lines}, ``ROW.seedN.SET.as-trained.hyp``), named in
    ``record["after"]["as_trained"][SET]`` so the step's own effect has a paired test too."""
    os.makedirs(ledger, exist_ok=True)
    stem = f"{record['row']}.seed{record['seed']}"
    for set_name, lines in hypotheses.items():
        record["test"][set_name]["hypotheses"] = write_lines(ledger, f"{stem}.{set_name}.hyp", lines)
        record["test"][set_name]["reference"] = store_reference(ledger, references[set_name])
    for set_name, lines in (as_trained or {}).items():
        entry = record["after"]["as_trained"][set_name]
        entry["hypotheses"] = write_lines(ledger, f"{stem}.{set_name}.as-trained.hyp", lines)
        entry["reference"] = store_reference(ledger, references[set_name])
    write_text(record_path(ledger, record["row"], record["seed"]), json.dumps(record, indent=2) + "\n")


def is_record_name(name: str) -> bool:
    """``name`` is a record's file name: ``ROW.seedN.json``, N an integer without leading zeros."""
    m = RECORD_NAME.match(name)
    return m is not None and m.group("seed") == str(int(m.group("seed")))


def record_files(ledger: str) -> List[str]:
    """The record files of the ledger, in name order: every ``*.json`` directly in it must be named
    ``ROW.seedN.json`` (N without leading zeros). Any other JSON file there -- an edited copy beside a record
    (``ROW.seed1.old.json``), a ``ROW.seed01.json`` -- is refused in one line naming it, never read as a record
    and never skipped silently: the tables a ledger renders are those of its records, or an error."""
    paths = sorted(glob.glob(os.path.join(glob.escape(ledger), "*.json")))
    for path in paths:
        if not is_record_name(os.path.basename(path)):
            raise OutlayersConfigError(
                f"{path}: not a record name (ROW.seedN.json), but it is a JSON file in the ledger directory "
                f"{ledger}, which holds records only; move it out of the ledger directory (a copy of a record kept "
                "there would be read as that run)")
    return paths


def read_records(ledger: str) -> List[Dict]:
    """Every record of the ledger, in file-name order (``record_files``); two records of one row and seed are an
    error naming both files."""
    if not os.path.isdir(ledger):
        raise OutlayersConfigError(f"ledger directory '{ledger}' does not exist; run 'python -m "
                                   "fairseq_outlayers.lab.ledger run' first or give --ledger DIR")
    out, seen = [], {}
    for path in record_files(ledger):
        record = load_record(path)
        key = (record["row"], record["seed"])
        if key in seen:
            raise OutlayersConfigError(f"{path}: a second record of row '{key[0]}' seed {key[1]} (the first is "
                                       f"{seen[key]}); a ledger holds one record per row and seed: move one out")
        seen[key] = path
        out.append(record)
    return out


def recorded(ledger: str, row: str, seed: int, options: List[str], row_file: str,
             after: Optional[List[str]] = None) -> Optional[Dict]:
    """The record of this run when it exists; an error when it was made with other options or another step after
    training (``after``: the row's ``# after:`` step, [] or None for none)."""
    path = record_path(ledger, row, seed)
    if not os.path.exists(path):
        return None
    record = load_record(path)
    if record["options"] != options:
        raise OutlayersConfigError(
            f"{path} was run with `{' '.join(record['options'])}` but {row_file} now gives "
            f"`{' '.join(options)}`; rename the row (a new experiment) or move the record away (to rerun it)")
    step = (record.get("after") or {}).get("step") or []
    if step != (after or []):
        raise OutlayersConfigError(
            f"{path} was made with the step `{' '.join(step) or 'none'}` after training but {row_file} now gives "
            f"`{' '.join(after or []) or 'none'}`; rename the row (a new experiment) or move the record away (to "
            "rerun it)")
    return record
