"""``outlayers-vectors`` (``python -m fairseq_outlayers.tools.vectors``): target word vectors for
``--output-layer continuous``::

    outlayers-vectors report DATA-BIN/dict.en.txt vectors.en.vec [--min-coverage 0.5]   # coverage, as training sees it
    outlayers-vectors random DATA-BIN/dict.en.txt random.en.300d.vec --dim 300 --seed 1  # random unit vectors
    outlayers-vectors export CHECKPOINT vectors.out.vec                                  # a trained model's word matrix
    outlayers-vectors export CHECKPOINT mixed.vec --random-below 5 --seed 1 [--center]   # ... rare words random
    outlayers-vectors mix DATA-BIN/dict.en.txt vectors.en.vec mixed.vec --random-below 5 # any .vec, rare words random

``random`` writes one unit vector drawn uniformly on the sphere for every word of a fairseq target dictionary. No
corpus is needed. Random target embeddings can match or beat pretrained ones for continuous outputs (Tokarchuk &
Niculae, NAACL 2024): in high dimension random unit vectors are nearly orthogonal, so every pair of words is far
apart. The same dictionary, dimension and seed give the same file on every machine.

``export`` writes the output matrix (``--matrix output``: the rows a softmax-type output layer scores words with,
e.g. the learned softmax, tied, joint or fixed layer) or the decoder's input embedding matrix (``--matrix input``)
of a checkpoint. Use: train continuous outputs against the vectors of a trained word-level model, to tell how much
of their gap to the softmax is the pretrained vectors. The model is rebuilt by fairseq from the checkpoint, so the
data directory with its dictionaries must exist (``--data`` when it moved since training).

``--random-below N`` makes a mixed table (Tokarchuk & Niculae, NAACL 2024: learned vectors for frequent words,
random ones for rare words): every dictionary word counted fewer than N times in the training data (the count in
``dict.LANG.txt``) gets a fixed random unit vector, drawn in dictionary order from ``--seed``; the special symbols
and the other words keep their vector, divided by its norm (``--center``: centred over those words first, as
``--target-vectors-center`` would, so train without that option). Every row of a mixed table is a unit vector.

Every file is a word2vec text file that ``--target-vectors`` reads, one row per target-dictionary word (``<pad>``
and fairseq's ``madeupwordNNNN`` fillers left out).
"""
import argparse
import logging
import os
import sys
from typing import List, Optional

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY, all_specs, file_options
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.continuous.target_vectors import load_target_table, random_unit_vectors
from fairseq_outlayers.methods.shared_private.word_pairs.corpus import load_dictionary
from fairseq_outlayers.outfiles import atomic_write, check_output_path
from fairseq_outlayers.tools.checkpoints import load_trained
from fairseq_outlayers.value_checks import FROZEN_BYTES, NON_NEGATIVE_INT, POSITIVE_INT, Range, check_fits

logger = logging.getLogger(__name__)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="outlayers-vectors",
                                     description="Target word vectors for --output-layer continuous.")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="align a vector file to a fairseq dictionary and print the coverage")
    rep.add_argument("dictionary", help="the target dictionary, e.g. data-bin/dict.en.txt")
    rep.add_argument("vectors", help="word2vec/fastText .vec text file, or a .bin model (needs gensim)")
    rep.add_argument("--min-coverage", type=Range(0, 1), default=0.5,
                     help="fail below this fraction of dictionary words with a vector (default: 0.5)")
    rep.add_argument("--center", action="store_true", help="centre the vectors as --target-vectors-center does")
    add_export_parser(sub)
    add_random_parser(sub)
    add_mix_parser(sub)
    args = parser.parse_args(argv)
    try:
        print(_run(args))
    except OutlayersConfigError as e:
        print(f"fairseq_outlayers: error: {e}", file=sys.stderr)
        return 1
    return 0


def _run(args) -> str:
    """One subcommand; what it prints."""
    if args.command == "random":
        n = write_random_vectors(args.dictionary, args.output, args.dim, args.seed, args.force)
        return f"wrote {n:,} random unit vectors of size {args.dim} to {args.output}"
    if args.command == "export":
        mixed = MixedTable(args.random_below, args.seed, args.center) if args.random_below else None
        n = export_target_vectors(args.checkpoint, args.output, args.matrix, args.data, args.force, mixed=mixed)
        return f"wrote {n:,} vectors to {args.output}" + (f" ({mixed.drawn:,} random)" if mixed else "")
    if args.command == "mix":
        mixed = MixedTable(args.random_below, args.seed, args.center)
        n = mix_vector_file(args.dictionary, args.vectors, args.output, mixed, args.force)
        return f"wrote {n:,} vectors ({mixed.drawn:,} random) to {args.output}"
    table = load_target_table(load_dictionary(args.dictionary), args.vectors, args.min_coverage, center=args.center)
    return "\n".join(table.report.lines())



