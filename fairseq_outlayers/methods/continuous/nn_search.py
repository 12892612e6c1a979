"""Nearest-neighbour search of continuous outputs (Kumar & Tsvetkov 2019, section 3): the best words for a
predicted vector ê by ``êᵀe_j`` over the unit target table, exactly (a chunked torch product with a running top-k)
or with a faiss inner-product index, and the log-probabilities renormalised over the K best words.
"""
import contextlib
import logging
import math
from typing import Optional

import torch
import torch.nn.functional as F


# ------------------------------------------------------------------------------------------------------------
# exact search over the whole table
# ------------------------------------------------------------------------------------------------------------

@torch.no_grad()
def nearest_neighbours(e_hat: torch.Tensor, table: torch.Tensor, k: int = 1,
                       candidates: Optional[torch.Tensor] = None, chunk_size: int = 16384):
    """Top-k words by ``êᵀe_j`` (= largest cosine = highest vMF density = smallest ‖ê - e_j‖ for unit e_j), by
    a chunked matrix product with a running top-k, so a 300k-word table needs only N x chunk_size scores.
    Returns (scores (N, k), ids (N, k))."""
    query = e_hat.to(table.dtype)
    best_val = best_idx = None
    for start in range(0, table.size(0), chunk_size):
        scores = F.linear(query, table[start:start + chunk_size]).float()
        if candidates is not None:
            scores.masked_fill_(~candidates[start:start + chunk_size].unsqueeze(0), -math.inf)
        val, idx = scores.topk(min(k, scores.size(-1)), dim=-1)
        idx = idx + start
        if best_val is not None:
            val, order = torch.cat([best_val, val], -1).topk(k, dim=-1)
            idx = torch.cat([best_idx, idx], -1).gather(-1, order)
        best_val, best_idx = val, idx
    return best_val, best_idx



# ------------------------------------------------------------------------------------------------------------
# decoding over the K best words only (optionally found by faiss)
# ------------------------------------------------------------------------------------------------------------

def import_faiss():
    """The faiss module, or a one-line error that says how to install it."""

    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # it logs every instruction set it tries
    try:
        import faiss
    except ImportError:
        from fairseq_outlayers.errors import OutlayersConfigError

        raise OutlayersConfigError("--continuous-search faiss needs the faiss package: pip install faiss-cpu (or "
                                   "pip install 'fairseq_outlayers[faiss]'), or use --continuous-search exact"
                                   ) from None
    return faiss


#: faiss searches this many queries or more with a BLAS matrix product (faiss's own default before 1.7.3)
BLAS_MIN_QUERIES = 20
#: OpenMP threads of a faiss search. faiss-cpu brings its own OpenMP runtime; its threads and torch's (which
#: spin for a while after each torch operation) oversubscribe the cores: measured on 2 cores, a 300k-word
#: search took 3.6 s with 2 faiss threads and 0.18 s with 1.
FAISS_THREADS = 1


@contextlib.contextmanager
def search_settings(faiss):
    """faiss's settings for one search of this package, restored afterwards: faiss keeps them process-wide (its
    OpenMP thread count and BLAS threshold are globals), so setting them for good would change every other faiss
    user in the process. Recent faiss scores fewer than 128,000 queries at a time without BLAS, which is 10x
    slower than the matrix product on CPUs where its generic build is loaded; a decoding step has a few hundred
    queries, and faiss's OpenMP threads (its own runtime, not torch's) fight torch's idle-spinning ones: one
    thread."""
    threshold, threads = faiss.cvar.distance_compute_blas_threshold, faiss.omp_get_max_threads()
    faiss.cvar.distance_compute_blas_threshold = min(threshold, BLAS_MIN_QUERIES)
    faiss.omp_set_num_threads(FAISS_THREADS)
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = threshold
        faiss.omp_set_num_threads(threads)


class FaissInnerProductIndex:
    """Exact maximum-inner-product search with faiss (``IndexFlatIP``, brute force) over the rows of a table
    that ``candidates`` allows: the same top-k as ``nearest_neighbours``, computed by faiss's blocked BLAS
    search instead of torch. The index holds a float32 copy of those rows in host memory (faiss-cpu); queries
    on another device are copied to the host and the results back. faiss's process-wide settings change only
    while one of its searches runs (``search_settings``)."""

    def __init__(self, table: torch.Tensor, candidates: Optional[torch.Tensor] = None):
        faiss = import_faiss()
        if candidates is None:
            ids = torch.arange(table.size(0), device=table.device)
        else:
            ids = candidates.nonzero().squeeze(1)
        vectors = table.detach().index_select(0, ids).float().cpu().contiguous().numpy()
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)
        self.ids = ids.cpu()

    def __len__(self):
        return self.ids.numel()

    @torch.no_grad()
    def search(self, query: torch.Tensor, k: int):
        """(scores (N, k) float32, ids (N, k) long table rows), best first, on the query's device."""
        k = min(k, len(self))
        q = query.detach().float().cpu().contiguous().numpy()
        with search_settings(import_faiss()):
            scores, pos = self.index.search(q, k)
        ids = self.ids[torch.from_numpy(pos).long()]
        return torch.from_numpy(scores).to(query.device), ids.to(query.device)


def candidate_log_probs(scores: torch.Tensor, ids: torch.Tensor, num_words: int,
                        extra_scores: Optional[torch.Tensor] = None, extra_ids: Optional[torch.Tensor] = None
                        ) -> torch.Tensor:
    """(N, num_words) log-probabilities renormalised over each row's candidates and -inf elsewhere: the
    log-softmax of the candidate scores (N, K) scattered to their ids (N, K). ``extra_scores``/``extra_ids``
    (N, 1) add one more candidate per row (e.g. end of sentence); where that id is already among the K it
    must be given a score of -inf (it is then neither counted twice nor written over the candidate's value)."""
    if extra_scores is not None:
        scores = torch.cat([extra_scores.float(), scores.float()], dim=-1)
        ids = torch.cat([extra_ids, ids], dim=-1)
    logp = F.log_softmax(scores.float(), dim=-1)
    out = torch.full((scores.size(0), num_words), -math.inf, dtype=torch.float32, device=scores.device)
    if extra_scores is not None:  # the extra column first, so that a duplicate id takes the candidate's value
        out.scatter_(1, ids[:, :1], logp[:, :1])
        ids, logp = ids[:, 1:], logp[:, 1:]
    return out.scatter_(1, ids, logp)

