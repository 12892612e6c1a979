#!/usr/bin/env python
"""Is one system better than another over several seeds? sacreBLEU's paired bootstrap resampling, extended to
seeds as the results ledger does it (``fairseq_outlayers.lab.ledger.stats.paired_bootstrap``: one draw of test
sentences per resample, applied to every seed of both systems; the statistic is the difference of the mean BLEU).

    python scripts/paired_bootstrap.py --ref work/multi30k/raw/test_2016_flickr.en --lowercase \\
        --baseline max-margin=work/vmf-sweep/max-margin.seed{1,2,3}/test.beam1.hyp \\
        --system released=work/vmf-sweep/released.seed{1,2,3}/test.beam1.hyp

Each ``NAME=FILE ...`` lists one hypothesis file per seed, in seed order (both systems in the same order; the
shorter list decides how many seeds are paired). Hypotheses are tokenised text as ``fairseq-generate`` prints it
after ``--remove-bpe`` (what ``compare`` and ``vmf_sweep.py`` write): they are detokenised with sacremoses, as
those tools score them (``fairseq_outlayers.tools.evaluation.scoring``), and scored with sacreBLEU against the raw
references (``--lowercase`` when the data was lowercased). One line per system: BLEU per seed, mean, the
difference to the baseline, its 95 % percentile interval and p-value (1,000 resamples, sacreBLEU's seed), and
with two or more seeds a side Welch's t-test over the per-seed scores (what ``ledger compare`` prints).
``--json FILE`` writes the same figures. Two systems with the same translations are reported as identical
(p = 1), not with the smallest p-value the resampling formula would give them.
"""
import argparse
import json
import sys


def fail(message):
    sys.exit(f"paired_bootstrap.py: error: {message}")


def read_lines(path, what):
    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.tools.evaluation.scoring import read_lines as read

    try:
        return read(path, what)
    except OutlayersConfigError as e:
        fail(e)


def parse_system(spec, what):
    """``NAME=FILE [FILE ...]`` (files also separated by commas; ``NAME=`` may repeat, as brace expansion writes it)."""
    name, sep, files = spec[0].partition("=")
    rest = [part[len(name) + 1:] if part.startswith(name + "=") else part for part in spec[1:]]  # NAME=a{1,2}
    paths = [p for part in [files, *rest] for p in part.split(",") if p]
    if not sep or not name or not paths:
        fail(f"{what} {' '.join(spec)!r}: expected NAME=FILE [FILE ...]")
    return name, paths


def system_stats(paths, refs, lang, lowercase):
    """Per seed: (sentence statistics, corpus BLEU)."""
    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.tools.evaluation.scoring import check_same_length, detokenise
    from fairseq_outlayers.lab.ledger.stats import bleu_from_stats, sentence_stats

    out = []
    for path in paths:
        hyps = read_lines(path, "hypotheses")
        try:
            check_same_length(path, hyps, "hypotheses", refs, "the references have")
        except OutlayersConfigError as e:
            fail(e)
        hyps = detokenise(hyps, lang)
        stats = sentence_stats(hyps, refs, lowercase)
        out.append((stats, bleu_from_stats(stats.astype("float64").sum(0))))
    return out


def main(argv=None):
    from fairseq_outlayers import value_checks

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, help="raw reference text, one sentence per line")
    p.add_argument("--lang", default="en", help="target language for detokenisation (default: en)")
    p.add_argument("--lowercase", action="store_true", help="lowercase the references (lowercased training data)")
    p.add_argument("--baseline", required=True, nargs="+", metavar="NAME=FILE", help="one file per seed")
    p.add_argument("--system", required=True, nargs="+", action="append", metavar="NAME=FILE",
                   help="one file per seed; repeat --system for more systems")
    p.add_argument("--samples", type=value_checks.POSITIVE_INT, default=1000, help="bootstrap resamples (default: 1000, as "
                   "sacreBLEU)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    args = p.parse_args(argv)
    base_name, base_paths = parse_system(args.baseline, "--baseline")
    systems = [parse_system(spec, "--system") for spec in args.system]
    if args.json:
        from fairseq_outlayers.errors import OutlayersConfigError
        from fairseq_outlayers.outfiles import check_output_path

        try:  # every file read: the reference and every hypothesis file
            check_output_path(args.json, args.force, option="--json",
                              inputs=[args.ref, *base_paths, *(f for _, paths in systems for f in paths)])
        except OutlayersConfigError as e:
            fail(e)

    from fairseq_outlayers.lab.ledger.stats import mean_sd, p_text, paired_bootstrap_test, welch_t_test

    refs = read_lines(args.ref, "references")
    if args.lowercase:
        refs = [r.lower() for r in refs]
    base = system_stats(base_paths, refs, args.lang, args.lowercase)
    rows = []
    mean, sd = mean_sd([b for _, b in base])
    rows.append({"name": base_name, "bleu": [b for _, b in base], "mean": mean, "sd": sd})
    for name, paths in systems:
        sys_ = system_stats(paths, refs, args.lang, args.lowercase)
        n = min(len(sys_), len(base))
        test = paired_bootstrap_test({i: sys_[i][0] for i in range(n)}, {i: base[i][0] for i in range(n)},
                                     n_samples=args.samples)
        mean, sd = mean_sd([b for _, b in sys_])
        welch = welch_t_test([b for _, b in sys_], [b for _, b in base])
        rows.append({"name": name, "bleu": [b for _, b in sys_], "mean": mean, "sd": sd, "seeds_paired": n,
                     "difference": test["diff"], "interval": list(test["interval"]), "p": test["p"],
                     "identical": test["identical"],
                     "p_seeds": None if welch is None else welch["p"]})

    def fmt(v):
        return "—" if v is None else f"{v:.2f}"

    print(f"| system | BLEU per seed | mean ± sd | − {base_name} (paired seeds) | 95 % interval | p "
          f"| p (seeds: Welch t) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        per_seed = " / ".join(f"{b:.2f}" for b in r["bleu"])
        if "difference" in r:
            low, high = r["interval"]
            p_seeds = "—" if r["p_seeds"] is None else f"{r['p_seeds']:.3f}"
            p_value = "1.000 (identical translations)" if r["identical"] else p_text(r["p"], args.samples)
            print(f"| {r['name']} | {per_seed} | {fmt(r['mean'])} ± {fmt(r['sd'])} | {r['difference']:+.2f} "
                  f"({r['seeds_paired']}) | [{low:+.2f}, {high:+.2f}] | {p_value} | {p_seeds} |")
        else:
            print(f"| {r['name']} (baseline) | {per_seed} | {fmt(r['mean'])} ± {fmt(r['sd'])} | | | | |")
    if args.json:
        from fairseq_outlayers.outfiles import write_text

        write_text(args.json, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
