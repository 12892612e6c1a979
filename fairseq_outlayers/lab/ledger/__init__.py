"""The results ledger: converged runs, one small committed record per row and seed, tables from the records alone.

    python -m fairseq_outlayers.lab.ledger run --rows "configs/ledger/multi30k/*.args" --seeds 1 2 3
    python -m fairseq_outlayers.lab.ledger render

* ``rows``: ledger row files (a description comment, ``# key: value`` directives such as ``# baseline: NAME``,
  then one line of fairseq-train options) and the converged-protocol command built from them;
* ``records``: the record of one finished run (JSON) and its test hypotheses, written atomically;
* ``runner``: train one row and seed to convergence, evaluate the best checkpoint, write the record;
* ``resume``: resume a cut-off run with fairseq's early-stopping count carried over from its log;
* ``stats``: mean, sample standard deviation and the paired bootstrap test over seeds;
* ``analysis``: the tables' numbers from the records (rows by seed, two rows compared, how the runs stopped);
* ``render``: the Markdown tables, regenerated bit for bit from the records.

The protocol is described in docs/results.md ("Converged protocol").
"""
