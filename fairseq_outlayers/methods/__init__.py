"""One folder a method: its registration (``register.py``: options, checks, build, export), its modules, its
criterions and file readers. ``fairseq_outlayers.models`` imports every ``methods/*/register.py``; nothing outside a
method's folder imports it, but the tools and the lab."""
