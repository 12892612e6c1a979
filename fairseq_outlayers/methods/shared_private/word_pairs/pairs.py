"""The word-pairing algorithm of shared-private bilingual embeddings and the pairing file format.

Liu et al. (2019, Sec. 2.1) let every source word share features with at most one target word and vice versa,
preferring, in this order:

1. ``lm`` -- similar lexical meaning (Sec. 2.1.1, eq. 1): source words taken by descending frequency; each is
   paired with the not-yet-paired target word y of highest alignment probability A(y|x), provided A(y|x) is
   at least the threshold (0.05 in Sec. 3.1);
2. ``wf`` -- same word form (Sec. 2.1.2): a remaining source word and a remaining target word that are the
   same string (numbers, punctuation, names, shared sub-words such as ``Ju@@``). Because meaning is paired
   first, a homograph (German ``Gift`` = English ``poison``) pairs by meaning, not with English ``gift``;
3. ``ur`` -- unrelated (Sec. 2.1.3): the words left on both sides, paired by frequency rank.

Special symbols (bos, pad, eos, unk, ``madeupword`` fillers) are never paired: their rows stay private.

The pairing file is plain UTF-8 text: ``#`` header lines (format, both dictionaries' SHA-256 over their symbols
and their sizes, how the pairing was made, the counts per category like the paper's Table 5), then one pair
per line: ``category<TAB>source token<TAB>target token<TAB>A(y|x)`` (A is 0 for a pair never aligned).
"""
import os
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write
from fairseq_outlayers.textfiles import text_lines

from .corpus import dictionary_hash, special_indices

CATEGORIES = ("lm", "wf", "ur")
FORMAT_LINE = "# fairseq_outlayers shared-private pairing, format 1"
DEFAULT_THRESHOLD = 0.05


@dataclass(frozen=True)
class Pair:
    category: str
    src: str
    tgt: str
    score: float


@dataclass
class Pairing:
    pairs: List[Pair]
    src_hash: str = ""
    tgt_hash: str = ""
    src_size: int = 0
    tgt_size: int = 0
    src_unpaired: int = 0  # non-special source words left without a partner
    tgt_unpaired: int = 0
    info: Dict[str, str] = field(default_factory=dict)

    def counts(self) -> Dict[str, int]:
        out = {c: 0 for c in CATEGORIES}
        for p in self.pairs:
            out[p.category] += 1
        return out

    def by_category(self, category: str) -> List[Pair]:
        return [p for p in self.pairs if p.category == category]

    def summary(self) -> str:
        """The counts per category in the layout of the paper's Table 5."""
        c = self.counts()
        rows = [("lexical meaning (lm)", c["lm"]), ("same word form (wf)", c["wf"]), ("unrelated (ur)", c["ur"]),
                ("source words left private", self.src_unpaired), ("target words left private", self.tgt_unpaired)]
        return "\n".join(f"  {name:<27} {n:>9,d}" for name, n in rows)


def _frequency_order(vocab: Sequence[Tuple[str, int]]) -> List[str]:
    """Tokens by descending count, ties in dictionary order."""
    return [tok for _, _, tok in sorted((-count, k, tok) for k, (tok, count) in enumerate(vocab))]


