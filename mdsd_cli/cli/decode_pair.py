"""The model pair and prompts of ``mdsd decode``: a built-in pair (--models) or two Hugging Face causal
LMs (--target/--draft), and built-in prompts or a prompts file (--prompts)."""

from __future__ import annotations

from pathlib import Path

from ..errors import DataFileError, InputError
from .console import status, warn

#: Settings of Hugging Face models (--target/--draft), with their defaults.
HF_DEFAULTS = {"device": "auto", "dtype": "float32", "revision": None, "draft_revision": None,
               "chat_template": False, "scoring": "auto", "threads": None}
#: The Hugging Face options that also apply to the shipped pair (``--models pystdlib``).
PYSTDLIB_OPTIONS = ("device", "dtype", "scoring", "threads")


def _prompts_file(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise DataFileError(f"prompts file {path} not found (give a count or a text/JSONL file of prompts)")
    return path


def _prompts(pair, spec: str):
    """``N`` built-in prompts, or the prompts of a text/JSONL file (the formats of ``mdsd dump``)."""
    from ..models import Prompt

    text = str(spec).strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise InputError("--prompts must be >= 1 (a count) or a prompts file")
        prompts = pair.prompts(count)
        if len(prompts) < count:
            warn(f"--prompts {count}: the built-in set has {len(prompts)} prompts; running all {len(prompts)}")
        return prompts
    path = _prompts_file(text)
    from ..datasets.hf import read_prompts

    return [Prompt(p.id, tuple(pair.target.encode(p.text)), p.text) for p in read_prompts(path, "generate")]


def _load_pair(settings: dict, *, trust_remote_code: bool, quiet: bool = True):
    """The built-in pair of ``--models``, or the Hugging Face pair of ``--target``/``--draft``."""
    from ..models import load_hf_pair, load_model_pair

    if settings.get("target") is None and settings["models"] == "pystdlib":  # a Hugging Face pair, shipped
        from ..models.trained import load_pystdlib_pair

        with status("loading the pystdlib pair", quiet=quiet):
            return load_pystdlib_pair(device=settings["device"], dtype=settings["dtype"], scoring=settings["scoring"],
                                      threads=settings["threads"], notify=warn)
    if settings.get("target") is None:
        return load_model_pair(settings["models"], vocab=settings["vocab"], seed=settings["model_seed"],
                               noise=settings["noise"])
    with status(f"loading the Hugging Face pair {settings['target']} / {settings['draft']} "
                "(tokenizer, weights; 10-40 s for models of a few hundred MB)", quiet=quiet):
        return load_hf_pair(settings["target"], settings["draft"], device=settings["device"], dtype=settings["dtype"],
                            revision=settings["revision"], draft_revision=settings["draft_revision"],
                            trust_remote_code=trust_remote_code, chat_template=settings["chat_template"],
                            scoring=settings["scoring"], threads=settings["threads"], notify=warn)


def _check_model_settings(settings: dict, given_models: bool) -> None:
    """--models and --target/--draft exclude each other; the Hugging Face options need --target/--draft."""
    hf = settings.get("target") is not None or settings.get("draft") is not None
    if hf:
        if settings.get("target") is None or settings.get("draft") is None:
            raise InputError("give both --target and --draft (local directories or Hugging Face names)")
        if given_models:
            raise InputError("--models picks a built-in pair; drop it when giving --target and --draft")
        if str(settings["prompts"]).strip().isdigit():
            raise InputError("Hugging Face models have no built-in prompts; give --prompts FILE (one prompt per "
                             "line, or JSONL with 'prompt')")
        return
    shipped = settings.get("models") == "pystdlib"  # loaded as a Hugging Face pair: these options apply
    set_hf = [k for k, v in HF_DEFAULTS.items()
              if settings.get(k, v) != v and not (shipped and k in PYSTDLIB_OPTIONS)]
    if set_hf:
        raise InputError(f"--{set_hf[0].replace('_', '-')} applies to Hugging Face models; use it with --target "
                         "and --draft" + (" (--models pystdlib takes --device, --dtype, --scoring and --threads)"
                                          if shipped else ""))
