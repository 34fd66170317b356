"""Module summaries as plain JSON, and back, with every field's type checked (see `checked_json`),
and where they are kept: a folder through which a run's workers share the summaries they compute,
and the result cache, which keeps them between runs (see `keeping_summaries`)."""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable, Iterator, TypeVar

from trainlint.checked_json import (
    BadEntry,
    decode_states,
    dumps,
    flag,
    header,
    items,
    mapping,
    opt_flag,
    opt_text,
    text,
)
from trainlint.reading import State, current_state, digest, read_regular

STORE_FORMAT = 25  # the layout of a stored summary (3: the calls a module makes every step; 4: the instances it passes; 6: where each function is defined; 7: the parameter a function returns; 8: calls made whenever a function runs; 9: the attributes of `self` a method calls; 10: the parameter a function steps; 11: methods set on classes from outside, arguments saved from the caller's frame; 12: layers a function replaces, the modules a returned optimizer holds, returned probabilities, library losses passed; 13: what a function does with its parameters; 14: one summary per module content, no variants; 15: torch layers and other modules' classes a class holds, the gradient flags it lacks; 16: the parameters a function calls, the methods it calls on self; 17: whether the module puts work on a device; 18: the attributes a class's constructor sets from its parameters; 19: what a dict holds by key; 20: the parameters a function reads on the host; 21: the methods a module calls with grad; 22: the parameters a returned tensor is computed from; 23: the methods a module calls without grad; 24: the methods of its class a method of an outlined module calls; 25: the parameter some `return`s give back, and what the others give)

if TYPE_CHECKING:
    from trainlint.model.lattice import Value
    from trainlint.model.summary import ClassSummary, FunctionSummary, ModuleSummary


_SUMMARY_KEYS = frozenset({"trainlint", "summary", "depends"})


def encode_summary(summary: ModuleSummary, depends: set[State], version: int) -> bytes:
    """A module's summary and the states of the files it was computed from."""
    return dumps({
        "trainlint": version,
        "summary": [
            {k: _encode_function(f) for k, f in summary.functions.items()},
            {k: [c.kind.value, {m: _encode_function(f) for m, f in c.methods.items()}, list(c.bases), list(c.registered),
                 {a: _encode_value(v) for a, v in c.attributes.items()}, list(c.lacks), list(c.holds)] for k, c in summary.classes.items()},
            summary.exports,
            [[c.target, [list(p) for p in c.chain], c.accelerator, c.when, c.flag] for c in summary.step_calls],
            [[a.callee_path, a.callee, a.key, a.class_path, a.class_name] for a in summary.arguments],
            summary.outline,
            [list(a) for a in summary.attached],
            summary.uses_accelerator,
            list(summary.graded_methods),
            list(summary.quiet_methods),
        ],
        "depends": sorted(depends),
    })


def decode_summary(raw: bytes, version: int) -> tuple[ModuleSummary, set[State]]:
    """What `encode_summary` wrote; raises BadEntry (or another ValueError) for anything else."""
    from trainlint.model.summary import ModuleSummary

    data = header(raw, version, _SUMMARY_KEYS)
    functions, classes, exports, step_calls, arguments, outline, attached, accelerator, graded, quiet = items(data["summary"], 10)
    summary = ModuleSummary(
        {k: _decode_function(f) for k, f in mapping(functions).items()},
        {k: _decode_class(c) for k, c in mapping(classes).items()},
        {k: text(v) for k, v in mapping(exports).items()},
        tuple(_decode_step_call(c) for c in items(step_calls)),
        tuple(_decode_argument(a) for a in items(arguments)),
        flag(outline),
        tuple(tuple(text(t) for t in items(a, 3)) for a in items(attached)),  # type: ignore[misc]
        flag(accelerator),
        tuple(text(m) for m in items(graded)),
        tuple(text(m) for m in items(quiet)),
    )
    return summary, set(decode_states(data["depends"]))


def _decode_argument(v: object) -> Any:
    from trainlint.model.summary import Argument

    return Argument(*(text(field) for field in items(v, 5)))


def _decode_step_call(v: object) -> Any:
    from trainlint.model.summary import StepCall

    target, chain, accelerator, when, unset = items(v, 5)
    places = []
    for place in items(chain):
        path, line, column, *note = items(place, 4 if type(place) is list and len(place) == 4 else 3)
        if type(line) is not int or type(column) is not int:
            raise BadEntry("not a place")
        places.append((text(path), line, column, text(note[0])) if note else (text(path), line, column))
    return StepCall(text(target), tuple(places), flag(accelerator), text(when), text(unset))


