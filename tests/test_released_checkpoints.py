"""Checkpoints written by the released package (0.1.0) still load and translate the same.

``tests/expected/released/`` holds one tiny Transformer checkpoint per output layer and per embeddings method, and
two of the LSTM (the optimizer state dropped), trained by the release on the tests' synthetic corpus, and
``translations.json`` the hypotheses and scores that the release's ``fairseq-generate`` gave with them. Each
checkpoint is decoded here with this checkout's package and must give the same hypotheses, and scores within 1e-4.

They were written from the release's source with ``python tests/test_released_checkpoints.py OUT_DIR``, run from
that source's root (so its harness imports the release's package), and copied here. The LSTM cases were added
later the same way, from the release (2aaecbc); the Transformer cases it wrote again had the same weights and gave
the same translations and scores."""
import json
import os
import re
import sys

import pytest

from harness import REPO, generate

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected", "released")
SIZES = ["--arch", "outlayers_transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim",
         "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
         "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0.0"]
LSTM_SIZES = ["--arch", "outlayers_lstm", "--encoder-embed-dim", "32", "--encoder-hidden-size", "16",
              "--decoder-embed-dim", "32", "--decoder-hidden-size", "24", "--decoder-out-embed-dim", "32",
              "--dropout", "0.0"]
#: the cases trained with the LSTM (SIZES otherwise)
LSTM_CASES = {"lstm-joint": (False, ["--output-layer", "joint", "--joint-dim", "16"]),
              "lstm-shared-private": (False, ["--embeddings", "shared-private", "--output-layer", "tied",
                                              "--pairing", "{pairing}"])}
#: name: (joined dictionary, options); {vectors} and {pairing} are the files written next to the data
CASES = {**LSTM_CASES, 
    "softmax": (False, ["--output-layer", "softmax"]),
    "tied-bias": (False, ["--output-layer", "tied", "--output-bias"]),
    "tied-all": (True, ["--output-layer", "tied-all"]),
    "joint": (False, ["--output-layer", "joint", "--joint-dim", "16"]),
    "fixed": (False, ["--output-layer", "fixed"]),
    "continuous": (False, ["--output-layer", "continuous", "--target-vectors", "{vectors}", "--criterion", "cosine"]),
    "shared-private": (False, ["--embeddings", "shared-private", "--output-layer", "tied", "--pairing", "{pairing}"]),
}
SCORE = re.compile(r"^H-(\d+)\t(\S+)\t(.*)$", re.M)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_fresh_build_has_the_state_dict_keys_of_the_release(tiny_bin, tiny_bin_joined, name):
    """The keys of each released checkpoint, read from the checkpoint itself (no list kept by hand): a model built
    now from the checkpoint's own arguments, with nothing loaded into it, has exactly those keys."""
    import argparse

    from fairseq import tasks

    from fairseq_outlayers.core.checkpoint_safety import read

    state = read(os.path.join(EXPECTED, name + ".pt"))
    args = argparse.Namespace(**vars(_model_args(state)))
    args.data = tiny_bin_joined if CASES[name][0] else tiny_bin
    model = tasks.setup_task(args).build_model(args)
    assert sorted(model.state_dict()) == sorted(state["model"]), name


def _model_args(state):
    """The model's arguments of a fairseq checkpoint (a Namespace in ``args``, or ``cfg.model``)."""
    return state.get("args") or state["cfg"]["model"]


def test_every_released_layer_is_pinned():
    """Every output layer and embeddings the release registered has a pinned checkpoint here: the names the pins
    were trained with, read from their own arguments, against the registries."""
    from fairseq_outlayers.core.checkpoint_safety import read
    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    pinned = set()
    for name in CASES:
        args = _model_args(read(os.path.join(EXPECTED, name + ".pt")))
        pinned |= {args.output_layer, args.embeddings}
    released = {"softmax", "tied", "tied-all", "joint", "fixed", "continuous", "standard", "shared-private"}
    assert released <= pinned and released <= set(OUTPUT_LAYER_REGISTRY) | set(EMBEDDING_REGISTRY)


def scored_hypotheses(stdout):
    """{sentence id: [score, hypothesis]} of fairseq-generate's output."""
    return {m.group(1): [float(m.group(2)), m.group(3)] for m in SCORE.finditer(stdout)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_released_checkpoint_translates_the_same(tiny_bin, tiny_bin_joined, name):
    with open(os.path.join(EXPECTED, "translations.json"), encoding="utf-8") as f:
        expected = json.load(f)[name]
    joined, _ = CASES[name]
    proc, _ = generate(tiny_bin_joined if joined else tiny_bin, os.path.join(EXPECTED, name + ".pt"))
    got = scored_hypotheses(proc.stdout)
    assert sorted(got) == sorted(expected) and len(got) == 24
    for sentence, (score, text) in expected.items():
        assert got[sentence][1] == text, (name, sentence)
        assert abs(got[sentence][0] - score) <= 1e-4, (name, sentence)


def write(out_dir):
    """Train every case for 4 updates with the package on the path and record its checkpoint and translations."""
    import tempfile

    import torch

    from harness import make_corpus, pairing_file, preprocess, train

    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp()
    raw = make_corpus(os.path.join(work, "raw"))
    data = {False: preprocess(raw, os.path.join(work, "bin")),
            True: preprocess(raw, os.path.join(work, "bin_joined"), joined=True)}
    files = {"vectors": os.path.join(work, "en.vec"), "pairing": pairing_file(raw, data[False],
                                                                              os.path.join(work, "pairs.txt"))}
    with open(os.path.join(data[False], "dict.en.txt"), encoding="utf-8") as f:
        words = [line.split()[0] for line in f]
    with open(files["vectors"], "w", encoding="utf-8") as f:
        f.write(f"{len(words)} 8\n")
        for i, word in enumerate(words):
            f.write(word + " " + " ".join(str(((i * 7 + j * 3) % 11) - 5 + 0.5) for j in range(8)) + "\n")
    translations = {}
    for name, (joined, extra) in sorted(CASES.items()):
        save = os.path.join(work, name)
        train(data[joined], save, LSTM_SIZES if name in LSTM_CASES else SIZES, [a.format(**files) for a in extra])
        state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu", weights_only=False)
        state["last_optimizer_state"] = None
        path = os.path.join(out_dir, name + ".pt")
        torch.save(state, path)
        proc, _ = generate(data[joined], path)
        translations[name] = scored_hypotheses(proc.stdout)
    with open(os.path.join(out_dir, "translations.json"), "w", encoding="utf-8") as f:  # one line per case
        f.write("{\n" + ",\n".join(f"{json.dumps(name)}: {json.dumps(translations[name], sort_keys=True)}"
                                    for name in sorted(translations)) + "\n}\n")
    print(f"wrote {len(CASES)} checkpoints and their translations to {out_dir} (package: {REPO})")


if __name__ == "__main__":  # python puts tests/ first on the path: the harness is found
    write(sys.argv[1])