def write_random_vectors(dictionary_path: str, output: str, dim: int, seed: int, force: bool = False) -> int:
    """Write the vectors; returns the number of rows written."""
    check_output_path(output, force, inputs=[dictionary_path], option="OUTPUT")
    dictionary = load_dictionary(dictionary_path)
    rows = [i for i in range(len(dictionary)) if exportable(dictionary, i)]
    check_fits("--dim", dim, 2 * FROZEN_BYTES * len(rows), f"the {len(rows):,d}-word table",
               "use a few hundred dimensions (the paper: 300)")
    vectors = random_unit_vectors(len(rows), dim, seed)
    with atomic_write(output) as f:
        f.write(f"{len(rows)} {dim}\n")
        for i, row in zip(rows, vectors.tolist()):
            f.write(dictionary[i] + " " + " ".join(f"{v:.8g}" for v in row) + "\n")
    logger.info(f"wrote {len(rows):,} random unit vectors of size {dim} (seed {seed}) to {output}")
    return len(rows)


class MixedTable:
    """The mixed table's settings (``--random-below``, ``--seed``, ``--center``) and, once applied, how many
    words got a random vector (``drawn``)."""

    def __init__(self, random_below: int, seed: int = 1, center: bool = False):
        if random_below < 1:
            raise OutlayersConfigError(f"--random-below {random_below}: give a count >= 1 (words counted fewer times "
                                       "than that get random vectors)")
        self.random_below, self.seed, self.center, self.drawn = random_below, seed, center, 0

    def rare(self, dictionary, rows: List[int]) -> List[bool]:
        """For each dictionary index of ``rows``: counted fewer than ``random_below`` times (never a special)."""
        return [i >= dictionary.nspecial and dictionary.count[i] < self.random_below for i in rows]

    def apply(self, dictionary, rows: List[int], weight):
        """(len(rows), d) unit rows: ``weight``'s rows (indexed by dictionary index) for frequent words and the
        special symbols, normalised (centred first with ``center``), and random unit rows for the rare words."""
        import torch

        rare = torch.tensor(self.rare(dictionary, rows), dtype=torch.bool)
        kept = weight[torch.tensor(rows, dtype=torch.long)].double()
        kept = torch.nn.functional.normalize(kept, dim=-1)
        if self.center and bool((~rare).any()):
            kept = torch.nn.functional.normalize(kept - kept[~rare].mean(0), dim=-1)
        self.drawn = int(rare.sum())
        if self.drawn:
            kept[rare] = random_unit_vectors(self.drawn, weight.size(1), self.seed).double()
        return kept.float()

    def describe(self) -> str:
        return f"--random-below {self.random_below} --seed {self.seed}" + (" --center" if self.center else "")


def write_table(output: str, dictionary, rows: List[int], table) -> None:
    with atomic_write(output) as f:
        f.write(f"{len(rows)} {table.size(1)}\n")
        for i, row in zip(rows, table.tolist()):
            f.write(dictionary[i] + " " + " ".join(f"{v:.8g}" for v in row) + "\n")


def mix_vector_file(dictionary_path: str, vectors: str, output: str, mixed: "MixedTable", force: bool = False) -> int:
    """A mixed table from any vector file (e.g. fastText): the file's vectors as ``--target-vectors`` aligns them to
    the dictionary (``<unk>``'s rule for words it lacks), rare words random; returns the rows written."""
    check_output_path(output, force, inputs=[dictionary_path, vectors], option="OUTPUT")
    dictionary = load_dictionary(dictionary_path)
    table = load_target_table(dictionary, vectors, min_coverage=0.0).table
    rows = [i for i in range(len(dictionary)) if exportable(dictionary, i)]
    write_table(output, dictionary, rows, mixed.apply(dictionary, rows, table))
    logger.info(f"wrote {len(rows):,} vectors ({mixed.drawn:,} random, {mixed.describe()}) to {output}")
    return len(rows)


def add_mix_parser(sub):
    mix = sub.add_parser("mix", help="a mixed table: a vector file's vectors for frequent words, fixed random unit "
                         "vectors for words counted fewer than --random-below times")
    mix.add_argument("dictionary", help="the target dictionary with the training counts, e.g. data-bin/dict.en.txt")
    mix.add_argument("vectors", help="word2vec/fastText .vec text file (e.g. outlayers-vectors export's output)")
    mix.add_argument("output", help="the .vec file to write (not overwritten without --force)")
    add_mix_options(mix, required=True)
    mix.add_argument("--force", action="store_true", help="overwrite OUTPUT")
    return mix


def add_mix_options(parser, required: bool = False):
    parser.add_argument("--random-below", type=POSITIVE_INT, required=required, default=None if required else 0,
                        metavar="N", help="words counted fewer than N times in the training data (dict.LANG.txt) get "
                        "a fixed random unit vector (a mixed table; Tokarchuk & Niculae 2024)" +
                        ("" if required else "; default: none"))
    parser.add_argument("--seed", type=NON_NEGATIVE_INT, default=1, help="seed of the random rows (default: 1)")
    parser.add_argument("--center", action="store_true", help="centre the kept vectors over the kept words before "
                        "normalising them, as --target-vectors-center would (train without that option)")


