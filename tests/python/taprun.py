# SPDX-License-Identifier: LGPL-2.1-or-later
"""taprun.py - run one unittest module and report it as TAP for automake's tap-driver.

Usage: python3 taprun.py tests/python/test_x.py

A skipped test is "ok N # SKIP reason"; an error or failure is "not ok N"
followed by its traceback as TAP comments.  The exit status is 0 when every
test passed or skipped, 1 otherwise.
"""
import importlib.util
import os
import sys
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.bad = 0
        self.failed_tests = set()

    def _line(self, text):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def _name(self, test):
        return test.id().split(".", 1)[-1]

    def _comment(self, text):
        for line in text.rstrip("\n").split("\n"):
            self._line("# " + line)

    def addSuccess(self, test):
        self.n += 1
        self._line("ok %d - %s" % (self.n, self._name(test)))

    def addSkip(self, test, reason):
        self.n += 1
        self._line("ok %d # SKIP %s" % (self.n, reason))

    def _fail(self, test, err):
        self.n += 1
        self.bad += 1
        self._line("not ok %d - %s" % (self.n, self._name(test)))
        self._comment(self._exc_info_to_string(err, test))

    def addFailure(self, test, err):
        self._fail(test, err)

    def addError(self, test, err):
        self._fail(test, err)

    def addExpectedFailure(self, test, err):
        self._fail(test, err)

    def addSubTest(self, test, subtest, err):
        # A failed subtest fails its test: one "not ok" for the test (the
        # plan counts tests), every failed subtest's traceback under it.
        if err is None:
            return
        if test.id() not in self.failed_tests:
            self.failed_tests.add(test.id())
            self._fail(test, err)
        else:
            self._comment(self._exc_info_to_string(err, subtest))

    def addUnexpectedSuccess(self, test):
        self._fail(test, (AssertionError, AssertionError("unexpected success"), None))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: taprun.py TEST_FILE.py\n")
        return 2
    path = argv[1]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except unittest.SkipTest as e:
        print("1..0 # SKIP %s" % e)
        return 0
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    print("1..%d" % suite.countTestCases())
    sys.stdout.flush()
    result = TapResult()
    suite.run(result)
    return 1 if result.bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
