## tests/fakes.mk - fake vendor runtimes backed by host memory, and the conformance suite every backend passes.
EXTRA_DIST += tests/fakes/fake-hip.c tests/fakes/fake-ze.c
if BUILD_ZE
check_LTLIBRARIES += tests/fakes/libfake-ze.la
tests_fakes_libfake_ze_la_SOURCES = tests/fakes/fake-ze.c
tests_fakes_libfake_ze_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZE_CPPFLAGS)
tests_fakes_libfake_ze_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_fakes_libfake_ze_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
endif
if BUILD_HIP
check_LTLIBRARIES += tests/fakes/libfake-hip.la
tests_fakes_libfake_hip_la_SOURCES = tests/fakes/fake-hip.c
tests_fakes_libfake_hip_la_CPPFLAGS = $(AM_CPPFLAGS) $(HIP_CPPFLAGS)
tests_fakes_libfake_hip_la_CFLAGS = $(AM_CFLAGS) -pthread
tests_fakes_libfake_hip_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/test-conformance
TESTS += tests/test-conformance
tests_test_conformance_SOURCES = tests/test-conformance.c tests/tap.h
tests_test_conformance_CFLAGS = $(test_cflags)
tests_test_conformance_LDADD = $(test_ldadd) -ldl
endif
