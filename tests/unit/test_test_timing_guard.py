"""A guard for the future: integration tests say "it will happen" with ``eventually``.

It reads every ``tests/integration/*.py`` with ``ast`` (nothing runs) and reports, as
``file:line``, two shapes that bet on the clock (see tests/eventually.py):

1. **A short sleep, then a check.** A statement ``time.sleep(x)`` or ``sleep(x)`` with a
   numeric constant ``x < 1`` s, followed later in the same statement list by a statement
   that checks (holds an ``assert``, a ``pytest.fail(...)`` call, or a
   ``with pytest.raises(...)``) with no wait in between: a statement holding a call of
   ``eventually``, ``stays``, ``wait`` (``.wait(``) or ``wait_*`` (``wait_held``,
   ``wait_pending``, ``wait_ready`` ...). When the list is the body of a ``with``, ``if`` or
   ``try`` block, the statements after that block count as later too. Not flagged: a sleep
   that is the last statement of a loop body (a poll: rule 2 looks at those loops), a sleep
   of 1 s or more, a sleep of a name or expression (``time.sleep(POLL_S)``), a sleep with
   no check after it (a helper).
2. **A hand-written poll.** A ``while`` loop holding ``assert <clock>() < deadline`` (any
   ``assert`` comparing a call of ``monotonic``/``time``/``perf_counter``): write it as
   ``eventually(predicate, what=...)``.

Only what a statement list says is looked at: nested ``def``/``lambda``/``class`` bodies are
checked on their own, never as part of the statement that holds them.
"""

from __future__ import annotations

import ast
import glob
import os
import textwrap
from dataclasses import dataclass

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTEGRATION = os.path.join(REPO_ROOT, "tests", "integration")

WAITS = ("eventually", "stays", "wait")  # and any name starting "wait_"
CLOCKS = ("monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns")
SHORT_SLEEP_S = 1.0
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}"


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _walk(node: ast.AST):
    """``ast.walk`` that stays out of nested def/lambda/class bodies (a ``def`` statement
    runs none of its body)."""
    if isinstance(node, _NESTED):
        return
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _NESTED))


