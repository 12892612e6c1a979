"""Unknown-word replacement with a lexicon, for fairseq's generate/interactive output and scripts/evaluate.sh.

A model with a closed target vocabulary (the word-level continuous outputs of Kumar & Tsvetkov 2019, or any
word-level baseline) writes ``<unk>`` for words outside it. The classic remedy (Luong et al. 2015, "Addressing
the rare word problem in neural machine translation"; Jean et al. 2015) replaces each generated ``<unk>`` by a
translation of the source unit the decoder attended to most, found in a lexical dictionary learned by a word
aligner on the training corpus (``python -m fairseq_outlayers.tools.pairing lexicon``), and copies the source word
when the dictionary has no entry.

The rule: the ``<unk>`` at hypothesis position j aligned (hard attention alignment, fairseq's
``--print-alignment hard``) to source position i becomes ``lexicon[src_i]`` when the lexicon has the unit, else
the whole source word containing position i (BPE pieces joined and their markers removed; the unit itself for
unsegmented text). An ``<unk>`` without an alignment link is left as it is. Positions index the tokens as the
model reads and writes them, so the rule runs before BPE is removed.

It runs in two places, both on the lines fairseq prints, with the code of this module:

* ``outlayers-generate`` / ``outlayers-interactive ... --replace-unk [LEXICON]``: fairseq's own generate /
  interactive ``main`` runs with fairseq's replacement off, the hard alignment on and BPE kept; its output goes
  through ``ReplaceUnkOutput``, which applies the rule to each hypothesis, then ``--remove-bpe``, and rewrites the
  H-, D- and final score lines (A- lines are shown only with ``--print-alignment``). The alignment is always
  computed, so no ``--print-alignment`` is needed, and binarised data works (the source units are the S- line).
* ``scripts/evaluate.sh --replace-unk [LEXICON]`` (``scripts/lib/score_translations.py``), on the saved
  ``fairseq-generate --print-alignment hard`` output.

fairseq 0.12's own ``fairseq-generate --replace-unk`` is not changed (importing this package patches nothing);
it does not work with current fairseq (facebookresearch/fairseq#3533: it indexes the source with an alignment
that has been a list of pairs since fairseq 0.10, and runs after ``--remove-bpe`` changed the token positions).
"""
import contextlib
import os
import sys
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import text_lines

BPE_MARKER = "@@"
#: what fairseq's argparse gives for a bare ``--replace-unk`` (its ``argparse_const``): copy, no lexicon
BARE_REPLACE_UNK = "@@ "
UNK = "<unk>"


# ---------------------------------------------------------------------------------------------------------
# the lexicon file


