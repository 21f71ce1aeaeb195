"""The driver's own checks (run by scripts/real-suites.sh before any suite): a reader that
miscounts or an expected list that swallows too much would make a broken run look clean."""

from __future__ import annotations

import unittest
from pathlib import Path

from .expected import classify, denied_command, expected_list, redis_denied
from .results import Failure, exception_line, from_junit, from_unittest
from .suites import django_settings
from .sandbox import Service

REPO = Path(__file__).resolve().parents[2]

UNITTEST_OUTPUT = """\
Found 7 test(s).
System check identified no issues (0 silenced).
..E.sF
======================================================================
ERROR: test_tz (timezones.tests.NewDatabaseTests.test_tz)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/x/django/db/backends/utils.py", line 105, in _execute
    return self.cursor.execute(sql, params)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
MySQLdb.OperationalError: (1298, "Unknown or incorrect time zone: 'UTC'")

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/tests/timezones/tests.py", line 10, in test_tz
    list(Event.objects.all())
django.db.utils.OperationalError: (1298, "Unknown or incorrect time zone: 'UTC'")

======================================================================
FAIL: test_sub (queries.tests.T.test_sub) (i=1)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/x/tests/queries/tests.py", line 3, in test_sub
    self.assertEqual(1, 2)
AssertionError: 1 != 2
second line of the message

======================================================================
FAIL: test_sub (queries.tests.T.test_sub) (i=2)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/x/tests/queries/tests.py", line 3, in test_sub
    self.assertEqual(1, 2)
AssertionError: 1 != 3

----------------------------------------------------------------------
Ran 7 tests in 0.512s

FAILED (failures=2, errors=1, skipped=1, expected failures=1)
Destroying test database for alias 'default'...
"""

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="1" tests="6">
<testcase classname="tests.test_commands.TestRedisCommands" name="test_get"/>
<testcase classname="tests.test_commands.TestRedisCommands" name="test_config_set">
  <failure message="redis.exceptions.NoPermissionError: User sandbox has no permissions to run the 'config|set' command">tb</failure>
</testcase>
<testcase classname="tests.test_commands.TestRedisCommands" name="test_flushdb">
  <failure message="redis.exceptions.NoPermissionError: User sandbox has no permissions to run the 'flushdb' command">tb</failure>
</testcase>
<testcase classname="tests.test_commands.TestRedisCommands" name="test_whoami">
  <error message="failed on setup with &quot;redis.exceptions.NoPermissionError: User sandbox has no permissions to run the 'acl|whoami' command&quot;">tb</error>
</testcase>
<testcase classname="tests.test_commands.TestRedisCommands" name="test_new">
  <skipped message="Redis version required &gt;= 8.0.0"/>
