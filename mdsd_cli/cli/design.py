"""``mdsd design``: search the draft laws for the one that maximises α*."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..io import build_manifest, check_output_path
from .console import emit_table, show_progress
from .data import PairOptions, warn_few_tokens, with_pair_options
from .options import (
    COMPUTE_PANEL,
    DraftsOpt,
    FormatOpt,
    OutOpt,
    ProgressOpt,
    QuietOpt,
    sampler_specs,
)

DESIGN_PANEL = "Design"

FamilyOpt = Annotated[list[str] | None, typer.Option(
    "--family", help="Family of draft laws to search: temperature (the drafter's q^(1/x)), top-k, top-p, hybrid "
    "(top m tokens + n-m drawn without replacement). Repeat for several. (default: all four)",
    rich_help_panel=DESIGN_PANEL, metavar="FAMILY")]
GridOpt = Annotated[list[str] | None, typer.Option(
    "--grid", help="A family's grid: family=start:stop:step (stop included) or family=v1,v2,... "
    "(defaults: temperature=0.5:1.5:0.1, top-k=4,8,...,512, top-p=0.8,0.9,0.95,0.98,0.99, hybrid=0..n-1).",
    rich_help_panel=DESIGN_PANEL, metavar="FAMILY=VALUES")]
BaseOpt = Annotated[list[str] | None, typer.Option(
    "--sampler", "-s", help="Base sampler(s) of the temperature, top-k and top-p families. (default: wor)",
    rich_help_panel=COMPUTE_PANEL, callback=sampler_specs, metavar="SPEC")]
SplitSeedOpt = Annotated[int, typer.Option(
    "--split-seed", min=0, help="Seed of the random split of the pairs into a selection half and a held-out half.",
    rich_help_panel=DESIGN_PANEL)]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Also run the verifier that reaches α* of each selected law at full vocabulary (optimal-iid "
    "for iid drafts, optimal-wor for wor at n <= 16) on the held-out half: columns verifier, verifier_heldout.",
    rich_help_panel=DESIGN_PANEL)]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="An experiment (TOML, e.g. experiments/draft-design.toml): datasets as in mdsd sweep, plus "
    "temperatures, drafts, families, samplers, grids, split_seed, verify. Replaces the data and design options; "
    "adds a dataset column.", rich_help_panel=DESIGN_PANEL, exists=False, dir_okay=False)]
AllRowsOpt = Annotated[bool, typer.Option(
    "--best", help="Only the plain samplers and the selected parameter of each family.",
    rich_help_panel=DESIGN_PANEL)]


@with_pair_options
def design(
    ctx: typer.Context,
    source: PairOptions,
    drafts: DraftsOpt = None,
    family: FamilyOpt = None,
    grid: GridOpt = None,
    sampler: BaseOpt = None,
    split_seed: SplitSeedOpt = 0,
    best: AllRowsOpt = False,
    verify: VerifyOpt = False,
    config: ConfigOpt = None,
    out: OutOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Search draft laws (temperature, top-k, top-p, greedy/random hybrids) for the highest α*.

    One row per (target temperature, n, family, parameter): mean α* over the pairs
    with its 95% interval, the mean gain over plain wor and iid drafts on the same
    pairs, and an honest selection: the parameter with the best mean on one half
    of the pairs (random, --split-seed) is marked 'selected', and 'heldout' is its
    mean on the other half. An aligned table on stdout unless -f or --out.
    """
    from ..design import FAMILIES, design_search, parse_grid

    if out is not None:
        check_output_path(out)
    if config is not None:
        df, settings = _run_config(ctx, config, progress=progress, quiet=quiet)
        if best:
            df = df[(df.family == "plain") | df.selected].reset_index(drop=True)
        emit_table(df, out=out, fmt=fmt or ("table" if out is None else None),
                   manifest=build_manifest("design", {**settings, "best": best}), quiet=quiet)
        return
    families = list(dict.fromkeys(f.replace("_", "-") for f in (family or FAMILIES)))
    grids = dict(parse_grid(g) for g in (grid or []))
    temps = source.temperatures
    ns = list(dict.fromkeys(drafts or [2]))
    bases = list(sampler or ["wor"])
    base = source.load(ctx)
    if base.temperature != 1.0 and temps != [base.temperature]:
        base = base.at_temperature(1.0)
    if base.temperature == 1.0:  # the plain laws at T = 1: say where n exceeds what q can draft
        warn_few_tokens(base, 1.0, [(s, n) for s in bases for n in ns])
    with show_progress("design", len(temps) * len(ns), mode=progress, quiet=quiet) as advance:
        df = design_search(base, ns, families=families, grid=grids, samplers=bases, temperatures=temps,
                           rng=split_seed, verify=verify, progress=advance)
    if best:
        df = df[(df.family == "plain") | df.selected].reset_index(drop=True)
    config = {
        **source.manifest(base.num_pairs), "temperatures": temps, "drafts": ns, "families": families,
        "grids": {k: list(v) for k, v in grids.items()}, "samplers": bases, "split_seed": split_seed,
        "renormalize": source.renormalize, "best": best, "verify": verify,
    }
    emit_table(df, out=out, fmt=fmt or ("table" if out is None else None),
               manifest=build_manifest("design", config), quiet=quiet)