def _encode_function(f: FunctionSummary) -> list[object]:
    return [f.where, f.steps, f.backprops, f.trains, f.clears_grads, f.clips, f.scales, f.synchronizes, f.syncs,
            f.reads_arguments, f.no_grad, f.sets_train_mode, f.differentiates_arguments, _encode_value(f.returns),
            list(f.defined), f.returns_argument, list(f.self_calls), f.steps_parameter, f.clips_parameter, f.adds_methods,
            f.saves_arguments, list(f.replaces_layers), list(f.optimizes), f.returns_activation,
            list(f.parameter_facts), list(f.calls_parameters), list(f.self_methods), list(f.read_parameters), list(f.returns_computed), f.turns_grad_off,
            f.passes_argument, _encode_value(f.returns_besides)]


def _decode_function(v: object) -> FunctionSummary:
    from trainlint.model.summary import FunctionSummary

    (where, steps, backprops, trains, clears_grads, clips, scales, synchronizes, syncs, reads_arguments, no_grad,
     sets_train_mode, differentiates, returns, defined, returns_argument, self_calls, steps_parameter, clips_parameter,
     adds_methods, saves_arguments, replaces_layers, optimizes, returns_activation, parameter_facts, calls_parameters, self_methods, read_parameters, returns_computed, turns_grad_off, passes_argument, returns_besides) = items(v, 32)
    path, qualified = items(defined, 2)
    return FunctionSummary(
        text(where), flag(steps), flag(backprops), flag(trains), flag(clears_grads), flag(clips), flag(scales),
        tuple(text(s) for s in items(synchronizes)), tuple(text(s) for s in items(syncs)), flag(reads_arguments),
        flag(no_grad), flag(sets_train_mode), opt_flag(differentiates), _decode_value(returns), (text(path), text(qualified)),
        opt_text(returns_argument), tuple(text(s) for s in items(self_calls)), opt_text(steps_parameter),
        opt_text(clips_parameter), flag(adds_methods), flag(saves_arguments),
        tuple(text(s) for s in items(replaces_layers)), tuple(text(s) for s in items(optimizes)), opt_text(returns_activation),
        tuple(text(s) for s in items(parameter_facts)), tuple(text(s) for s in items(calls_parameters)),
        tuple(text(s) for s in items(self_methods)), tuple(text(s) for s in items(read_parameters)),
        tuple(text(s) for s in items(returns_computed)), flag(turns_grad_off), opt_text(passes_argument), _decode_value(returns_besides),
    )


def _decode_class(v: object) -> ClassSummary:
    from trainlint.model.summary import ClassSummary

    kind, methods, bases, registered, attributes, lacks, holds = items(v, 7)
    return ClassSummary(_kind(kind), {k: _decode_function(f) for k, f in mapping(methods).items()}, tuple(text(b) for b in items(bases)),
                        tuple(text(r) for r in items(registered)), {k: _decode_value(a) for k, a in mapping(attributes).items()},
                        tuple(text(a) for a in items(lacks)), tuple(text(h) for h in items(holds)))


def _encode_value(v: Value) -> list[object]:
    return [v.kind.value, v.device, v.graph, v.dtype, v.origin, v.enabled,
            None if v.element is None else _encode_value(v.element),
            None if v.items is None else [_encode_value(i) for i in v.items], None if v.keys is None else list(v.keys)]


def _decode_value(v: object) -> Value:
    from trainlint.model.lattice import Value

    kind, device, graph, dtype, origin, enabled, element, parts, keys = items(v, 9)
    value = Value(_kind(kind), text(device), opt_flag(graph), opt_text(dtype), opt_text(origin), opt_flag(enabled),
                  None if element is None else _decode_value(element),
                  None if parts is None else tuple(_decode_value(i) for i in items(parts)),
                  None if keys is None else tuple(text(k) for k in items(keys)))
    return _interned().get(value, value)


def _kind(v: object) -> Any:
    from trainlint.model.lattice import Kind

    try:
        return Kind(text(v))
    except ValueError:
        raise BadEntry("unknown kind") from None


_INTERNED: dict[Value, Value] = {}


def _interned() -> dict[Value, Value]:
    """The analysis's named values, so that a decoded one is the same object (`v is CYCLE`)."""
    if not _INTERNED:
        from trainlint.model import lattice

        _INTERNED.update((c, c) for c in vars(lattice).values() if type(c) is lattice.Value)
    return _INTERNED