def pair_words(src_vocab: Sequence[Tuple[str, int]], tgt_vocab: Sequence[Tuple[str, int]],
               probs: Dict[str, Dict[str, float]], threshold: float = DEFAULT_THRESHOLD) -> Pairing:
    """One-to-one pairing of two vocabularies (tokens with counts, specials already removed).

    ``probs[x][y]`` is A(y|x); target candidates with equal A are taken by descending target frequency."""
    if not 0.0 <= threshold <= 1.0:
        raise OutlayersConfigError(f"--threshold must be in [0, 1], got {threshold}")
    tgt_rank = {tok: r for r, tok in enumerate(_frequency_order(tgt_vocab))}
    src_order = _frequency_order(src_vocab)
    paired_src, paired_tgt = set(), set()
    pairs: List[Pair] = []

    def add(category, x, y):
        pairs.append(Pair(category, x, y, probs.get(x, {}).get(y, 0.0)))
        paired_src.add(x)
        paired_tgt.add(y)

    for x in src_order:  # 1. lexical meaning, eq. (1): argmax over the aligned, still unpaired candidates
        candidates = [(a, y) for y, a in probs.get(x, {}).items() if y in tgt_rank and y not in paired_tgt]
        if candidates:
            a, y = min(candidates, key=lambda ay: (-ay[0], tgt_rank[ay[1]]))
            if a >= threshold:
                add("lm", x, y)
    for x in src_order:  # 2. same word form
        if x not in paired_src and x in tgt_rank and x not in paired_tgt:
            add("wf", x, x)
    rest_src = [x for x in src_order if x not in paired_src]  # 3. unrelated, by frequency rank
    rest_tgt = [y for y in _frequency_order(tgt_vocab) if y not in paired_tgt]
    for x, y in zip(rest_src, rest_tgt):
        add("ur", x, y)
    return Pairing(pairs, src_unpaired=len(rest_src) - min(len(rest_src), len(rest_tgt)),
                   tgt_unpaired=len(rest_tgt) - min(len(rest_src), len(rest_tgt)))


def vocabulary(dictionary) -> List[Tuple[str, int]]:
    """(token, count) of the dictionary's non-special symbols, in dictionary order."""
    specials = special_indices(dictionary)
    return [(s, int(dictionary.count[i])) for i, s in enumerate(dictionary.symbols) if i not in specials]


def pair_dictionaries(src_dict, tgt_dict, probs, threshold: float = DEFAULT_THRESHOLD, info=None) -> Pairing:
    pairing = pair_words(vocabulary(src_dict), vocabulary(tgt_dict), probs, threshold)
    pairing.src_hash, pairing.tgt_hash = dictionary_hash(src_dict), dictionary_hash(tgt_dict)
    pairing.src_size, pairing.tgt_size = len(src_dict), len(tgt_dict)
    pairing.info = dict(info or {}, threshold=str(threshold))
    return pairing


def pair_identical(src_dict, tgt_dict) -> Pairing:
    """Joined dictionary only: every non-special word paired with itself, as a same-word-form pair.

    This is the three-way sharing option: with lambda_wf = 1 the source and target vectors of every word are one
    vector (three-way weight tying of Press & Wolf 2017 with private special symbols); with lambda_wf < 1 each word
    keeps (1 - lambda_wf) d private features per language."""
    if dictionary_hash(src_dict) != dictionary_hash(tgt_dict):
        raise OutlayersConfigError(
            f"--identical pairs each word with itself and needs one joined dictionary (fairseq-preprocess "
            f"--joined-dictionary), but the source ({len(src_dict)} symbols) and target ({len(tgt_dict)} symbols) "
            "dictionaries differ"
        )
    pairing = Pairing([Pair("wf", tok, tok, 1.0) for tok, _ in vocabulary(src_dict)])
    pairing.src_hash = pairing.tgt_hash = dictionary_hash(src_dict)
    pairing.src_size = pairing.tgt_size = len(src_dict)
    pairing.info = {"aligner": "none", "pairing": "identical"}
    return pairing


def write_example_pairing(src_dict, tgt_dict, path: str):
    """A small valid ``--pairing`` file with pairs of all three categories: every third word pair by frequency
    rank aligned (A = 1), then same word forms, then the rest (``Option.example``: what the registry-driven tests
    train with)."""
    src, tgt = (_frequency_order(vocabulary(d)) for d in (src_dict, tgt_dict))
    probs = {x: {y: 1.0} for x, y in list(zip(src, tgt))[::3]}
    write_pairing(path, pair_dictionaries(src_dict, tgt_dict, probs, info={"aligner": "example"}), overwrite=True)


# ---------------------------------------------------------------------------------------------------------
# file format


