"""Score the output of fairseq-generate for scripts/evaluate.sh (which documents the options).

Reads OUT/generate.out, writes OUT/{hyp.tok,ref.tok,hyp.detok,bleu.txt,scores.json}: sacreBLEU with its
signature on detokenised text, tokenised (multi-bleu style) BLEU, optionally the replacement of <unk> by the
lexicon translation (--unk-lexicon FILE) or copy of the aligned source word (--replace-unk 1), and word F1 by
training frequency (--rare-f1 TRAIN_TEXT).
"""
import argparse
import json
import os
import sys
from collections import Counter

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import is_input, write_text
from fairseq_outlayers.textfiles import read_lines, text_lines


def remove_bpe(text):
    """fairseq's --remove-bpe for subword-nmt/fastBPE (the '@@ ' continuation marker)."""
    return (text + " ").replace("@@ ", "").rstrip()


def replace_unknown(hyp, src, align, unk="<unk>", lexicon=None, counts=None):
    """Replace each <unk> of the BPE-level hypothesis (fairseq's hard attention alignment 'i-j' = source i,
    target j) by the rule of ``fairseq_outlayers.tools.evaluation.unknown_words`` (the one outlayers-generate
    --replace-unk applies): lexicon[aligned source unit], else the whole source word of that unit. ``counts``
    (a Counter) gets 'lexicon'/'copied'."""
    from fairseq_outlayers.tools.evaluation.unknown_words import links_by_target, replace_unknowns

    tokens, from_lexicon, copied = replace_unknowns(hyp.split(), src.split(), links_by_target(align) or {},
                                                    lexicon, unk)
    if counts is not None:
        counts["lexicon"] += from_lexicon
        counts["copied"] += copied
    return " ".join(tokens)


FREQUENCY_BINS = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, 99), (100, 999), (1000, None)]


def frequency_bucket(count):
    """Name of the training-frequency bin of a word seen ``count`` times ('unseen', '1', ..., '5-9', '1000+')."""
    if count == 0:
        return "unseen"
    for lo, hi in FREQUENCY_BINS:
        if count >= lo and (hi is None or count <= hi):
            return f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}")


def word_f1_by_frequency(hyps, refs, freq):
    """Word F1 per training-frequency bin (the rare-word analysis of Kumar & Tsvetkov 2019, Figure 2, computed
    as compare-mt does): in each sentence a word matches min(count in hypothesis, count in reference) times;
    precision = matches / hypothesis words of the bin, recall = matches / reference words of the bin.
    Returns {bin: {"f1": percent, "ref_words": n, "hyp_words": n}} in bin order."""
    match, in_hyp, in_ref = Counter(), Counter(), Counter()
    for h, r in zip(hyps, refs):
        ch, cr = Counter(h.split()), Counter(r.split())
        for w, n in cr.items():
            b = frequency_bucket(freq.get(w, 0))
            in_ref[b] += n
            match[b] += min(n, ch.get(w, 0))
        for w, n in ch.items():
            in_hyp[frequency_bucket(freq.get(w, 0))] += n
    out = {}
    for name in ["unseen"] + [frequency_bucket(lo) for lo, _ in FREQUENCY_BINS]:
        precision = match[name] / in_hyp[name] if in_hyp[name] else 0.0
        recall = match[name] / in_ref[name] if in_ref[name] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[name] = {"f1": round(100 * f1, 2), "ref_words": in_ref[name], "hyp_words": in_hyp[name]}
    return out


