"""Negative sampling for a softmax (Pappas et al. 2018, section 3.2): the sampled vocabulary V', a
reproducible seed per batch, and the log Q correction. Pure torch; ``--criterion sampled_softmax``
(``fairseq_outlayers.losses.sampled_softmax``) trains with them, and the benchmarks call them directly."""
import math
from typing import Optional, Tuple

import torch


def mix_seed(*values: int) -> int:
    """Deterministic 63-bit seed from integers (splitmix64 finaliser over a running combination)."""
    mask = (1 << 64) - 1
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & mask)) & mask
        h = (h + 0x9E3779B97F4A7C15) & mask
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
        h ^= h >> 31
    return h & ((1 << 63) - 1)


def sample_vocabulary(targets: torch.Tensor, vocab_size: int, ratio: float, pad: Optional[int] = None,
                      generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Choose V' and remap the targets into it.

    V' = every id in ``targets`` (plus ``pad``) and negatives drawn uniformly without replacement from the other
    ids until ``|V'| = max(#positives, ceil(ratio * vocab_size))``. Returns ``(ids, remapped)``: ``ids`` is the
    sorted 1-D LongTensor of V' (so ratio 1 gives ``arange(vocab_size)``), ``remapped`` has the shape of
    ``targets`` and holds each target's position in ``ids``.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"sample ratio must be in (0, 1], got {ratio}")
    device = targets.device
    positives = targets.reshape(-1)
    if pad is not None:
        positives = torch.cat([positives, positives.new_tensor([pad])])
    positives = torch.unique(positives)
    wanted = min(vocab_size, int(math.ceil(ratio * vocab_size - 1e-9)))
    n_neg = wanted - positives.numel()
    if n_neg > 0:
        is_pos = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        is_pos[positives] = True
        perm = torch.randperm(vocab_size, generator=generator, device=generator.device if generator is not None
                              else device).to(device)
        negatives = perm[~is_pos[perm]][:n_neg]
        ids = torch.sort(torch.cat([positives, negatives])).values
    else:
        ids = positives  # torch.unique returns sorted ids
    lookup = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
    lookup[ids] = torch.arange(ids.numel(), device=device)
    return ids, lookup[targets]


def sampling_correction(ids: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                        pad: Optional[int] = None) -> torch.Tensor:
    """log Q offsets for the columns ``ids`` of V' (``sample_vocabulary``'s first output) given the batch's
    ``targets``: 0 for the batch's targets (and ``pad``), which are in V' for certain, and -log r for the uniformly
    drawn negatives, r = (number of negatives) / (words that are not targets) being each such word's chance of
    being drawn. Softmax over V' of ``logits + offsets`` then has sum_P exp(s) + sum_N exp(s) / r as its
    normaliser, an unbiased estimate of sum_V exp(s) given the batch. Float32, shape ``(len(ids),)``; all zeros
    when V' holds no negative (e.g. ratio 1)."""
    is_pos = torch.zeros(vocab_size, dtype=torch.bool, device=ids.device)
    is_pos[targets.reshape(-1)] = True
    if pad is not None:
        is_pos[pad] = True
    negative = ~is_pos[ids]
    n_neg = int(negative.sum())
    offsets = torch.zeros(ids.numel(), dtype=torch.float32, device=ids.device)
    if n_neg:
        offsets[negative] = math.log((vocab_size - int(is_pos.sum())) / n_neg)
    return offsets
