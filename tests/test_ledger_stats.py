"""The ledger's statistics against the slow forms they replace: sentence statistics in one pass over the corpus
equal sacreBLEU's sentence by sentence, and the vectorised bootstrap equals a resample-by-resample loop bit for
bit (the committed tables depend on every digit). Those run with the disk cache off; the cache's own tests
check that a kept entry is what the computation gives, and that a bad entry or folder is only computed again."""
import os
import random

import numpy as np
import pytest

from fairseq_outlayers.lab.ledger import stats, stats_cache
from fairseq_outlayers.tools.evaluation.scoring import bleu_metric

WORDS = "a man in a blue shirt is riding the bike ; two dogs play on grass , A Dog runs .".split()


def corpus(seed, n):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) for _ in range(n)]


@pytest.fixture(autouse=True)
def computed(request, monkeypatch):
    """The statistics computed here, not read from entries an earlier test kept (the cache's tests set their own
    folder)."""
    monkeypatch.setenv(stats_cache.ENV, stats_cache.OFF)
    stats._RESAMPLED.clear()


@pytest.mark.parametrize("lowercase", [False, True])
def test_sentence_stats_equal_sacrebleu_sentence_by_sentence(lowercase):
    refs = corpus(1, 60)
    for seed in (2, 3):  # the second system reuses the cached references
        hyps = corpus(seed, 60)
        got = stats.sentence_stats(hyps, refs, lowercase)
        bleu = bleu_metric(lowercase)
        want = []
        for h, r in zip(hyps, refs):
            s = bleu.sentence_score(h, [r])
            want.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
        assert got.dtype == np.float32 and got.shape == (60, 10)
        assert np.array_equal(got, np.array(want, dtype="float32"))
    assert stats.sentence_stats([], [], lowercase).shape == (0, 10)
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        stats.sentence_stats(["a", "b"], ["a"], lowercase)


def loop_bootstrap(system, baseline, n_samples, seed, level=0.95):
    """The bootstrap as first written: one resample at a time."""
    seeds = sorted(set(system) & set(baseline))
    n = len(system[seeds[0]])

    def difference(pick):
        return (sum(stats.bleu_from_stats(pick(system[s]).sum(0)) for s in seeds) / len(seeds)
                - sum(stats.bleu_from_stats(pick(baseline[s]).sum(0)) for s in seeds) / len(seeds))

    observed = difference(lambda a: a.astype(np.float64))
    idxs = np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)
    signed = np.array([difference(lambda a, idx=idx: a[idx]) for idx in idxs])
    diffs = np.abs(signed)
    p = (np.sum(diffs - diffs.mean() > abs(observed)).item() + 1) / (n_samples + 1)
    tail = 100.0 * (1.0 - level) / 2.0
    return observed, p, (float(np.percentile(signed, tail)), float(np.percentile(signed, 100.0 - tail)))


def test_vectorised_bootstrap_equals_the_loop_bit_for_bit():
    refs = corpus(10, 300)
    system = {s: stats.sentence_stats(corpus(20 + s, 300), refs, True) for s in (1, 2, 3)}
    baseline = {s: stats.sentence_stats(corpus(30 + s, 300), refs, True) for s in (1, 2, 4)}
    got = stats.paired_bootstrap_test(system, baseline, n_samples=250, seed=7)
    diff, p, interval = loop_bootstrap(system, baseline, 250, 7)
    assert got["seeds"] == [1, 2]
    assert (got["diff"], got["p"], got["interval"]) == (diff, p, interval)


def test_a_kept_entry_is_what_the_computation_gives_and_a_changed_input_is_another_entry(tmp_path, monkeypatch):
    monkeypatch.setenv(stats_cache.ENV, str(tmp_path))
    refs, hyps = corpus(40, 50), corpus(41, 50)
    fresh = stats._sentence_stats(hyps, refs, True)
    first = stats.sentence_stats(hyps, refs, True)
    assert len(os.listdir(tmp_path / "sentence-stats")) == 1
    again = stats.sentence_stats(hyps, refs, True)  # read back from the file
    assert first.dtype == again.dtype == np.float32 and np.array_equal(first, fresh) and np.array_equal(again, fresh)
    stats.sentence_stats(hyps, refs, False)  # cased: another entry
    stats.sentence_stats(hyps[:-1] + [hyps[-1] + " x"], refs, True)  # one word more: another entry
    assert len(os.listdir(tmp_path / "sentence-stats")) == 3
    resampled = stats.resampled_bleu(fresh, 50, 3)
    stats._RESAMPLED.clear()
    assert np.array_equal(stats.resampled_bleu(fresh, 50, 3), resampled)  # from the file, bit for bit
    assert np.array_equal(resampled, stats._resampled_bleu(fresh, 50, 3))
    assert len(os.listdir(tmp_path / "resampled-bleu")) == 1
    assert not [n for n in os.listdir(tmp_path / "sentence-stats") if n.endswith(".tmp")]


def test_a_bad_entry_or_an_unwritable_folder_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv(stats_cache.ENV, str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return np.arange(4.0)

    assert np.array_equal(stats_cache.memo("k", [b"a"], compute), np.arange(4.0)) and len(calls) == 1
    (entry,) = (tmp_path / "k").iterdir()
    entry.write_bytes(b"not an array")  # cut short or overwritten
    assert np.array_equal(stats_cache.memo("k", [b"a"], compute), np.arange(4.0)) and len(calls) == 2
    assert np.array_equal(stats_cache.memo("k", [b"a"], compute), np.arange(4.0)) and len(calls) == 2  # rewritten
    assert np.array_equal(stats_cache.memo("k", [b"a", b""], compute), np.arange(4.0)) and len(calls) == 3
    blocked = tmp_path / "file"
    blocked.write_text("x")  # a file where the folder should be: nothing can be kept
    monkeypatch.setenv(stats_cache.ENV, str(blocked))
    assert np.array_equal(stats_cache.memo("k", [b"a"], compute), np.arange(4.0)) and len(calls) == 4
    monkeypatch.setenv(stats_cache.ENV, stats_cache.OFF)
    assert stats_cache.folder() is None
    monkeypatch.delenv(stats_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert stats_cache.folder() == str(tmp_path / "xdg" / "fairseq_outlayers" / "ledger")
