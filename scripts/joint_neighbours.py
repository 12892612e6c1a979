#!/usr/bin/env python
"""Nearest neighbours of query words in the input and output representations of a trained model.

Reproduces the kind of table in Pappas et al. (2018), Table 1: for each query word, the top-k most similar target
words by cosine similarity (a) in the decoder's input embedding E and (b) in the output representation the
output layer scores against -- g_out(E) for the joint layer, E itself for a tied layer, the learned output matrix
for an untied softmax (any softmax-type output layer of this package: its ``target_weights()``).

    python scripts/joint_neighbours.py --path checkpoints/joint/checkpoint_best.pt \\
        --data data-bin/multi30k.de-en --words man woman dog playing red --k 5

Special symbols (``<s>``, ``<pad>``, ``</s>``, ``<unk>``) and the query itself are never listed as neighbours.
"""
import argparse
import os
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F


from fairseq_outlayers.errors import OutlayersConfigError, one_line_errors  # noqa: E402
from fairseq_outlayers.outfiles import check_output_path, write_text  # noqa: E402
from fairseq_outlayers.value_checks import Range  # noqa: E402


def nearest_neighbours(matrix: torch.Tensor, query_ids: List[int], k: int, exclude: Optional[List[int]] = None,
                       chunk: int = 4096) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-k cosine neighbours of rows ``query_ids`` of ``matrix`` among all rows, excluding the query itself and
    the ids in ``exclude``. Returns ``(ids, similarities)``, each (len(query_ids), k), best first. The vocabulary
    is scanned in chunks so that memory stays O(queries x chunk)."""
    normed = F.normalize(matrix.float(), dim=-1)
    queries = normed[query_ids]
    best_sim = torch.full((len(query_ids), 0), float("-inf"))
    best_ids = torch.zeros((len(query_ids), 0), dtype=torch.long)
    excluded = torch.zeros(matrix.size(0), dtype=torch.bool)
    if exclude:
        excluded[exclude] = True
    for start in range(0, matrix.size(0), chunk):
        sims = queries @ normed[start:start + chunk].T
        ids = torch.arange(start, start + sims.size(1))
        sims = sims.masked_fill(excluded[start:start + chunk].unsqueeze(0), float("-inf"))
        sims = sims.masked_fill(ids.unsqueeze(0) == torch.tensor(query_ids).unsqueeze(1), float("-inf"))
        all_sim = torch.cat([best_sim, sims], dim=1)
        all_ids = torch.cat([best_ids, ids.unsqueeze(0).expand(len(query_ids), -1)], dim=1)
        top = all_sim.topk(min(k, all_sim.size(1)), dim=1)
        best_sim, best_ids = top.values, all_ids.gather(1, top.indices)
    return best_ids, best_sim


def representations(model) -> Tuple[torch.Tensor, torch.Tensor]:
    """(input embedding E, output representation) of a model of this package, both |V| x dim."""
    layer = model.decoder.output_projection
    if not hasattr(layer, "target_weights"):
        raise OutlayersConfigError(
            f"the checkpoint's output layer ({type(layer).__name__}) has no per-word output vectors; "
            "use a checkpoint trained with --output-layer joint, tied or softmax"
        )
    layer.eval()
    with torch.no_grad():
        return model.decoder.embed_tokens.weight.detach(), layer.target_weights(None)[0].detach()


def neighbour_table(model, dictionary, words: List[str], k: int) -> List[dict]:
    ids = []
    for w in words:
        i = dictionary.index(w)
        if i == dictionary.unk() and w != dictionary.unk_word:
            raise OutlayersConfigError(
                f"query word '{w}' is not in the target dictionary ({len(dictionary)} types); query a word "
                "of the model's (BPE) target vocabulary, e.g. one listed in dict.<tgt>.txt"
            )
        ids.append(i)
    # specials and the never-seen filler words fairseq pads dictionaries with (madeupwordNNNN) are not neighbours
    exclude = list(range(dictionary.nspecial)) + [i for i, w in enumerate(dictionary.symbols)
                                                  if w.startswith("madeupword")]
    candidates = len(dictionary) - len(set(exclude)) - 1  # a query is never its own neighbour
    if k > candidates:
        raise OutlayersConfigError(
            f"--k {k} is more than the {candidates:,d} neighbours a query has in this {len(dictionary):,d}-type target "
            f"dictionary (less its special and filler symbols and the query itself); use --k {candidates} or less")
    inp, out = representations(model)
    rows = []
    for name, matrix in (("input", inp), ("output", out)):
        nn_ids, nn_sims = nearest_neighbours(matrix, ids, k, exclude)
        for q, (word, row_ids, row_sims) in enumerate(zip(words, nn_ids.tolist(), nn_sims.tolist())):
            if len(rows) <= q:
                rows.append({"query": word})
            rows[q][name] = [(dictionary[i], s) for i, s in zip(row_ids, row_sims)]
    return rows


def format_markdown(rows: List[dict], k: int, label: str) -> str:
    lines = [f"| query | {label} input | {label} output |", "|---|---|---|"]
    for row in rows:
        for j in range(k):
            inp = row["input"][j] if j < len(row["input"]) else ("", float("nan"))
            out = row["output"][j] if j < len(row["output"]) else ("", float("nan"))
            lines.append(f"| {row['query'] if j == 0 else ''} | {inp[0]} ({inp[1]:.2f}) | {out[0]} ({out[1]:.2f}) |")
    return "\n".join(lines)


def format_tsv(rows: List[dict], k: int) -> str:
    lines = ["query\trank\tinput\tinput_cos\toutput\toutput_cos"]
    for row in rows:
        for j in range(min(k, len(row["input"]))):
            (iw, isim), (ow, osim) = row["input"][j], row["output"][j]
            lines.append(f"{row['query']}\t{j + 1}\t{iw}\t{isim:.4f}\t{ow}\t{osim:.4f}")
    return "\n".join(lines)


def load(path: str, data: Optional[str]):
    import fairseq_outlayers.models  # noqa: F401  (registers the models; checkpoint allow-list)
    from fairseq_outlayers.tools.checkpoints import load_model_ensemble_and_task

    if not os.path.exists(path):
        raise OutlayersConfigError(f"checkpoint '{path}' does not exist; pass --path to a fairseq checkpoint")
    overrides = {"data": data} if data else {}
    models, _cfg, task = load_model_ensemble_and_task([path], arg_overrides=overrides)
    return models[0], task.target_dictionary


@one_line_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True, help="fairseq checkpoint of an outlayers_* model")
    parser.add_argument("--data", help="data-bin directory with the dictionaries (default: the checkpoint's)")
    parser.add_argument("--words", nargs="+", required=True, help="query words of the target vocabulary")
    parser.add_argument("--k", type=Range(1, integer=True), default=5,
                        help="neighbours per query (default: 5, as in the paper)")
    parser.add_argument("--format", choices=("markdown", "tsv"), default="markdown", help="(default: markdown)")
    parser.add_argument("--label", default="", help="model name for the column headers, e.g. NMT-joint")
    parser.add_argument("--output", help="write the table here instead of standard output")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = parser.parse_args(argv)
    if args.output:
        check_output_path(args.output, args.force, inputs=(args.path,), option="--output")
    model, dictionary = load(args.path, args.data)
    rows = neighbour_table(model, dictionary, args.words, args.k)
    text = format_markdown(rows, args.k, args.label) if args.format == "markdown" else format_tsv(rows, args.k)
    if args.output:
        write_text(args.output, text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
