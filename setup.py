"""fairseq_outlayers: output-layer and embedding parametrisations for fairseq NMT.

Install through ``make install`` (or ``bash scripts/install.sh``): torch and fairseq-fixed must be installed
in a particular order and fastBPE needs a build without isolation, which plain ``pip install .`` cannot express.
"""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "fairseq_outlayers", "version.py"), encoding="utf-8") as f:
    VERSION = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)

SYSTRAN_ALIGN = 'systran-align; python_version < "3.12"'

setup(
    name="fairseq_outlayers",
    version=VERSION,
    description="Output layers for fairseq NMT: joint input-output, shared-private, fixed random and continuous outputs",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # the Pythons scripts/install.sh accepts (PY_SUPPORTED; a test checks that the two agree)
    python_requires=">=3.10,<3.14",
    packages=find_packages(include=["fairseq_outlayers", "fairseq_outlayers.*"]),
    install_requires=[
        # torch and fairseq are not listed with open ranges on purpose: scripts/install.sh pins torch==2.13.0
        # first (an open range would pull a multi-GB CUDA build on CPU machines) and then fairseq-fixed.
        # The floor is install.sh's TORCH_MIN (a CUDA build from 2.1 on is kept). One feature needs more:
        # --criterion fused_cross_entropy's torch path uses F.linear_cross_entropy (torch 2.13), checked where it
        # is used (torch_op_missing) and refused in one line naming torch 2.13.
        "torch>=2.1",
        "fairseq-fixed==0.12.3.1",
        "sacrebleu>=2.0",
        "sacremoses",
        "scipy",
        "numpy",
    ],
    extras_require={
        # fast_align for the shared-private pairing and --replace-unk lexicons; systran-align has no build (wheel or
        # source) for Python 3.12 or 3.13, where the pairing reads alignments from the user's own fast_align instead
        "align": [SYSTRAN_ALIGN],
        "vectors": ["gensim>=4.3"],  # training / reading word2vec and fastText target vectors
        "plot": ["matplotlib"],  # scatter plots of the analysis scripts
        "faiss": ["faiss-cpu"],  # --continuous-search faiss (K-best decoding of continuous outputs)
        # Cut Cross-Entropy's CUDA kernel for --criterion fused_cross_entropy (Triton: Linux only; not a default
        # dependency because it pulls Triton onto CPU machines, where the criterion's chunked path serves)
        "cce": ['cut-cross-entropy>=25.1.1; platform_system == "Linux"'],
        # CTranslate2 for `outlayers-export --to ctranslate2` and serving the export (its converter and runtime)
        "serve": ["ctranslate2>=4.5,<5"],
        # pytest-xdist: the suite on every core (pytest.ini); pytest-randomly: the order-independence check
        # (`-p randomly`); coverage >= 7.10 follows the commands the tests start (docs/development.md)
        "test": ["pytest>=7", "pytest-xdist>=3.5", "pytest-randomly>=3.15", "coverage>=7.10", "hypothesis>=6",
                 "mpmath", SYSTRAN_ALIGN, "gensim>=4.3", "matplotlib", "faiss-cpu", "ctranslate2>=4.5,<5"],
    },
    entry_points={
        "console_scripts": [
            "outlayers-train = fairseq_outlayers.tools.wrappers:train",
            "outlayers-generate = fairseq_outlayers.tools.wrappers:generate",
            "outlayers-interactive = fairseq_outlayers.tools.wrappers:interactive",
            "outlayers-validate = fairseq_outlayers.tools.wrappers:validate",
            "outlayers-params = fairseq_outlayers.tools.params:main",
            "outlayers-fit-bias = fairseq_outlayers.tools.fit_bias:main",
            "outlayers-pairing = fairseq_outlayers.tools.pairing.__main__:main",
            "outlayers-vectors = fairseq_outlayers.tools.vectors:main",
            "outlayers-options = fairseq_outlayers.tools.options:main",
            "outlayers-export = fairseq_outlayers.tools.export:main",
        ],
    },
    license="MIT",
    classifiers=[
        "License :: OSI Approved :: MIT License",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
