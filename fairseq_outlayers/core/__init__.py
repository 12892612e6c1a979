"""The kind-based core every method plugs into: the two registries and their ``Option`` (``registry.py``), the
seams' options (``options.py``) and checks (``checks.py``), the model build (``build.py``), the output-layer base
classes (``output_layer.py``), fingerprints kept in checkpoints, safe checkpoint loading and fairseq 0.12's
workarounds. No module here names a method."""
