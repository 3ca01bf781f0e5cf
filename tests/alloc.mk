## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/alloc.mk - the caching allocator's tests.
EXTRA_DIST += tests/alloc-fixture.h tests/alloc-check.h
alloc_tests = tests/test-alloc-policy tests/test-alloc-oom tests/test-alloc-random \
	tests/test-alloc-expand tests/test-alloc-threads tests/test-alloc-stitch \
	tests/test-alloc-tcache tests/test-alloc-streams tests/test-alloc-table tests/test-lock

if HAVE_CMOCKA
check_PROGRAMS += $(alloc_tests)
TESTS += $(alloc_tests)
tests_test_alloc_policy_SOURCES = tests/test-alloc-policy.c tests/alloc-fixture.h tests/tap.h
tests_test_alloc_policy_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_alloc_policy_LDADD = $(test_ldadd) $(JSONC_LIBS)
tests_test_alloc_oom_SOURCES = tests/test-alloc-oom.c tests/alloc-fixture.h tests/tap.h
tests_test_alloc_oom_CFLAGS = $(test_cflags)
tests_test_alloc_oom_LDADD = $(test_ldadd)
tests_test_alloc_random_SOURCES = tests/test-alloc-random.c tests/alloc-fixture.h tests/tap.h
tests_test_alloc_random_CFLAGS = $(test_cflags)
tests_test_alloc_random_LDADD = $(test_ldadd)
tests_test_alloc_expand_SOURCES = tests/test-alloc-expand.c tests/alloc-fixture.h tests/tap.h
tests_test_alloc_expand_CFLAGS = $(test_cflags)
tests_test_alloc_expand_LDADD = $(test_ldadd)
tests_test_alloc_stitch_SOURCES = tests/test-alloc-stitch.c tests/alloc-check.h tests/alloc-fixture.h \
	tests/tap.h
tests_test_alloc_stitch_CFLAGS = $(test_cflags)
tests_test_alloc_stitch_LDADD = $(test_ldadd)
tests_test_alloc_threads_SOURCES = tests/test-alloc-threads.c tests/alloc-check.h tests/alloc-fixture.h \
	tests/tap.h
tests_test_alloc_threads_CFLAGS = $(test_cflags)
tests_test_alloc_threads_LDADD = $(test_ldadd)
tests_test_alloc_tcache_SOURCES = tests/test-alloc-tcache.c tests/alloc-check.h tests/alloc-fixture.h \
	tests/arena-base.h tests/tap.h
tests_test_alloc_tcache_CFLAGS = $(test_cflags)
tests_test_alloc_tcache_LDADD = $(test_ldadd) -lpthread -ldl
tests_test_alloc_streams_SOURCES = tests/test-alloc-streams.c tests/alloc-check.h tests/alloc-fixture.h \
	tests/tap.h
tests_test_alloc_streams_CFLAGS = $(test_cflags)
tests_test_alloc_streams_LDADD = $(test_ldadd) -lpthread
tests_test_lock_SOURCES = tests/test-lock.c tests/tap.h
tests_test_lock_CFLAGS = $(test_cflags)
tests_test_lock_LDADD = $(test_ldadd)
tests_test_alloc_table_SOURCES = tests/test-alloc-table.c tests/tap.h
tests_test_alloc_table_CFLAGS = $(test_cflags)
tests_test_alloc_table_LDADD = $(test_ldadd)
endif

# libdevcache against an independent model of PyTorch's policy
# (tests/pytorch-model.c), on the arena test device (tests/modules/arena.c):
# the two share one deterministic first-fit driver (tests/first-fit.h).
if HAVE_CMOCKA
check_PROGRAMS += tests/test-alloc-pytorch
TESTS += tests/test-alloc-pytorch
# The recorded traces of bench/ are read with the tool's reader.
tests_test_alloc_pytorch_SOURCES = tests/test-alloc-pytorch.c tests/pytorch-traces.c \
	tests/pytorch-traces.h tests/pytorch-model.c tests/pytorch-model-expand.c \
	tests/pytorch-model.h tests/pytorch-model-internal.h tests/first-fit.h tests/arena-base.h tests/tap.h \
	tools/trace-read.c tools/trace-read.h
tests_test_alloc_pytorch_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_test_alloc_pytorch_CFLAGS = $(test_cflags) $(ZLIB_CFLAGS)
tests_test_alloc_pytorch_LDADD = $(test_ldadd) $(ZLIB_LIBS)
endif
