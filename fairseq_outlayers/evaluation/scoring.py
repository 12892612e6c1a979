"""Translate a test set with a checkpoint and score it, from files fairseq writes.

* ``generate(...)``: ``fairseq-generate --results-path DIR`` (BPE removed), hypotheses read back from
  ``DIR/generate-SUBSET.txt`` in sentence order;
* ``score(hyp_tok, hyp_detok, refs, prep)``: sacreBLEU (13a, case-insensitive when the data was lowercased) of
  the detokenised hypotheses against the raw references, with its signature, and tokenised BLEU
  (multi-bleu style: the references tokenised as the training data was) for comparison with papers;
* ``evaluate(...)``: both, for the data directory's own ``test`` split or for a raw ``SRC_FILE,REF_FILE`` pair
  prepared with the training run's tokeniser, case and BPE (``fairseq_outlayers.rawtext``);
* ``parse_raw_sets(specs)``: the ``NAME=SRC_FILE,REF_FILE`` command-line form.
"""
import os
import re
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.rawtext import Preparation, binarise, read_text


def generate(data_bin: str, checkpoint: str, results_dir: str, beam: int = 5, lenpen: float = 1.0,
             batch_size: int = 128, subset: str = "test", extra: Sequence[str] = ()) -> Tuple[List[str], List[str]]:
    """(the command, the tokenised hypotheses in sentence order)."""
    from fairseq_outlayers.cli.compare import generate_command, hypotheses_from

    os.makedirs(results_dir, exist_ok=True)
    cmd = generate_command(data_bin, checkpoint, beam, lenpen, batch_size, subset) + [
        "--results-path", results_dir, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OutlayersConfigError(f"fairseq-generate failed on {data_bin} ({subset}) with {checkpoint}: "
                                   f"{(proc.stderr.strip().splitlines() or [''])[-1]}")
    with open(os.path.join(results_dir, f"generate-{subset}.txt"), encoding="utf-8") as f:
        return cmd, hypotheses_from(f.read())


def bleu_metric(lowercase: bool, tokenize: Optional[str] = None):
    from sacrebleu.metrics import BLEU

    return BLEU(lowercase=lowercase) if tokenize is None else BLEU(lowercase=lowercase, tokenize=tokenize)


def score(hyp_tok: List[str], hyp_detok: List[str], refs: List[str], prep: Preparation) -> Dict:
    if len(hyp_detok) != len(refs):
        raise OutlayersConfigError(f"{len(hyp_detok)} translations but {len(refs)} references; the reference "
                                   "file must have one line per source sentence")
    sacre = bleu_metric(prep.lowercase)
    s = sacre.corpus_score(hyp_detok, [refs])
    tok = bleu_metric(prep.lowercase, tokenize="none")
    t = tok.corpus_score(hyp_tok, [prep.tokenise(refs, prep.tgt)])
    return {"sentences": len(refs), "sacrebleu": round(s.score, 2), "sacrebleu_signature": str(sacre.get_signature()),
            "tokenized_bleu": round(t.score, 2), "tokenized_bleu_signature": str(tok.get_signature())}


def evaluate(prep: Preparation, data: str, checkpoint: str, work_dir: str, ref_path: str,
             src_path: Optional[str] = None, beam: int = 5, lenpen: float = 1.0,
             batch_size: int = 128) -> Tuple[Dict, List[str], List[str]]:
    """Scores, detokenised hypotheses and raw references of one test set: ``data``'s own test split when
    ``src_path`` is None, else the raw ``src_path`` prepared as the training data was."""
    refs = read_text(ref_path, "reference file")
    data_bin = data
    if src_path is not None:
        src = read_text(src_path, "source file")
        if len(src) != len(refs):
            raise OutlayersConfigError(f"{src_path} has {len(src)} lines but {ref_path} has {len(refs)}; a test "
                                       "set's source and reference files must be line-aligned")
        data_bin = binarise(prep, src, None, data, os.path.join(work_dir, "data"))
    cmd, hyp_tok = generate(data_bin, checkpoint, work_dir, beam, lenpen, batch_size)
    hyp_detok = prep.detokenise(hyp_tok)
    result = score(hyp_tok, hyp_detok, refs, prep)
    result["generate"] = cmd
    return result, hyp_detok, refs


SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse_raw_sets(specs: Sequence[str], option: str = "--test-set") -> Dict[str, Tuple[str, str]]:
    """``["news=a.de,a.en", ...]`` -> ``{"news": ("a.de", "a.en")}``, every file checked."""
    sets = {}
    for spec in specs:
        name, eq, files = spec.partition("=")
        parts = files.split(",")
        if not eq or len(parts) != 2 or not all(parts) or not SET_NAME.match(name):
            raise OutlayersConfigError(f"{option} '{spec}': expected NAME=SRC_FILE,REF_FILE (NAME of letters, "
                                       "digits, '.', '_', '-'), e.g. flickr2017=test_2017_flickr.de,"
                                       "test_2017_flickr.en")
        if name in sets:
            raise OutlayersConfigError(f"{option}: the test-set name '{name}' is given twice; name each set once")
        for path in parts:
            if not os.path.isfile(path):
                raise OutlayersConfigError(f"{option} '{spec}': file '{path}' does not exist")
        sets[name] = (parts[0], parts[1])
    return sets