def add_random_parser(sub):
    rnd = sub.add_parser("random", help="write random unit vectors (uniform on the sphere) for every word of a "
                         "target dictionary as a .vec file")
    rnd.add_argument("dictionary", help="the target dictionary, e.g. data-bin/dict.en.txt")
    rnd.add_argument("output", help="the .vec file to write (not overwritten without --force)")
    rnd.add_argument("--dim", type=POSITIVE_INT, default=300, help="vector size m (default: 300, the paper's)")
    rnd.add_argument("--seed", type=NON_NEGATIVE_INT, default=1, help="seed of the draw (default: 1)")
    rnd.add_argument("--force", action="store_true", help="overwrite OUTPUT")
    return rnd


def model_matrix(model, matrix: str):
    """(V, d) float tensor: the output layer's word rows or the decoder's input embeddings."""
    decoder, args = model.decoder, getattr(model, "outlayers_args", None)
    if matrix == "input":
        weight = getattr(getattr(decoder, "embed_tokens", None), "weight", None)
        if weight is None:
            embeddings = getattr(args, "embeddings", "?")
            raise OutlayersConfigError(f"this model's decoder input embeddings (--embeddings {embeddings}) have no "
                                       "weight matrix: export the vectors they were built from instead")
        return weight.detach().float()
    layer = getattr(decoder, "output_projection", None)
    if layer is None or not hasattr(layer, "target_weights"):
        softmax = ", ".join(sorted(n for n, spec in OUTPUT_LAYER_REGISTRY.items() if spec.softmax_type))
        raise OutlayersConfigError(f"--matrix output needs a softmax-type output layer ({softmax}); this model's is "
                                   f"--output-layer {getattr(args, 'output_layer', '?')}: use --matrix input")
    return layer.target_weights(None)[0].detach().float()


def exportable(dictionary, index: int) -> bool:
    word = dictionary[index]
    return index != dictionary.pad() and not word.startswith("madeupword")


def model_inputs(cfg) -> list:
    """The paths a loaded model's configuration names as its inputs: the data directories (``task.data``, one or
    several joined by ``os.pathsep``) and the files its options name (``Option.file``, read from the registries)."""
    def get(section, key):
        value = getattr(getattr(cfg, section, None), key, None) if cfg is not None else None
        return value if isinstance(value, str) and value else None

    data = get("task", "data")
    files = [get("model", dest) for dest in file_options(all_specs())]
    return (data.split(os.pathsep) if data else []) + [p for p in files if p]


def export_target_vectors(checkpoint: str, output: str, matrix: str = "output", data=None, force=False,
                          mixed: Optional["MixedTable"] = None) -> int:
    """Write the vectors (a mixed table with ``mixed``); returns the number of rows written."""
    check_output_path(output, force, inputs=[checkpoint, data], option="OUTPUT")

    model, cfg, task = load_trained(checkpoint, data)
    # the files the model was built from (its data directory with the dictionaries, a pairing file, target
    # vectors) are inputs too, named by the checkpoint rather than on the command line: never written over
    check_output_path(output, force, inputs=[checkpoint, data, *model_inputs(cfg)], option="OUTPUT")
    weight = model_matrix(model, matrix)
    dictionary = task.target_dictionary
    if weight.size(0) != len(dictionary):
        raise OutlayersConfigError(f"'{checkpoint}': the {matrix} matrix has {weight.size(0)} rows but the target "
                                   f"dictionary {len(dictionary)} words; give the training data with --data DIR")
    rows = [i for i in range(len(dictionary)) if exportable(dictionary, i)]
    if mixed is not None:
        write_table(output, dictionary, rows, mixed.apply(dictionary, rows, weight))
        logger.info(f"wrote {len(rows):,} {matrix} vectors ({mixed.drawn:,} random, {mixed.describe()}) from "
                    f"{checkpoint} to {output}")
        return len(rows)
    with atomic_write(output) as f:
        f.write(f"{len(rows)} {weight.size(1)}\n")
        for i in rows:
            f.write(dictionary[i] + " " + " ".join(f"{v:.6g}" for v in weight[i].tolist()) + "\n")
    logger.info(f"wrote {len(rows):,} {matrix} vectors of size {weight.size(1)} from {checkpoint} to {output}")
    return len(rows)


def add_export_parser(sub):
    exp = sub.add_parser("export", help="write a trained model's output (or input) word matrix as a .vec file")
    exp.add_argument("checkpoint", help="a fairseq-train checkpoint of this package (word-level targets)")
    exp.add_argument("output", help="the .vec file to write (not overwritten without --force)")
    exp.add_argument("--matrix", choices=("output", "input"), default="output",
                     help="output: the output layer's word rows (default); input: the decoder input embeddings")
    exp.add_argument("--data", help="the data directory (dictionaries), if it moved since training")
    add_mix_options(exp)
    exp.add_argument("--force", action="store_true", help="overwrite OUTPUT")
    return exp


if __name__ == "__main__":
    sys.exit(main())