def _short_sleep(stmt: ast.stmt) -> float | None:
    """``x`` when ``stmt`` is ``time.sleep(x)``/``sleep(x)`` with a constant ``x`` < 1 s."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    if _name(call.func) != "sleep" or len(call.args) != 1 or call.keywords:
        return None
    arg = call.args[0]
    if (isinstance(arg, ast.Constant) and isinstance(arg.value, (int, float))
            and not isinstance(arg.value, bool) and arg.value < SHORT_SLEEP_S):
        return float(arg.value)
    return None


def _waits(stmt: ast.stmt) -> bool:
    for n in _walk(stmt):
        if isinstance(n, ast.Call):
            name = _name(n.func)
            if name in WAITS or name.startswith("wait_"):
                return True
    return False


def _pytest_call(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == attr and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pytest")


def _checks(stmt: ast.stmt) -> bool:
    for n in _walk(stmt):
        if isinstance(n, ast.Assert) or _pytest_call(n, "fail"):
            return True
        if isinstance(n, (ast.With, ast.AsyncWith)) and any(
                _pytest_call(item.context_expr, "raises") for item in n.items):
            return True
    return False


def _clock_assert(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Call) and _name(s.func) in CLOCKS for s in sides)


class _Checker:
    def __init__(self, path: str):
        self.path = path
        self.found: list[Violation] = []

    def block(self, body: list[ast.stmt], after: list[ast.stmt], in_loop: bool) -> None:
        """Check one statement list; ``after``: the statements that run next once it ends
        (outside any loop), in order."""
        for i, stmt in enumerate(body):
            seconds = _short_sleep(stmt)
            last_in_loop = in_loop and i == len(body) - 1
            if seconds is not None and not last_in_loop:
                for later in [*body[i + 1:], *([] if in_loop else after)]:
                    if _waits(later):
                        break
                    if _checks(later):
                        self.found.append(Violation(
                            self.path, stmt.lineno,
                            f"sleep({seconds:g}) then a check at line {later.lineno} with no "
                            "eventually/stays/wait in between: wait for the fact instead"))
                        break
            self.statement(stmt, [*body[i + 1:], *after])

    def statement(self, stmt: ast.stmt, after: list[ast.stmt]) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.block(stmt.body, [], in_loop=False)
            return
        if isinstance(stmt, ast.While):
            for n in _walk(stmt):
                if _clock_assert(n):
                    self.found.append(Violation(
                        self.path, n.lineno,
                        "a hand-written poll (assert on the clock in a while loop): use "
                        "eventually(predicate, what=...)"))
        for field in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, field, None)
            if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                loop = isinstance(stmt, _LOOPS) and field == "body"
                self.block(sub, [] if loop else after, in_loop=loop)
        for handler in getattr(stmt, "handlers", []):
            self.block(handler.body, after, in_loop=False)
        for case in getattr(stmt, "cases", []):
            self.block(case.body, after, in_loop=False)


def check_source(source: str, path: str = "<snippet>") -> list[Violation]:
    """The violations in ``source`` (a module's text)."""
    checker = _Checker(path)
    checker.block(ast.parse(source, path).body, [], in_loop=False)
    return sorted(checker.found, key=lambda v: v.line)


def check_files(paths: list[str]) -> list[Violation]:
    found = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            found += check_source(fh.read(), os.path.relpath(path, REPO_ROOT))
    return found


# -- the guard itself ----------------------------------------------------------------------


def test_integration_tests_wait_for_facts_instead_of_sleeping():
    paths = sorted(glob.glob(os.path.join(INTEGRATION, "*.py")))
    assert paths, INTEGRATION
    found = check_files(paths)
    assert not found, "tests that bet on the clock (see tests/eventually.py):\n" + "\n".join(
        map(str, found))


# -- the rule, on small snippets -----------------------------------------------------------


def lines(source: str) -> list[int]:
    return [v.line for v in check_source(textwrap.dedent(source))]


def test_a_short_sleep_then_an_assert_is_reported():
    assert lines("""
        import time
        def test_x():
            send()
            time.sleep(0.3)
            assert x == 1
        """) == [5]


def test_the_report_names_file_and_line():
    (v,) = check_source("from time import sleep\nsleep(0.5)\nassert x\n", "t/test_a.py")
    assert str(v).startswith("t/test_a.py:2: sleep(0.5) then a check at line 3")


def test_a_bare_sleep_and_other_checks_count_too():
    assert lines("""
        from time import sleep
        def test_x():
            sleep(0.1)
            log("sent")
            pytest.fail("boom")
        def test_y():
            sleep(0)
            with pytest.raises(ValueError):
                f()
        """) == [4, 8]


def test_a_wait_in_between_makes_it_right():
    for wait in ("eventually(lambda: x == 1, what='x')", "stays(ok, 1.0, what='ok')",
                 "gate.wait_held(1)", "wait_pending(url, 'm', 3)", "done.wait(30)",
                 "srv.wait_ready()", "n = eventually(count, what='n')"):
        assert lines(f"""
            import time
            def test_x():
                time.sleep(0.3)
                {wait}
                assert x == 1
            """) == [], wait


def test_a_sleep_of_a_second_or_more_is_allowed():
    assert lines("""
        import time
        def test_x():
            time.sleep(2)
            assert x == 1
            time.sleep(1.0)
            assert x == 2
        """) == []


def test_a_sleep_with_no_check_after_it_is_allowed():
    assert lines("""
        import time
        def send_slowly(client, n):
            for _ in range(n):
                client.send()
            time.sleep(0.2)
            return client.count
        """) == []


def test_a_named_sleep_is_not_judged():
    assert lines("""
        import time
        def test_x():
            time.sleep(POLL_S)
            assert x == 1
        """) == []


def test_a_poll_sleep_ending_a_loop_body_is_not_this_rule():
    assert lines("""
        import time
        def test_x():
            while not done():
                time.sleep(0.05)
            assert x == 1
        def test_y():
            for _ in range(3):
                send()
                time.sleep(0.1)
            assert x == 1
        """) == []


def test_a_sleep_inside_a_loop_body_then_an_assert_in_it_is_reported():
    assert lines("""
        import time
        def test_x():
            for _ in range(3):
                time.sleep(0.1)
                assert x == 1
        """) == [5]


def test_a_sleep_ending_a_with_block_then_an_assert_after_it_is_reported():
    assert lines("""
        import time
        def test_x():
            with gate.closed():
                send()
                time.sleep(0.3)
            assert x == 1
        """) == [6]


def test_an_assert_inside_a_later_block_is_a_check():
    assert lines("""
        import time
        def test_x():
            time.sleep(0.3)
            for r in results:
                assert r.ok
        """) == [4]


def test_an_assert_in_a_nested_def_is_not_a_check_there():
    assert lines("""
        import time
        def test_x():
            time.sleep(0.3)
            def later():
                assert x == 1
        """) == []


def test_a_hand_written_poll_on_the_clock_is_reported():
    assert lines("""
        import time
        def wait_for(pred, timeout_s):
            deadline = time.monotonic() + timeout_s
            while not pred():
                assert time.monotonic() < deadline, "never"
                time.sleep(0.1)
        """) == [6]


def test_a_clock_assert_outside_a_loop_is_not_a_poll():
    assert lines("""
        import time
        def test_x():
            started = time.monotonic()
            run()
            assert time.monotonic() - started < 600
        """) == []