def write_pairing(path: str, pairing: Pairing, overwrite: bool = False):
    if os.path.exists(path) and not overwrite:
        raise OutlayersConfigError(f"'{path}' exists; choose another -o path or pass --force to overwrite it")
    c = pairing.counts()
    info = " ".join(f"{k}={v}" for k, v in sorted(pairing.info.items()))
    lines = [
        FORMAT_LINE,
        f"# source-dictionary: sha256={pairing.src_hash} symbols={pairing.src_size}",
        f"# target-dictionary: sha256={pairing.tgt_hash} symbols={pairing.tgt_size}",
        f"# made-with: {info}",
        f"# counts: lm={c['lm']} wf={c['wf']} ur={c['ur']} "
        f"unpaired-source={pairing.src_unpaired} unpaired-target={pairing.tgt_unpaired}",
        "# columns: category, source token, target token, A(y|x) (tab-separated)",
    ]
    with atomic_write(path) as f:
        f.write("\n".join(lines) + "\n")
        for p in pairing.pairs:
            f.write(f"{p.category}\t{p.src}\t{p.tgt}\t{p.score:.6g}\n")


def _header_fields(value: str) -> Dict[str, str]:
    return dict(item.split("=", 1) for item in value.split() if "=" in item)


def read_pairing(path: str) -> Pairing:
    """Parse and validate a pairing file (format, categories, scores, one-to-one); errors name file:line."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"pairing file '{path}' does not exist; make it with "
                                   "outlayers-pairing (see docs/shared-private.md)")
    pairs: List[Pair] = []
    header: Dict[str, str] = {}
    seen_src: Dict[str, int] = {}
    seen_tgt: Dict[str, int] = {}
    for lineno, line in text_lines(path, "pairing files are UTF-8 text"):
        line = line.rstrip("\r\n")
        if lineno == 1 and line != FORMAT_LINE:
            raise OutlayersConfigError(f"{path}:1: not a pairing file (expected '{FORMAT_LINE}'); make one "
                                       "with python -m fairseq_outlayers.tools.pairing")
        if line.startswith("#"):
            key, _, value = line[1:].strip().partition(":")
            header[key.strip()] = value.strip()
            continue
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 4:
            raise OutlayersConfigError(f"{path}:{lineno}: expected 4 tab-separated columns (category, "
                                       f"source token, target token, score), found {len(cols)}")
        cat, src, tgt, score = cols
        if cat not in CATEGORIES:
            raise OutlayersConfigError(f"{path}:{lineno}: unknown category '{cat}' (one of {', '.join(CATEGORIES)})")
        try:
            value = float(score)
        except ValueError:
            raise OutlayersConfigError(f"{path}:{lineno}: score '{score}' is not a number") from None
        if not 0.0 <= value <= 1.0:  # also false for NaN
            raise OutlayersConfigError(f"{path}:{lineno}: score '{score}' is not a probability A(y|x) in "
                                       "[0, 1]; fix the line or re-run python -m fairseq_outlayers.tools.pairing")
        if not src or not tgt:
            raise OutlayersConfigError(f"{path}:{lineno}: empty {'source' if not src else 'target'} token; "
                                       "each pair names one source and one target dictionary token")
        for tok, seen, side in ((src, seen_src, "source"), (tgt, seen_tgt, "target")):
            if tok in seen:
                raise OutlayersConfigError(
                    f"{path}:{lineno}: the pairing is not one-to-one: {side} token '{tok}' is already paired "
                    f"on line {seen[tok]}; each word may share features with one word only"
                )
            seen[tok] = lineno
        pairs.append(Pair(cat, src, tgt, value))
    for key in ("source-dictionary", "target-dictionary"):
        fields = _header_fields(header.get(key, ""))
        if "sha256" not in fields or "symbols" not in fields:
            raise OutlayersConfigError(f"{path}: header line '# {key}: sha256=... symbols=...' is missing")
    s, t = _header_fields(header["source-dictionary"]), _header_fields(header["target-dictionary"])
    counts = _header_fields(header.get("counts", ""))
    numbers = {}
    for name, fields, key in (("source-dictionary symbols", s, "symbols"), ("target-dictionary symbols", t, "symbols"),
                              ("counts unpaired-source", counts, "unpaired-source"),
                              ("counts unpaired-target", counts, "unpaired-target")):
        value = fields.get(key, "0")
        if not (value.isascii() and value.isdigit()):
            raise OutlayersConfigError(f"{path}: header '{name}={value}' is not a non-negative whole number; "
                                       "re-run python -m fairseq_outlayers.tools.pairing")
        numbers[name] = int(value)
    if not pairs:
        raise OutlayersConfigError(f"{path}: the pairing file has a header but no pairs, so no embedding would be "
                                   "shared; it was cut short or made from text that does not match the "
                                   "dictionaries: re-run python -m fairseq_outlayers.tools.pairing")
    found = Pairing(pairs).counts()
    for cat in CATEGORIES:
        stated = counts.get(cat)
        if stated is not None and (not (stated.isascii() and stated.isdigit()) or int(stated) != found[cat]):
            said = " ".join(f"{c}={counts.get(c)}" for c in CATEGORIES)
            holds = " ".join(f"{c}={found[c]}" for c in CATEGORIES)
            raise OutlayersConfigError(f"{path}: the header says '{said}' but the file holds {holds} pairs: it was "
                                       "cut short or edited; re-run python -m fairseq_outlayers.tools.pairing (or, after "
                                       "an intended edit, correct the '# counts:' line)")
    return Pairing(pairs, s["sha256"], t["sha256"], numbers["source-dictionary symbols"],
                   numbers["target-dictionary symbols"], numbers["counts unpaired-source"],
                   numbers["counts unpaired-target"], _header_fields(header.get("made-with", "")))


def index_maps(pairing: Pairing, src_dict, tgt_dict, path: str = "pairing",
               src_name: str = "source", tgt_name: str = "target") -> Dict[str, Tuple[List[int], List[int]]]:
    """{category: (source indices, target indices)} of the pairs, after checking the pairing against the
    dictionaries the model is trained with: same symbols (hash), every token present, no special symbol."""
    for side, d, h, n, name in (("source", src_dict, pairing.src_hash, pairing.src_size, src_name),
                                ("target", tgt_dict, pairing.tgt_hash, pairing.tgt_size, tgt_name)):
        if dictionary_hash(d) != h:
            raise OutlayersConfigError(
                f"the {side} dictionary ({name}, {len(d)} symbols) is not the one '{path}' was made for "
                f"({n} symbols, different sha256); the data was re-preprocessed since pairing: re-run "
                "outlayers-pairing with the current dictionaries"
            )
    maps: Dict[str, Tuple[List[int], List[int]]] = {c: ([], []) for c in CATEGORIES}
    missing = {"source": [], "target": []}
    sp_src, sp_tgt = special_indices(src_dict), special_indices(tgt_dict)
    for p in pairing.pairs:
        i, j = src_dict.indices.get(p.src), tgt_dict.indices.get(p.tgt)
        if i is None:
            missing["source"].append(p.src)
        if j is None:
            missing["target"].append(p.tgt)
        if i is None or j is None:
            continue
        if i in sp_src or j in sp_tgt:
            raise OutlayersConfigError(f"'{path}': special symbol in pair ({p.src}, {p.tgt}); special symbols "
                                       "(<s>, <pad>, </s>, <unk>, madeupword*) are never shared")
        maps[p.category][0].append(i)
        maps[p.category][1].append(j)
    for side, toks in missing.items():
        if toks:
            raise OutlayersConfigError(
                f"'{path}': {len(toks)} {side} token(s) are not in the {side} dictionary (first: "
                f"{', '.join(toks[:5])}); re-run the pairing with the dictionaries used for training"
            )
    return maps


def lambdas_from_string(value) -> Tuple[float, float, float]:
    """Parse ``--shared-private-lambdas 0.9,0.7,0.5`` (lm, wf, ur), each in [0, 1]."""
    if isinstance(value, (tuple, list)):
        parts = list(value)
    else:
        parts = [v for v in str(value).replace(" ", "").split(",") if v]
    try:
        lams = tuple(float(v) for v in parts)
    except ValueError:
        lams = ()
    if len(lams) != 3 or not all(0.0 <= v <= 1.0 for v in lams):
        raise OutlayersConfigError(
            f"--shared-private-lambdas must be three numbers in [0, 1] for lm,wf,ur (e.g. 0.9,0.7,0.5), got '{value}'"
        )
    return lams

