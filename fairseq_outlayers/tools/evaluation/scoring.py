"""Translate a test set with a checkpoint and score it, from the files fairseq writes: the one evaluation path of
the package (``lab/compare.py``, the ledger, ``scripts/evaluate.sh``, the sweep and tuning scripts all score here).

* ``generate_command(...)`` / ``generate(...)``: ``fairseq-generate --results-path DIR`` (BPE removed, every
  sentence, bounded length), hypotheses read back from ``DIR/generate-SUBSET.txt`` in sentence order;
* ``read_generate_output(text)``: the ``S-``/``T-``/``H-``/``A-`` lines of fairseq-generate output by sentence id;
* ``corpus_bleu(...)``: sacreBLEU (13a, case-insensitive when the data was lowercased) of detokenised hypotheses
  against raw references, with its signature, and tokenised BLEU (multi-bleu style) for comparison with papers;
* ``score(hyp_tok, hyp_detok, refs, prep)``: both, the references tokenised as the training data was;
* ``evaluate(...)``: translate and score a subset of the data directory (``test`` by default) or a raw
  ``SRC_FILE,REF_FILE`` pair prepared with the training run's tokeniser, case and BPE (``fairseq_outlayers.tools.rawtext``);
* ``parse_raw_sets(specs)``: the ``NAME=SRC_FILE,REF_FILE`` command-line form.
"""
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers import USER_DIR, textfiles
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import write_text
from fairseq_outlayers.tools import commands
from fairseq_outlayers.tools.commands import executable
from fairseq_outlayers.tools.rawtext import Preparation, binarise, data_languages, read_text


def generate_command(data_bin: str, checkpoint: str, beam: int, lenpen: float, batch_size: int,
                     subset: str = "test") -> List[str]:
    """fairseq-generate of every sentence of ``subset``, BPE removed (tokenised output)."""
    return [executable("fairseq-generate"), data_bin, "--user-dir", USER_DIR, "--path", checkpoint,
            "--gen-subset", subset, "--beam", str(beam), "--lenpen", str(lenpen), "--batch-size", str(batch_size),
            "--required-batch-size-multiple", "1",  # the default (8) silently drops the last N mod 8 sentences
            # at most 1.2 x source length + 10 tokens: an undertrained model that never ends a sentence would
            # otherwise run to fairseq's 200-token limit on every sentence
            "--max-len-a", "1.2", "--max-len-b", "10",
            "--remove-bpe", "--num-workers", "0"]


def read_generate_output(text: str) -> Dict[str, Dict[int, str]]:
    """{"S": {id: source}, "T": {id: target}, "H": {id: hypothesis}, "A": {id: alignment}} of fairseq-generate
    output (the first hypothesis of each sentence; its score is dropped)."""
    found = {"S": {}, "T": {}, "H": {}, "A": {}}
    for line in text.splitlines():
        kind, dash, rest = line.partition("-")
        if not dash or kind not in found:
            continue
        fields = rest.split("\t")
        if not (fields[0].isascii() and fields[0].isdigit()):
            continue
        idx = int(fields[0])
        if kind == "H":  # H-id, score, text; the best hypothesis comes first
            if idx not in found["H"]:
                found["H"][idx] = fields[2] if len(fields) > 2 else ""
        else:
            found[kind][idx] = fields[1] if len(fields) > 1 else ""
    return found


def hypotheses_from(text: str) -> List[str]:
    """The hypotheses (``H-<id>`` lines) of fairseq-generate output, in sentence-id order."""
    hyps = read_generate_output(text)["H"]
    return [hyps[i] for i in sorted(hyps)]


def generate(data_bin: str, checkpoint: str, results_dir: str, beam: int = 5, lenpen: float = 1.0,
             batch_size: int = 128, subset: str = "test", extra: Sequence[str] = (),
             env: Optional[Dict[str, str]] = None) -> Tuple[List[str], List[str]]:
    """(the command, the tokenised hypotheses in sentence order); ``env``: variables set for fairseq-generate only.
    A checkpoint that is missing, refused, damaged or holds NaN weights is one line before fairseq-generate runs."""
    from fairseq_outlayers.core import checkpoint_safety  # torch: only a command that decodes loads it

    checkpoint_safety.check_decodable(checkpoint)  # looked up at the call: a test may replace it
    os.makedirs(results_dir, exist_ok=True)
    cmd = generate_command(data_bin, checkpoint, beam, lenpen, batch_size, subset) + [
        "--results-path", results_dir, *extra]
    proc = commands.run(cmd, env=dict(os.environ, **env) if env else None)
    if proc.returncode != 0:
        raise OutlayersConfigError(f"fairseq-generate failed on {data_bin} ({subset}) with {checkpoint}: "
                                   f"{failure_line(proc.stderr)}")
    with open(os.path.join(results_dir, f"generate-{subset}.txt"), encoding="utf-8") as f:
        return cmd, hypotheses_from(f.read())


