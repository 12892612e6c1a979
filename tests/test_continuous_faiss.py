"""Decoding continuous outputs over the K best words: ``--continuous-search exact|faiss``, ``--continuous-topk K``."""
import copy
import gc
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.continuous.continuous_output import _FAISS_INDEXES, ContinuousOutput
from fairseq_outlayers.methods.continuous.nn_search import candidate_log_probs
from harness import TINY_TRANSFORMER, generate, train

faiss = pytest.importorskip("faiss")

V, M, D, EOS = 700, 16, 12, 2


def layer_pair(search="faiss", topk=5, score_scale=None, seed=0):
    """A K-best layer and the dense (default) layer with the same weights, on a random unit table with masked rows
    (padding, <s>, a block of words without a vector)."""
    g = torch.Generator().manual_seed(seed)
    table = F.normalize(torch.randn(V, M, generator=g), dim=-1)
    table[1] = 0
    decodable = torch.ones(V, dtype=torch.bool)
    decodable[[0, 1]] = False
    decodable[100:160] = False
    k_best = ContinuousOutput(table, decodable, D, search=search, topk=topk, eos=EOS, score_scale=score_scale)
    dense = ContinuousOutput(table, decodable, D, eos=EOS, score_scale=score_scale)
    dense.load_state_dict(k_best.state_dict())
    return k_best, dense


@pytest.mark.parametrize("score_scale", [None, 7.0])
def test_faiss_top_k_equals_torch_topk_of_the_exact_scores(score_scale):
    layer, dense = layer_pair(score_scale=score_scale)
    e_hat = torch.randn(40, M, generator=torch.Generator().manual_seed(1)) * 3
    query = e_hat.double() if score_scale is None else score_scale * F.normalize(e_hat.double(), dim=-1)
    exact = (query @ dense.target_table.double().T).masked_fill(~dense.decodable, -math.inf)  # float64
    for k in (1, 5, 37):
        scores, ids = layer.top_candidates(e_hat, k)
        ref = torch.topk(exact, k, dim=-1)
        assert torch.equal(ids, ref.indices)
        assert torch.allclose(scores.double(), ref.values, rtol=1e-5, atol=1e-5)
        t_scores, t_ids = ContinuousOutput.top_candidates(dense, e_hat, k)  # the chunked torch search
        assert torch.equal(t_ids, ref.indices)
    assert not layer.decodable[ids].eq(False).any()  # masked rows are never candidates


def test_log_probs_over_the_k_best_and_end_of_sentence():
    layer, dense = layer_pair(topk=5)
    exact_k, _ = layer_pair(search="exact", topk=5)
    h = torch.randn(3, 4, D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        e_hat = layer(h)
        lp = layer.get_normalized_probs((e_hat,), log_probs=True)
        full = dense.get_normalized_probs((e_hat,), log_probs=True)
        # the same K-best log-probabilities from the chunked torch search
        assert torch.allclose(exact_k.get_normalized_probs((e_hat,), True), lp, atol=1e-5)
        probs = layer.get_normalized_probs((e_hat,), log_probs=False)
    assert lp.shape == full.shape == (3, 4, V) and lp.dtype == torch.float32
    scores = (e_hat.double() @ dense.target_table.double().T).masked_fill(~dense.decodable, -math.inf).view(-1, V)
    for row, out in zip(scores, lp.view(-1, V)):
        keep = set(torch.topk(row, 5).indices.tolist()) | {EOS}
        finite = set(torch.nonzero(torch.isfinite(out)).squeeze(1).tolist())
        assert finite == keep
        idx = torch.tensor(sorted(keep))
        ref = torch.log_softmax(row[idx], dim=0)  # renormalised over the K best and </s>, float64
        assert torch.allclose(out[idx].double(), ref, atol=1e-5)
    assert torch.equal(lp.argmax(-1), full.argmax(-1))  # greedy picks the same word
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4), atol=1e-5)
    # K at least the vocabulary: exactly the dense log-probabilities, with either search
    for search in ("exact", "faiss"):
        every, _ = layer_pair(search=search, topk=V + 5)
        with torch.no_grad():
            assert torch.allclose(every.get_normalized_probs((e_hat,), True), full, atol=1e-5)
    # </s> among the K best: counted once (probabilities still sum to 1), with its own score
    ids = torch.tensor([[EOS, 7, 9]])
    out = candidate_log_probs(torch.tensor([[2.0, 1.0, 0.5]]), ids, 12, torch.tensor([[-math.inf]]),
                              torch.tensor([[EOS]]))
    assert torch.allclose(out[0, [EOS, 7, 9]], torch.log_softmax(torch.tensor([2.0, 1.0, 0.5]), 0))
    assert torch.isinf(out[0, [0, 1, 3, 8, 10, 11]]).all()