# Summaries are kept at two levels. The run's folder (set by the supervisor before it forks its
# workers, see `sharing_summaries`) shares what one worker computed with the others: a module is
# summarised once per run, not per worker, and within a run the files it read are as they were. The
# result cache (`keeping_summaries`: authenticated entries that outlive the run) keeps them between
# runs, for a warm run, pre-commit on one file and the editor: an entry from there is used only when
# every file it was computed from is still as recorded.
_SHARED_FOLDER: str | None = None
MAX_SHARED_BYTES = 32 << 20
Read = Callable[[str], "bytes | None"]
Write = Callable[[str, bytes], object]
_KEPT: tuple[Read, Write, str] | None = None  # read and write an entry of the result cache; the code's key
_HOLDS: dict[State, bool] = {}  # whether each recorded state is current (for entries of earlier runs)


@contextmanager
def sharing_summaries() -> Iterator[None]:
    """Let the processes forked inside the block share the summaries they compute, for this run."""
    global _SHARED_FOLDER
    with tempfile.TemporaryDirectory(prefix="trainlint-summaries-") as folder:
        _SHARED_FOLDER = folder
        try:
            yield
        finally:
            _SHARED_FOLDER = None


@contextmanager
def keeping_summaries(read: Read, write: Write, code: str) -> Iterator[None]:
    """Inside the block, keep summaries between runs in the result cache: `read(name)` gives an
    entry's verified content (or None), `write(name, content)` stores one; `code` names the analysis
    that computes them (an entry of another version of trainlint is another name). Processes forked
    inside the block inherit it."""
    global _KEPT
    _KEPT = (read, write, code)
    _HOLDS.clear()
    try:
        yield
    finally:
        _KEPT = None


def forget_states() -> None:
    """Files may have changed since they were checked (a long-lived process, before each lint)."""
    _HOLDS.clear()


def shared_count() -> int:
    """How many summaries this run's workers have shared so far (0 outside `sharing_summaries`): the
    supervisor's sign that they are summarising the project's modules (a progress display's phase)."""
    folder = _SHARED_FOLDER
    if folder is None:
        return 0
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if not e.name.startswith("."))  # (not those being written, nor claims)
    except OSError:
        return 0


def shared_entry(path: Path, state: State) -> str | None:
    """The name of the summary of this content of the module (by path: summaries name it; a module
    has one summary per content); None where summaries are neither shared nor kept."""
    if _SHARED_FOLDER is None and _KEPT is None:
        return None
    key = f"{os.path.abspath(path)}\0{state[2]}".encode("utf-8", "surrogatepass")
    hashed = digest()
    hashed.update(key)
    return hashed.hexdigest()


def _kept_name(entry: str, code: str) -> str:
    """An entry's name in the result cache: of this analysis's code, and apart from results' names.
    The working folder is part of it: a summary names files as the analysis was given them, and a
    relative name means another file to a run started elsewhere."""
    hashed = digest()
    hashed.update(f"summary\0{code}\0{os.getcwd()}\0{entry}".encode("utf-8", "surrogatepass"))
    return hashed.hexdigest()


def load_shared(entry: str | None) -> tuple[ModuleSummary, set[State]] | None:
    """The summary another worker of this run shared, else one an earlier run kept whose files are
    all as recorded (anything odd: None, and it is computed)."""
    if entry is None:
        return None
    raw = read_regular(os.path.join(_SHARED_FOLDER, entry), MAX_SHARED_BYTES, follow=False) if _SHARED_FOLDER is not None else None
    if raw is not None:
        try:
            return decode_summary(raw, STORE_FORMAT)
        except Exception:  # damaged (decoding runs no code): try the cache, else compute it
            pass
    if _KEPT is None:
        return None
    read, _, code = _KEPT
    raw = read(_kept_name(entry, code))
    if raw is None:
        return None
    try:
        summary, depends = decode_summary(raw, STORE_FORMAT)
    except Exception:
        return None
    if not all(holds(state) for state in depends):
        return None  # a module it read changed (or appeared, or went) since
    if _SHARED_FOLDER is not None:  # the other workers of this run need not check it again
        _share(entry, raw)
    return summary, depends