def failure_line(stderr: str) -> str:
    """The line of a failed fairseq program's standard error that says why: the package's one line, else the
    exception line of the traceback (``Name: message``), else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("fairseq_outlayers: error: "):
            return line[len("fairseq_outlayers: error: "):]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception): ", line):
            return line
    return lines[-1] if lines else ""


def detokenise(lines: Sequence[str], lang: str) -> List[str]:
    """Moses detokenisation of tokenised (BPE-free) lines, as every score of the package does it."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(h.split()) for h in lines]


def check_line_counts(hypotheses: Sequence[str], references: Sequence[Sequence[str]]):
    """One line when a reference stream has another number of lines than the hypotheses: sacreBLEU pairs them
    line by line and scores only the shorter of the two, without a word."""
    for refs in references:
        if len(refs) != len(hypotheses):
            raise OutlayersConfigError(f"{len(hypotheses)} translations but {len(refs)} references; the reference "
                                       "file must have one line per test sentence, in the test set's order")


_CHECKED_BLEU = None


def _checked_bleu_class():
    """sacreBLEU's BLEU whose ``corpus_score`` refuses hypotheses and references of different lengths."""
    global _CHECKED_BLEU
    if _CHECKED_BLEU is None:
        from sacrebleu.metrics import BLEU

        class CheckedBLEU(BLEU):
            def corpus_score(self, hypotheses, references, n_bootstrap: int = 1):
                if references is not None:
                    check_line_counts(hypotheses, references)
                return super().corpus_score(hypotheses, references, n_bootstrap)

        _CHECKED_BLEU = CheckedBLEU
    return _CHECKED_BLEU


def bleu_metric(lowercase: bool, tokenize: Optional[str] = None):
    """sacreBLEU's BLEU; its ``corpus_score`` refuses N hypotheses against M != N references (one line)."""
    BLEU = _checked_bleu_class()
    if tokenize is None:
        return BLEU(lowercase=lowercase)
    # tokenised BLEU scores tokenised text on purpose: force=True keeps sacreBLEU's "forgot to detokenize"
    # warning out of the logs (the signature is the same)
    return BLEU(lowercase=lowercase, tokenize=tokenize, force=True)


def corpus_bleu(hyp_tok: Sequence[str], hyp_detok: Sequence[str], ref_tok: Sequence[str],
                ref_detok: Sequence[str], lowercase: bool):
    """(scores, sacreBLEU result, tokenised-BLEU result): sacreBLEU of the detokenised hypotheses against the raw
    references and BLEU without tokenisation of the tokenised ones (multi-bleu.perl's way), case-insensitive when
    the data was lowercased; ``scores`` holds both, rounded to 2 decimals, with their signatures."""
    sacre = bleu_metric(lowercase)
    s = sacre.corpus_score(list(hyp_detok), [list(ref_detok)])
    tok = bleu_metric(lowercase, tokenize="none")
    t = tok.corpus_score(list(hyp_tok), [list(ref_tok)])
    scores = {"sentences": len(ref_detok), "sacrebleu": round(s.score, 2),
              "sacrebleu_signature": str(sacre.get_signature()), "tokenized_bleu": round(t.score, 2),
              "tokenized_bleu_signature": str(tok.get_signature())}
    return scores, s, t


def score(hyp_tok: List[str], hyp_detok: List[str], refs: List[str], prep: Preparation) -> Dict:
    if len(hyp_detok) != len(refs):
        raise OutlayersConfigError(f"{len(hyp_detok)} translations but {len(refs)} references; the reference "
                                   "file must have one line per source sentence")
    return corpus_bleu(hyp_tok, hyp_detok, prep.tokenise(refs, prep.tgt), refs, prep.lowercase)[0]


def evaluate(prep: Preparation, data: str, checkpoint: str, work_dir: str, ref_path: str,
             src_path: Optional[str] = None, beam: int = 5, lenpen: float = 1.0, batch_size: int = 128,
             subset: str = "test", extra: Sequence[str] = (),
             env: Optional[Dict[str, str]] = None) -> Tuple[Dict, List[str], List[str], List[str]]:
    """Scores, tokenised and detokenised hypotheses, and raw references of one test set: ``data``'s own
    ``subset`` when ``src_path`` is None, else the raw ``src_path`` prepared as the training data was. The
    hypotheses are read from the ``generate-SUBSET.txt`` fairseq-generate writes into ``work_dir``; ``extra``:
    more fairseq-generate options (e.g. ``--model-overrides``); ``env``: variables set for fairseq-generate only."""
    refs = read_text(ref_path, "reference file")
    data_bin = data
    if src_path is not None:
        src = read_text(src_path, "source file")
        if len(src) != len(refs):
            raise OutlayersConfigError(f"{src_path} has {len(src)} lines but {ref_path} has {len(refs)}; a test "
                                       "set's source and reference files must be line-aligned")
        data_bin, subset = binarise(prep, src, None, data, os.path.join(work_dir, "data")), "test"
    cmd, hyp_tok = generate(data_bin, checkpoint, work_dir, beam, lenpen, batch_size, subset, extra, env)
    hyp_detok = prep.detokenise(hyp_tok)
    result = score(hyp_tok, hyp_detok, refs, prep)
    result["generate"] = cmd
    return result, hyp_tok, hyp_detok, refs


