## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/torch.mk - PyTorch's pluggable-allocator entry points, on the fake CUDA and HIP drivers.
# The test runs scenarios in fresh processes (the entry points' context is
# the process's), one of them through the shared library as torch loads it.
if HAVE_CMOCKA
check_PROGRAMS += tests/test-torch
TESTS += tests/test-torch
tests_test_torch_SOURCES = tests/test-torch.c tests/tap.h
tests_test_torch_CPPFLAGS = $(AM_CPPFLAGS) \
	-DTEST_LIBDEVCACHE=\"$(abs_top_builddir)/.libs/libdevcache.so\"
tests_test_torch_CFLAGS = $(test_cflags)
tests_test_torch_LDADD = $(test_ldadd) -ldl
EXTRA_tests_test_torch_DEPENDENCIES = libdevcache.la
endif
