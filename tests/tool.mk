## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/tool.mk - the devcache tool as a person meets it: widths, help, JSON, bash completion.
if HAVE_CMOCKA
check_PROGRAMS += tests/test-tool-output
TESTS += tests/test-tool-output
tests_test_tool_output_SOURCES = tests/test-tool-output.c tests/tap.h tests/spawn.c \
	tests/spawn.h $(model_writer)
tests_test_tool_output_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_tool_output_LDADD = $(test_ldadd) $(JSONC_LIBS)

check_PROGRAMS += tests/test-progress
TESTS += tests/test-progress
tests_test_progress_SOURCES = tests/test-progress.c tests/tap.h tests/spawn.c tests/spawn.h \
	$(model_writer)
tests_test_progress_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_progress_LDADD = $(test_ldadd) $(JSONC_LIBS)
endif

# Sourced in bash, which completes a few words through it; skipped,
# saying so, without bash.  TAP, as the C tests (.sh: tests/local.mk).
TESTS += tests/test-tool-completion.sh
EXTRA_DIST += tests/test-tool-completion.sh