def score_subset(data_bin: str, checkpoint: str, hyp_path: str, ref_path: str, beam: int = 5, lenpen: float = 1.0,
                 batch_size: int = 128, subset: str = "test", extra: Sequence[str] = (),
                 lowercase: Optional[bool] = None, src: Optional[str] = None, tgt: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None) -> Dict:
    """``evaluate`` of a subset of ``data_bin`` as the runners use it: the tokenised hypotheses are written to
    ``hyp_path`` (atomically), fairseq-generate's own output to ``HYP_PATH_WITHOUT_EXTENSION.generate/``;
    ``lowercase`` None reads the case from the data directory's ``.done``, ``src``/``tgt`` None the languages from
    its binarised files; ``env``: variables set for fairseq-generate only (the run's GPU: ``gpus.py``)."""
    if (src is None) != (tgt is None):
        found_src, found_tgt = data_languages(data_bin)
        src, tgt = src or found_src, tgt or found_tgt
    prep = Preparation.from_data(data_bin, src, tgt, lowercase=lowercase)
    scores, hyp_tok, _, _ = evaluate(prep, data_bin, checkpoint, os.path.splitext(hyp_path)[0] + ".generate",
                                     ref_path, None, beam, lenpen, batch_size, subset, extra, env)
    write_text(hyp_path, "".join(h + "\n" for h in hyp_tok))
    return scores


def read_lines(path: str, what: str, allow_empty: bool = False) -> List[str]:
    """The lines of a text file of translations or references (gzipped when the name ends in .gz), without line
    ends; a missing, damaged, non-UTF-8 or (unless ``allow_empty``) empty file is one line naming it and the line."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"{what} {path}: no such file; give a UTF-8 text file, one sentence per line")
    lines = textfiles.read_lines(path, textfiles.REENCODE, what, unreadable="give a UTF-8 text file, one sentence per line")
    if not lines and not allow_empty:
        raise OutlayersConfigError(f"{what} '{path}' is empty; give one sentence per line")
    return lines


def check_same_length(path: str, lines: Sequence[str], what: str, refs: Sequence[str], against: str):
    """An error naming the file when a translation file is not line-aligned with its reference (``against``:
    "the references have", "--ref FILE has"): where it ends, or its first line beyond the reference."""
    if len(lines) != len(refs):
        where = (f"it ends after line {len(lines)}" if len(lines) < len(refs)
                 else f"its line {len(refs) + 1} is beyond the reference's last line")
        raise OutlayersConfigError(f"{what} {path} has {len(lines)} lines but {against} {len(refs)} ({where}); "
                                   "give the output of the same test set (every sentence, in order)")


def binarised_sizes(idx_path: str) -> Optional[List[int]]:
    """The length of every sentence (tokens, with the end-of-sentence token) of a fairseq-preprocess ``.idx`` file
    of the default ``mmap`` format, read from its header and size table; None for any other format."""
    import numpy as np

    magic = b"MMIDIDX\x00\x00"
    try:
        with open(idx_path, "rb") as f:
            head = f.read(26)  # magic, version (8 bytes), dtype code (1), number of sentences (8)
            if len(head) < 26 or head[:9] != magic:
                return None
            count = int.from_bytes(head[18:26], "little")
            sizes = np.frombuffer(f.read(4 * count), dtype="<i4")
    except OSError:
        return None
    return sizes.tolist() if len(sizes) == count else None


def subset_sentences(data_bin: str, subset: str = "test") -> Optional[int]:
    """The number of sentences of ``subset`` in a fairseq-preprocess directory (from its ``.idx`` files, which hold
    the same sentences on both sides); None when it has no such file of the default format, or when its files
    disagree (several language pairs)."""
    counts = set()
    for name in sorted(os.listdir(data_bin)) if os.path.isdir(data_bin) else []:
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == subset and "-" in parts[1] and parts[3] == "idx":
            sizes = binarised_sizes(os.path.join(data_bin, name))
            if sizes is not None:
                counts.add(len(sizes))
    return counts.pop() if len(counts) == 1 else None


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
