"""Values the package writes into a model's arguments, which fairseq saves with every checkpoint (fingerprints,
the sizes of the tables read from files, the build state)."""
import contextlib

from omegaconf import OmegaConf, open_dict


def record(args, **values):
    """Set ``values`` on ``args``: an argparse Namespace, or a (struct) omegaconf DictConfig such as
    fairseq-hydra-train's, opened for keys it does not have yet."""
    with open_dict(args) if OmegaConf.is_config(args) else contextlib.nullcontext():
        for key, value in values.items():
            setattr(args, key, value)
