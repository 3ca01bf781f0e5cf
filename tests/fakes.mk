## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/fakes.mk - fake vendor runtimes backed by host memory, and the conformance suite every backend passes.
# Each fake is one library, built from its own files and the shared headers.
fake_shared_headers = tests/fakes/fake-controls.h tests/fakes/fake-registry.h \
	tests/fakes/fake-vmm.h
fake_cuda_sources = tests/fakes/fake-cuda.c tests/fakes/fake-cuda-memory.c \
	tests/fakes/fake-cuda-streams.c tests/fakes/fake-cuda.h
fake_hip_sources = tests/fakes/fake-hip.c tests/fakes/fake-hip-memory.c \
	tests/fakes/fake-hip-streams.c tests/fakes/fake-hip.h
fake_ze_sources = tests/fakes/fake-ze.c tests/fakes/fake-ze-memory.c \
	tests/fakes/fake-ze-lists.c tests/fakes/fake-ze.h
EXTRA_DIST += $(fake_cuda_sources) $(fake_hip_sources) $(fake_ze_sources) \
	$(fake_shared_headers)
# The fake of each vendor module that configure builds: what make check-gpu
# and bench/soak run the modules on.
fake_runtimes =
if BUILD_CUDA
check_LTLIBRARIES += tests/fakes/libfake-cuda.la
fake_runtimes += tests/fakes/libfake-cuda.la
tests_fakes_libfake_cuda_la_SOURCES = $(fake_cuda_sources) $(fake_shared_headers)
tests_fakes_libfake_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_fakes_libfake_cuda_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_fakes_libfake_cuda_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
endif
if BUILD_ZE
check_LTLIBRARIES += tests/fakes/libfake-ze.la
fake_runtimes += tests/fakes/libfake-ze.la
tests_fakes_libfake_ze_la_SOURCES = $(fake_ze_sources) $(fake_shared_headers)
tests_fakes_libfake_ze_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZE_CPPFLAGS)
tests_fakes_libfake_ze_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_fakes_libfake_ze_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
endif
if BUILD_HIP
check_LTLIBRARIES += tests/fakes/libfake-hip.la
fake_runtimes += tests/fakes/libfake-hip.la
tests_fakes_libfake_hip_la_SOURCES = $(fake_hip_sources) $(fake_shared_headers)
tests_fakes_libfake_hip_la_CPPFLAGS = $(AM_CPPFLAGS) $(HIP_CPPFLAGS)
tests_fakes_libfake_hip_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_fakes_libfake_hip_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
# The same fake as ROCm 6, whose virtual-memory calls take another layout.
check_LTLIBRARIES += tests/fakes/libfake-hip6.la
tests_fakes_libfake_hip6_la_SOURCES = $(tests_fakes_libfake_hip_la_SOURCES)
tests_fakes_libfake_hip6_la_CPPFLAGS = $(tests_fakes_libfake_hip_la_CPPFLAGS) -DFAKE_HIP_ABI=6
tests_fakes_libfake_hip6_la_CFLAGS = $(tests_fakes_libfake_hip_la_CFLAGS)
tests_fakes_libfake_hip6_la_LDFLAGS = $(tests_fakes_libfake_hip_la_LDFLAGS)
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/test-conformance
TESTS += tests/test-conformance
tests_test_conformance_SOURCES = tests/test-conformance.c tests/tap.h \
	$(model_writer)
tests_test_conformance_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_conformance_LDADD = $(test_ldadd) -ldl
endif

# Every vendor call of a workload failed in turn, on each fake: a program
# per backend, skipped where not built, sharing the workload and the rules
# (tests/fault-matrix.h).
if HAVE_CMOCKA
fault_matrix_tests = tests/test-fault-matrix-cuda tests/test-fault-matrix-hip \
	tests/test-fault-matrix-ze
check_PROGRAMS += $(fault_matrix_tests)
TESTS += $(fault_matrix_tests)
fault_matrix = tests/fault-matrix.c tests/fault-matrix.h tests/fault-workload.c \
	tests/fault-workload.h tests/tap.h $(model_writer)
tests_test_fault_matrix_cuda_SOURCES = tests/test-fault-matrix-cuda.c $(fault_matrix)
tests_test_fault_matrix_cuda_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_fault_matrix_cuda_LDADD = $(test_ldadd) -ldl
tests_test_fault_matrix_hip_SOURCES = tests/test-fault-matrix-hip.c $(fault_matrix)
tests_test_fault_matrix_hip_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_fault_matrix_hip_LDADD = $(test_ldadd) -ldl
tests_test_fault_matrix_ze_SOURCES = tests/test-fault-matrix-ze.c $(fault_matrix)
tests_test_fault_matrix_ze_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_fault_matrix_ze_LDADD = $(test_ldadd) -ldl
endif

# The vendor backends' own behaviour, on the fakes: skipped where not built.
if HAVE_CMOCKA
check_PROGRAMS += tests/test-cuda tests/test-fakes-visible-devices
TESTS += tests/test-cuda tests/test-fakes-visible-devices
tests_test_cuda_SOURCES = tests/test-cuda.c tests/tap.h tests/spawn.c tests/spawn.h
tests_test_cuda_CFLAGS = $(test_cflags)
tests_test_cuda_LDADD = $(test_ldadd) -ldl
tests_test_fakes_visible_devices_SOURCES = tests/test-fakes-visible-devices.c tests/tap.h tests/spawn.c \
	tests/spawn.h
tests_test_fakes_visible_devices_CFLAGS = $(test_cflags)
tests_test_fakes_visible_devices_LDADD = $(test_ldadd)
endif

# A device's largest single allocation, on the fake Level Zero loader.
if HAVE_CMOCKA
check_PROGRAMS += tests/test-alloc-limit
TESTS += tests/test-alloc-limit
tests_test_alloc_limit_SOURCES = tests/test-alloc-limit.c tests/tap.h tests/spawn.c tests/spawn.h \
	$(model_writer)
tests_test_alloc_limit_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_alloc_limit_LDADD = $(test_ldadd) -ldl
endif