def read_lexicon(path: str) -> Dict[str, str]:
    """{source unit: target word} from a lexicon file (two or more whitespace-separated columns per line, as
    fairseq's ``load_align_dict`` reads them; blank lines are skipped)."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"--replace-unk lexicon '{path}' does not exist; build one with "
                                   "outlayers-pairing lexicon --src-text ... --tgt-text ... --out FILE")
    out: Dict[str, str] = {}
    width = None  # columns of the first entry
    for lineno, line in text_lines(path, "a lexicon is a UTF-8 text file with 'source target' per line"):
        cols = line.split()
        if not cols:
            continue
        if len(cols) < 2:
            raise OutlayersConfigError(f"{path}:{lineno}: expected 'source_unit target_word' (two columns), "
                                       f"got '{line.strip()}'")
        width = width or len(cols)
        if not line.endswith("\n") and len(cols) < width:
            raise OutlayersConfigError(f"{path}:{lineno}: the last line has {len(cols)} columns where the others "
                                       f"have {width} and no line end: the file was cut short; rebuild it")
        out[cols[0]] = cols[1]
    if not out:
        raise OutlayersConfigError(f"--replace-unk lexicon '{path}' has no entry ('source_unit target_word' per "
                                   "line); rebuild it (python -m fairseq_outlayers.tools.pairing lexicon), or give a bare "
                                   "--replace-unk to copy the aligned source word")
    return out


def load_lexicon(replace_unk) -> Optional[Dict[str, str]]:
    """The value of a ``--replace-unk [LEXICON]`` option: None without the option, {} (copy only) for a bare
    ``--replace-unk``, else the lexicon, read with line-numbered errors."""
    if replace_unk is None:
        return None
    if not isinstance(replace_unk, str) or replace_unk in ("", BARE_REPLACE_UNK):
        return {}
    return read_lexicon(replace_unk)


# ---------------------------------------------------------------------------------------------------------
# the replacement rule


def source_words(tokens: Sequence[str], marker: str = BPE_MARKER) -> List[str]:
    """For each source token, the whole word it belongs to (BPE pieces joined, markers removed)."""
    words: List[Optional[str]] = [None] * len(tokens)
    start = 0
    for k, t in enumerate(tokens):
        if not t.endswith(marker):
            word = "".join(x[:-len(marker)] if x.endswith(marker) else x for x in tokens[start:k + 1])
            for j in range(start, k + 1):
                words[j] = word
            start = k + 1
    for j in range(start, len(tokens)):  # a dangling piece at the end
        words[j] = tokens[j][:-len(marker)] if tokens[j].endswith(marker) else tokens[j]
    return words  # type: ignore[return-value]


def links_by_target(alignment) -> Optional[Dict[int, int]]:
    """{target position: source position} from any alignment fairseq produces: a list of (source, target)
    pairs or a Pharaoh string 'i-j ...' (the hard alignment since fairseq 0.10), or one source index per target
    position (a 1-D tensor or list of ints, older fairseq). None when there is no alignment at all (an empty
    tensor: generation ran without the alignment). The first link of a target position wins."""
    if alignment is None:
        return None
    if isinstance(alignment, str):
        alignment = [tuple(int(v) for v in item.split("-")) for item in alignment.split()]
    elif hasattr(alignment, "tolist"):  # a tensor
        if alignment.numel() == 0:
            return None
        alignment = alignment.tolist()
    out: Dict[int, int] = {}
    for j, item in enumerate(alignment):
        if isinstance(item, (tuple, list)):
            i, t = int(item[0]), int(item[1])
            out.setdefault(t, i)
        else:
            out.setdefault(j, int(item))
    return out


def replace_unknowns(hyp: Sequence[str], src: Sequence[str], links: Dict[int, int],
                     lexicon: Optional[Dict[str, str]] = None, unk: str = UNK) -> Tuple[List[str], int, int]:
    """Apply the replacement rule (module docstring) to hypothesis tokens; returns (tokens, number replaced
    from the lexicon, number copied from the source)."""
    lexicon = lexicon or {}
    words = source_words(src)
    out, from_lexicon, copied = list(hyp), 0, 0
    for j, tok in enumerate(out):
        i = links.get(j)
        if tok != unk or i is None or not 0 <= i < len(src):
            continue
        if src[i] in lexicon:
            out[j] = lexicon[src[i]]
            from_lexicon += 1
        else:
            out[j] = words[i]
            copied += 1
    return out, from_lexicon, copied


# ---------------------------------------------------------------------------------------------------------
# fairseq's generate / interactive output


class ReplaceUnkOutput:
    """A text stream that takes what fairseq-generate / fairseq-interactive print (run with the hard alignment
    and without BPE removal) and writes to ``out`` the output the user asked for, with the rule applied.

    Per sentence: the S- line gives the source units (printed with ``post_process`` applied); each hypothesis'
    H-, D- and P- lines are held until its A- line, then H = rule, then ``post_process``; D = ``decode(H)``; A- is
    written only with ``keep_alignment``. With a ``scorer`` (fairseq's, for generate), the first hypothesis of
    each sentence is scored against its T- line as fairseq-generate does, and fairseq's final
    ``Generate SUBSET with beam=N: ...`` line shows that score. ``quiet`` writes only that final line."""

    def __init__(self, out, lexicon: Dict[str, str], post_process: Optional[str] = None, decode=None,
                 keep_alignment: bool = False, quiet: bool = False, scorer=None):
        from fairseq.data import Dictionary, data_utils

        self.out, self.lexicon, self.decode = out, lexicon, decode or (lambda x: x)
        self.post = (lambda x: data_utils.post_process(x, post_process)) if post_process else (lambda x: x)
        self.keep_alignment, self.quiet, self.scorer = keep_alignment, quiet, scorer
        self.tokens = Dictionary()  # token ids for fairseq's BLEU scorer: only equality of words matters
        self.sources: Dict[str, List[str]] = {}
        self.targets: Dict[str, str] = {}
        self.pending: Dict[str, List[Dict[str, str]]] = {}
        self.scored: set = set()
        self.counts: Counter = Counter()
        self._partial = ""

    # the stream interface print() and logging use
    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self):
        self.out.flush()

    def close(self):
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        for hypos in self.pending.values():  # hypotheses without an alignment line: left as printed
            for h in hypos:
                self._emit(h["H"], h.get("D"), h.get("P"))
        self.pending.clear()
        self.flush()

    def _emit(self, *lines, per_sentence=True):
        if per_sentence and self.quiet:
            return
        for line in lines:
            if line is not None:
                self.out.write(line + "\n")

    def _line(self, line: str):
        kind, _, rest = line.partition("-")
        sid, tab, text = rest.partition("\t")
        if not (len(kind) == 1 and tab and sid.isascii() and sid.isdigit()):
            if line.startswith("Generate ") and " with beam=" in line and self.scorer is not None:
                line = line.split(": ", 1)[0] + ": " + self.scorer.result_string()
            self._emit(line, per_sentence=False)
            return
        if kind == "S":
            self.sources[sid] = text.split()
            self._emit(f"S-{sid}\t{self.post(text)}")
        elif kind == "T":
            self.targets[sid] = self.decode(self.post(text))
            self._emit(f"T-{sid}\t{self.post(text)}")
        elif kind == "H":
            self.pending.setdefault(sid, []).append({"H": line})
        elif kind in ("D", "P") and self.pending.get(sid):
            self.pending[sid][-1][kind] = line
        elif kind == "A" and self.pending.get(sid):
            self._hypothesis(sid, self.pending[sid].pop(0), text)
            if self.keep_alignment:
                self._emit(line)
            self.flush()
        else:
            self._emit(line)

    def _hypothesis(self, sid: str, held: Dict[str, str], alignment: str):
        _, score, hyp = (held["H"].split("\t", 2) + [""])[:3]
        tokens, from_lexicon, copied = replace_unknowns(hyp.split(), self.sources.get(sid, []),
                                                        links_by_target(alignment) or {}, self.lexicon)
        self.counts["lexicon"] += from_lexicon
        self.counts["copied"] += copied
        hyp = self.post(" ".join(tokens))
        detok = self.decode(hyp)
        self._emit(f"H-{sid}\t{score}\t{hyp}", f"D-{sid}\t{score}\t{detok}", held.get("P"))
        if self.scorer is not None and sid in self.targets and sid not in self.scored:
            self.scored.add(sid)
            if hasattr(self.scorer, "add_string"):
                self.scorer.add_string(self.targets[sid], detok)
            else:
                encode = lambda s: self.tokens.encode_line(s, add_if_not_exist=True)  # noqa: E731
                self.scorer.add(encode(self.targets[sid]), encode(detok))


def take_over_replacement(args, tool: str):
    """Turn fairseq's own replacement off and ask for what the rule needs (hard alignment, BPE kept); returns
    the ``ReplaceUnkOutput`` settings the user's options stand for."""
    if args.print_alignment not in (None, "hard"):
        raise OutlayersConfigError(f"{tool} --replace-unk uses the hard alignment: drop --print-alignment "
                                   f"{args.print_alignment} or give --print-alignment hard")
    settings = {"lexicon": load_lexicon(args.replace_unk), "post_process": args.post_process,
                "keep_alignment": args.print_alignment == "hard"}
    args.replace_unk, args.print_alignment, args.post_process = None, "hard", None
    return settings


def report_replacements(tool: str, stream: ReplaceUnkOutput):
    """One line on stderr: how many <unk> were replaced, and how."""
    c = stream.counts
    print(f"{tool}: --replace-unk: {c['lexicon'] + c['copied']} <unk> replaced ({c['lexicon']} from the lexicon, "
          f"{c['copied']} copied from the aligned source word)", file=sys.stderr)


def generate_main(args):
    """fairseq-generate's ``main`` with ``--replace-unk [LEXICON]`` done by the rule; ``args`` from fairseq's
    generation parser."""
    from fairseq import scoring
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate

    tool = "outlayers-generate"
    if args.bpe or args.tokenizer:
        raise OutlayersConfigError(f"{tool} --replace-unk needs the source units in the S- lines, which --bpe/"
                                   "--tokenizer decode: leave them out (use --remove-bpe and detokenise afterwards, "
                                   "as scripts/evaluate.sh does)")
    settings = take_over_replacement(args, tool)
    settings["quiet"], args.quiet = args.quiet, False  # the lines are needed for the score
    results_path, args.results_path = args.results_path, None
    scorer = scoring.build_scorer(convert_namespace_to_omegaconf(args).scoring, Dictionary())
    with contextlib.ExitStack() as stack:
        out = sys.stdout
        if results_path is not None:
            os.makedirs(results_path, exist_ok=True)
            out = stack.enter_context(open(os.path.join(results_path, f"generate-{args.gen_subset}.txt"), "w",
                                           buffering=1, encoding="utf-8"))
        stream = ReplaceUnkOutput(out, scorer=scorer, **settings)
        with contextlib.redirect_stdout(stream):
            generate.main(args)
        stream.close()
    report_replacements(tool, stream)
    return scorer