#: the files the scoring writes into OUT
WRITTEN = ("hyp.tok", "ref.tok", "hyp.detok", "scores.json", "bleu.txt")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tgt", default="en")
    p.add_argument("--lowercase", default="0")
    p.add_argument("--raw-ref", default="")
    p.add_argument("--rare-f1", default="")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--beam", default="5")
    p.add_argument("--lenpen", default="1.0")
    p.add_argument("--tok-ref", default="")
    p.add_argument("--replace-unk", default="0")
    p.add_argument("--unk-lexicon", default="", help="with --replace-unk 1: source unit -> target word lexicon")
    a = p.parse_args(argv)
    # the package's one evaluation path (fairseq_outlayers/tools/evaluation/scoring.py): the same parsing of
    # fairseq-generate's output, detokenisation, reference tokenisation and BLEU as the runners and the ledger
    from fairseq_outlayers.tools.evaluation.scoring import corpus_bleu, detokenise, read_generate_output
    from fairseq_outlayers.tools.rawtext import Preparation

    out, tgt, raw_ref, rare, ckpt, beam, lenpen, tok_ref = (a.out, a.tgt, a.raw_ref, a.rare_f1, a.checkpoint,
                                                            a.beam, a.lenpen, a.tok_ref)
    lower, replace_unk = a.lowercase == "1", a.replace_unk == "1"

    for name in WRITTEN:  # before any work: a reference or lexicon given inside OUT under a name written here
        given = is_input(os.path.join(out, name), (raw_ref, tok_ref, a.unk_lexicon))
        if given is not None:
            sys.exit(f"evaluate.sh: {out}/{name} is written by the scoring but is also an input ('{given}'); "
                     "keep the references and the lexicon outside OUT (nothing an input is written over)")
    with open(os.path.join(out, "generate.out"), encoding="utf-8") as f:
        found = read_generate_output(f.read())
    hyps, refs, srcs, aligns = found["H"], found["T"], found["S"], found["A"]
    replaced, unk_counts, lexicon = 0, Counter(), None
    if replace_unk:
        if a.unk_lexicon:
            from fairseq_outlayers.tools.evaluation.unknown_words import read_lexicon

            try:
                lexicon = read_lexicon(a.unk_lexicon)
            except OutlayersConfigError as e:
                sys.exit(f"evaluate.sh: {e}")
        for i in hyps:
            new = replace_unknown(hyps[i], srcs.get(i, ""), aligns.get(i, ""), lexicon=lexicon, counts=unk_counts)
            replaced += hyps[i].split().count("<unk>") - new.split().count("<unk>")
            hyps[i] = remove_bpe(new)
        refs = {i: remove_bpe(r) for i, r in refs.items()}
    if not hyps:
        sys.exit(f"evaluate.sh: no hypotheses in {out}/generate.out; see {out}/generate.err")
    ids = sorted(hyps)
    hyp_tok = [hyps[i] for i in ids]
    ref_tok = [refs.get(i, "") for i in ids]
    tok_origin = "fairseq's target side, BPE removed"
    hyp_detok = detokenise(hyp_tok, tgt)

    def read_ref(path, option):
        try:
            lines = read_lines(path, what=option)
        except OutlayersConfigError as e:
            sys.exit(f"evaluate.sh: {e}")
        if len(lines) != len(hyp_tok):
            sys.exit(f"evaluate.sh: {len(hyp_tok)} translations but {len(lines)} lines in {option} {path}; "
                     "give the reference of the same split (--subset)")
        return lines

    if raw_ref:
        ref_detok = read_ref(raw_ref, "--raw-ref")
        ref_origin = raw_ref
        # as fairseq_outlayers/tools/corpus_tools.py tokenize: escaped, optionally lowercased
        ref_tok = Preparation(src="", tgt=tgt, lowercase=lower, bpe_codes=None, target_bpe=False).tokenise(
            ref_detok, tgt)
        tok_origin = f"{raw_ref} tokenised with sacremoses{' and lowercased' if lower else ''}"
    else:
        ref_detok = detokenise(ref_tok, tgt)
        ref_origin = "detokenised references of the binarised data (no --raw-ref: not a standard sacreBLEU score)"
    if tok_ref:
        ref_tok = read_ref(tok_ref, "--tok-ref")
        tok_origin = tok_ref

    for name, lines in (("hyp.tok", hyp_tok), ("ref.tok", ref_tok), ("hyp.detok", hyp_detok)):
        write_text(os.path.join(out, name), "".join(x + "\n" for x in lines))
    bleu, s, t = corpus_bleu(hyp_tok, hyp_detok, ref_tok, ref_detok, lower)
    scores = {"checkpoint": ckpt, "sentences": len(ids), "beam": int(beam), "lenpen": float(lenpen),
              "sacrebleu": bleu["sacrebleu"], "sacrebleu_signature": bleu["sacrebleu_signature"],
              "sacrebleu_reference": ref_origin, "tokenized_bleu": bleu["tokenized_bleu"],
              "tokenized_bleu_signature": bleu["tokenized_bleu_signature"],
              "tokenized_bleu_reference": tok_origin}
    if replace_unk:
        scores["unk_replaced"] = replaced
        if lexicon is not None:
            scores.update(unk_lexicon=a.unk_lexicon, unk_from_lexicon=unk_counts["lexicon"],
                          unk_copied=unk_counts["copied"])
    lines = [f"sacreBLEU {s.score:.2f}  ({s.format(score_only=False)})",
             f"  signature: {scores['sacrebleu_signature']}",
             f"  reference: {ref_origin}",
             f"tokenised BLEU {t.score:.2f}  (multi-bleu style: tokenised, BPE removed; "
             f"{scores['tokenized_bleu_signature']})",
             f"  reference: {tok_origin}"]
    if replace_unk and lexicon is None:
        lines.append(f"--replace-unk: {replaced} <unk> replaced by the aligned source word")
    elif replace_unk:
        # a copied source word can itself be <unk> (a source word outside the source dictionary): counted as
        # copied, but not as replaced
        still = unk_counts["lexicon"] + unk_counts["copied"] - replaced
        lines.append(f"--replace-unk: {replaced} <unk> replaced: {unk_counts['lexicon']} from the lexicon "
                     f"{a.unk_lexicon}, {unk_counts['copied']} copied from the aligned source word"
                     + (f" ({still} of those copies are <unk> in the source too)" if still else ""))

    if rare:
        try:
            freq = Counter(w for _, line in text_lines(rare, what="--rare-f1") for w in line.split())
        except OutlayersConfigError as e:
            sys.exit(f"evaluate.sh: {e}")
        f1 = word_f1_by_frequency(hyp_tok, ref_tok, freq)
        lines.append("word F1 by training frequency of the word (compare-mt style: per-sentence matched counts)")
        for name, v in f1.items():
            lines.append(f"  freq {name:>8}: F1 {v['f1']:6.2f}  (reference words {v['ref_words']}, "
                         f"hypothesis words {v['hyp_words']})")
        scores["rare_word_f1"] = f1

    write_text(os.path.join(out, "scores.json"), json.dumps(scores, indent=2))
    write_text(os.path.join(out, "bleu.txt"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {out}/{{hyp.tok,ref.tok,hyp.detok,bleu.txt,scores.json}}")


if __name__ == "__main__":
    main()
