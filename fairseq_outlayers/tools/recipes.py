"""The recipe table: which training recipes exist, and each one as a plain ``fairseq-train`` argument list.

A recipe is a fairseq-hydra-train config written by hand, ``configs/DATASET/METHOD.yaml``; the files that exist
are the recipes, so the methods of a dataset are the names of its files. ``configs/datasets.yaml`` holds what
``scripts/train.sh`` needs besides fairseq's options: where each dataset's preparation script writes its data and
how its test set is scored. Nothing is generated from either file.

    python scripts/lib/recipes.py list                                       # METHOD DATASET, one a line
    python scripts/lib/recipes.py settings METHOD DATASET                    # what train.sh needs, KEY=VALUE
    python scripts/lib/recipes.py args METHOD DATASET [GROUP.KEY=VALUE ...]  # fairseq-train arguments, one a line

A recipe becomes fairseq-train arguments by fairseq's own naming rule (``gen_parser_from_dataclass``):
``group.some_key: v`` is ``--some-key v``; a group's ``_name`` is its choice option (``--task``, ``--arch``,
``--criterion``, ``--optimizer``, ``--lr-scheduler``); ``task.data`` is the positional argument and comes first; a
list is written comma-separated and ``true`` as the bare flag. The ``generation`` group holds the recipe's
decoding settings: fairseq-train has no such options, train.sh prints them in the evaluate.sh command.
``GROUP.KEY=VALUE`` sets a value (the ``???`` paths of the user's machine, the checkpoint folder), as
``++GROUP.KEY=VALUE`` does for fairseq-hydra-train. tests/test_recipes.py parses every recipe converted here with
fairseq-train's own parser and checks that it gives back every value of the file.
"""
import os
import sys

import yaml

#: the recipes' folder, from the working directory (a checkout's root) unless a function is given another
CONFIGS = "configs"
DATASETS = "datasets.yaml"
CHOICE_OPTIONS = {"task": "--task", "model": "--arch", "criterion": "--criterion", "optimizer": "--optimizer",
                  "lr_scheduler": "--lr-scheduler"}
DECODING = "generation"
MISSING = "???"
DATASET_KEYS = {"prepared": str, "reference": str, "lowercase": bool, "word_targets_for_vectors": bool}


def shown(path):
    """``path`` as the messages name it: from the working directory when it is inside it."""
    rel = os.path.relpath(os.path.abspath(path), os.getcwd())
    return path if rel.startswith("..") else rel


class RecipeError(Exception):
    """A missing or malformed recipe file; the message is one line naming the file and the fix."""


class UnknownRecipe(RecipeError):
    """A METHOD or DATASET that has no recipe."""


