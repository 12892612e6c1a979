"""``python -m fairseq_outlayers.tools.pairing``: make the pairing file of shared-private embeddings.

Give the training text exactly as the model sees it (tokenised and BPE'd, one sentence per line) and the
dictionaries fairseq-preprocess wrote; the pairing file goes to -o (never overwritten without --force).

``python -m fairseq_outlayers.tools.pairing lexicon --src-text ... --tgt-text ... --out lexicon.txt`` builds the
lexical dictionary of ``--replace-unk`` with the same aligners (see ``lexicon.py``).
"""
import argparse
import sys

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.shared_private.embedding import closed_form_numel
from fairseq_outlayers.outfiles import check_output_path, removed_on_termination
from fairseq_outlayers.tools.pairing import make_pairing
from fairseq_outlayers.tools.pairing.alignment import add_aligner_options, check_aligner_available
from fairseq_outlayers.methods.shared_private.word_pairs import load_dictionary, pair_identical, write_pairing


def build_parser():
    p = argparse.ArgumentParser(prog="outlayers-pairing", description=__doc__.strip().splitlines()[0],
                                epilog="outlayers-pairing lexicon --help: the lexical dictionary "
                                "for --replace-unk, built with the same aligners")
    p.add_argument("--src-text", help="source side of the training corpus (tokenised, BPE'd); required unless "
                   "--identical")
    p.add_argument("--tgt-text", help="target side, line-aligned with --src-text")
    p.add_argument("--src-dict", required=True, help="source dictionary (data-bin/dict.SRC.txt)")
    p.add_argument("--tgt-dict", required=True, help="target dictionary (data-bin/dict.TGT.txt)")
    p.add_argument("-o", "--output", required=True, help="pairing file to write")

    add_aligner_options(p, direction="forward")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="minimum A(y|x) for a lexical-meaning pair (default: 0.05, the paper's value)")
    p.add_argument("--identical", action="store_true",
                   help="joined dictionary only: pair every word with itself (category wf), no alignment; with "
                   "--shared-private-lambdas 0,1,0 this is three-way weight tying of the non-special words")
    p.add_argument("--report-dim", type=int, default=512,
                   help="embedding size d for the parameter summary printed at the end (default: 512)")
    p.add_argument("--force", action="store_true", help="overwrite -o if it exists")
    return p


def main(argv=None):
    with removed_on_termination():  # SIGTERM: the aligner's temporary directory is removed too
        return _main(argv)


def _main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lexicon"]:
        from .lexicon import main as lexicon_main

        return lexicon_main(argv[1:])
    args = build_parser().parse_args(argv)

    def log(msg):
        print(f"pairing: {msg}", file=sys.stderr)

    try:
        if not 0.0 <= args.threshold <= 1.0:
            raise OutlayersConfigError(f"--threshold must be in [0, 1], got {args.threshold}")
        if args.iterations < 1:
            raise OutlayersConfigError(f"--iterations must be at least 1, got {args.iterations}")
        if args.report_dim < 1:
            raise OutlayersConfigError(f"--report-dim must be at least 1, got {args.report_dim}")
        check_output_path(args.output, args.force, option="-o",
                          inputs=(args.src_text, args.tgt_text, args.src_dict, args.tgt_dict, args.alignment))
        if not args.identical:
            check_aligner_available(args.aligner)
        if args.identical:
            pairing = pair_identical(load_dictionary(args.src_dict), load_dictionary(args.tgt_dict))
        else:
            if not args.src_text or not args.tgt_text:
                raise OutlayersConfigError("--src-text and --tgt-text are required (the training text the "
                                           "aligner reads), unless --identical")
            pairing, t = make_pairing(args.src_text, args.tgt_text, args.src_dict, args.tgt_dict,
                                      aligner=args.aligner, alignment=args.alignment, direction=args.direction,
                                      threshold=args.threshold, iterations=args.iterations, log=log)
            log(f"aligned {t['sentences']} sentence pairs, {t['words']} words in {t['align_s']:.1f} s "
                f"({t['words'] / max(t['align_s'], 1e-9):,.0f} words/s); paired in {t['pair_s']:.2f} s")
            if t["skipped"]:
                log(f"warning: {len(t['skipped'])} sentence pair(s) got no links and were skipped (lines "
                    f"{', '.join(map(str, t['skipped'][:10]))}{' ...' if len(t['skipped']) > 10 else ''})")
        write_pairing(args.output, pairing, overwrite=args.force)
    except OutlayersConfigError as e:
        print(f"fairseq_outlayers: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}:\n{pairing.summary()}")

    d, vx, vy = args.report_dim, pairing.src_size, pairing.tgt_size
    vanilla = (vx + 2 * vy) * d
    for name, lambdas in (("decoder WT", (0, 0, 0)), ("shared-private 0.9,0.7,0.5", (0.9, 0.7, 0.5))):
        n = closed_form_numel(pairing.counts(), lambdas, vx, vy, d)
        print(f"  embedding parameters at d={d}, {name}: {n:,d} ({100 * (1 - n / vanilla):.1f}% fewer than "
              f"vanilla's {vanilla:,d})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
