"""An adversarial fuzzer for polsched's configuration and pods (issue 36, `make fuzz`).

generators makes seeded, replayable cases (policies, CEL, DRA selectors, pods and a small
cluster); worker runs one case through production code in a subprocess; watchdog kills
a worker that hangs or grows past its memory; campaign runs the corpus and the generated
cases and judges the invariants. It lives under tests/ because it is a test tool: it
reuses the test environment and is never shipped in the operator's package.
"""
