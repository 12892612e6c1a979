"""Every ``outlayers_*`` architecture x every ``--output-layer`` x every ``--embeddings``: the arguments fairseq-train
parses, the model's arguments once built, and the state-dict keys with their shapes (or the class of the error
that refuses the combination). ``tests/test_seam_equivalence.py`` compares them with ``tests/expected/seams.json``.

``python tests/seam_equivalence.py --write`` records the file again (only for an intended change of the format).
Models are built on the meta device where they can be (keys and shapes without memory or time for the weights),
else on the CPU (the layers that compute a frozen table when built).
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected", "seams.json")
M = 8  # size of the test's target vectors


def write_vectors(path, dict_path):
    """Deterministic vectors (no random generator) for every word of the target dictionary."""
    with open(dict_path, encoding="utf-8") as f:
        words = [line.split()[0] for line in f if not line.startswith("madeupword")]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {M}\n")
        for i, w in enumerate(words):
            f.write(w + " " + " ".join(str(((i * 7 + j * 3) % 11) - 5 + 0.5) for j in range(M)) + "\n")
    return path


def corpora(root):
    """(separate-dictionary data, joined-dictionary data, target vectors, pairing file) under ``root``."""
    sys.path.insert(0, HERE)
    from harness import make_corpus, pairing_file, preprocess

    raw = make_corpus(os.path.join(root, "raw"))
    sep = preprocess(raw, os.path.join(root, "bin"))
    joined = preprocess(raw, os.path.join(root, "bin_joined"), joined=True)
    vectors = write_vectors(os.path.join(root, "en.vec"), os.path.join(sep, "dict.en.txt"))
    pairing = pairing_file(raw, sep, os.path.join(root, "pairs.txt"))
    return sep, joined, vectors, pairing


def architectures():
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(a for a, cls in ARCH_MODEL_REGISTRY.items() if a.startswith("outlayers_"))


def _plain(value, root):
    """JSON-able, with the temporary directory written as <TMP>."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v, root) for k, v in sorted(dict(value).items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, "<TMP>")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return repr(value)


#: written by the model core before this test existed: a control state, not configuration (removed since)
IGNORED = ("outlayers_args_state",)


def _args(args, root):
    values = {k: v for k, v in vars(args).items() if k not in IGNORED}
    fps = values.get("outlayers_fingerprints")
    if fps:  # file digests of the pairing tool's output carry the tool's own header: keep which files, not digests
        values["outlayers_fingerprints"] = {k: (v if k.endswith("_dict") else {"path": v.get("path")})
                                            for k, v in dict(fps).items()}
    return _plain(values, root)


def one(arch, layer, embeddings, data, root):
    """{"parsed", "built", "state"} of one combination, or {"error": class name, "message": text}."""
    import torch
    from fairseq import options, tasks

    sep, joined, vectors, pairing = data
    argv = [joined if layer == "tied-all" else sep, "--arch", arch, "--output-layer", layer,
            "--embeddings", embeddings, "--cpu", "--save-dir", os.path.join(root, "save")]
    if layer == "continuous" or embeddings == "target-vectors":
        argv += ["--target-vectors", vectors]
    if layer == "continuous":
        argv += ["--criterion", "cosine"]
    if embeddings == "shared-private":
        argv += ["--pairing", pairing]
    try:
        parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
        out = {"parsed": _args(parsed, root)}
        task = tasks.setup_task(parsed)
        try:
            with torch.device("meta"):
                model = task.build_model(parsed)
        except (RuntimeError, AttributeError, NotImplementedError):  # a layer that computes its frozen table
            parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
            model = tasks.setup_task(parsed).build_model(parsed)
    except Exception as e:  # noqa: BLE001  (a refused combination: its class is what must stay)
        return {"error": type(e).__name__, "message": str(e).replace(root, "<TMP>")}
    out["built"] = _args(parsed, root)
    out["state"] = {k: list(v.shape) for k, v in sorted(model.state_dict().items())}
    return out


def record(root=None):
    import logging

    import fairseq_outlayers  # noqa: F401

    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.realpath(root or tmp)
            data = corpora(root)
            from fairseq_outlayers.models.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

            return {f"{arch} {layer} {emb}": one(arch, layer, emb, data, root)
                    for arch in architectures() for layer in sorted(OUTPUT_LAYER_REGISTRY)
                    for emb in sorted(EMBEDDING_REGISTRY)}
    finally:
        logging.disable(logging.NOTSET)


MISSING = "<missing>"
#: the state-dict keys written out in the file (the seams' tensors); the others are kept as one digest
SEAM_KEYS = ("decoder.output_projection.", "decoder.embed_tokens.", "encoder.embed_tokens.")


def _diff(base, values):
    return {k: values.get(k, MISSING) for k in sorted(set(base) | set(values)) if base.get(k, MISSING) !=
            values.get(k, MISSING)}


def compact(got, common=None):
    """The file's form: the parsed arguments as their difference from those every combination shares
    (``common``), the built model's as their difference from the parsed, the state dict's seam keys with shapes
    and a digest of all keys and shapes."""
    import hashlib

    if common is None:
        parsed = [v["parsed"] for v in got.values() if "parsed" in v]
        common = {k: v for k, v in parsed[0].items() if all(p.get(k, MISSING) == v for p in parsed)}
    combos = {}
    for combo, v in got.items():
        if "error" in v:
            combos[combo] = {"error": v["error"], "message": v["message"]}
            continue
        state = v["state"]
        combos[combo] = {
            "parsed": _diff(common, v["parsed"]), "built": _diff(v["parsed"], v["built"]),
            "state": {k: s for k, s in state.items() if k.startswith(SEAM_KEYS)},
            "state_sha256": hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest(),
        }
    return {"common": common, "combos": combos}


def differences(expected, got):
    """One line per combination whose arguments, keys or refusal differ from ``expected`` (the file's form)."""
    got = compact(got, expected["common"])["combos"]
    expected = expected["combos"]
    out = []
    for combo in sorted(set(expected) | set(got)):
        a, b = expected.get(combo), got.get(combo)
        if a is None or b is None:
            out.append(f"{combo}: {'new' if a is None else 'missing'}")
            continue
        if a.get("error") != b.get("error"):
            out.append(f"{combo}: {a.get('error', 'built')} -> {b.get('error', 'built')}: {b.get('message', '')}")
            continue
        for part in ("parsed", "built", "state", "state_sha256"):
            if part in a and a[part] != b.get(part):
                if part == "state_sha256":
                    out.append(f"{combo}: the state-dict keys or shapes differ")
                    continue
                keys = sorted(k for k in set(a[part]) | set(b[part]) if a[part].get(k) != b[part].get(k))
                out.append(f"{combo}: {part} differs in {keys[:8]}"
                           + "".join(f"\n    {k}: {a[part].get(k)!r} -> {b[part].get(k)!r}" for k in keys[:8]))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record {EXPECTED}")
    args = parser.parse_args(argv)
    got = record()
    if args.write:
        with open(EXPECTED, "w", encoding="utf-8") as f:
            json.dump(compact(got), f, indent=1, sort_keys=True)
            f.write("\n")
        refused = sum("error" in v for v in got.values())
        print(f"{len(got)} combinations ({len(got) - refused} built, {refused} refused) written to {EXPECTED}")
        return 0
    with open(EXPECTED, encoding="utf-8") as f:
        diff = differences(json.load(f), got)
    print("\n".join(diff) or f"{len(got)} combinations: identical")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