def holds(recorded: State) -> bool:
    """Whether the path of a recorded state is as it was recorded (checked once until `forget_states`)."""
    known = _HOLDS.get(recorded)
    if known is None:
        known = _HOLDS[recorded] = current_state(recorded) == recorded
    return known


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StateMemo(dict[K, V]):
    """A memo whose answers carry the states of the paths they were read from (`states(answer)`):
    after `forget`, an answer asked for again is given while each of those states `holds`, and found
    afresh otherwise (a long-lived process forgets before each lint; most answers still hold)."""

    def __init__(self, states: Callable[[V], Collection[State]]) -> None:
        super().__init__()
        self._states = states
        self._before: dict[K, V] = {}

    def get(self, key: K, default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None and key in self._before:
            earlier = self._before.pop(key)
            if all(holds(s) for s in self._states(earlier)):
                found = self[key] = earlier
        return default if found is None else found

    def forget(self, recheck: bool = True) -> None:
        """Set the answers aside, to be checked when asked for again (`recheck`), else drop them."""
        if recheck:
            self._before.update(self)
        else:
            self._before.clear()
        self.clear()


def store_shared(entry: str | None, summary: ModuleSummary, depends: set[State]) -> None:
    """Share a summary with the other workers of this run and keep it for later runs (failures
    change nothing: both are optimisations)."""
    if entry is None:
        return
    try:
        data = encode_summary(summary, depends, STORE_FORMAT)
    except Exception:
        return
    if _SHARED_FOLDER is not None:
        _share(entry, data)
    if _KEPT is not None:
        _, write, code = _KEPT
        try:
            write(_kept_name(entry, code), data)
        except Exception:
            pass


def claim(entry: str | None, patience: float) -> bool:
    """Whether this process is to compute the summary `entry` (True: it holds the run's claim on it,
    to `release`), or another worker of the run has just shared it (False: `load_shared` it). A
    worker that needs a summary another one is computing waits for it rather than computing it too
    (summaries read each other's only along the import graph, cycles apart, so two workers never wait
    for each other; a claim whose process has gone is not waited for, nor one held past `patience`
    seconds: a summary the other worker is slow to compute, this one computes too)."""
    if entry is None or _SHARED_FOLDER is None:
        return True
    name = os.path.join(_SHARED_FOLDER, f".claim-{entry}")
    started, pause = time.monotonic(), 0.005
    while True:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        except OSError:  # a folder that cannot be written: no claims, each computes what it needs
            return True
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(str(os.getpid()))
            if os.path.exists(os.path.join(_SHARED_FOLDER, entry)):  # shared between its last look and the claim
                release(entry)
                return False
            return True
        if os.path.exists(os.path.join(_SHARED_FOLDER, entry)):
            return False
        if time.monotonic() - started > patience or not _alive(name):
            return True
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def mark_over_budget(entry: str | None) -> None:
    """Tell the other workers of this run that summary `entry` ran out of its budget here: they read
    it as unknown too rather than spend the budget again (not kept between runs: another run may
    have the time)."""
    if entry is None or _SHARED_FOLDER is None:
        return
    try:
        os.close(os.open(os.path.join(_SHARED_FOLDER, f".over-{entry}"), os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass


def over_budget(entry: str | None) -> bool:
    """Whether a worker of this run ran out of budget on summary `entry` (`mark_over_budget`)."""
    return entry is not None and _SHARED_FOLDER is not None and os.path.exists(os.path.join(_SHARED_FOLDER, f".over-{entry}"))


def _alive(claim_file: str) -> bool:
    """Whether the process holding a claim still runs (a worker ended for its time or memory leaves it)."""
    try:
        with open(claim_file) as fh:
            pid = int(fh.read() or "0")
    except (OSError, ValueError):
        return True  # (gone since, or being written: look again)
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def release(entry: str | None) -> None:
    """Give up this process's claim on summary `entry` (computed and shared, or not to be)."""
    if entry is None or _SHARED_FOLDER is None:
        return
    try:
        os.unlink(os.path.join(_SHARED_FOLDER, f".claim-{entry}"))
    except OSError:
        pass


def _share(entry: str, data: bytes) -> None:
    """Write a summary into the run's folder, atomically."""
    try:
        fd, tmp = tempfile.mkstemp(dir=_SHARED_FOLDER, prefix=".tmp-")  # mode 0o600, in a 0o700 folder
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(_SHARED_FOLDER, entry))  # type: ignore[arg-type]
    except Exception:  # a folder that cannot be written changes nothing
        pass


def log_computation(path: Path, state: State) -> None:
    """With `TRAINLINT_SUMMARY_LOG=FILE`, a line per summary computed (module, content hash), for
    the tests and benchmarks that count them; appended whole, so workers may share the file."""
    log = os.environ.get("TRAINLINT_SUMMARY_LOG")
    if log:
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{path}\t{state[2]}\n".encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
        except OSError:
            pass
