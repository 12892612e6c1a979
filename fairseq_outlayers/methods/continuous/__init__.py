"""Continuous outputs (Kumar & Tsvetkov 2019): ``--output-layer continuous``, its losses (``criterions.py``), the
vMF maths, nearest-neighbour search and the target-vector reader."""