#: Keys of a design experiment file and their types.
CONFIG_KEYS = {"name": str, "description": str, "datasets": list, "temperatures": list, "drafts": list,
               "families": list, "samplers": list, "grids": dict, "split_seed": int, "verify": bool}


def _run_config(ctx, path: Path, *, progress, quiet):
    """Run the design experiment described by a TOML file: one design_search per dataset."""
    import pandas as pd

    from ..design import FAMILIES, design_search, parse_grid
    from ..errors import InputError
    from ..sweep import _base_pairs
    from ..sweep_config import _check_dataset_exists, _dataset_specs, read_toml
    from .data import given

    clash = given(ctx, "data", "synthetic", "pairs", "pair_range", "temperature", "drafts", "family", "grid",
                  "sampler", "split_seed", "verify")
    if clash:
        raise InputError(f"--config replaces {', '.join(clash)}; set them in {path} instead")
    data = read_toml(path)
    where = str(path)
    for key, value in data.items():
        if key not in CONFIG_KEYS:
            raise InputError(f"{where}: unknown key {key!r}; allowed: {', '.join(CONFIG_KEYS)}")
        if not isinstance(value, CONFIG_KEYS[key]):
            raise InputError(f"{where}: {key!r} must be a {CONFIG_KEYS[key].__name__}, got {value!r}")
    if not data.get("datasets"):
        raise InputError(f"{where}: 'datasets' is missing or empty; add at least one [[datasets]] entry")
    specs = [s for i, d in enumerate(data["datasets"]) for s in _dataset_specs(d, f"{where}: datasets[{i}]")]
    for spec in specs:
        _check_dataset_exists(spec, where)
    grids = dict(parse_grid(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}")
                 for k, v in data.get("grids", {}).items())
    settings = {k: data.get(k, default) for k, default in (
        ("temperatures", [1.0]), ("drafts", [2]), ("families", list(FAMILIES)), ("samplers", ["wor"]),
        ("split_seed", 0), ("verify", False))}
    # (checked by design_search: a string, a fraction or a bool is refused, not converted)
    temps, ns = settings["temperatures"], settings["drafts"]
    frames = []
    with show_progress("design", len(specs) * len(temps) * len(ns), mode=progress, quiet=quiet) as advance:
        for spec in specs:
            df = design_search(_base_pairs(spec), ns, families=settings["families"], grid=grids,
                               samplers=settings["samplers"], temperatures=temps, rng=settings["split_seed"],
                               verify=settings["verify"], progress=advance)
            df.insert(0, "dataset", spec.name)
            frames.append(df)
    settings.update(name=data.get("name", path.stem), config=str(path), grids={k: list(v) for k, v in grids.items()},
                    datasets=[s.as_dict() for s in specs])
    return pd.concat(frames, ignore_index=True), settings


__all__ = ["design"]
