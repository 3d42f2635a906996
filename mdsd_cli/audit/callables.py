"""The functions an audit calls: loading them by name, adapting torch or batched ones, wrapping mdsd's.

The audited function has the signature ``verify(p, q, drafts, rng)``:

* ``p``, ``q``: the target and draft distributions, read-only numpy arrays ``[V]``;
* ``drafts``: the draft tuple, a read-only int64 array ``[k]`` in drawing order;
* ``rng``: a ``numpy.random.Generator``, the function's only source of randomness;

and returns the output token (an integer), or ``(token, accepted_index)`` with the
index None or -1 when no draft was accepted. :func:`adapt_callable` turns a
function taking torch tensors (``[V]`` or batched ``[1, V]``, a ``torch.Generator``)
into one of this form.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import numpy as np

from ..errors import CallableError, InputError, option
from .guards import CallTimeout

#: The prefix naming one of mdsd's own verifiers instead of a file or module.
MDSD_PREFIX = "mdsd:"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _import_failure(exc: BaseException) -> str:
    text = _first_line(exc)
    if isinstance(exc, SystemExit):
        text += " (it exits when imported: put the code that runs it under if __name__ == '__main__')"
    return text


def _defined_callables(namespace) -> str:
    names = [k for k, v in vars(namespace).items() if callable(v) and not k.startswith("_")
             and getattr(v, "__module__", None) == getattr(namespace, "__name__", None)]
    return ", ".join(sorted(names)[:12]) or "none"


def load_callable(spec: str, *, n: int | None = None, sampler: str | None = None, law: bool = False):
    """The function named by ``spec``: ``PATH.py:function``, ``module:function`` or ``mdsd:VERIFIER``.

    ``function`` may be dotted (``Class.method``, ``obj.attr``). A file is imported as a
    module of its own, with its directory on ``sys.path`` (so that it can import its
    neighbours); a module name is looked up on ``sys.path`` and the current directory.
    ``mdsd:rrs`` is mdsd's ``rrs`` wrapped by :func:`as_callable` (it needs ``n``); with
    ``law=True`` its exact conditional law instead.

    Raises
    ------
    CallableError
        No colon, a missing file or module, a syntax error or an exception while importing
        (``SystemExit`` included: a module calling ``sys.exit`` or parsing arguments on import),
        a missing attribute, or an attribute that is not callable.
    """
    spec = str(spec)
    if spec.startswith(MDSD_PREFIX):
        name = spec[len(MDSD_PREFIX):]
        if n is None:
            raise CallableError(f"{spec}: mdsd's verifiers need the number of drafts n")
        wrapped = as_callable(name, n, sampler=sampler)
        return wrapped.output_law if law else wrapped
    source, sep, attribute = spec.rpartition(":")
    if not sep or not source or not attribute:
        raise CallableError(f"cannot tell the function from {spec!r}; give PATH.py:function, module:function "
                            "or mdsd:VERIFIER")
    if source.endswith(".py") or os.sep in source or "/" in source:
        namespace = _import_file(Path(source))
        where = source
    else:
        namespace = _import_module(source)
        where = f"module {source}"
    obj = namespace
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise CallableError(f"{where} has no {attribute!r}; the functions it defines: "
                                f"{_defined_callables(namespace)}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CallableError(f"{source}:{attribute} is a {type(obj).__name__}, not a function; give a function "
                            "verify(p, q, drafts, rng)")
    return obj


def _import_file(path: Path):
    if not path.exists():
        raise CallableError(f"file {path} not found")
    if path.is_dir():
        raise CallableError(f"{path} is a directory; give a .py file")
    try:
        code = compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        raise CallableError(f"{path}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise CallableError(f"cannot read {path}: {_first_line(exc)}") from None
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"mdsd_audited_{path.stem}_{len(sys.modules)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the user's own file is the point
    except (KeyboardInterrupt, CallTimeout):
        del sys.modules[name]
        raise
    except BaseException as exc:  # SystemExit included (sys.exit, argparse at module level)
        del sys.modules[name]
        raise CallableError(f"importing {path} raised {_import_failure(exc)}") from None
    return module


def _import_module(name: str):
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise CallableError(f"no module named {exc.name!r}; give PATH.py:function for a file, or run from the "
                                "directory that holds the module") from None
        raise CallableError(f"importing module {name} raised {_import_failure(exc)}") from None
    except SyntaxError as exc:
        raise CallableError(f"module {name}, {exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
    except (KeyboardInterrupt, CallTimeout):
        raise
    except BaseException as exc:  # SystemExit included (sys.exit, argparse at module level)
        raise CallableError(f"importing module {name} raised {_import_failure(exc)}") from None


class MdsdVerifierCallable:
    """One of mdsd's verifiers as a plain ``verify(p, q, drafts, rng) -> (token, index)`` function.

    The verifier's set-up is done once per ``(p, q)`` (recognised by identity, as the audit passes
    the same arrays for every call of a case). :meth:`output_law` gives its exact conditional law.
    """

    def __init__(self, name: str, n: int, sampler: str | None = None):
        from ..verifiers import get_verifier

        cls = get_verifier(name)  # unknown names fail now, with the list
        if sampler is not None and cls.samplers is not None and sampler not in cls.samplers:
            raise InputError(f"mdsd's {name} is lossless for {'/'.join(cls.samplers)} drafts only, not {sampler!r}; "
                             f"audit it with {option('--sampler ' + cls.samplers[0], 'sampler=' + repr(cls.samplers[0]))}")
        if cls.fixed_n is not None and n != cls.fixed_n:
            raise InputError(f"mdsd's {name} is defined for n = {cls.fixed_n} only, got n = {n}")
        self.name, self.n, self.sampler = name, int(n), sampler
        self._pair = None
        self._verifier = None
        self.__name__ = f"mdsd:{name}"

    def _prepared(self, p, q):
        from ..verifiers import prepare_verifier

        if self._pair is None or self._pair[0] is not p or self._pair[1] is not q:
            self._verifier = prepare_verifier(self.name, p, q, self.n, sampler=self.sampler)
            self._pair = (p, q)
        return self._verifier

    def __call__(self, p, q, drafts, rng):
        result = self._prepared(p, q).verify(drafts, rng)
        return result.token, result.index

    def output_law(self, p, q, drafts) -> np.ndarray:
        """Exact ``P(Y = . | X = drafts)``."""
        v = self._prepared(p, q)
        return v.output_law(v.check_drafts(drafts))


def as_callable(name: str, n: int, *, sampler: str | None = None) -> MdsdVerifierCallable:
    """mdsd's verifier ``name`` for ``n`` drafts as a plain audited function (see :class:`MdsdVerifierCallable`)."""
    return MdsdVerifierCallable(name, n, sampler)


