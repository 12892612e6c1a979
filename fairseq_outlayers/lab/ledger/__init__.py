"""The results ledger: converged runs, one small committed record per row and seed, tables from the records alone.

    python -m fairseq_outlayers.lab.ledger run --rows "configs/ledger/multi30k-transformer-tiny/*.args" --seeds 1 2 3
    python -m fairseq_outlayers.lab.ledger render

* ``rows``: ledger row files (a description comment, ``# key: value`` directives such as ``# baseline: NAME``,
  then one line of fairseq-train options) and the converged-protocol command built from them;
* ``records`` and ``schema``: the record of one finished run (JSON) and its test hypotheses, written atomically,
  and the checks a record must pass;
* ``runner``: train one row and seed to convergence, evaluate the best checkpoint, write the record;
* ``patience``: resume a cut-off run with fairseq's early-stopping count carried over from its log;
* ``steps``: a step a row applies to its trained checkpoint before the test (``# after:``);
* ``status``: where each row and seed stands (``ledger status``);
* ``stats``: mean, sample standard deviation, the paired bootstrap test, Welch's test and the verdict rule;
  ``stats_cache`` keeps its sentence statistics and resamples on disk between renders;
* ``analysis``: the tables' numbers from the records (rows by seed, two rows compared, how the runs stopped);
* ``claims``: the claims of ``docs/results/claims.json`` and their verdicts; ``evidence``: the README's table;
* ``render`` and ``plots``: the Markdown page and its SVG plots, regenerated bit for bit from the records;
* ``lookups``: one-line answers outside the page (``ledger compare``).

The protocol is described in docs/reproducing.md ("The results ledger (converged runs)").
"""
