"""The calls into other project modules that a function makes whenever it runs, for the summary: a
model's `forward` that other modules call every step runs its loss head each time. A call made only
under the test of a flag of the function (`def forward(self, x, gen_image=False)` with `if gen_image:
return self.gen_image(...)`) says which flag: it is per step only where a step call sets it
(`Project.step_seeds` reads what the step calls pass, DESIGN.md "The whole program")."""

from __future__ import annotations

import libcst as cst

from trainlint.model.facts import Call, Function, Site

MAX_WHENEVER = 48  # calls recorded per function run from elsewhere (a model's `forward` and what it runs)
UNSET_DEFAULTS = ("False", "None")  # a flag's default that leaves its branch untaken


class WheneverRun:
    """Mixin of the training model (`StepChains`)."""

    def _calls_whenever_run(self) -> list[tuple[str, tuple[Call, ...], str, str]]:
        """For each function other modules may run (top level, or a method of a top-level class) that
        is not per step here already: the calls into other project modules it makes whenever it runs,
        through the functions of this module it runs each time (ungated), each with its chain from
        its body and the flag of the function it is made under (`flag_under`; "" for none). Per step
        wherever the function is (`Project.step_seeds` joins them up): what this module does every
        step does not depend on who calls it, so its summary does not either."""
        if self.is_test_code:  # type: ignore[attr-defined]
            return []
        edges: dict[Function, list[tuple[Call, Function]]] = {}
        direct: dict[Function, list[tuple[Call, str]]] = {}
        for call in self.calls:  # type: ignore[attr-defined]
            fn = call.site.function
            if fn is None or fn in self.step_functions or fn.runs_once or self.framework_internal(call.site):  # type: ignore[attr-defined]
                continue
            if self._gated(call.site, {fn}) or self._outermost_step_loop(call.site) is not None:  # type: ignore[attr-defined]
                continue
            for callee in self.callees(call):  # type: ignore[attr-defined]
                if callee is not fn and callee not in self.step_functions:  # type: ignore[attr-defined]
                    edges.setdefault(fn, []).append((call, callee))
            for target in self._targets(call):  # type: ignore[attr-defined]
                direct.setdefault(fn, []).append((call, target))
        if not direct:
            return []
        out: list[tuple[str, tuple[Call, ...], str, str]] = []
        for entry in self.functions:  # type: ignore[attr-defined]
            if entry.parent is not None or entry in self.step_functions or entry.runs_once:  # type: ignore[attr-defined]
                continue
            flagged = self._flagged_callees(entry, edges)
            reached: dict[Function, tuple[Call, ...]] = {entry: ()}
            queue = [entry]
            found = 0
            while queue and found < MAX_WHENEVER:
                fn = queue.pop(0)
                for call, target in direct.get(fn, ()):
                    flag = self.flag_under(entry, call.site) if fn is entry else flagged.get(fn, "")
                    out.append((target, (*reached[fn], call), entry.qualified, flag))
                    found += 1
                for call, callee in edges.get(fn, ()):
                    if callee not in reached:
                        reached[callee] = (*reached[fn], call)
                        queue.append(callee)
        return out

    def _flagged_callees(self, entry: Function, edges: dict[Function, list[tuple[Call, Function]]]) -> dict[Function, str]:
        """The functions `entry` runs only through its calls under a test of one of its flags, each
        with that flag: those no call of it outside such a test reaches (directly or not)."""
        free: set[Function] = set()
        first: list[tuple[Function, str]] = []
        queue: list[Function] = []
        for call, callee in edges.get(entry, ()):
            flag = self.flag_under(entry, call.site)
            if flag:
                first.append((callee, flag))
            elif callee not in free:
                free.add(callee)
                queue.append(callee)
        while queue:
            for _, callee in edges.get(queue.pop(), ()):
                if callee not in free and callee is not entry:
                    free.add(callee)
                    queue.append(callee)
        flagged: dict[Function, str] = {}
        pending = list(reversed(first))
        while pending:
            fn, flag = pending.pop()
            if fn in flagged or fn in free or fn is entry:
                continue
            flagged[fn] = flag
            pending.extend((callee, flag) for _, callee in edges.get(fn, ()))
        return flagged

    def flag_under(self, fn: Function, site: Site) -> str:
        """The flag of `fn` whose `if` holds the code at `site` in its body (`if gen_image:`): an explicit
        parameter, False or None by default and never bound again in `fn`, as "1 gen_image" (its place
        among the explicit parameters, and its name); "" where there is none."""
        if site.function is not fn:
            return ""
        params = fn.explicit_params
        for node in site.gate_nodes:
            test = node.test if node is not None else None
            if not isinstance(test, cst.Name) or test.value not in params:
                continue
            default = fn.defaults.get(test.value)
            if isinstance(default, cst.Name) and default.value in UNSET_DEFAULTS and not any(
                test.value in a.targets for a in self.assigns if a.site.function is fn  # type: ignore[attr-defined]
            ):
                return f"{params.index(test.value)} {test.value}"
        return ""
