"""Turn a ``fairseq-train`` argument list into the equivalent ``fairseq-hydra-train`` YAML, and back-check one.

    python scripts/lib/args2yaml.py write METHOD DATASET OUT.yaml     # from `scripts/train.sh --print-args`
    python scripts/lib/args2yaml.py check METHOD DATASET IN.yaml      # exit 1 and list the differences
    python scripts/lib/args2yaml.py check-all                         # every configs/DATASET/METHOD.yaml

Both directions go through fairseq itself: the arguments are parsed by fairseq-train's own parser (with the
plugin's ``--user-dir``) and converted by ``convert_namespace_to_omegaconf``, which is how fairseq decides the
group (common, task, model, criterion, optimizer, lr_scheduler, optimization, dataset, checkpoint) and the typed
value of every option. An option belongs to the first dataclass group that declares it; the rest (the model's
own options) go to ``model``. Paths that depend on the user's machine (``task.data``, ``checkpoint.save_dir``,
``model.target_vectors``, ``model.pairing``) are written as placeholders and compared by presence only;
``--user-dir`` becomes ``common.user_dir`` given on the command line.
"""
import argparse
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ["common", "common_eval", "distributed_training", "dataset", "optimization", "checkpoint", "bmuf",
          "generation", "eval_lm", "interactive", "ema", "task", "criterion", "optimizer", "lr_scheduler"]
NAMES = {"arch": ("model", "_name"), "task": ("task", "_name"), "criterion": ("criterion", "_name"),
         "optimizer": ("optimizer", "_name"), "lr_scheduler": ("lr_scheduler", "_name")}
#: options whose values are machine-specific paths: placeholders in the YAML, compared by presence
PATHS = {("task", "data"): "???", ("model", "target_vectors"): "???", ("model", "pairing"): "???"}
SKIP = {"user_dir"}
METHODS = ["softmax", "tied", "joint", "fixed", "continuous", "shared-private"]
DATASETS = ["multi30k", "iwslt14", "wmt14", "wmt16-word"]


def train_sh_args(method, dataset, env=None):
    """The fairseq-train arguments ``scripts/train.sh --print-args METHOD DATASET`` prints."""
    out = subprocess.run(["bash", os.path.join(REPO, "scripts", "train.sh"), "--print-args", method, dataset],
                         capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if out.returncode != 0:
        raise SystemExit(f"train.sh --print-args {method} {dataset} failed: {out.stderr.strip()}")
    return out.stdout.rstrip("\n").split("\n")


def option_names(argv):
    """The dest names of the options in ``argv`` (``--foo-bar`` -> ``foo_bar``), in order, without repeats."""
    names = []
    for a in argv:
        if a.startswith("--"):
            name = a[2:].split("=", 1)[0].replace("-", "_")
            if name not in names:
                names.append(name)
    return names


def resolve(argv):
    """Parse ``argv`` with fairseq-train's parser and return fairseq's omegaconf config."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=argv)
    return convert_namespace_to_omegaconf(args), args


def _plain(value):
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def to_groups(argv):
    """{group: {key: value}} for exactly the options given in ``argv`` (and the data path), typed by fairseq."""
    cfg, args = resolve(argv)
    groups = {}
    groups.setdefault("task", {})["data"] = cfg.task.data
    for name in option_names(argv):
        if name in SKIP:
            continue
        if name in NAMES:
            group, key = NAMES[name]
            groups.setdefault(group, {})[key] = getattr(args, name)
            continue
        for group in GROUPS:
            sub = cfg.get(group)
            if sub is not None and name in sub:
                groups.setdefault(group, {})[name] = _plain(sub[name])
                break
        else:
            groups.setdefault("model", {})[name] = _plain(getattr(args, name))
    return groups


def yaml_groups(method, dataset):
    groups = to_groups(train_sh_args(method, dataset))
    for (group, key), placeholder in PATHS.items():
        if key in groups.get(group, {}):
            groups[group][key] = placeholder
    if "save_dir" in groups.get("checkpoint", {}):
        groups["checkpoint"]["save_dir"] = f"checkpoints/{dataset}/{method}"
    order = ["common", "task", "model", "criterion", "optimizer", "lr_scheduler", "optimization", "dataset",
             "checkpoint"]
    return {g: groups[g] for g in order + sorted(set(groups) - set(order)) if g in groups}


HEADER = """# fairseq-hydra-train config: {method} on {dataset}, the same run as `bash scripts/train.sh {method} {dataset}`
# (tests/test_recipes.py checks that the two resolve to the same settings). Written by
#   python scripts/lib/args2yaml.py write {method} {dataset} configs/{dataset}/{method}.yaml
# Run (??? values are required on the command line):
#   fairseq-hydra-train --config-dir configs/{dataset} --config-name {method} \\
#     common.user_dir=$PWD/fairseq_outlayers task.data=$PWD/{data}{extra}
"""


def write(method, dataset, path):
    groups = yaml_groups(method, dataset)
    data = os.path.relpath(train_sh_args(method, dataset)[0], REPO)
    extra = ""
    if groups.get("model", {}).get("target_vectors") == "???":
        extra = " \\\n#     model.target_vectors=/path/to/vectors.vec   (train.sh makes it when missing)"
    if groups.get("model", {}).get("pairing") == "???":
        extra = " \\\n#     model.pairing=/path/to/pairing.txt   (train.sh makes it when missing)"
    text = HEADER.format(method=method, dataset=dataset, data=data, extra=extra)
    text += yaml.safe_dump(groups, sort_keys=False, default_flow_style=False, width=120)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def differences(method, dataset, path):
    """Lines describing every key whose value differs between the YAML and train.sh (empty when equal)."""
    with open(path, encoding="utf-8") as f:
        loaded = yaml.safe_load(f)
    expected = yaml_groups(method, dataset)
    diffs = []
    for group in sorted(set(loaded) | set(expected)):
        a, b = loaded.get(group) or {}, expected.get(group) or {}
        for key in sorted(set(a) | set(b)):
            if key not in a:
                diffs.append(f"{group}.{key}: set by train.sh ({b[key]!r}) but missing from {path}")
            elif key not in b:
                diffs.append(f"{group}.{key}: set in {path} ({a[key]!r}) but not by train.sh")
            elif _norm(a[key]) != _norm(b[key]):
                diffs.append(f"{group}.{key}: {path} has {a[key]!r}, train.sh gives {b[key]!r}")
    return diffs


def _norm(v):
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    return v


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("action", choices=["write", "check", "check-all"])
    p.add_argument("method", nargs="?")
    p.add_argument("dataset", nargs="?")
    p.add_argument("yaml", nargs="?")
    args = p.parse_args(argv)
    if args.action == "check-all":
        bad = 0
        for dataset in DATASETS:
            for method in METHODS:
                path = os.path.join(REPO, "configs", dataset, f"{method}.yaml")
                diffs = differences(method, dataset, path) if os.path.exists(path) else [f"{path} is missing"]
                bad += bool(diffs)
                print(f"{dataset}/{method}: {'OK' if not diffs else 'DIFFERENT'}")
                for d in diffs:
                    print("  " + d)
        sys.exit(1 if bad else 0)
    if not (args.method and args.dataset and args.yaml):
        p.error(f"{args.action} needs METHOD DATASET YAML")
    if args.action == "write":
        write(args.method, args.dataset, args.yaml)
    else:
        diffs = differences(args.method, args.dataset, args.yaml)
        for d in diffs:
            print(d)
        sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
