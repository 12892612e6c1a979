#!/usr/bin/env python
"""2-D PCA of paired source and target embeddings of a shared-private checkpoint (Liu et al. 2019, Figure 6).

Reads the embedding blocks and index maps from the checkpoint itself (no pairing file needed), assembles the
source and target matrices, takes the pairs of one category (default: lexical meaning, the most frequent
``--top`` source words, or the source words given with ``--words``), projects the source and target vectors of
those pairs onto their first two principal components and writes an SVG scatter plot (source words in blue,
target words in red, a grey line per pair) plus the coordinates as TSV. It also prints the mean distance between
paired and between randomly matched vectors, the quantity the figure illustrates.

    python scripts/shared_private_pca.py checkpoints/checkpoint_best.pt --data data-bin/multi30k_de_en \\
        --top 20 -o pca.svg
"""
import argparse
import os
from typing import List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATEGORIES = ("lm", "wf", "ur")


def load_embeddings(checkpoint: str):
    """(source matrix, target matrix, {category: [(src index, tgt index), ...]}, model args) from a checkpoint."""
    import torch

    from fairseq_outlayers.core.checkpoint_safety import read
    from fairseq_outlayers.methods.shared_private.embedding import assemble

    state = read(checkpoint)  # weights-only: a crafted or damaged file is refused with one line
    model, cfg = state["model"], state["cfg"]["model"]
    prefix = "encoder.embed_tokens.core."
    if prefix + "src_rows" not in model:
        raise SystemExit(f"{checkpoint}: not a shared-private model (no {prefix}src_rows)")
    get = lambda name: model[prefix + name].float()  # noqa: E731
    shared = [get(f"shared.{k}") for k in range(3)]
    mats, orders = {}, {}
    for side in ("src", "tgt"):
        rows = model[prefix + f"{side}_rows"]
        mats[side] = assemble(shared, [get(f"{side}_private.{k}") for k in range(3)], get(f"{side}_unpaired"), rows)
        orders[side] = torch.argsort(rows).tolist()  # stacked row -> dictionary index
    pairs, start = {}, 0
    for k, c in enumerate(CATEGORIES):
        n = shared[k].shape[0]
        pairs[c] = [(orders["src"][r], orders["tgt"][r]) for r in range(start, start + n)]
        start += n
    return mats["src"], mats["tgt"], pairs, cfg


def pca_2d(x):
    """Project the rows of x onto their first two principal components (SVD of the centred matrix)."""
    import torch

    centred = x - x.mean(dim=0, keepdim=True)
    _, _, v = torch.linalg.svd(centred.double(), full_matrices=False)
    return (centred.double() @ v[:2].T).float()


def write_svg(path: str, points: List[Tuple[float, float, str, str]], links: List[Tuple[int, int]], title: str):
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    w, h, m = 800, 600, 60
    sx = lambda x: m + (x - x0) / max(x1 - x0, 1e-9) * (w - 2 * m)  # noqa: E731
    sy = lambda y: h - m - (y - y0) / max(y1 - y0, 1e-9) * (h - 2 * m)  # noqa: E731
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="24" text-anchor="middle" font-size="15">{esc(title)}</text>']
    for a, b in links:
        out.append(f'<line x1="{sx(xs[a]):.1f}" y1="{sy(ys[a]):.1f}" x2="{sx(xs[b]):.1f}" y2="{sy(ys[b]):.1f}" '
                   'stroke="#bbb"/>')
    for x, y, label, colour in points:
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{sx(x) + 5:.1f}" y="{sy(y) - 4:.1f}" font-size="11" fill="{colour}">{esc(label)}</text>')
    out.append("</svg>")
    from fairseq_outlayers.outfiles import write_text

    write_text(path, "\n".join(out) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--data", help="data-bin directory with the dictionaries (default: the one in the checkpoint)")
    p.add_argument("--category", default="lm", choices=CATEGORIES)
    p.add_argument("--top", type=int, default=20, help="the most frequent source words of the category")
    p.add_argument("--words", help="comma-separated source words to show instead of --top")
    p.add_argument("-o", "--output", default="shared_private_pca.svg",
                   help="SVG figure; the coordinates go to the same name with .tsv (default: shared_private_pca.svg)")
    p.add_argument("--force", action="store_true", help="overwrite the figure and table if they exist")
    args = p.parse_args(argv)
    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.outfiles import check_output_path, write_text

    table = os.path.splitext(args.output)[0] + ".tsv"
    if not os.path.isfile(args.checkpoint):
        raise SystemExit(f"error: checkpoint '{args.checkpoint}' does not exist")
    try:
        for path, option in ((args.output, "-o"), (table, "-o (its .tsv table)")):
            check_output_path(path, args.force, inputs=(args.checkpoint,), option=option)
    except OutlayersConfigError as e:
        raise SystemExit(f"error: {e}") from None
    import torch

    from fairseq.data import Dictionary

    src_m, tgt_m, pairs, cfg = load_embeddings(args.checkpoint)
    data = args.data or getattr(cfg, "data", None)
    src_lang, tgt_lang = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
    if src_lang is None or tgt_lang is None:
        from fairseq.data.data_utils import infer_language_pair

        src_lang, tgt_lang = infer_language_pair(data)
    dicts = {side: Dictionary.load(os.path.join(data, f"dict.{lang}.txt"))
             for side, lang in (("src", src_lang), ("tgt", tgt_lang))}
    chosen = pairs[args.category]
    if args.words:
        wanted = set(args.words.split(","))
        chosen = [(i, j) for i, j in chosen if dicts["src"][i] in wanted]
    else:
        chosen = sorted(chosen, key=lambda ij: -dicts["src"].count[ij[0]])[: args.top]
    if len(chosen) < 2:
        raise SystemExit(f"fewer than 2 {args.category} pairs to show; choose other --words")
    src_idx = torch.tensor([i for i, _ in chosen])
    tgt_idx = torch.tensor([j for _, j in chosen])
    xy = pca_2d(torch.cat([src_m[src_idx], tgt_m[tgt_idx]]))
    n = len(chosen)
    points = [(float(xy[k, 0]), float(xy[k, 1]), dicts["src"][i], "#1f4fbf") for k, (i, _) in enumerate(chosen)]
    points += [(float(xy[n + k, 0]), float(xy[n + k, 1]), dicts["tgt"][j], "#c0392b") for k, (_, j) in enumerate(chosen)]
    write_svg(args.output, points, [(k, n + k) for k in range(n)],
              f"{os.path.basename(args.checkpoint)}: {n} {args.category} pairs, 2-D PCA (source blue, target red)")
    write_text(table, "side\tword\tpc1\tpc2\n" + "".join(
        f"{'src' if k < n else 'tgt'}\t{label}\t{x:.5f}\t{y:.5f}\n" for k, (x, y, label, _) in enumerate(points)))
    paired = (src_m[src_idx] - tgt_m[tgt_idx]).norm(dim=1).mean().item()
    shuffled = (src_m[src_idx] - tgt_m[tgt_idx.roll(1)]).norm(dim=1).mean().item()
    print(f"wrote {args.output} (+ .tsv); mean L2 distance paired {paired:.4f} vs mismatched {shuffled:.4f}")
    return paired, shuffled


if __name__ == "__main__":
    from fairseq_outlayers.errors import one_line_errors

    one_line_errors(main)()
