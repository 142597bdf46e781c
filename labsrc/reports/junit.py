"""JUnit XML for a gate run, so CI systems (GitHub Actions, GitLab, Jenkins) show the gates natively.

The de-facto JUnit schema (as read by Jenkins' JUnit plugin, GitLab's unit test
reports and the common GitHub Actions reporters): one ``<testsuite>`` holding

* one ``<testcase classname="labsrc.gate">`` per gate, with ``<failure>`` when it
  fails the run (its text: the detail, then one line per finding: case, chunk,
  rank and reason) and ``<skipped>`` when it is NOT TESTED;
* one ``<testcase classname="labsrc.gate.<gate name>">`` per failing case of a
  failed gate, whose ``<failure>`` body is the case's compact trace (ids, ranks,
  versions; never chunk text).

Nothing time-dependent is written, so a rerun on the same inputs gives the same file.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from labsrc.gate.gates import GateRun
from labsrc.reports.traces import compact_trace

__all__ = ["GATE_CLASSNAME", "junit_xml", "write_junit"]

#: The ``classname`` of every per-gate ``<testcase>``; failing cases use ``labsrc.gate.<gate name>``.
GATE_CLASSNAME = "labsrc.gate"


def junit_xml(run: GateRun) -> str:
    """The JUnit XML document for ``run`` (UTF-8 text with an XML declaration)."""
    cases_by_name = {o.case.name: o for o in run.outcomes}
    suite = ET.Element("testsuite", name="labsrc release gate")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("on_date", run.on_date.isoformat()), *(("subject", run.subject),) * bool(run.subject),
                        *sorted(run.versions.items())):
        ET.SubElement(properties, "property", name=str(name), value=str(value))
    tests = failures = skipped = 0
    for gate in run.gates:
        element = ET.SubElement(suite, "testcase", classname=GATE_CLASSNAME, name=gate.name, time="0")
        tests += 1
        if not gate.tested:
            if gate.passed:
                skipped += 1
                ET.SubElement(element, "skipped", message=f"NOT TESTED: {gate.detail}")
                continue
            failures += 1
            failure = ET.SubElement(element, "failure", message=f"NOT TESTED, which fails the run: {gate.detail}",
                                    type="NotTested")
            failure.text = gate.detail
            continue
        if gate.passed:
            continue
        failures += 1
        failing = gate.failing_cases or gate.failing_stages
        label = "cases" if gate.failing_cases else "stages"
        message = gate.detail + (f"; failing {label}: {', '.join(failing)}" if failing else "")
        failure = ET.SubElement(element, "failure", message=message, type="GateFailed")
        failure.text = "\n".join((message, *gate.findings))
        for name in gate.failing_cases:
            outcome = cases_by_name.get(name)
            child = ET.SubElement(suite, "testcase", classname=f"{GATE_CLASSNAME}.{gate.name}", name=name, time="0")
            tests += 1
            failures += 1
            body = ET.SubElement(child, "failure", message=f"case {name!r} fails gate {gate.name!r}", type="CaseFailed")
            if outcome is not None:
                body.text = json.dumps(compact_trace(outcome, run), indent=2, sort_keys=True, default=str)
    for name, reason in run.omitted:  # a lane gate not made: skipped, as the pytest form skips its item
        element = ET.SubElement(suite, "testcase", classname=GATE_CLASSNAME, name=name, time="0")
        tests += 1
        skipped += 1
        ET.SubElement(element, "skipped", message=f"not made: {reason}")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="labsrc gate", tests=str(tests), failures=str(failures),
                      errors="0", skipped=str(skipped))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(run: GateRun, path: str | Path) -> Path:
    """Write :func:`junit_xml` to ``path`` (its folder is created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(run), encoding="utf-8")
    return path
