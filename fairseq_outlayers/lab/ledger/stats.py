"""Statistics of the ledger tables: mean and sample standard deviation over seeds, and a paired bootstrap test.

``paired_bootstrap`` is sacreBLEU's paired bootstrap resampling (``sacrebleu --paired-bs``, after Koehn 2004 and
Moses' bootstrap-hypothesis-difference-significance.pl) extended to several seeds per system: each resample draws
the test sentences once (numpy ``default_rng(seed).choice``, as sacreBLEU does) and applies the same draw to every
seed of both systems; the statistic is the difference of the mean BLEU over the seeds both systems have. The
p-value is sacreBLEU's: the resampled absolute differences are centred on their mean, and p = (number above the
observed absolute difference + 1) / (resamples + 1). With one seed it is exactly sacreBLEU's own test (same seed,
same resamples: tests/test_ledger.py checks it against ``sacrebleu.significance.PairedTest``;
tests/test_ledger_stats.py checks the vectorised resampling against a loop over the resamples).
"""
import logging
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_outlayers.lab.ledger import stats_cache

#: sacreBLEU's defaults for the paired bootstrap (``--paired-bs-n 1000``, ``SACREBLEU_SEED=12345``)
N_SAMPLES = 1000
SEED = 12345


def mean_sd(values: Sequence[float]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (n - 1 in the denominator); the deviation is None below 2 values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def sentence_stats(hyps: List[str], refs: List[str], lowercase: bool) -> np.ndarray:
    """sacreBLEU's sufficient statistics per sentence: [hyp length, ref length, 4 matches, 4 totals] (kept on disk
    by ``stats_cache``)."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    parts = [b"lc" if lowercase else b"cased", "\n".join(hyps).encode(), "\n".join(refs).encode(),
             len(hyps).to_bytes(8, "little")]
    return stats_cache.memo("sentence-stats", parts, lambda: _sentence_stats(hyps, refs, lowercase))


def _sentence_stats(hyps: List[str], refs: List[str], lowercase: bool) -> np.ndarray:
    from fairseq_outlayers.tools.evaluation.scoring import bleu_metric

    bleu = bleu_metric(lowercase)
    rows = []
    logger = logging.getLogger("sacrebleu")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its advice on smoothing sentence scores: only the raw counts are used here
    try:
        # one pass over the corpus: the same per-sentence statistics as ``bleu.sentence_score(h, [r])`` gives
        # sentence by sentence ([hyp length, ref length, matches, totals]), without caching the references anew
        # for every sentence (tests/test_ledger.py checks the two agree)
        if hyps:
            rows = [list(row) for row in _reference_cache(bleu, lowercase, refs)._extract_corpus_statistics(
                list(hyps), None)]
    finally:
        logger.setLevel(level)
    return np.array(rows, dtype="float32").reshape(len(rows), -1) if rows else np.zeros((0, 10), dtype="float32")


_REFERENCES: Dict[Tuple[bool, Tuple[str, ...]], object] = {}


def _reference_cache(bleu, lowercase: bool, refs: Sequence[str]):
    """``bleu`` holding the references' n-grams (sacreBLEU's own reference cache), kept for the next system
    scored against the same references: every record of a table shares them."""
    key = (lowercase, tuple(refs))
    if key not in _REFERENCES:
        if len(_REFERENCES) >= 8:
            _REFERENCES.clear()
        bleu._ref_cache = bleu._cache_references([list(refs)])
        _REFERENCES[key] = bleu
    return _REFERENCES[key]


def bleu_from_stats(sums: np.ndarray) -> float:
    """Corpus BLEU (sacreBLEU's default exponential smoothing) from summed sentence statistics."""
    from sacrebleu.metrics import BLEU

    return BLEU.compute_bleu(correct=sums[2:6], total=sums[6:10], sys_len=int(sums[0]), ref_len=int(sums[1]),
                             smooth_method="exp").score


def paired_bootstrap(system: Dict[int, np.ndarray], baseline: Dict[int, np.ndarray], n_samples: int = N_SAMPLES,
                     seed: int = SEED) -> Tuple[float, float, List[int]]:
    """(observed difference of mean BLEU, p-value, the seeds used) over the seeds both systems have."""
    result = paired_bootstrap_test(system, baseline, n_samples, seed)
    return result["diff"], result["p"], result["seeds"]


def paired_bootstrap_test(system: Dict[int, np.ndarray], baseline: Dict[int, np.ndarray],
                          n_samples: int = N_SAMPLES, seed: int = SEED, level: float = 0.95) -> Dict:
    """``paired_bootstrap`` with the resampled differences kept: {"diff", "p", "seeds", "interval", "identical"},
    the interval being the percentile bootstrap interval of the difference (``level``, 95 % by default) from the
    same resamples as the p-value. Two systems whose sentence statistics are equal for every seed (the same
    translations) are ``identical``: difference 0, interval [0, 0] and p = 1, not the smallest p-value the
    resampling formula would give them."""
    seeds = sorted(set(system) & set(baseline))
    if not seeds:
        raise ValueError("the system and its baseline have no seed in common")
    if n_samples < 1:
        raise ValueError(f"the number of bootstrap resamples must be at least 1, not {n_samples}")
    n = len(system[seeds[0]])
    if any(len(system[s]) != n or len(baseline[s]) != n for s in seeds):
        raise ValueError("every run must have translated the same test sentences")
    if n == 0:
        raise ValueError("no test sentence to resample")
    if all(np.array_equal(system[s], baseline[s]) for s in seeds):
        # the same statistics sentence by sentence: every resample gives a difference of exactly 0, where the
        # formula below (sacreBLEU's, which counts resampled differences strictly above the observed one) would
        # read its smallest p-value, 1 / (resamples + 1). Two identical systems are reported as identical.
        return {"diff": 0.0, "p": 1.0, "seeds": seeds, "interval": (0.0, 0.0), "identical": True}

    # the observed scores from exact (float64) sums, as sacreBLEU scores a corpus; the resamples from float32 sums,
    # as its bootstrap does
    observed = (sum(bleu_from_stats(system[s].astype(np.float64).sum(0)) for s in seeds) / len(seeds)
                - sum(bleu_from_stats(baseline[s].astype(np.float64).sum(0)) for s in seeds) / len(seeds))
    sys_bleu = [resampled_bleu(system[s], n_samples, seed) for s in seeds]
    base_bleu = [resampled_bleu(baseline[s], n_samples, seed) for s in seeds]
    # per resample: the mean over the seeds of each system, summed seed after seed (as ``sum`` over floats does)
    signed = sum(sys_bleu) / len(seeds) - sum(base_bleu) / len(seeds)
    diffs = np.abs(signed)
    centred = diffs - diffs.mean()
    p = (np.sum(centred > abs(observed)).item() + 1) / (n_samples + 1)
    tail = 100.0 * (1.0 - level) / 2.0
    interval = (float(np.percentile(signed, tail)), float(np.percentile(signed, 100.0 - tail)))
    return {"diff": observed, "p": p, "seeds": seeds, "interval": interval, "identical": False}


#: the resampled BLEU scores of a run (its sentence statistics, the resample count and seed), kept for the next
#: comparison of the same run in this process (a table compares one baseline with many systems) and on disk
#: (``stats_cache``) for the next render
_RESAMPLED: Dict[Tuple[bytes, str, Tuple[int, ...], int, int], np.ndarray] = {}
_DRAWS: Dict[Tuple[int, int, int], np.ndarray] = {}


def resampled_bleu(stats: np.ndarray, n_samples: int = N_SAMPLES, seed: int = SEED) -> np.ndarray:
    """The corpus BLEU of each bootstrap resample of one run's sentence statistics (float64, ``n_samples``). The
    draw of resample k is the same for every run of ``n`` sentences (numpy ``default_rng(seed).choice``, as
    sacreBLEU draws), and its statistics are float32 sums in the order ``stats[idx].sum(0)`` sums (row after row),
    as sacreBLEU's bootstrap sums them."""
    key = (stats.tobytes(), stats.dtype.str, stats.shape, n_samples, seed)
    if key not in _RESAMPLED:
        if len(_RESAMPLED) >= 4096:
            _RESAMPLED.clear()
        parts = [key[0], key[1].encode(), repr(key[2:]).encode()]
        _RESAMPLED[key] = stats_cache.memo("resampled-bleu", parts, lambda: _resampled_bleu(stats, n_samples, seed))
    return _RESAMPLED[key]


def _resampled_bleu(stats: np.ndarray, n_samples: int, seed: int) -> np.ndarray:
    n = len(stats)
    if (n, n_samples, seed) not in _DRAWS:
        _DRAWS.clear()  # one corpus at a time, as a table reads it
        _DRAWS[(n, n_samples, seed)] = np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)
    idxs = _DRAWS[(n, n_samples, seed)]
    block = max(1, (10_000_000 // max(1, n * 10)))  # about 40 MB of resampled statistics at a time
    sums = np.concatenate([stats[idxs[i:i + block]].sum(1) for i in range(0, n_samples, block)])
    return np.array([bleu_from_stats(row) for row in sums], dtype=np.float64)


def welch_t_test(system: Sequence[float], baseline: Sequence[float]) -> Optional[Dict]:
    """Welch's two-sided t-test of the per-seed scores of two rows: {"t", "df", "p"}, or None below two seeds a side.

    The paired bootstrap resamples test sentences for fixed trained models, so it leaves out how much a score moves
    from one training seed to the next; this test is its complement at the level of seeds (each seed one
    observation; unequal variances; Welch-Satterthwaite degrees of freedom). With three seeds a side it has little
    power: a p-value above 0.05 here says the seeds are too few or too spread to separate the rows."""
    from scipy.special import stdtr

    welch = _welch(system, baseline)
    if welch is None:
        return None
    difference, error, df = welch
    t = difference / error
    return {"t": t, "df": df, "p": float(2.0 * stdtr(df, -abs(t)))}


def welch_interval(system: Sequence[float], baseline: Sequence[float],
                   level: float = 0.95) -> Optional[Tuple[float, float]]:
    """The seed-level interval of the difference of the two rows' mean scores: Welch's ``level`` confidence interval
    (difference of the seed means ± the t quantile at the Welch-Satterthwaite degrees of freedom times the standard
    error), or None below two seeds a side or without spread. Unlike the paired bootstrap's interval, which
    resamples test sentences of fixed trained models, it counts how much a score moves from one training seed to
    the next."""
    from scipy.stats import t as student_t

    welch = _welch(system, baseline)
    if welch is None:
        return None
    difference, error, df = welch
    half = float(student_t.ppf(0.5 + level / 2.0, df)) * error
    return (difference - half, difference + half)


def _welch(system: Sequence[float], baseline: Sequence[float]) -> Optional[Tuple[float, float, float]]:
    """(difference of the seed means, its standard error, Welch-Satterthwaite degrees of freedom), or None below
    two seeds a side or without spread."""
    if len(system) < 2 or len(baseline) < 2:
        return None
    (m1, s1), (m2, s2) = mean_sd(system), mean_sd(baseline)
    v1, v2 = s1 * s1 / len(system), s2 * s2 / len(baseline)
    if v1 + v2 == 0.0:
        return None
    df = (v1 + v2) ** 2 / (v1 * v1 / (len(system) - 1) + v2 * v2 / (len(baseline) - 1))
    return m1 - m2, math.sqrt(v1 + v2), df


def seeds_for_power(diff: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                    most: int = 10000) -> Optional[int]:
    """Seeds per row a two-sided two-sample t-test at level ``alpha`` needs to find a true difference ``diff``
    between two rows whose scores spread with standard deviation ``sd`` from seed to seed, with probability
    ``power``; None when ``most`` seeds would not do, or when there is no spread to measure.

    Exact (noncentral t with 2n - 2 degrees of freedom and noncentrality diff / sd * sqrt(n / 2)), equal seeds a
    side; Cohen's (1988) table gives 64 seeds a side for diff / sd = 0.5, 26 for 0.8. It says how far a
    three-seed comparison can see: three seeds a row find a difference four times in five only when it is
    above 3.071 seed standard deviations (2.15 BLEU at a spread of 0.7)."""
    from scipy.stats import nct, t as student_t

    if sd <= 0.0 or diff == 0.0:
        return None
    effect = abs(diff) / sd

    def achieved(n: int) -> float:
        df = 2 * n - 2
        critical = student_t.ppf(1.0 - alpha / 2.0, df)
        shift = effect * math.sqrt(n / 2.0)
        return float(nct.sf(critical, df, shift) + nct.cdf(-critical, df, shift))

    low, high = 2, 2
    while achieved(high) < power:
        if high >= most:
            return None
        low, high = high + 1, min(2 * high, most)
    while low < high:
        middle = (low + high) // 2
        if achieved(middle) >= power:
            high = middle
        else:
            low = middle + 1
    return high


#: the verdict rule's level for the seed-level test
VERDICT_ALPHA = 0.05


def target_verdict(interval: Tuple[float, float], system: Sequence[float], baseline: Sequence[float],
                   target: float, alpha: float = VERDICT_ALPHA) -> Tuple[str, str]:
    """The verdict rule on "system − baseline ≥ target": ("above" | "below" | "inconclusive", the reason).

    "above" when the paired bootstrap's 95 % interval of the difference lies at or above the target and the seeds
    back it: every seed of the system is more than ``target`` above every seed of the baseline, or Welch's test of
    the system's seeds shifted by ``target`` against the baseline's finds the difference above the target at
    ``alpha``. "below" is the mirror image (the interval below the target, the seeds below it the same way).
    Anything else is "inconclusive": the interval holds the target, or the seeds do not back the interval."""
    low, high = interval
    if low >= target:
        side = "above"
    elif high < target:
        side = "below"
    else:
        return "inconclusive", f"the interval holds the target {target:+.2f}"
    sign = 1.0 if side == "above" else -1.0
    if not system or not baseline:
        return "inconclusive", "no seed scores"
    apart = (min(system) - max(baseline) > target) if side == "above" else (max(system) - min(baseline) < target)
    if apart:
        return side, f"the interval and every seed pair lie {side} the target {target:+.2f}"
    welch = welch_t_test([v - target for v in system], baseline)
    if welch is not None and welch["p"] < alpha and sign * welch["t"] > 0:
        return side, f"the interval lies {side} the target {target:+.2f}; seeds p = {welch['p']:.3f}"
    seeds_p = "fewer than two seeds a side" if welch is None else f"seeds p = {welch['p']:.3f}"
    return "inconclusive", (f"the interval lies {side} the target {target:+.2f}, the seeds do not back it "
                            f"(seed pairs overlap it, {seeds_p})")


def p_text(p: float, n_samples: int = N_SAMPLES) -> str:
    """A paired-bootstrap p-value as the pages write it: "0.012", or "≤ 0.001" at the test's floor. No resample
    above the observed difference gives p = 1 / (resamples + 1), the smallest value the test can give: the true p
    may be lower, so the floor is written as a bound."""
    floor = 1.0 / (n_samples + 1)
    return f"≤ {max(floor, 0.001):.3f}" if p <= floor * (1 + 1e-9) else f"{p:.3f}"


def p_is(p: float, n_samples: int = N_SAMPLES) -> str:
    """``p_text`` after "p": "p = 0.012" or "p ≤ 0.001"."""
    text = p_text(p, n_samples)
    return f"p {text}" if text.startswith("≤") else f"p = {text}"
