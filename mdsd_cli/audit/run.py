"""The audit itself: stratified calls of the function, the sequential test, the report.

What the function is given and how its answers are read (tokens, accepted indices, failures) is in
:mod:`.calls`; the cases it runs on in :mod:`.cases`.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from ..errors import InputError
from ..samplers import get_sampler
from .betting import AcceptanceBoundTest, DirectionalBettingTest
from .calls import (
    DTYPES,
    BadOutput,
    case_inputs,
    check_indices,
    describe_failure,
    parse_results,
    replay,
    tuple_seed,
)
from .cases import AuditCase, resolve_cases
from .guards import Interrupt, deadline, no_process_exit
from .report import (
    ERROR,
    EXACT_TOLERANCE,
    LOSSY,
    PASSED,
    ROUNDING,
    ROUNDING_THRESHOLD,
    STOPPED,
    AuditReport,
    CaseResult,
    TupleEvidence,
)
from .strata import MAX_ENUMERATED, Strata, sampled_strata, stratify

#: Strata are at most this many, and at most one per this many calls of the case's budget.
MAX_STRATA = 20_000
CALLS_PER_STRATUM = 10
#: Rounds grow by this factor, from FIRST_ROUND_SHARE of the case's budget (at least MIN_ROUND calls) ...
ROUND_GROWTH = 1.5
FIRST_ROUND_SHARE = 1 / 500
MIN_ROUND = 200
#: ... up to this many calls.
MAX_ROUND = 50_000
#: Fewest calls a case may get: the first round (MIN_ROUND calls) only learns where to look, so a case
#: needs as many again for its test to have any power.
MIN_CALLS_PER_CASE = 2 * MIN_ROUND
#: Shares of a case's level: the test that its acceptance rate exceeds α*, the exact test of outputs that
#: never vary, and (the rest) the betting test on its output law.
ACCEPTANCE_SHARE = 0.1
CONSTANT_SHARE = 0.5
BETTING_SHARE = 1.0 - ACCEPTANCE_SHARE - CONSTANT_SHARE
#: mdsd's lossless verifier for each draft law: the reference the evidence of a failure is measured against.
REFERENCE_VERIFIERS = {"iid": "rrs", "wor": "rrsw", "greedy": "greedy", "hub": "hub", "topk": "topk"}
#: Strata reported as evidence of a failure: at most this many, ...
EVIDENCE = 3
#: ... each contributing at least this fraction of the largest contribution, and (after the first) at least
#: this many standard errors of sampling noise.
EVIDENCE_FRACTION = 0.05
EVIDENCE_NOISE = 2.0


class CaseRun:
    """The audit of one case, advanced one round at a time."""

    def __init__(self, fn, case: AuditCase, index: int, *, sampler: str, n: int, budget: int, seed: int,
                 level: float, dtype: str, law=None, stratified: bool = True,
                 rounding: float = ROUNDING_THRESHOLD, timeout: float | None = None, interrupt=None):
        from ..bounds import optimal_acceptance

        self.fn, self.case, self.index, self.level, self.rounding = fn, case, index, level, rounding
        self.timeout, self.interrupt = timeout, interrupt
        self.constant_pvalue = 1.0
        self.only_token, self.varied = None, False  # the one token output so far; whether outputs varied
        self.sampler = get_sampler(sampler)
        self.n, self.budget, self.seed = n, budget, seed
        self.seen_p, self.seen_q, self.p, self.q = case_inputs(case, dtype)
        self.V = self.p.size
        self.alpha_star = float(optimal_acceptance(self.p, self.q, n, sampler=sampler))
        limit = max(1, min(MAX_STRATA, budget // CALLS_PER_STRATUM))
        self.strata: Strata = (stratify(self.sampler, self.q, n, max_strata=limit) if stratified
                               else sampled_strata())
        G = self.strata.num_strata
        self.test = DirectionalBettingTest(self.p, self.strata.stratum_weight)
        self.acceptance_test = AcceptanceBoundTest(self.alpha_star)
        self.counts = np.zeros((G, self.V), dtype=np.int64)
        self.stratum_calls = np.zeros(G, dtype=np.int64)
        self.accepted = np.zeros(G, dtype=np.int64)
        self.member_calls = np.zeros(self.strata.num_tuples, dtype=np.int64)
        self.impossible = 0
        self.done = 0
        self.round = max(MIN_ROUND, int(budget * FIRST_ROUND_SHARE))
        self.status, self.reason = PASSED, ""
        self.exact_error, self.exact_acceptance = math.nan, None
        self.exact_evidence: list = []
        self.design_rng = np.random.default_rng(np.random.SeedSequence([seed, index], spawn_key=(0,)))
        self.seed_base = tuple_seed(seed, index, 0)
        if self.strata.kind == "sampled":
            self.sampled_seed = tuple_seed(seed, index, 2**32 - 1)
            self.sampled_rng = np.random.default_rng(self.sampled_seed)
        else:
            rows = self.strata.tuples.copy()
            rows.flags.writeable = False
            self.rows = list(rows)
            self.rngs: list = [None] * self.strata.num_tuples
        if law is not None:
            self._exact(law)

    @property
    def active(self) -> bool:
        return self.status in (PASSED, ROUNDING) and self.done < self.budget

    @contextlib.contextmanager
    def _guard(self, progress):
        """Around the function's calls: numpy's error state is the harness's again afterwards (the function
        may call np.seterr), os._exit/os.abort raise, a call past the timeout raises, and Ctrl-C interrupts."""
        calls = self.interrupt.calls() if self.interrupt is not None else contextlib.nullcontext()
        with np.errstate(), no_process_exit(), deadline(self.timeout, progress), calls:
            yield

    # --- the exact law ------------------------------------------------------------------------
    def _exact(self, law) -> None:
        """``sum_x P(x) law(x)`` over every draft tuple (when at most MAX_ENUMERATED), against ``p``."""
        if self.sampler.estimate_tuples(self.q, self.n) > MAX_ENUMERATED:
            return
        tuples, prob = self.sampler.tuple_law(self.q, self.n, max_tuples=MAX_ENUMERATED)
        keep = prob > 0
        tuples, prob = tuples[keep], prob[keep] / prob[keep].sum()
        tuples.flags.writeable = False
        laws = np.empty((prob.size, self.V))
        acceptance = 0.0
        for t, row in enumerate(tuples):
            try:
                with self._guard(lambda: None):
                    values = np.asarray(law(self.seen_p, self.seen_q, row), dtype=np.float64)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit included: the law's own failure, reported for this case
                self._fail(ERROR, f"the law function {describe_failure(exc)} on drafts {tuple(row.tolist())}")
                return
            if values.shape != (self.V,) or not np.isfinite(values).all() or values.min() < -1e-12 \
                    or abs(values.sum() - 1.0) > 1e-9:
                self._fail(ERROR, f"the law function returned no distribution over the V = {self.V} tokens "
                                  f"on drafts {tuple(row.tolist())} (shape {values.shape}, sum {values.sum():.12g})")
                return
            laws[t] = values
            acceptance += prob[t] * values[np.unique(row)].sum()
        departure = prob @ laws - self.p
        self.exact_error = float(np.abs(departure).max())
        self.exact_acceptance = acceptance
        if EXACT_TOLERANCE < self.exact_error <= self.rounding:
            self._fail(ROUNDING, f"the exact output law differs from p by up to {self.exact_error:.3g}: rounding "
                                 f"level (at most {self.rounding:g}), not counted as a loss")
        elif self.exact_error > EXACT_TOLERANCE:
            self._fail(LOSSY, f"the exact output law differs from p by up to {self.exact_error:.3g} (more than "
                              f"the rounding threshold {self.rounding:g})")
            reference = self._reference_laws(tuples)
            if reference is None:
                return
            # each tuple's share of sum_y |departure_y| = 2 TV, relative to the lossless reference
            contribution = prob * ((laws - reference) @ np.sign(departure))
            total = float(np.abs(departure).sum())
            for t in np.argsort(-contribution, kind="stable")[:EVIDENCE]:
                if not contribution[t] > 0 or contribution[t] < EVIDENCE_FRACTION * contribution.max():
                    break
                self.exact_evidence.append(TupleEvidence(
                    drafts=tuple(int(x) for x in tuples[t]), stratum_weight=float(prob[t]),
                    contribution=float(contribution[t]), output_counts=np.zeros(self.V, dtype=np.int64), calls=0,
                    seed=-1, law=laws[t].copy(), total=total, reference=self.reference_name,
                    reference_law=reference[t].copy()))

    @property
    def reference_name(self) -> str:
        return f"mdsd:{REFERENCE_VERIFIERS[self.sampler.name]}"

    def _reference_laws(self, tuples: np.ndarray) -> np.ndarray | None:
        """Exact conditional laws ``[M, V]`` of mdsd's lossless verifier for the draft law on ``tuples``
        (None if it cannot be set up for this pair)."""
        from ..errors import MdsdError
        from ..verifiers import prepare_verifier

        try:
            verifier = prepare_verifier(REFERENCE_VERIFIERS[self.sampler.name], self.p, self.q, self.n,
                                        sampler=self.sampler.name)
            return verifier.output_laws(tuples)
        except MdsdError:
            return None

    def _fail(self, status: str, reason: str) -> None:
        if self.status == PASSED or self.status == ROUNDING and status != ROUNDING:
            self.status, self.reason = status, reason

    def stop(self, why: str = "the audit stopped at another case's failure") -> None:
        """Mark the case unfinished (``fail_fast`` stopped the audit at another case, or Ctrl-C)."""
        if self.active:
            self.status, self.reason = STOPPED, (f"not finished: {why} after {self.done:,} of {self.budget:,} "
                                                 "calls")

    def _constant_pvalue(self) -> float:
        """When every output so far is one token: the largest probability, over every lossless function, of
        outputs that never vary, given the calls made in each stratum (else 1).

        Under losslessness the strata's output laws L_g mix to p (sum_g w_g L_g = p) and nothing else is known.
        The chance that all m_g calls of every stratum return token y is prod_g L_g(y)^m_g, largest (over the
        L_g(y) in [0, 1] with sum_g w_g L_g(y) = p(y)) at L_g(y) = min(1, m_g / (lambda w_g)): water-filling
        on the calls per unit of weight. The events "always y" are disjoint, so the p-value is the sum over y.
        """
        if self.varied or self.only_token is None:
            return 1.0
        w = self.strata.stratum_weight
        m = self.stratum_calls.astype(np.float64)
        called = m > 0
        w, m = w[called], m[called]
        r = m / w
        order = np.argsort(-r, kind="stable")
        w, m, r = w[order], m[order], r[order]
        # At lambda = r_j strata 0..j give y with probability 1, the rest m_g / (lambda w_g):
        # S_j = sum_g min(w_g, m_g / r_j), increasing in j.
        head_w, head_m = np.cumsum(w), np.cumsum(m)
        S = head_w + (m.sum() - head_m) / r
        tail_mlogr = np.append(np.cumsum((m * np.log(r))[::-1])[::-1], 0.0)  # sum over g >= k
        p = self.p[self.p > 0]
        k = np.searchsorted(S, p)  # S[k-1] < p(y) <= S[k]: strata 0..k-1 at 1
        free = k >= S.size  # p(y) above the called strata's weight: they can all give y
        kk = np.minimum(k, S.size - 1)
        at_one_w = np.where(kk > 0, head_w[kk - 1], 0.0)
        rest_m = m.sum() - np.where(kk > 0, head_m[kk - 1], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = rest_m / (p - at_one_w)
            log_sup = np.minimum(0.0, tail_mlogr[kk] - rest_m * np.log(lam))
        log_sup = np.where(free, 0.0, log_sup)
        return float(min(1.0, math.fsum(np.exp(log_sup).tolist())))

    # --- one round ------------------------------------------------------------------------------
    def step(self) -> int:
        """Make one round of calls; returns how many."""
        b = min(self.round, self.budget - self.done)
        self.round = min(MAX_ROUND, int(self.round * ROUND_GROWTH))
        plan = self.test.plan(self.counts, self.stratum_calls)
        if self.strata.kind == "sampled":
            strata = np.zeros(b, dtype=np.int64)
            drafts = self.sampler.sample(self.q, self.n, self.design_rng, b)
            drafts.flags.writeable = False
            rows = list(drafts)
            results, failure = self._call_sampled(rows)
            members = None
            drafted = drafts
        else:
            strata = self.design_rng.choice(self.strata.num_strata, size=b, p=plan.allocation)
            members = self.strata.draw_members(strata, self.design_rng)
            for t in np.unique(members).tolist():
                if self.rngs[t] is None:
                    self.rngs[t] = np.random.default_rng((self.seed_base + t) % 2**32)
            results, failure = self._call_strata(members.tolist())
            drafted = self.strata.tuples[members]
        made = len(results)
        if failure is not None:
            self.done += made + 1
            if members is None:
                where = rows[made]
                replay = f"call {self.done:,} of the case, its generator seeded {self.sampled_seed}"
            else:
                t = int(members[made])
                where = self.rows[t]
                calls = int(self.member_calls[t] + np.count_nonzero(members[:made] == t)) + 1
                replay = f"replay: seed {tuple_seed(self.seed, self.index, t)}, {calls:,} calls"
            self._fail(ERROR, f"the function {describe_failure(failure)} on drafts {tuple(where.tolist())} "
                              f"({replay})")
            return made + 1
        self.done += made
        try:
            tokens, indices = parse_results(results, self.V)
            if indices is not None:
                check_indices(drafted, tokens, indices)
        except BadOutput as exc:
            self._fail(ERROR, f"the function {exc}")
            return made
        G = self.strata.num_strata
        self.counts += np.bincount(strata * self.V + tokens, minlength=G * self.V).reshape(G, self.V)
        self.stratum_calls += np.bincount(strata, minlength=G)
        # accepted: the index the function gives, else an output equal to one of the drafts
        hit = indices >= 0 if indices is not None else (drafted == tokens[:, None]).any(axis=1)
        self.accepted += np.bincount(strata, weights=hit, minlength=G).astype(np.int64)
        if members is not None:
            self.member_calls += np.bincount(members, minlength=self.strata.num_tuples)
        if not self.varied and tokens.size:
            first = int(tokens[0]) if self.only_token is None else self.only_token
            self.only_token, self.varied = first, bool((tokens != first).any())
        impossible = int(np.count_nonzero(~(self.p[tokens] > 0)))
        self.impossible += impossible
        self.test.observe(plan, strata, tokens)
        self.acceptance_test.observe(plan.ratio[strata], hit.astype(np.float64))
        if impossible:
            y = int(tokens[np.argmax(~(self.p[tokens] > 0))])
            self._fail(LOSSY, f"{self.impossible} output(s) of target probability 0 (token {y})")
        elif self._check_constant():
            y = self.only_token
            self._fail(LOSSY, f"all {self.done:,} outputs are token {y} (target probability {self.p[y]:.6g}): a "
                              f"lossless function gives outputs that never vary with probability at most "
                              f"{self.constant_pvalue:.3g} <= {CONSTANT_SHARE * self.level:.3g}")
        elif self.test.pvalue <= BETTING_SHARE * self.level:
            self._fail(LOSSY, f"output law departs from p (p-value {self.pvalue:.3g} <= {self.level:.3g})")
        elif self.acceptance_test.pvalue <= ACCEPTANCE_SHARE * self.level:
            rate = float(self.strata.stratum_weight @ (self.accepted / np.maximum(self.stratum_calls, 1)))
            self._fail(LOSSY, f"acceptance {rate:.3g} above alpha* = {self.alpha_star:.3g}, which no lossless "
                              f"verifier exceeds (p-value {self.pvalue:.3g} <= {self.level:.3g})")
        return made

    def _check_constant(self) -> bool:
        self.constant_pvalue = self._constant_pvalue()
        return self.constant_pvalue <= CONSTANT_SHARE * self.level

    @property
    def pvalue(self) -> float:
        """The case's p-value: the output-law test's, the acceptance test's and the constant-output test's,
        Bonferroni-weighted."""
        return min(1.0, self.test.pvalue / BETTING_SHARE, self.acceptance_test.pvalue / ACCEPTANCE_SHARE,
                   self.constant_pvalue / CONSTANT_SHARE)

    def _call_strata(self, order: list):
        fn, p, q, rows, rngs = self.fn, self.seen_p, self.seen_q, self.rows, self.rngs
        results: list = []
        append = results.append
        try:
            # the function may change numpy's error handling (np.seterr): not for the harness; nor end the process
            with self._guard(results.__len__):
                for t in order:
                    append(fn(p, q, rows[t], rngs[t]))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the function's own failure (SystemExit included): reported for this case
            return results, exc
        return results, None

    def _call_sampled(self, rows: list):
        fn, p, q, rng = self.fn, self.seen_p, self.seen_q, self.sampled_rng
        results: list = []
        append = results.append
        try:
            with self._guard(results.__len__):
                for row in rows:
                    append(fn(p, q, row, rng))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            return results, exc
        return results, None

    # --- the result -----------------------------------------------------------------------------
    def result(self) -> CaseResult:
        w = self.strata.stratum_weight
        called = self.stratum_calls > 0
        m = np.maximum(self.stratum_calls, 1)
        laws = np.where(called[:, None], self.counts / m[:, None], self.p)
        # Sums in a fixed order (rows added one after another, math.fsum), not BLAS products, whose
        # rounding depends on the processor and the thread count: the table is the same on every machine.
        estimate = (w[:, None] * laws).sum(axis=0)
        tv, tv_noise = math.nan, math.nan
        rate = np.where(called, self.accepted / m, 0.0)
        if called.any():
            # to 1e-14: below that it is the rounding of the weights (which sum to 1 only to ~1e-16)
            tv = round(0.5 * math.fsum(np.abs(estimate - self.p)), 14)
            spread = laws * (1.0 - laws)
            if not (spread * called[:, None]).any():  # outputs that never vary: the noise a stratum with law p would give
                spread = np.broadcast_to(self.p * (1.0 - self.p), laws.shape)
            variance = (((w * w / m) * called)[:, None] * spread).sum(axis=0)
            tv_noise = 0.5 * math.sqrt(2.0 / math.pi) * math.fsum(np.sqrt(variance))
            covered = math.fsum(w[called])
            acceptance = math.fsum(w[called] * rate[called]) / covered
            smooth = (self.accepted + 0.5) / (self.stratum_calls + 1.0)
            se = math.sqrt(math.fsum((w * w / m) * called * (smooth * (1.0 - smooth)))) / covered
        else:
            acceptance, se = math.nan, math.nan
        if self.exact_acceptance is not None:
            acceptance, se = float(self.exact_acceptance), 0.0
        evidence = (self.exact_evidence or self._evidence()) if self.status == LOSSY else []
        return CaseResult(case=self.case, index=self.index, status=self.status, reason=self.reason,
                          design=self.strata.kind, strata=self.strata.num_strata, calls=self.done, tv=tv,
                          tv_noise=tv_noise, statistic=self.test.max_log_wealth, pvalue=self.pvalue,
                          impossible=self.impossible, acceptance=acceptance, acceptance_se=se,
                          alpha_star=self.alpha_star, exact_error=self.exact_error, evidence=evidence)

    def _evidence(self) -> list:
        """The strata carrying the failure, largest share first.

        Impossible outputs: each stratum's weighted frequency of them. Otherwise, with ``L_g`` the
        stratum's observed output law, ``R_g`` the exact law of mdsd's lossless verifier for the draft
        law (:data:`REFERENCE_VERIFIERS`) on the same tuples, ``D = sum_g w_g L_g - p`` and
        ``s = sign(D)``: since ``sum_g w_g R_g = p``, the shares ``w_g (L_g - R_g) . s`` add up to
        ``D . s = 2 TV`` exactly, and a stratum where the function behaves as the reference carries 0
        (up to noise). After the first, a stratum is named only if its share is at least
        :data:`EVIDENCE_NOISE` standard errors of the noise of its estimate.
        """
        if self.strata.kind == "sampled" or not self.stratum_calls.any():
            return []
        w = self.strata.stratum_weight
        called = self.stratum_calls > 0
        m = np.maximum(self.stratum_calls, 1)
        observed = self.counts / m[:, None]
        reference_law = None
        if self.impossible:
            score = w * observed[:, ~(self.p > 0)].sum(axis=1)
            total, reference = float(score.sum()), ""
        else:
            member_laws = self._reference_laws(self.strata.tuples)
            if member_laws is None:
                return []
            group = self.strata.stratum_of()
            reference_law = np.zeros((self.strata.num_strata, self.V))
            np.add.at(reference_law, group, (self.strata.weight / w[group])[:, None] * member_laws)
            laws = np.where(called[:, None], observed, reference_law)
            departure = w @ laws - self.p
            sign = np.sign(departure)
            score = w * ((laws - reference_law) @ sign)
            total, reference = float(np.abs(departure).sum()), self.reference_name
            spread = np.maximum(laws @ (sign * sign) - (laws @ sign) ** 2, 0.0)
            noise = w * np.sqrt(spread / m)
        score = np.where(called, score, -np.inf)
        out = []
        top = float(score.max())
        for g in np.argsort(-score, kind="stable")[:EVIDENCE]:
            if not score[g] > 0 or score[g] < EVIDENCE_FRACTION * top:
                break
            if out and reference and score[g] < EVIDENCE_NOISE * noise[g]:
                continue
            lo, hi = self.strata.start[g], self.strata.start[g + 1]
            t = int(lo + np.argmax(self.member_calls[lo:hi]))
            out.append(TupleEvidence(drafts=tuple(int(x) for x in self.strata.tuples[t]),
                                     stratum_weight=float(w[g]), contribution=float(score[g]),
                                     output_counts=self.counts[g].copy(), calls=int(self.member_calls[t]),
                                     seed=tuple_seed(self.seed, self.index, t), total=total, reference=reference,
                                     reference_law=None if reference_law is None else reference_law[g].copy()))
        return out


def _notes(case_list, level: float, per_case: int) -> list[str]:
    """Cases where the budget cannot catch a function that always returns the likeliest token."""
    notes = []
    for c in case_list:  # can the budget catch a function that always returns the likeliest token?
        top = float(np.max(c.p))
        if 0.0 < top < 1.0:
            need = math.ceil(math.log(CONSTANT_SHARE * level) / math.log(top))
            if per_case < need:
                notes.append(f"case {c.name}: {per_case:,} calls cannot detect a function that always returns its "
                             f"likeliest token (target probability {top:.6g}); that takes at least {need:,} calls "
                             f"per case (a budget of {need * len(case_list):,})")
    return notes


def _audit_rounds(runs, *, fail_fast: bool, progress, interrupt) -> None:
    """Round after round over the active cases, until each has spent its budget, failed, or was stopped."""
    advance = progress or (lambda k: None)
    for run in runs:
        if not run.active:
            advance(run.budget - run.done)
    while any(r.active for r in runs):
        for run in runs:
            if not run.active:
                continue
            made = run.step()
            advance(made if run.active else made + run.budget - run.done)
            if fail_fast and run.status in (LOSSY, ERROR) or interrupt.requested:
                break
        if interrupt.requested:
            break
        if fail_fast and any(r.status in (LOSSY, ERROR) for r in runs):
            for r in runs:
                if r.active:
                    advance(r.budget - r.done)
                    r.stop()
            break


def audit_verifier(fn, *, sampler: str = "iid", n: int, cases="battery", budget: int = 1_000_000,
                   alpha: float = 0.01, seed: int = 0, law=None, dtype: str = "float64", fail_fast: bool = False,
                   random_count: int = 10, stratified: bool = True, progress=None,
                   rounding: float = ROUNDING_THRESHOLD, timeout: float | None = None) -> AuditReport:
    """Audit a verifier function: is its output distributed as ``p``, and how far is its acceptance from α*?

    Parameters
    ----------
    fn : callable
        ``fn(p, q, drafts, rng) -> token`` or ``-> (token, accepted_index)`` (see
        :mod:`mdsd_cli.audit.callables`; :func:`~mdsd_cli.audit.adapt_callable` wraps torch functions).
    sampler : {"iid", "wor", "greedy", "hub"}
        The draft law the function is meant for; the audit draws the drafts from it.
    n : int
        Number of drafts.
    cases : "battery", "random", PairBatch or sequence of AuditCase or (p, q)
        The pairs to audit on (default: the adversarial battery of :mod:`mdsd_cli.audit.cases`).
    budget : int
        Calls of ``fn`` in all; each case gets an equal share.
    alpha : float
        Family-wise significance level: the chance that a lossless function is reported lossy
        on any case is at most ``alpha`` (Bonferroni: each case is tested at ``alpha / cases``).
    seed : int
        Seeds every generator (the design's and the one each draft tuple's calls receive).
    law : callable, optional
        ``law(p, q, drafts) -> [V]``, the function's exact conditional output law. On cases whose
        draft tuples can be enumerated the output law ``sum_x P(x) law(x)`` is then computed exactly:
        an exact proof, or disproof, of losslessness there.
    dtype : {"float64", "float32", "float16"}
        The float type of the ``p`` and ``q`` the function receives; the audit tests against those
        values (renormalised).
    fail_fast : bool
        Stop every case as soon as one is found lossy or failing; the cases left unfinished are
        reported ``stopped``.
    random_count : int
        Number of cases for ``cases="random"``.
    stratified : bool
        False: draw every tuple from the sampler (plain Monte Carlo of the output law, one
        stratum), to measure what stratification gains; no tuple is then named as evidence.
    progress : callable, optional
        Called with the number of calls made after every round.
    rounding : float
        With ``law``: an exact output law within this of ``p`` (largest absolute difference) but not
        within 1e-9 is reported ``rounding`` with its size, not ``lossy`` (the function's own float
        arithmetic); 0 counts every departure above 1e-9 as a loss.
    timeout : float, optional
        Seconds one call of ``fn`` (or ``law``) may take: a call still running after between
        ``timeout`` and twice that is its case's error, with the drafts and seed that replay it
        (main thread only, by ``SIGALRM``; native code that never returns to Python is not
        interrupted). None: no limit.

    Returns
    -------
    AuditReport

    The calls are made round by round, the cases in turn: each case has its own generators, so its
    result does not depend on the others (or on ``fail_fast``, up to where that stops it). Ctrl-C
    (SIGINT, in the main thread) stops the audit after the round in progress: the report then has
    ``interrupted`` set, and the unfinished cases are ``stopped`` with what they found so far.
    """
    if not callable(fn):
        raise InputError(f"the function to audit must be callable, got a {type(fn).__name__}")
    if law is not None and not callable(law):
        raise InputError(f"the law must be callable, got a {type(law).__name__}")
    s = get_sampler(sampler)
    n = s.check_n(n)
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; choose {', '.join(DTYPES)}")
    if not 0.0 <= rounding < 1.0:
        raise InputError(f"the rounding threshold must lie in [0, 1), got {rounding}")
    case_list = resolve_cases(cases, n, seed=seed, count=random_count, dtype=dtype)
    per_case = int(budget) // len(case_list)
    if per_case < MIN_CALLS_PER_CASE:
        raise InputError(f"a budget of {budget:,} calls gives {per_case} per case for {len(case_list)} cases, too few "
                         f"for the test to detect anything (its first {MIN_ROUND} calls only learn where to look); "
                         f"give at least {MIN_CALLS_PER_CASE * len(case_list):,}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise InputError(f"timeout must be a positive number of seconds (or None for no limit), got {timeout!r}")
    level = alpha / len(case_list)
    with Interrupt() as interrupt:
        # Ctrl-C while the exact laws are computed ends the audit (KeyboardInterrupt): nothing to report yet
        runs = [CaseRun(fn, c, i, sampler=s.name, n=n, budget=per_case, seed=seed, level=level, dtype=dtype,
                        law=law, stratified=stratified, rounding=rounding, timeout=timeout, interrupt=interrupt)
                for i, c in enumerate(case_list)]
        try:
            _audit_rounds(runs, fail_fast=fail_fast, progress=progress, interrupt=interrupt)
        except KeyboardInterrupt:
            interrupt.requested = True
        if interrupt.requested:
            for r in runs:
                if r.active:
                    r.stop("interrupted (Ctrl-C)")
    notes = _notes(case_list, level, per_case)
    mutated = getattr(fn, "mutated", None)
    if mutated:
        notes.append(f"the function writes into its input {' and '.join(mutated)} in place; each call was given "
                     "fresh copies, so it was audited as if it owned its inputs (a caller sharing p or q between "
                     "calls would see them changed)")
    return AuditReport(cases=[r.result() for r in runs], sampler=s.name, n=n, alpha=alpha, level=level,
                       budget=int(budget), seed=seed, rounding_threshold=rounding, notes=notes,
                       interrupted=interrupt.requested)


__all__ = ["DTYPES", "CaseRun", "audit_verifier", "case_inputs", "replay", "resolve_cases", "tuple_seed"]
