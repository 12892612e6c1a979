"""Text helpers for the preparation scripts (scripts/prepare-*.sh); plain Python, no Perl.

    python fairseq_outlayers/tools/corpus_tools.py tags IN OUT [--style 2014|2017]
    python fairseq_outlayers/tools/corpus_tools.py segs IN OUT
    python fairseq_outlayers/tools/corpus_tools.py clean SRC TGT OUT_SRC OUT_TGT [--also RAW_SRC RAW_TGT OUT_RAW_SRC OUT_RAW_TGT]
                                         [--min-len 1] [--max-len 175] [--ratio 1.5]
    python fairseq_outlayers/tools/corpus_tools.py every N IN OUT_EVERY_NTH OUT_REST
    python fairseq_outlayers/tools/corpus_tools.py tokenize --lang L [--lower] [--normalize] [--jobs 2] IN OUT

``tags``  the IWSLT ``train.tags.*`` files: drop the talk metadata lines and keep the text of title and
          description lines, as fairseq's prepare-iwslt14.sh (style 2014: <url>, <talkid>, <keywords>) and
          prepare-iwslt17-multilingual.sh (style 2017: also <speaker>, <reviewer>, <translator>, <doc>) do.
``segs``  the text of every ``<seg id=...>`` element of an IWSLT .xml or WMT .sgm file, one per line
          (fairseq's sed rule, including the ’ -> ' replacement).
``clean`` Moses clean-corpus-n on tokenised text: drop a pair when a side has fewer than --min-len or more
          than --max-len tokens, or the longer side is more than --ratio times the shorter; ``--also`` filters
          two more line-aligned files (the raw text) the same way.
``tokenize`` Moses tokenisation with sacremoses in one process (optionally several workers), exactly what
          ``sacremoses -l L tokenize`` writes (XML special characters escaped, e.g. ``&apos;``; fairseq's
          ``--remove-bpe`` output is unescaped again by the Moses detokeniser), then optional lowercasing;
          ``--normalize`` first applies Moses punctuation normalisation and replaces non-printing characters
          by spaces (fairseq's WMT recipes: normalize-punctuation.perl, remove-non-printing-char.perl).
``every`` lines whose number is a multiple of N to one file, the others to another (fairseq's IWSLT'14
          valid split: every 23rd training pair).

Every failure is one line naming the file (and line) and what to do.
"""
import argparse
import re
import sys
import unicodedata
from multiprocessing import Pool

from fairseq_outlayers import textfiles
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write, is_input

SEG = re.compile(r'<seg id="?[^">]*"?>\s*(.*?)\s*</seg>\s*$')
DROP = {"2014": ("<url>", "<talkid>", "<keywords>"),
        "2017": ("<url>", "<talkid>", "<keywords>", "<speaker>", "<reviewer", "<translator", "<doc", "</doc>")}
STRIP = ("<title>", "</title>", "<description>", "</description>")


def fail(prog, msg):
    raise SystemExit(f"{prog}: {msg}")


def read_lines(prog, path):
    try:
        return textfiles.read_lines(path, "re-encode the file as UTF-8", unreadable="check the raw data directory",
                                    strip_cr=True)
    except OutlayersConfigError as e:
        fail(prog, str(e))


def write_lines(path, lines):
    """Write ``lines`` to ``path`` atomically: a step killed half-way leaves the old file or none."""
    with atomic_write(path) as f:
        for line in lines:
            f.write(line + "\n")


def check_not_inputs(prog, args):
    """Every file a step writes is none of the files it reads (an output given as an input would replace it)."""
    also = list(args.also or []) if getattr(args, "also", None) else []
    inputs = [getattr(args, k, None) for k in ("inp", "src", "tgt")] + also[:2]
    outputs = [getattr(args, k, None) for k in ("out", "out_src", "out_tgt", "out_every", "out_rest")] + also[2:]
    outputs = [o for o in outputs if o]
    for out in outputs:
        given = is_input(out, inputs)
        if given is not None:
            fail(prog, f"output '{out}' is also an input of this step ('{given}'); write to another file")
    if len(set(outputs)) != len(outputs):
        fail(prog, f"the same output file is given twice ({' '.join(outputs)}); give each output its own file")


def strip_tags(lines, style):
    """fairseq's IWSLT rule: drop metadata lines, keep the text of title/description lines."""
    out = []
    for line in lines:
        if any(tag in line for tag in DROP[style]):
            continue
        for tag in STRIP:
            line = line.replace(tag, "")
        out.append(line)
    return out


def segments(lines):
    """The text of each <seg id=...> element (one per line in IWSLT xml and WMT sgm files)."""
    out = []
    for line in lines:
        if "<seg id" not in line:
            continue
        m = SEG.search(line)
        text = m.group(1) if m else re.sub(r"\s*</seg>\s*", "", re.sub(r'<seg id="?[^">]*"?>\s*', "", line))
        out.append(text.replace("\u2019", "'"))
    return out


