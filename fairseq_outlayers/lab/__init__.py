"""The experiment lab: the results ledger (``python -m fairseq_outlayers.lab.ledger``), the demo table
(``python -m fairseq_outlayers.lab.compare``) and the helpers that run fairseq-train for them.

The lab imports the plugin and the tools; neither imports the lab.
"""
