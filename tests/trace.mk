## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/trace.mk - tests of allocation traces (writing, reading), devcache replay and the summary table.
trace_tests = tests/test-trace tests/test-replay tests/test-tune tests/test-summary \
	tests/test-torchtrace

if HAVE_CMOCKA
check_PROGRAMS += $(trace_tests)
TESTS += $(trace_tests)
# The writer is in the library; the reader is the tool's, compiled in.
tests_test_trace_SOURCES = tests/test-trace.c tests/tap.h \
	tools/trace-read.c tools/trace-read.h
tests_test_trace_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_test_trace_CFLAGS = $(test_cflags) $(ZLIB_CFLAGS)
tests_test_trace_LDADD = $(test_ldadd) $(ZLIB_LIBS)
tests_test_replay_SOURCES = tests/test-replay.c tests/tap.h tests/spawn.c tests/spawn.h
tests_test_replay_CFLAGS = $(test_cflags) $(ZLIB_CFLAGS)
tests_test_replay_LDADD = $(test_ldadd) $(ZLIB_LIBS)
tests_test_tune_SOURCES = tests/test-tune.c tests/tap.h tests/spawn.c tests/spawn.h
tests_test_tune_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_tune_LDADD = $(test_ldadd) $(JSONC_LIBS)
# The table's formatting against statistics made up to reach every unit:
# summary.c alone, over a devcache_stats() the test provides.
tests_test_summary_SOURCES = tests/test-summary.c tests/tap.h lib/summary.c
tests_test_summary_CFLAGS = $(test_cflags)
tests_test_summary_LDADD = $(CMOCKA_LIBS)
# bench/torchtrace.so (bench/local.mk) preloaded into the test's child,
# recording the calls of tests/torchtrace/caller.so, which stands for
# libc10; and the committed bench/torch-*.trace.gz read with the reader.
tests_test_torchtrace_SOURCES = tests/test-torchtrace.c tests/tap.h tests/spawn.c tests/spawn.h \
	tests/torchtrace/caller.h tools/trace-read.c tools/trace-read.h
tests_test_torchtrace_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools -iquote $(srcdir)/tests
tests_test_torchtrace_CFLAGS = $(test_cflags) $(ZLIB_CFLAGS)
tests_test_torchtrace_LDADD = $(test_ldadd) $(ZLIB_LIBS) -ldl
endif
check_LTLIBRARIES += tests/torchtrace/caller.la
tests_torchtrace_caller_la_SOURCES = tests/torchtrace/caller.c tests/torchtrace/caller.h
tests_torchtrace_caller_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_torchtrace_caller_la_LIBADD = -lpthread
tests_torchtrace_caller_la_LDFLAGS = $(test_module_ldflags)
