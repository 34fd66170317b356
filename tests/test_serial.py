"""Cache entries and shared summaries as JSON: every stored field comes back, anything else is refused."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from trainlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
from trainlint.engine.lint import FileResult
from trainlint.model.summary import Argument, StepCall, ClassSummary, FunctionSummary, ModuleSummary
from trainlint.model.values import CYCLE, Kind, Value
from trainlint.checked_json import BadEntry
from trainlint.checked_json import is_state
from trainlint.engine.serial import decode_result, dependency_items, encode_dependencies, encode_result
from trainlint.project.store import decode_summary, encode_summary


def _diagnostic(**changes: object) -> Diagnostic:
    fix = Fix("move it", (Edit(3, 1, 3, 9, "x.to(dev)\n"), Edit(4, 2, 5, 1, "\udcff", cell=2)), Applicability.UNSAFE)
    base: dict[str, object] = dict(
        code="TL401", name="host-sync-in-step", message="`loss.item()` in \"step\" \u00e9", severity=Severity.WARNING,
        path="nb/\udce9.ipynb", line=3, column=5, end_line=3, end_column=16, hint="log every N steps", fix=fix,
        facts={"kind": "value read", "lr": 1e-3, "n": 3, "fp16": True, "none": None, "inf": float("inf")},
        cell=2, file_span=(10, 4, 10, 15),
        chains=((Location("train.py", 12, 5), Location("engine.py", 40, 9, "`criterion` may be `SetCriterion`, built from the configuration")), (Location("/abs/\udce9.py", 3, 1),)),
    )
    base.update(changes)
    return Diagnostic(**base)  # type: ignore[arg-type]


def test_a_result_comes_back_field_for_field():
    result = FileResult("nb/\udce9.ipynb", [_diagnostic(), _diagnostic(fix=None, facts={}, cell=None, file_span=None)],
                        dependencies=(("utils.py", 85, "ab" * 32), ("lib", -2, "")))
    back, groups = decode_result(encode_result(result, 2, ["cd" * 32, "ef" * 32]), 2, 100)
    assert back.path == result.path and groups == ["cd" * 32, "ef" * 32]
    states = [tuple(json.loads(line)) for line in dependency_items(encode_dependencies(result.dependencies, 2), 2)]
    assert states == list(result.dependencies) and all(is_state(state) for state in states)
    assert not is_state(("utils.py", "85", "ab")) and not is_state(("utils.py", 85))
    assert not is_state(("utils.py", "85", "ab")) and not is_state(("utils.py", 85))
    assert back.diagnostics == result.diagnostics
    assert [(d.facts, d.file_span, d.chains) for d in back.diagnostics] == [(d.facts, d.file_span, d.chains) for d in result.diagnostics]


def test_a_summary_comes_back_with_every_field_of_every_stored_type():
    pair = (Value(Kind.FUNCTION, origin="torch.cuda.synchronize"), Value(Kind.NONE, "host"))
    nested = Value(Kind.COLLECTION, "host", None, None, "namespace", None, Value(Kind.TENSOR, "accelerator", True, "float16"), pair, ("sync", "none"))
    full = FunctionSummary("`f` in u.py", True, True, True, True, True, True, ("torch.cuda.synchronize()",),
                           ("t.item()",), True, True, True, False, nested, ("/p/u.py", "f"), "0 model", ("vae_layer",),
                           "1 optimizer", "2 clip_grad", True, True, ("self.head", "0 model.fc"), ("0 model",), "softmax",
                           ("evaluates 0 model", "epochs 1 loader"), ("0 fn",), ("_update_with_batch",), ("1 targets", "*"),
                           ("list", "0 output", "1 target"), True, "0 input_dict", Value(Kind.COLLECTION, "host", element=Value(Kind.TENSOR)))
    assert all(getattr(full, f.name) != f.default for f in fields(FunctionSummary))  # a new field must be stored too
    assert [f.name for f in fields(Value)] == ["kind", "device", "graph", "dtype", "origin", "enabled", "element", "items", "keys"]
    assert [f.name for f in fields(ClassSummary)] == ["kind", "methods", "bases", "registered", "attributes", "lacks", "holds"]
    assert [f.name for f in fields(ModuleSummary)] == ["functions", "classes", "exports", "step_calls", "arguments", "outline", "attached", "uses_accelerator", "graded_methods", "quiet_methods"]
    assert [f.name for f in fields(Argument)] == ["callee_path", "callee", "key", "class_path", "class_name"]
    passed = Argument("/p/trainer.py", "Trainer", "model", "/p/models.py", "Net")
    assert [f.name for f in fields(StepCall)] == ["target", "chain", "accelerator", "when", "flag"]
    step = StepCall("models.loss.Criterion.forward", (("train.py", 12, 5), ("engine.py", 40, 9, "`criterion` may be `Criterion`, built from the configuration")), True, "Trainer.fit", "1 gen_image")
    summary = ModuleSummary({"f": full, "g": replace(full, differentiates_arguments=None)}, {"Scaler": ClassSummary(Kind.SCALER, {"__call__": full}, ("torch.amp.GradScaler", ".base.Base"), ("FSDP2Backend", "loss_fn"), {"lstm": Value(Kind.MODULE, origin="/p/m.py::Lstm")}, ("require_grad",), ("loss=0 loss",))}, {"x": ".engine.x"}, (step,), (passed,), True, (("book.add_to_class", "book.Trainer", "book.Trainer.clip"),), True, ("visualize_results",), ("predict",))
    depends = {("u.py", 12, "cd" * 32), ("pkg/__init__.py", -1, "")}
    assert decode_summary(encode_summary(summary, depends, 2), 2) == (summary, depends)
    cycle = decode_summary(encode_summary(ModuleSummary({"g": FunctionSummary(returns=CYCLE)}), set(), 2), 2)
    assert cycle[0].functions["g"].returns is CYCLE


@pytest.mark.parametrize("change", [
    lambda e: e.update(trainlint=3),
    lambda e: e.update(trainlint=True),
    lambda e: e.update(extra=1),
    lambda e: e.update(path=None),
    lambda e: e["diagnostics"][0].__setitem__(5, "3"),
    lambda e: e["diagnostics"][0].__setitem__(5, True),
    lambda e: e["diagnostics"][0].__setitem__(5, -1),
    lambda e: e["diagnostics"][0].__setitem__(8, 10**9),  # past the file: a huge underline
    lambda e: e["diagnostics"][0][10][2][0].__setitem__(3, 117),
    lambda e: e["diagnostics"][0].__setitem__(3, "fatal"),
    lambda e: e["diagnostics"][0].__setitem__(3, ["error"]),
    lambda e: e["diagnostics"][0].__setitem__(11, {"k": [1]}),
    lambda e: e["diagnostics"][0].__setitem__(13, [1, 2, 3]),
    lambda e: e["diagnostics"][0][10].__setitem__(1, "maybe"),
    lambda e: e["diagnostics"][0].pop(),
    lambda e: e.update(dependencies=["u.py", 85, ""]),
    lambda e: e.update(dependencies={"u.py": 1}),
])
def test_anything_but_what_was_written_is_refused(change):
    entry = json.loads(encode_result(FileResult("t.py", [_diagnostic()]), 2, ["cd" * 32]))
    change(entry)
    with pytest.raises(ValueError):
        decode_result(json.dumps(entry).encode(), 2, 100)


@pytest.mark.parametrize("raw", [b"", b"{", b"\x80\x04\x95", b"[" * 100_000, b"null", b'{"trainlint": 2}'])
def test_malformed_bytes_are_refused(raw):
    with pytest.raises((ValueError, RecursionError)):
        decode_result(raw, 2, 100)
    with pytest.raises((ValueError, RecursionError)):
        dependency_items(raw, 2)
    with pytest.raises((ValueError, RecursionError)):
        decode_summary(raw, 2)


def test_a_wrongly_typed_summary_is_refused():
    good = json.loads(encode_summary(ModuleSummary({"f": FunctionSummary()}), set(), 2))
    good["summary"][0]["f"][1] = 1  # `steps` must be a boolean
    with pytest.raises(BadEntry):
        decode_summary(json.dumps(good).encode(), 2)