def test_faiss_index_is_built_once_and_follows_the_table():
    layer, _ = layer_pair()
    q = torch.randn(2, M)
    first = layer.faiss_index()
    layer.top_candidates(q, 3)
    assert layer.faiss_index() is first and len(first) == V - 62
    copy.deepcopy(layer)  # a model with a built index still deep-copies (the index lives outside it)
    other, _ = layer_pair(seed=5)
    layer.load_state_dict(other.state_dict())  # a checkpoint loaded in place: new table, new index
    assert layer.faiss_index() is not first
    assert torch.equal(layer.top_candidates(q, 3)[1], torch.topk(other.scores(q), 3).indices)
    gc.collect()  # indexes of earlier tests' models that are garbage already: not counted
    n = len(_FAISS_INDEXES)
    del layer, first
    gc.collect()
    assert len(_FAISS_INDEXES) == n - 1  # the index goes away with its model


def test_faiss_settings_are_local_to_a_search():
    """faiss's thread count and BLAS threshold are process-wide: a search sets them for itself only and gives the
    caller's values back, also when the search fails."""
    from fairseq_outlayers.methods.continuous.nn_search import BLAS_MIN_QUERIES, FAISS_THREADS, FaissInnerProductIndex

    index = FaissInnerProductIndex(torch.randn(50, M))
    before = faiss.omp_get_max_threads(), faiss.cvar.distance_compute_blas_threshold
    faiss.omp_set_num_threads(FAISS_THREADS + 2)
    faiss.cvar.distance_compute_blas_threshold = BLAS_MIN_QUERIES + 1000
    seen = []
    search = index.index.search

    def recording_search(q, k):
        seen.append((faiss.omp_get_max_threads(), faiss.cvar.distance_compute_blas_threshold))
        return search(q, k)

    try:
        index.index.search = recording_search
        index.search(torch.randn(3, M), 4)
        assert seen == [(FAISS_THREADS, BLAS_MIN_QUERIES)]  # the search's own settings while it runs ...
        assert faiss.omp_get_max_threads() == FAISS_THREADS + 2  # ... and the caller's afterwards
        assert faiss.cvar.distance_compute_blas_threshold == BLAS_MIN_QUERIES + 1000

        def failing_search(q, k):
            raise RuntimeError("search failed")

        index.index.search = failing_search
        with pytest.raises(RuntimeError, match="search failed"):
            index.search(torch.randn(3, M), 4)
        assert faiss.omp_get_max_threads() == FAISS_THREADS + 2
        assert faiss.cvar.distance_compute_blas_threshold == BLAS_MIN_QUERIES + 1000
    finally:
        faiss.omp_set_num_threads(before[0])
        faiss.cvar.distance_compute_blas_threshold = before[1]


def test_option_errors(tiny_bin, monkeypatch):
    from harness import build_model

    base = TINY_TRANSFORMER + ["--output-layer", "continuous", "--criterion", "vmf_nll", "--target-vectors",
                               _vectors(tiny_bin)]
    with pytest.raises(OutlayersConfigError, match="--continuous-topk must be a positive integer, got 0"):
        build_model(tiny_bin, base + ["--continuous-topk", "0"])
    monkeypatch.setitem(sys.modules, "faiss", None)  # faiss not installed
    with pytest.raises(OutlayersConfigError, match="needs the faiss package: pip install faiss-cpu"):
        build_model(tiny_bin, base + ["--continuous-search", "faiss"])


_VEC = {}


def _vectors(tiny_bin):
    """Random m = 16 vectors for every target word of the tiny corpus (as tests/test_continuous_output.py)."""
    if tiny_bin not in _VEC:
        d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
        words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
        rng = np.random.default_rng(0)
        path = os.path.join(os.path.dirname(tiny_bin), "faiss-test-en.vec")
        with open(path, "w", encoding="utf-8") as f:
            for w in words:
                f.write(w + " " + " ".join(f"{x:.6f}" for x in rng.standard_normal(M)) + "\n")
        _VEC[tiny_bin] = path
    return _VEC[tiny_bin]


def test_generate_greedy_with_faiss_equals_exact(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "continuous", "--target-vectors", _vectors(tiny_bin),
                                             "--criterion", "vmf_nll", "--lr", "0.005"], max_update=30)
    ckpt = os.path.join(save, "checkpoint_last.pt")
    bounded = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "10"]
    _, exact = generate(tiny_bin, ckpt, bounded)
    proc, fast = generate(tiny_bin, ckpt, bounded + ["--model-overrides",
                                                     "{'continuous_search': 'faiss', 'continuous_topk': 3}"])
    assert len(exact) == 24 and fast == exact  # sentence for sentence
    assert any(len(h.split()) > 1 for h in exact.values())
    assert "faiss.loader" not in proc.stderr  # no loader chatter in fairseq's log
    _, beam = generate(tiny_bin, ckpt, ["--beam", "4", "--model-overrides", "{'continuous_search': 'faiss'}"])
    assert len(beam) == 24
