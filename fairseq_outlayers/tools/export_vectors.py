"""Target word vectors from a trained model: ``python -m fairseq_outlayers.tools.vectors export CHECKPOINT OUT.vec``.

Writes the output matrix (``--matrix output``: the rows a softmax-type output layer scores words with, e.g. the
learned softmax, tied, joint or fixed layer) or the decoder's input embedding matrix (``--matrix input``) of a
checkpoint as a word2vec text file, one row per target-dictionary word (``<pad>`` and fairseq's
``madeupwordNNNN`` fillers left out), which ``--target-vectors`` reads. Use: train continuous outputs against the
vectors of a trained word-level model, to tell how much of their gap to the softmax is the pretrained vectors.
The model is rebuilt by fairseq from the checkpoint (``--user-dir`` is this package), so the data directory with
its dictionaries must exist (``--data`` when it moved since training).
"""
import logging
import os

from fairseq_outlayers.checkpoint_safety import load_trained
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.models.registry import OUTPUT_LAYER_REGISTRY
from fairseq_outlayers.models.seam_options import all_specs, file_options
from fairseq_outlayers.outfiles import atomic_write, check_output_path

logger = logging.getLogger(__name__)


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


def export_target_vectors(checkpoint: str, output: str, matrix: str = "output", data=None, force=False) -> int:
    """Write the vectors; returns the number of rows written."""
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
    exp.add_argument("--force", action="store_true", help="overwrite OUTPUT")
    return exp
