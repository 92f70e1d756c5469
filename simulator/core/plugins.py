"""Plug-ins: the one place that turns a policy or acceptance-source spec into a class.

A spec that is not one of the built-in names (which the caller's registry resolves first) is either

- a name that an installed distribution registers as a Python entry point, in the group ``dspark_sim.policies``
  or ``dspark_sim.acceptance``; in that distribution's ``pyproject.toml``::

      [project.entry-points."dspark_sim.acceptance"]
      live = "mypackage.live:LiveSource"

- or an import string ``package.module:Class``, importable from where the command runs (``PYTHONPATH=.``).

A plug-in class must subclass the project's base (``simulator.core.policies.Policy`` or
``simulator.core.acceptance.AcceptanceSource``, of which ``simulator.core.acceptance.runtime.RuntimeSource`` is the kind
that generates real tokens), so that it inherits the flags and defaults the engine reads.

``source_files`` names the files a loaded class depends on; the run key hashes them, so that editing a plug-in
re-runs what it affects instead of serving stored numbers made by the old code.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from simulator.errors import UserError

POLICY_GROUP = "dspark_sim.policies"
ACCEPTANCE_GROUP = "dspark_sim.acceptance"


def entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The installed plug-ins of a group, by name (the first distribution wins a duplicate name)."""
    out: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=group):
        out.setdefault(ep.name, ep)
    return out


def registrar(registry: dict[str, type]) -> Callable[[type], type]:
    """The decorator that files a built-in class in ``registry`` under its ``name`` (which it must have)."""

    def register(cls: type) -> type:
        if not cls.name:
            raise ValueError(f"{cls.__qualname__} has no name")
        registry[cls.name] = cls
        return cls

    return register


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_plugin(spec: str, *, group: str, base: type, what: str, noun: str, known: Iterable[str] = ()) -> type:
    """The class a spec names: ``module:Class`` or an entry point of ``group``; it must subclass ``base``.

    what:  how an error names the field, e.g. ``"scn.yaml: systems[1].policy"``; noun: what kind of plug-in.
    known: the built-in names, listed (with the installed entry points) when the spec names nothing."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise UserError(f"{what}: {spec!r} is not an import string; expected package.module:Class")
        try:
            obj = importlib.import_module(module)
        except ImportError as exc:
            raise UserError(f"{what}: cannot import module {module!r} ({exc}); is it on PYTHONPATH?") from None
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{what}: module {module!r} has no {attr!r}") from None
        origin = spec
    else:
        eps = entry_points(group)
        if spec not in eps:
            names = [*known, *sorted(eps)]
            raise UserError(f"{what}: unknown {noun} {spec!r}{did_you_mean(spec, names)}; known: "
                            f"{', '.join(names)}, or package.module:Class")
        try:
            obj = eps[spec].load()
        except (ImportError, AttributeError) as exc:
            raise UserError(f"{what}: entry point {spec!r} of group {group} ({eps[spec].value}) does not load "
                            f"({type(exc).__name__}: {exc})") from None
        origin = f"{spec} ({eps[spec].value})"
    if not (isinstance(obj, type) and issubclass(obj, base)):
        kind = obj.__name__ if isinstance(obj, type) else type(obj).__name__ + " object"
        raise UserError(f"{what}: {origin} is {kind!r}, expected a subclass of {base.__module__}.{base.__qualname__}")
    return obj


def construct(cls: type, kwargs: dict, who: str, error: type[UserError] = UserError):
    """``cls(**kwargs)``, with one-line errors for parameters it does not take, parameters it lacks, and values its
    constructor rejects (by raising ValueError, the contract for a bad parameter value). ``who`` names the
    system or field in the error."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # some extension types have no signature: let the call decide
        sig = None
    if sig is not None:
        try:
            sig.bind(**kwargs)
        except TypeError as exc:
            params = sig.parameters.values()
            takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            open_ended = any(p.kind is p.VAR_KEYWORD for p in params)
            unknown = [] if open_ended else [k for k in kwargs if k not in takes]
            if unknown:
                msg = f"unknown parameter {unknown[0]!r}{did_you_mean(unknown[0], takes)}"
            else:
                msg = str(exc).replace("__init__() ", "")
            raise error(f"{who}: {msg}; {cls.__name__} takes {', '.join(takes) or 'no parameters'}") from None
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise error(f"{who}: {exc}") from None


def source_files(cls: type) -> list[Path]:
    """The source files a loaded class depends on: for each class of its MRO (its own base classes may live in
    the user's code too), the module's file, or every ``.py`` file of its top-level package when the module is
    part of a package (modules of a package import each other). Standard-library classes are skipped."""
    files: set[Path] = set()
    for klass in cls.__mro__:
        name = klass.__module__
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top == "builtins":
            continue
        module = sys.modules.get(name)
        if module is None:
            continue
        package = sys.modules.get(top)
        roots = getattr(package, "__path__", None) if (top != name or hasattr(module, "__path__")) else None
        if roots:
            files.update(p.resolve() for root in roots for p in Path(root).rglob("*.py"))
        elif getattr(module, "__file__", None):
            files.add(Path(module.__file__).resolve())
    return sorted(files)


def origin(cls: type) -> str:
    """Where a loaded class comes from, for a listing: ``built-in`` for the project's own, else ``plug-in`` and the
    file it was loaded from (relative to the working directory when under it), or its import string when the
    file is unknown."""
    if cls.__module__.partition(".")[0] == "simulator":
        return "built-in"
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:  # a class without a file (built in C, or made in an interactive session)
        file = None
    if not file:
        return f"plug-in {cls.__module__}:{cls.__qualname__}"
    path = Path(file).resolve()
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"plug-in {path}"