def _python_value(x):
    """A torch tensor or numpy array of one element as a Python number; None stays None."""
    if x is None or isinstance(x, (int, np.integer)):
        return x
    if hasattr(x, "numel") and hasattr(x, "item"):  # torch
        return x.item() if x.numel() == 1 else x
    if isinstance(x, np.ndarray) and x.size == 1:
        return x.item()
    return x


def _python_result(out):
    if isinstance(out, (tuple, list)):
        return tuple(_python_value(v) for v in out)
    return _python_value(out)


def adapt_callable(fn, *, framework: str = "numpy", batched: bool = False, device: str = "cpu"):
    """``fn`` made into the audited form ``verify(p, q, drafts, rng)`` on numpy arrays.

    Parameters
    ----------
    fn : callable
        The function as written: ``fn(p, q, drafts, rng)``.
    framework : {"numpy", "torch"}
        ``torch``: ``fn`` receives torch tensors (``p``, ``q`` in the dtype the audit was
        given, on ``device``; drafts int64) and a ``torch.Generator`` seeded from the
        audit's generator at every call (so every call is reproducible).
    batched : bool
        ``fn`` wants a batch of one: ``p``, ``q`` of shape ``[1, V]``, drafts ``[1, k]``; it may
        return ``[1]``-shaped results.
    device : str
        torch device of the tensors.

    The tensors of ``p`` and ``q`` are made once per case; a function that changes them in place
    (torch counts every in-place write in a tensor's version) gets fresh copies from then on, for
    every call, and the adapter's ``mutated`` attribute says which inputs it changed (the audit
    reports it). Results that are one-element tensors or arrays become Python numbers.
    """
    if framework not in ("numpy", "torch"):
        raise InputError(f"unknown framework {framework!r}; choose numpy or torch")
    if framework == "numpy" and not batched:
        return fn
    if framework == "numpy":
        def batched_numpy(p, q, drafts, rng):
            return _python_result(fn(p[None, :], q[None, :], drafts[None, :], rng))

        return batched_numpy
    try:
        import torch
    except ImportError:
        raise InputError("the torch adapter needs torch; install it (make install puts a CPU build in .venv)") from None
    try:
        generator = torch.Generator(device=device)
    except RuntimeError as exc:
        raise InputError(f"torch device {device!r} is not available: {_first_line(exc)}") from None
    cache: dict = {}

    def tensors(p, q):
        tp, tq = torch.tensor(p, device=device), torch.tensor(q, device=device)
        return (tp[None, :], tq[None, :]) if batched else (tp, tq)

    def torch_call(p, q, drafts, rng):
        if cache.get("key") is None or cache["key"][0] is not p or cache["key"][1] is not q:
            cache["tensors"] = tensors(p, q)
            cache["key"] = (p, q)
        elif torch_call.mutated:  # the function writes into its inputs: a fresh copy for every call
            cache["tensors"] = tensors(p, q)
        tp, tq = cache["tensors"]
        versions = (tp._version, tq._version)
        td = torch.from_numpy(np.array(drafts, dtype=np.int64)).to(device)  # a copy: the audit's rows are read-only
        generator.manual_seed(int(rng.integers(2**63 - 1)))
        out = _python_result(fn(tp, tq, td[None, :] if batched else td, generator))
        changed = [name for name, t, v in (("p", tp, versions[0]), ("q", tq, versions[1])) if t._version != v]
        if changed:
            torch_call.mutated = sorted(set(torch_call.mutated) | set(changed))
            cache["tensors"] = tensors(p, q)
        return out

    torch_call.mutated = []
    return torch_call
