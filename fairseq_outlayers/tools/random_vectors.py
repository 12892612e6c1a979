"""Random target vectors: ``outlayers-vectors random DICT OUT.vec --dim 300 --seed 1``.

Writes one unit vector drawn uniformly on the sphere for every word of a fairseq target dictionary (``<pad>`` and
fairseq's ``madeupwordNNNN`` fillers left out), as a word2vec text file that ``--target-vectors`` reads. No corpus
is needed. Random target embeddings can match or beat pretrained ones for continuous outputs (Tokarchuk &
Niculae, NAACL 2024): in high dimension random unit vectors are nearly orthogonal, so every pair of words is far
apart. The same dictionary, dimension and seed give the same file on every machine.
"""
import logging

from fairseq_outlayers.outfiles import atomic_write, check_output_path
from fairseq_outlayers.target_vectors import random_unit_vectors
from fairseq_outlayers.tools.export_vectors import exportable
from fairseq_outlayers.value_checks import FROZEN_BYTES, NON_NEGATIVE_INT, POSITIVE_INT, check_fits
from fairseq_outlayers.word_pairs.corpus import load_dictionary

logger = logging.getLogger(__name__)


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


def add_random_parser(sub):
    rnd = sub.add_parser("random", help="write random unit vectors (uniform on the sphere) for every word of a "
                         "target dictionary as a .vec file")
    rnd.add_argument("dictionary", help="the target dictionary, e.g. data-bin/dict.en.txt")
    rnd.add_argument("output", help="the .vec file to write (not overwritten without --force)")
    rnd.add_argument("--dim", type=POSITIVE_INT, default=300, help="vector size m (default: 300, the paper's)")
    rnd.add_argument("--seed", type=NON_NEGATIVE_INT, default=1, help="seed of the draw (default: 1)")
    rnd.add_argument("--force", action="store_true", help="overwrite OUTPUT")
    return rnd