def _load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise RecipeError(f"{shown(path)}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise RecipeError(f"{shown(path)}: not valid YAML{where} ({problem}); fix the file") from None


def datasets(configs=CONFIGS):
    """{dataset: its entry of configs/datasets.yaml}, each entry checked."""
    path = os.path.join(configs, DATASETS)
    table = _load(path)
    if not isinstance(table, dict) or not table:
        raise RecipeError(f"{shown(path)}: must map each dataset to its settings ({', '.join(DATASET_KEYS)})")
    for name, entry in table.items():
        keys = set(entry) if isinstance(entry, dict) else set()
        if not {"prepared", "reference"} <= keys <= set(DATASET_KEYS):
            raise RecipeError(f"{shown(path)}: {name} must have prepared and reference, and may have lowercase "
                              "and word_targets_for_vectors (nothing else)")
        for key, value in entry.items():
            if not isinstance(value, DATASET_KEYS[key]):
                raise RecipeError(f"{shown(path)}: {name}.{key} must be a {DATASET_KEYS[key].__name__}, "
                                  f"not {value!r}")
    return table


def methods(dataset, configs=CONFIGS):
    """The methods with a recipe for ``dataset``: the names of configs/DATASET/*.yaml, sorted."""
    folder = os.path.join(configs, dataset)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(n[:-len(".yaml")] for n in names if n.endswith(".yaml"))


def recipes(configs=CONFIGS):
    """Every (method, dataset) pair that has a recipe, datasets in the order of configs/datasets.yaml."""
    return [(method, dataset) for dataset in datasets(configs) for method in methods(dataset, configs)]


def recipe_path(method, dataset, configs=CONFIGS):
    """configs/DATASET/METHOD.yaml, or UnknownRecipe naming the choices."""
    table = datasets(configs)
    if dataset not in table:
        raise UnknownRecipe(f"unknown DATASET '{dataset}'; choose {_choices(table)} "
                            f"(the datasets of {shown(os.path.join(configs, DATASETS))})")
    found = methods(dataset, configs)
    if method not in found:
        where = shown(os.path.join(configs, dataset))
        raise UnknownRecipe(f"unknown METHOD '{method}' for {dataset}; choose {_choices(found) or 'nothing'} "
                            f"(a recipe is a file {where}/METHOD.yaml)")
    return os.path.join(configs, dataset, method + ".yaml")


def _choices(names):
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def load_recipe(path):
    """The recipe at ``path`` as {group: {key: value}}, in the file's order, its values checked."""
    recipe = _load(path)
    if not isinstance(recipe, dict) or not all(isinstance(v, dict) for v in recipe.values()):
        raise RecipeError(f"{shown(path)}: must map fairseq's groups (task, model, criterion, optimizer, ...) "
                          "to their options, as fairseq-hydra-train reads it")
    for group, options in recipe.items():
        for key, value in options.items():
            _check_value(path, f"{group}.{key}", value)
        if "_name" in options and group not in CHOICE_OPTIONS and group != DECODING:
            raise RecipeError(f"{shown(path)}: {group}._name is not a fairseq choice; only "
                              f"{', '.join(CHOICE_OPTIONS)} have one")
    return recipe


def _check_value(path, name, value):
    if value is False:
        raise RecipeError(f"{shown(path)}: {name}: false has no fairseq-train flag; remove the line (false is the "
                          "flag's default)")
    if value is None or isinstance(value, dict):
        raise RecipeError(f"{shown(path)}: {name} must be a number, a string, true or a list of those")
    if isinstance(value, list):
        for item in value:
            if isinstance(item, (bool, list, dict)) or item is None:
                raise RecipeError(f"{shown(path)}: {name} must be a list of numbers or strings")


def with_values(recipe, values):
    """A copy of ``recipe`` with {"group.key": value} set (added at the end of its group when the file lacks it)."""
    out = {group: dict(options) for group, options in recipe.items()}
    for name, value in values.items():
        group, _, key = name.partition(".")
        if not group or not key:
            raise RecipeError(f"'{name}={value}': name a key as GROUP.KEY, e.g. task.data=PATH")
        out.setdefault(group, {})[key] = value
    return out


def fairseq_train_args(recipe, path=None):
    """The fairseq-train argument list of a recipe whose ``???`` values are all set: task.data, then every other
    option in the file's order (the ``generation`` group left out). ``path`` names the recipe in errors."""
    where = shown(path) if path else "the recipe"
    for group, options in recipe.items():
        for key, value in options.items():
            if value == MISSING:
                raise RecipeError(f"{where}: {group}.{key} is ??? (a path of your machine): set it with "
                                  f"{group}.{key}=VALUE")
    if "data" not in recipe.get("task", {}):
        raise RecipeError(f"{where}: task.data is missing; add 'data: ???' to the task group")
    args = [str(recipe["task"]["data"])]
    for group, options in recipe.items():
        if group == DECODING:
            continue
        for key, value in options.items():
            if (group, key) == ("task", "data"):
                continue
            flag = CHOICE_OPTIONS[group] if key == "_name" else "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            else:
                args += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return args


def settings(method, dataset, configs=CONFIGS):
    """What train.sh needs to know of a recipe, as {name: text}: the file, the languages, the prepared data
    folder, ``-word`` when the recipe trains on the word-level preparation, the ``???`` keys to fill and the
    evaluate.sh options."""
    path = recipe_path(method, dataset, configs)
    recipe = load_recipe(path)
    entry = datasets(configs)[dataset]
    missing = [f"{g}.{k}" for g, options in recipe.items() for k, v in options.items() if v == MISSING]
    fairseq_train_args(with_values(recipe, dict.fromkeys(missing, "PATH")), path)  # any error now, not later
    task = recipe.get("task", {})
    if "source_lang" not in task or "target_lang" not in task:
        raise RecipeError(f"{shown(path)}: the task group needs source_lang and target_lang")
    src, tgt = task["source_lang"], task["target_lang"]
    prepared = os.path.join(os.path.dirname(os.path.abspath(configs)), entry["prepared"])
    decoding = recipe.get(DECODING, {})
    evaluate = [f"--beam {decoding.get('beam', 5)} --lenpen {decoding.get('lenpen', 1.0)} --src {src} --tgt {tgt}"]
    if entry.get("lowercase"):
        evaluate.append("--lowercase")
    evaluate.append(f"--raw-ref {os.path.join(prepared, entry['reference'])}.{tgt}")
    word = entry.get("word_targets_for_vectors") and "model.target_vectors" in missing
    return {"recipe": shown(path), "src": src, "tgt": tgt,
            "prepared": prepared, "word": "-word" if word else "", "fill": " ".join(missing),
            "evaluate": " ".join(evaluate)}


def main(argv=None, configs=CONFIGS):
    """``configs``: the recipes' folder (``scripts/lib/recipes.py`` gives its checkout's)."""
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: recipes.py list | settings METHOD DATASET | args METHOD DATASET [GROUP.KEY=VALUE ...]"
    try:
        if argv[:1] == ["list"] and len(argv) == 1:
            lines = [f"{m} {d}" for m, d in recipes(configs)]
        elif argv[:1] == ["settings"] and len(argv) == 3:
            lines = [f"{k}={v}" for k, v in settings(argv[1], argv[2], configs).items()]
        elif argv[:1] == ["args"] and len(argv) >= 3:
            path = recipe_path(argv[1], argv[2], configs)
            bad = [a for a in argv[3:] if "=" not in a]
            if bad:
                raise RecipeError(f"'{bad[0]}': give a value as GROUP.KEY=VALUE, e.g. task.data=PATH")
            values = dict(a.split("=", 1) for a in argv[3:])
            lines = fairseq_train_args(with_values(load_recipe(path), values), path)
        else:
            print(usage, file=sys.stderr)
            return 2
    except RecipeError as e:
        print(e, file=sys.stderr)
        return 2 if isinstance(e, UnknownRecipe) else 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
