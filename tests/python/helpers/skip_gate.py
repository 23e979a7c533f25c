"""The skip rule of CI: under CI (the environment variable CI set and not empty; .ci/run sets
CI=1) every skip is listed with its reason (-rs) and a skip that tests/python/skip_allowlist.txt
does not allow fails the run, so that a missing redis-server, Chromium, model, template or Python
package fails CI instead of turning it green. conftest.py registers SkipGate when in_ci()."""
import fnmatch
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent  # tests/python
SKIP_ALLOWLIST = TESTS / "skip_allowlist.txt"


def in_ci() -> bool:
    """True when the environment variable CI is set and not empty."""
    return bool(os.environ.get("CI"))


def read_skip_allowlist(path: Path = SKIP_ALLOWLIST) -> list[tuple[str, str, str]]:
    """The entries of `path` as (node-id pattern, reason pattern, why) triples: one per line,
    three non-empty fields separated by ' | '; blank lines and lines starting with '#' are
    ignored. Raises pytest.UsageError naming the line when one is malformed."""
    entries = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(" | ")]
        if len(fields) != 3 or not all(fields):
            raise pytest.UsageError(f"{path}:{n}: expected NODE ID | SKIP REASON | WHY: {line}")
        entries.append((fields[0], fields[1], fields[2]))
    return entries


def skip_reason(report) -> str:
    """The reason a skipped test or collector gave, without pytest's 'Skipped: ' prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


class SkipGate:
    """A pytest plugin: notes every skip (of a test or of a whole module at collection), and at
    the end of the session fails it (exit status 1) when one is not allowed by the allow-list,
    listing those in the terminal summary. Node ids are made relative to tests/python, whatever
    pytest's rootdir."""

    def __init__(self, config, allowlist: Path = SKIP_ALLOWLIST):
        self.config = config
        self.allowlist = allowlist
        self.entries = read_skip_allowlist(allowlist)  # a malformed list fails at start
        self.skips = []       # (node id, reason)
        self.disallowed = []  # the skips no entry allows
        if "s" not in config.option.reportchars:
            config.option.reportchars += "s"  # -rs: every skip listed with its reason

    def node_id(self, nodeid: str) -> str:
        path, sep, rest = nodeid.partition("::")
        rel = os.path.relpath(Path(self.config.rootpath) / path, TESTS)
        return rel.replace(os.sep, "/") + sep + rest

    def allowed(self, node: str, reason: str) -> bool:
        return any(fnmatch.fnmatchcase(node, n) and fnmatch.fnmatchcase(reason, r)
                   for n, r, _ in self.entries)

    def note(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((self.node_id(report.nodeid), skip_reason(report)))

    def pytest_runtest_logreport(self, report):
        self.note(report)

    def pytest_collectreport(self, report):
        self.note(report)

    def pytest_sessionfinish(self, session, exitstatus):
        self.disallowed = [(n, r) for n, r in self.skips if not self.allowed(n, r)]
        if self.disallowed and session.exitstatus in (pytest.ExitCode.OK,
                                                      pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.disallowed:
            return
        terminalreporter.section("skips CI does not allow", sep="=", red=True, bold=True)
        for node, reason in self.disallowed:
            terminalreporter.line(f"{node}: {reason}")
        terminalreporter.line(f"{len(self.disallowed)} skip(s) not allowed by "
                              f"tests/python/{self.allowlist.name} (CI is set): the run fails")
