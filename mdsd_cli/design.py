"""The draft-law search: which rule for turning q into n drafts maximises α*.

The drafter sees only ``q``, so the design space is every rule that turns ``q``
into drafts. :func:`design_search` scans four parametric families of
:mod:`mdsd_cli.samplers.parametric` on a grid each,

==============  ======================================  ==========================
family          sampler for parameter ``x``             default grid
==============  ======================================  ==========================
``temperature`` ``<base>:temperature=x`` (q^(1/x))      0.5 to 1.5, step 0.1
``top-k``       ``<base>:top_k=x``                      4, 8, 16, ..., 512
``top-p``       ``<base>:top_p=x``                      0.8, 0.9, 0.95, 0.98, 0.99
``hybrid``      ``hybrid:m=x`` (top x tokens + n - x    0 .. n - 1
                drawn without replacement)
==============  ======================================  ==========================

and computes α* of every (pair, parameter) exactly by the chain. Each row
gives the mean α* over the pairs with its 95% interval, the mean paired gain
over plain ``wor`` and ``iid`` drafts on the same pairs, and an **honest
selection**: the pairs are split in two halves at random (seeded); the
parameter with the best mean on the first half is marked ``selected``, and
``heldout`` is the mean on the second half, which played no part in choosing
it. The in-sample best (``best_in_sample``) is marked beside it; its mean over
all pairs is optimistic by the selection.

Exactness: every α* is the chain value (exact to ~1e-12); the identity
parameters (temperature 1, ``hybrid:m=0``) give the plain sampler's α*, and
``hybrid:m=0`` / ``hybrid:m=n-1`` are computed as ``wor`` / ``greedy``, which
they equal in law.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from .bounds.chain import chain_solve
from .distributions import PairBatch, check_drafts, check_pair, check_temperature
from .errors import InputError, unknown_choice
from .samplers import get_sampler
from .samplers.parametric import format_value

#: The families and the sampler key each one varies.
FAMILIES = {"temperature": "temperature", "top-k": "top_k", "top-p": "top_p", "hybrid": "m"}
#: Default grids (``hybrid``: every m from 0 to n - 1).
DEFAULT_GRIDS: dict[str, tuple[float, ...] | None] = {
    "temperature": tuple(round(0.5 + 0.1 * i, 10) for i in range(11)),
    "top-k": (4, 8, 16, 32, 64, 128, 256, 512),
    "top-p": (0.8, 0.9, 0.95, 0.98, 0.99),
    "hybrid": None,
}
#: The plain samplers every search reports beside the families (the gains are against wor and iid).
BASELINES = ("iid", "wor", "greedy")
#: Values a --grid may take (start:stop:step beyond this is refused with its count).
MAX_GRID = 10_000
#: Rows of transformed q stacked into one batched iid chain call.
STACK_ENTRIES = 1 << 23

COLUMNS = ["temperature", "n", "family", "parameter", "sampler", "pairs", "alpha_star", "ci95_low", "ci95_high",
           "gain_vs_wor", "gain_vs_iid", "selection", "heldout", "selected", "best_in_sample"]
#: Extra columns with ``verify=True``.
VERIFY_COLUMNS = ["verifier", "verifier_heldout"]


def optimal_verifier_for(spec: str, n: int) -> str | None:
    """The verifier that reaches α* of draft law ``spec`` at full vocabulary, if there is one:
    ``optimal-iid`` for iid drafts, ``optimal-wor`` for wor drafts at n <= 16 (any transform of q)."""
    from .verifiers.optimal.chords import MAX_CHORD_DRAFTS

    s = get_sampler(spec)
    if s.kind == "iid":
        return "optimal-iid"
    if s.kind == "wor" and n <= MAX_CHORD_DRAFTS:
        return "optimal-wor"
    return None


def parse_grid(text: str) -> tuple[str, tuple[float, ...]]:
    """``family=start:stop:step`` (stop included) or ``family=v1,v2,...`` as ``(family, values)``.

    >>> parse_grid("temperature=0.5:0.7:0.1")
    ('temperature', (0.5, 0.6, 0.7))
    >>> parse_grid("top-k=4,16")
    ('top-k', (4.0, 16.0))
    """
    family, eq, values = str(text).partition("=")
    family = family.strip().replace("_", "-")
    example = "e.g. temperature=0.5:1.5:0.05 or top-k=4,8,16"
    if not eq or not values.strip():
        raise InputError(f"grid {text!r} is not family=values; {example}")
    check_family(family)
    try:
        if ":" in values:
            start, stop, step = (float(v) for v in values.split(":"))
            if not (step > 0 and stop >= start and math.isfinite(stop - start)):
                raise ValueError
            count = int(math.floor((stop - start) / step + 1e-9)) + 1
            grid = None
        else:
            grid = tuple(float(v) for v in values.split(","))
    except ValueError:
        raise InputError(f"grid {text!r}: values must be start:stop:step with step > 0 and stop >= start, "
                         f"or a comma-separated list; {example}") from None
    if grid is None:  # outside the try: this message is not the syntax error's
        if count > MAX_GRID:
            raise InputError(f"grid {text!r} has {count:,} values (at most {MAX_GRID:,}); use a larger step")
        grid = tuple(round(start + step * i, 10) for i in range(count))
    return family, grid


def check_family(family: str) -> str:
    """``family`` if it is one of :data:`FAMILIES`, else :class:`InputError`."""
    if family not in FAMILIES:
        raise unknown_choice("design family", family, FAMILIES)
    return family


def family_specs(family: str, grid: Iterable[float], n: int, base: str = "wor") -> list[tuple[float, str]]:
    """``(parameter, sampler spec)`` for every grid value of ``family`` at ``n`` drafts.

    Every spec is checked now (:class:`InputError` naming the valid range, e.g.
    ``hybrid:m=9`` at n = 4, or a temperature <= 0).
    """
    check_family(family)
    key = FAMILIES[family]
    # a base with its own parameters (``wor:top_k=50``) keeps them: the family's key is added
    base_name, sep, base_params = str(base).strip().partition(":")
    params = [item.strip() for item in base_params.split(",") if item.strip()] if sep else []
    if key in {item.partition("=")[0].strip().replace("-", "_") for item in params}:
        raise InputError(f"base sampler {base!r} already sets {key}, which the {family} family varies; "
                         f"give the base without it (e.g. {base_name}) or search other families")
    out = []
    for x in grid:
        if family == "hybrid":
            spec = ",".join([f"hybrid:m={format_value(x)}", *params])
        else:
            spec = f"{base_name}:" + ",".join([*params, f"{key}={format_value(x)}"])
        get_sampler(spec).check_n(n)
        out.append((float(x), spec))
    return out


def _law_for_computation(spec: str, n: int) -> str:
    # hybrid:m=0 is wor and hybrid:m=n-1 is greedy in law (tests/test_parametric_samplers.py)
    s = get_sampler(spec)
    if s.kind == "hybrid" and s.base is s:
        if s.m == 0:
            return "wor"
        if s.m == n - 1:
            return "greedy"
    return s.name


def alpha_star_grid(P: np.ndarray, Q: np.ndarray, n: int, specs: Iterable[str]) -> dict[str, np.ndarray]:
    """α* of every pair for every sampler spec: ``{spec: [N]}``, exact by the chain.

    Specs drawing iid from a transformed q are stacked into batched chain calls
    across parameters (the iid scan is vectorised over rows); equal laws are
    computed once.
    """
    specs = list(dict.fromkeys(specs))
    law = {spec: _law_for_computation(spec, n) for spec in specs}
    values: dict[str, np.ndarray] = {}
    todo = list(dict.fromkeys(law.values()))
    iid = [s for s in todo if get_sampler(s).kind == "iid"]
    N, V = P.shape
    per_call = max(1, STACK_ENTRIES // max(N * V, 1))
    for start in range(0, len(iid), per_call):
        group = iid[start:start + per_call]
        stacked = np.concatenate([get_sampler(s).draft_distribution(Q) for s in group])
        got, _, _ = chain_solve(np.tile(P, (len(group), 1)), stacked, n, sampler="iid", want_sets=False)
        for j, s in enumerate(group):
            values[s] = got[j * N:(j + 1) * N]
    for s in todo:
        if s not in values:
            values[s] = chain_solve(P, Q, n, sampler=s, want_sets=False)[0]
    return {spec: values[law[spec]] for spec in specs}


def _split(num_pairs: int, rng) -> tuple[np.ndarray, np.ndarray]:
    if num_pairs < 2:
        raise InputError(f"the honest split needs at least 2 pairs, got {num_pairs}; give more pairs")
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer, np.random.Generator)) or (
            not isinstance(rng, np.random.Generator) and rng < 0):
        raise InputError(f"the split seed must be an integer >= 0 or a numpy Generator, got {rng!r}")
    order = np.random.default_rng(rng).permutation(num_pairs)
    half = (num_pairs + 1) // 2
    return np.sort(order[:half]), np.sort(order[half:])


def _listed(value, what: str, *, empty: bool = False) -> list:
    """An argument that takes one value or several as a list: a bare string is one name (not its characters), a
    number one value; an empty list is refused unless ``empty``."""
    if isinstance(value, np.ndarray):
        items = value.ravel().tolist()
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        items = list(value)
    else:
        return [value]
    if not items and not empty:
        raise InputError(f"{what} is empty; give at least one value")
    return items


def design_search(pairs, n, *, families: Iterable[str] = tuple(FAMILIES),
                  grid: Mapping[str, Iterable[float]] | None = None, samplers: Iterable[str] = ("wor",),
                  temperatures: Iterable[float] | None = None, rng=0, verify: bool = False,
                  progress: Callable[[int], None] | None = None):
    """Search the draft laws of each family for the one that maximises α*.

    Parameters
    ----------
    pairs : PairBatch or (p, q) with ``p, q [N, V]``
        Target and draft distributions (N >= 2 for the honest split).
    n : int or iterable of int
        Number(s) of drafts.
    families : iterable of {"temperature", "top-k", "top-p", "hybrid"}
    grid : mapping family -> values, optional
        Overrides :data:`DEFAULT_GRIDS` per family (``hybrid`` defaults to 0..n-1).
    samplers : iterable of str
        Base samplers of the temperature, top-k and top-p families (default ``wor``).
    temperatures : iterable of float, optional
        Target temperatures to re-temper ``pairs`` to (a :class:`PairBatch` only;
        default: the pairs as given). The draft temperature of
        ``wor:temperature=x`` is then ``x`` times the target's.
    rng : int or numpy.random.Generator
        Seed of the split of the pairs into a selection half and a held-out half.
    verify : bool
        For each selected row whose law has a verifier reaching α* at full vocabulary
        (:func:`optimal_verifier_for`), run it: ``verifier_heldout`` is its exact
        acceptance rate averaged over the held-out half (equal to ``heldout`` when
        the verifier reaches α*).
    progress : callable, optional
        Called with 1 after each (temperature, n) block, for a progress bar.

    Returns
    -------
    pandas.DataFrame
        One row per (temperature, n, family, parameter, base sampler), with the
        plain ``iid``, ``wor``, ``greedy`` first (family ``plain``): columns
        :data:`COLUMNS`. ``alpha_star`` is the mean over all pairs with its 95%
        Student t interval; ``gain_vs_wor``/``gain_vs_iid`` the mean paired
        difference to plain wor/iid; ``selection``/``heldout`` the means on the
        two halves; ``selected`` marks the parameter with the best selection mean
        per (temperature, n, family, base), ``best_in_sample`` the best over all pairs.

    Examples
    --------
    >>> from mdsd_cli import zipf_pairs
    >>> df = design_search(zipf_pairs(8, 200, seed=0), 2, families=["hybrid"])
    >>> df[["sampler", "alpha_star"]].round(4).values.tolist()
    [['iid', 0.8361], ['wor', 0.843], ['greedy', 0.6989], ['hybrid:m=0', 0.843], ['hybrid:m=1', 0.6989]]
    """
    import pandas as pd

    from .summary import mean_interval

    if isinstance(pairs, PairBatch):
        batch = pairs
    else:
        try:
            p, q = pairs
        except (TypeError, ValueError):
            raise InputError("pairs must be a PairBatch or a (p, q) tuple of [N, V] arrays") from None
        P, Q, _ = check_pair(p, q)
        batch = PairBatch(target=P, draft=Q)
    ns = [check_drafts(x) for x in _listed(n, "n (the numbers of drafts)")]
    families = [check_family(str(f).replace("_", "-")) for f in _listed(families, "families", empty=True)]
    grids = dict(DEFAULT_GRIDS)
    for family, values in (grid or {}).items():
        family = check_family(family.replace("_", "-"))
        if family not in families:
            raise InputError(f"a grid is given for {family}, which is not searched; add it to the families "
                             f"(--family {family}) or drop its grid")
        grids[family] = tuple(_listed(values, f"the grid of {family}", empty=True))
        if not grids[family]:
            raise InputError(f"the grid of {family} is empty; give at least one value")
    bases = list(dict.fromkeys(get_sampler(s).name for s in _listed(samplers, "samplers")))
    temps = (list(dict.fromkeys(check_temperature(t) for t in _listed(temperatures, "temperatures")))
             if temperatures is not None
             else [batch.temperature])
    select, hold = _split(batch.num_pairs, rng)

    # every spec is checked before any work
    plan = []
    for T in temps:
        for nn in ns:
            rows = [("plain", math.nan, b, b) for b in BASELINES]
            for family in families:
                values = grids[family] if grids[family] is not None else tuple(range(nn))
                for base in (bases if family != "hybrid" else ["wor"]):
                    rows += [(family, x, spec, base) for x, spec in family_specs(family, values, nn, base)]
            plan.append((T, nn, rows))

    out = []
    for T, nn, rows in plan:
        b = batch if T == batch.temperature else batch.at_temperature(T)
        alphas = alpha_star_grid(b.target, b.draft, nn, [r[2] for r in rows])
        wor, iid = alphas["wor"], alphas["iid"]
        for family, x, spec, base in rows:
            a = alphas[spec]
            mean, _, low, high = mean_interval(a)
            low, high = max(low, 0.0), min(high, 1.0)  # a mean of probabilities: the t interval can leave [0, 1]
            out.append({"temperature": T, "n": nn, "family": family, "parameter": x, "sampler": spec,
                        "base": base, "pairs": a.size, "alpha_star": mean, "ci95_low": low, "ci95_high": high,
                        "gain_vs_wor": float((a - wor).mean()), "gain_vs_iid": float((a - iid).mean()),
                        "selection": float(a[select].mean()), "heldout": float(a[hold].mean())})
        if progress:
            progress(1)
    df = pd.DataFrame(out)
    df["selected"] = False
    df["best_in_sample"] = False
    for _, group in df[df.family != "plain"].groupby(["temperature", "n", "family", "base"], sort=False):
        df.loc[group.selection.idxmax(), "selected"] = True  # first of ties: the lowest parameter listed
        df.loc[group.alpha_star.idxmax(), "best_in_sample"] = True
    if not verify:
        return df[COLUMNS]
    from .verifiers import acceptance_rate

    df["verifier"] = None
    df["verifier_heldout"] = math.nan
    for i in np.flatnonzero(df.selected.to_numpy()):
        row = df.iloc[i]
        name = optimal_verifier_for(row.sampler, int(row.n))
        if name is None:
            continue
        b = batch if row.temperature == batch.temperature else batch.at_temperature(row.temperature)
        rates = acceptance_rate(name, b.target[hold], b.draft[hold], int(row.n), sampler=row.sampler)
        df.loc[df.index[i], ["verifier", "verifier_heldout"]] = [name, float(np.mean(rates))]
    return df[COLUMNS + VERIFY_COLUMNS]
