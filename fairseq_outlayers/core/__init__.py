"""The kind-based core every method plugs into: the two registries, their ``Option`` and the seams' options
(``registry.py``), the model build and the seams' checks (``build.py``), the output-layer base classes
(``output_layer.py``), fingerprints kept in checkpoints, safe checkpoint loading and fairseq 0.12's workarounds.
No module here names a method."""