def keep_pair(src_tokens, tgt_tokens, min_len, max_len, ratio):
    """Moses clean-corpus-n's test for one sentence pair (lengths in tokens)."""
    a, b = len(src_tokens), len(tgt_tokens)
    if a < min_len or b < min_len or a > max_len or b > max_len:
        return False
    return a <= ratio * b and b <= ratio * a


def remove_non_printing(line):
    """Replace every Unicode 'other' character (category C*: controls, format, unassigned) by a space."""

    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in line)


def _tokenize_chunk(job):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    lang, lower, normalize, lines = job
    tok = MosesTokenizer(lang=lang)
    if normalize:
        norm = MosesPunctNormalizer(lang=lang)
        lines = [remove_non_printing(norm.normalize(line)) for line in lines]
    out = [tok.tokenize(line, return_str=True, escape=True) for line in lines]
    return [x.lower() for x in out] if lower else out


def tokenize(lines, lang, lower=False, jobs=1, chunk=20000, normalize=False):
    """Tokenise ``lines`` like ``sacremoses -l LANG tokenize`` (escaped), lowercasing when asked."""
    chunks = [(lang, lower, normalize, lines[i:i + chunk]) for i in range(0, len(lines), chunk)]
    if jobs > 1 and len(chunks) > 1:

        with Pool(jobs) as pool:
            parts = pool.map(_tokenize_chunk, chunks)
    else:
        parts = [_tokenize_chunk(c) for c in chunks]
    return [x for part in parts for x in part]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--prog", default="corpus_tools.py", help="name used in error messages")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tags")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--style", choices=sorted(DROP), default="2014")
    p = sub.add_parser("segs")
    p.add_argument("inp")
    p.add_argument("out")
    p = sub.add_parser("clean")
    p.add_argument("src")
    p.add_argument("tgt")
    p.add_argument("out_src")
    p.add_argument("out_tgt")
    p.add_argument("--also", nargs=4, metavar=("RAW_SRC", "RAW_TGT", "OUT_RAW_SRC", "OUT_RAW_TGT"))
    p.add_argument("--min-len", type=int, default=1)
    p.add_argument("--max-len", type=int, default=175)
    p.add_argument("--ratio", type=float, default=1.5)
    p = sub.add_parser("every")
    p.add_argument("n", type=int)
    p.add_argument("inp")
    p.add_argument("out_every")
    p.add_argument("out_rest")
    p = sub.add_parser("tokenize")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--lang", required=True)
    p.add_argument("--lower", action="store_true")
    p.add_argument("--normalize", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    prog = args.prog
    check_not_inputs(prog, args)

    if args.cmd == "tags":
        write_lines(args.out, strip_tags(read_lines(prog, args.inp), args.style))
    elif args.cmd == "segs":
        segs = segments(read_lines(prog, args.inp))
        if not segs:
            fail(prog, f"{args.inp} has no <seg id=...> lines; is it an IWSLT .xml or WMT .sgm file?")
        write_lines(args.out, segs)
    elif args.cmd == "clean":
        files = [args.src, args.tgt] + (list(args.also[:2]) if args.also else [])
        texts = [read_lines(prog, f) for f in files]
        for f, t in zip(files[1:], texts[1:]):
            if len(t) != len(texts[0]):
                fail(prog, f"{files[0]} has {len(texts[0])} lines but {f} has {len(t)}; the files must be "
                     "line-aligned")
        keep = [keep_pair(s.split(), t.split(), args.min_len, args.max_len, args.ratio)
                for s, t in zip(texts[0], texts[1])]
        outs = [args.out_src, args.out_tgt] + (list(args.also[2:]) if args.also else [])
        for out, text in zip(outs, texts):
            write_lines(out, [line for line, k in zip(text, keep) if k])
        print(f"{prog}: clean: kept {sum(keep)} of {len(keep)} pairs ({args.min_len}-{args.max_len} tokens, "
              f"ratio <= {args.ratio})", file=sys.stderr)
    elif args.cmd == "tokenize":
        write_lines(args.out, tokenize(read_lines(prog, args.inp), args.lang, args.lower, args.jobs,
                                           normalize=args.normalize))
    elif args.cmd == "every":
        if args.n <= 0:
            fail(prog, f"every: N must be positive, got {args.n}")
        lines = read_lines(prog, args.inp)
        write_lines(args.out_every, [x for i, x in enumerate(lines, 1) if i % args.n == 0])
        write_lines(args.out_rest, [x for i, x in enumerate(lines, 1) if i % args.n != 0])


if __name__ == "__main__":
    main()