</testcase>
<testcase classname="tests.test_commands.TestRedisCommands" name="test_set"/>
</testsuite></testsuites>
"""


class Readers(unittest.TestCase):
    def test_unittest_counts_and_causes(self):
        result = from_unittest(UNITTEST_OUTPUT)
        self.assertIsNone(result.crashed)
        self.assertEqual((result.failed, result.errors, result.skipped), (2, 1, 2))
        # 7 ran: 2 tests failed (one of them twice, as subtests), 2 skipped.
        self.assertEqual(result.passed, 3)
        causes = [f.cause for f in result.failures]
        self.assertEqual(causes, [
            "django.db.utils.OperationalError: (1298, \"Unknown or incorrect time zone: 'UTC'\")",
            "AssertionError: 1 != 2",
            "AssertionError: 1 != 3",
        ])
        self.assertEqual(result.failures[0].test, "test_tz (timezones.tests.NewDatabaseTests.test_tz)")

    def test_unittest_run_that_never_started(self):
        output = ("Creating test database for alias 'default'...\nTraceback (most recent call "
                  "last):\n  File \"x\", line 1, in f\n    g()\ndjango.db.utils.ProgrammingError:"
                  " permission denied to create extension \"bloom\"\nHINT:  Must be superuser\n")
        result = from_unittest(output)
        self.assertEqual(result.crashed,
                         'django.db.utils.ProgrammingError: permission denied to create '
                         'extension "bloom"')

    def test_exception_line_without_frames(self):
        self.assertEqual(exception_line("ValueError: x"), "ValueError: x")

    def test_junit(self):
        result = from_junit(JUNIT, deselected=4)
        self.assertEqual((result.passed, result.failed, result.errors, result.skipped,
                          result.deselected), (2, 2, 1, 1, 4))
        self.assertEqual(result.failures[2].cause, "redis.exceptions.NoPermissionError: User "
                         "sandbox has no permissions to run the 'acl|whoami' command")


class Expected(unittest.TestCase):
    def test_denied_list_is_the_daemons(self):
        denied, allowed = redis_denied(REPO)
        self.assertIn("config", denied)
        self.assertIn("acl", denied)
        self.assertIn("acl|whoami", allowed)
        self.assertNotIn("flushdb", denied)

    def test_only_denied_by_design_is_expected(self):
        expected = expected_list(REPO)
        failures = from_junit(JUNIT).failures
        explained, unexplained = classify("redis-py", "docker", failures, expected)
        self.assertEqual([f.test.rsplit("::", 1)[1] for f in explained["denied by design"]],
                         ["test_config_set"])
        # FLUSHDB is allowed and ACL WHOAMI allowed back: refusing them is a bug, not design.
        self.assertEqual([f.test.rsplit("::", 1)[1] for f in unexplained],
                         ["test_flushdb", "test_whoami"])
        # Another suite never borrows redis-py's entries.
        self.assertEqual(classify("django", "docker", failures, expected)[0], {})

    def test_debug_refused_before_the_acl_and_anonymous_clients(self):
        expected = expected_list(REPO)
        failures = [
            Failure("a", "failed", "redis.exceptions.ResponseError: DEBUG command not allowed. "
                    "If the enable-debug-command option is set to \"local\", you can …"),
            Failure("b", "failed", "redis.exceptions.AuthenticationError: HELLO must be called "
                    "with the client already authenticated, otherwise the HELLO AUTH …"),
            Failure("c", "failed", "redis.exceptions.AuthenticationError: invalid "
                    "username-password pair or user is disabled."),
        ]
        explained, unexplained = classify("redis-py", "docker", failures, expected)
        self.assertEqual({k: [f.test for f in v] for k, v in explained.items()},
                         {"denied by design": ["a"], "no anonymous access": ["b"]})
        # A wrong password is not anonymity: it stays unexplained.
        self.assertEqual([f.test for f in unexplained], ["c"])

    def test_a_tests_teardown_error_follows_its_explained_failure(self):
        failures = [
            Failure("t", "failed", "redis.exceptions.NoPermissionError: User sandbox has no "
                    "permissions to run the 'acl|setuser' command"),
            Failure("t", "error", "redis.exceptions.AuthenticationError: invalid "
                    "username-password pair or user is disabled."),
        ]
        explained, unexplained = classify("redis-py", "docker", failures, expected_list(REPO))
        self.assertEqual(len(explained["denied by design"]), 2)
        self.assertEqual(unexplained, [])

    def test_an_old_servers_answer_is_expected_only_where_that_server_runs(self):
        failure = Failure("tests.test_commands.TestRedisCommands::test_xgroup_create_entriesread",
                          "failed", "AssertionError: assert [{'name': b'g... b'0-0', ...}] == "
                          "[{'name': b'g... b'0-0', ...}]")
        expected = expected_list(REPO)
        self.assertEqual(classify("redis-py", "process", [failure], expected)[1], [])
        self.assertEqual(classify("redis-py", "docker", [failure], expected)[1], [failure])

    def test_whole_suite_entries_match_their_cause_not_any_failure_of_the_test(self):
        expected = expected_list(REPO)
        fdw = Failure("test_foreign_data_wrapper (inspectdb.tests.InspectDBTransactionalTests."
                      "test_foreign_data_wrapper)", "error", "django.db.utils.ProgrammingError: "
                      'permission denied to create extension "file_fdw"')
        timing = Failure("test_crafted_xml_performance (serializers.test_deserialization."
                         "TestDeserializer.test_crafted_xml_performance) [varying depth]",
                         "failed", "AssertionError: 5.2 not less than or equal to 2")
        self.assertEqual(classify("django", "docker", [fdw, timing], expected)[1], [])
        # Another extension refused, the same test failing otherwise: not explained.
        postgis = Failure(fdw.test, "error", 'permission denied to create extension "postgis"')
        broken = Failure(timing.test, "error", "django.db.utils.OperationalError: gone")
        self.assertEqual(classify("django", "docker", [postgis, broken], expected)[1],
                         [postgis, broken])
        # "Not raised" is expected of the three root-only tests, not of a database test.
        db_test = Failure("test_x (backends.tests.T.test_x)", "failed",
                          "AssertionError: IntegrityError not raised")
        self.assertEqual(classify("django", "docker", [db_test], expected)[1], [db_test])

    def test_denied_command_names_it(self):
        denied, allowed = redis_denied(REPO)
        failure = Failure("t", "failed", "Command # 1 (DEBUG OBJECT k) of pipeline caused error:"
                          " User sandbox has no permissions to run the 'debug' command")
        self.assertEqual(denied_command(failure, denied, allowed), "debug")


class Settings(unittest.TestCase):
    def test_django_settings_are_python_and_name_test_databases(self):
        service = Service("mariadb", "127.0.0.1", 3306, "sandbox", "p'w", "sandbox", "u", [])
        namespace: dict = {}
        exec(django_settings(service, "django.db.backends.mysql"), namespace)
        databases = namespace["DATABASES"]
        self.assertEqual(databases["default"]["PASSWORD"], "p'w")
        self.assertEqual(databases["default"]["TEST"]["NAME"], "test_sandbox")
        self.assertEqual(databases["other"]["TEST"]["NAME"], "test_other")


if __name__ == "__main__":
    unittest.main()
