"""The real-suite job (scripts/real-suites.sh): other projects' own test suites against sandboxes.

Parts: `sandbox` (provision and teardown through the CLI), `suites` (Django, SQLAlchemy,
redis-py: what each runs and how), `runner` (a deadline, a log without passwords), `results`
(counts and causes from unittest's text and pytest's JUnit XML), `expected` (the few failures
that are not ours, each explained), `__main__` (the loop and the report). It does not fix or
retry anything: a failure is reported, grouped by cause, and fails the job unless explained.
"""
