## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/local.mk - `make check`: cmocka programs with TAP output, through automake's tap-driver.

# TEST_BACKENDS: the folders of the vendor modules this configuration
# builds, and only those: a folder that is not built would make the library
# warn about backend_path (a missing directory), and that warning fails the
# tests that check a run says nothing else.  A test of a module that is not
# built skips.  With none built it is the backends folder itself, which
# holds no module (and tests take an empty TEST_BACKENDS for "not run by
# make check").  TEST_BACKEND_MODULES: every name in backends/modules.

LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
LOG_COMPILER = env AWK='$(AWK)' $(SHELL) $(top_srcdir)/tests/run-tap.sh
# Tests never read the machine's or the user's configuration, and find the
# tool, the test modules and the German catalogue in the build tree.
AM_TESTS_ENVIRONMENT = \
	unset DEVCACHE_CONF DEVCACHE_OPTIONS DEVCACHE_BACKEND_PATH PYTORCH_CUDA_ALLOC_CONF \
		PYTORCH_NO_CUDA_MEMORY_CACHING; \
	export XDG_CONFIG_HOME='$(abs_top_builddir)/tests/no-xdg'; \
	export DEVCACHE_LOCALEDIR='$(abs_top_builddir)/tests/locale'; \
	export TEST_TOOL='$(abs_top_builddir)/tools/devcache'; \
	export TEST_MODULES='$(abs_top_builddir)/tests/modules/.libs'; \
	export TEST_ARENA='$(abs_top_builddir)/tests/arena/.libs'; \
	export TEST_TORCHTRACE='$(abs_top_builddir)/bench/.libs/torchtrace.so'; \
	export TEST_TORCHTRACE_CALLER='$(abs_top_builddir)/tests/torchtrace/.libs/caller.so'; \
	TEST_BACKENDS=; for m in $(backendmod_LTLIBRARIES); do \
		TEST_BACKENDS="$${TEST_BACKENDS:+$$TEST_BACKENDS:}$(abs_top_builddir)/$${m%/*}/.libs"; done; \
	export TEST_BACKEND_MODULES='$(backend_modules)'; \
	export TEST_BACKENDS="$${TEST_BACKENDS:-$(abs_top_builddir)/backends}"; \
	export TEST_CUDA_STUB='$(CUDA_STUB)'; \
	export TEST_FAKES='$(abs_top_builddir)/tests/fakes/.libs'; \
	export TEST_SRCDIR='$(abs_top_srcdir)/tests'; \
	export TEST_PODIR='$(abs_top_srcdir)/po'; \
	export MAN_BUILDDIR='$(abs_top_builddir)/man'; \
	export GROFF='$(GROFF)'; \
	export ABIDW='$(ABIDW)' ABIDIFF='$(ABIDIFF)' ABIDW_FLAGS='$(ABIDW_FLAGS)'; \
	export ABIDIFF_FLAGS='$(ABIDIFF_FLAGS)'; \
	export ABI_HEADERS='$(abi_headers)' ABI_BASELINE='$(abs_top_srcdir)/lib/libdevcache.abi'; \
	export ABI_LIBRARY='$(abs_top_builddir)/libdevcache.la';

EXTRA_DIST += tests/tap.h tests/run-tap.sh

# ---- test-only backend modules (never installed) ---------------------------
check_LTLIBRARIES += \
	tests/modules/good.la tests/modules/badabi.la tests/modules/missing.la \
	tests/modules/failinit.la tests/modules/nodevice.la tests/modules/notbackend.la \
	tests/modules/misnamed.la tests/modules/vmm.la tests/modules/badtunable.la \
	tests/modules/newminor.la
test_module_ldflags = -module -avoid-version -shared -rpath /nowhere
EXTRA_DIST += tests/modules/fake.h
tests_modules_badtunable_la_SOURCES = tests/modules/badtunable.c
tests_modules_badtunable_la_LDFLAGS = $(test_module_ldflags)
tests_modules_newminor_la_SOURCES = tests/modules/newminor.c
tests_modules_newminor_la_LDFLAGS = $(test_module_ldflags)
tests_modules_good_la_SOURCES = tests/modules/good.c
tests_modules_good_la_LDFLAGS = $(test_module_ldflags)
tests_modules_badabi_la_SOURCES = tests/modules/badabi.c
tests_modules_badabi_la_LDFLAGS = $(test_module_ldflags)
tests_modules_missing_la_SOURCES = tests/modules/missing.c
tests_modules_missing_la_LDFLAGS = $(test_module_ldflags)
tests_modules_failinit_la_SOURCES = tests/modules/failinit.c
tests_modules_failinit_la_LDFLAGS = $(test_module_ldflags)
tests_modules_nodevice_la_SOURCES = tests/modules/nodevice.c
tests_modules_nodevice_la_LDFLAGS = $(test_module_ldflags)
tests_modules_notbackend_la_SOURCES = tests/modules/notbackend.c
tests_modules_notbackend_la_LDFLAGS = $(test_module_ldflags)
tests_modules_misnamed_la_SOURCES = tests/modules/misnamed.c
tests_modules_misnamed_la_LDFLAGS = $(test_module_ldflags)
tests_modules_vmm_la_SOURCES = tests/modules/vmm.c
tests_modules_vmm_la_LDFLAGS = $(test_module_ldflags)
# The deterministic device of tests/test-alloc-pytorch, built into a
# folder of its own (TEST_ARENA): the loader's tests count the modules
# in tests/modules.
check_LTLIBRARIES += tests/arena/arena.la
tests_arena_arena_la_SOURCES = tests/modules/arena.c tests/first-fit.h
tests_arena_arena_la_LDFLAGS = $(test_module_ldflags)

# ---- the German catalogue, where the tests can find it uninstalled ----------
tests/locale/de/LC_MESSAGES/$(PACKAGE).mo: $(top_srcdir)/po/de.po
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(MSGFMT_PROG) -o $@ $(top_srcdir)/po/de.po
check_DATA = tests/locale/de/LC_MESSAGES/$(PACKAGE).mo
clean-local: clean-test-locale
clean-test-locale:
	-rm -rf tests/locale tests/no-xdg tests/tmp-*
.PHONY: clean-test-locale

# ---- the test programs -------------------------------------------------------
unit_tests = \
	tests/test-version tests/test-errors tests/test-tunables tests/test-config-string \
	tests/test-config-file tests/test-config-open tests/test-loader tests/test-host \
	tests/test-tool tests/test-i18n

if HAVE_CMOCKA
check_PROGRAMS += $(unit_tests)
TESTS += $(unit_tests)
test_cflags = $(AM_CFLAGS) $(CMOCKA_CFLAGS) -pthread
test_ldadd = lib/libdevcache-core.la $(CMOCKA_LIBS) $(LTLIBINTL) -lpthread
# The one model writer: its core (tests/model-writer-core.*, json-c, no
# cmocka, also linked by bench/) and the tests' face of it, whose errors
# fail the test (tests/model-writer.*).  Its users add $(JSONC_CFLAGS).
model_writer_core = tests/model-writer-core.c tests/model-writer-core.h
model_writer = tests/model-writer.c tests/model-writer.h $(model_writer_core)
tests_test_version_SOURCES = tests/test-version.c tests/tap.h
tests_test_version_CFLAGS = $(test_cflags)
tests_test_version_LDADD = libdevcache.la $(CMOCKA_LIBS)
tests_test_errors_SOURCES = tests/test-errors.c tests/tap.h
tests_test_errors_CFLAGS = $(test_cflags)
tests_test_errors_LDADD = $(test_ldadd)
tests_test_tunables_SOURCES = tests/test-tunables.c tests/tap.h
tests_test_tunables_CFLAGS = $(test_cflags)
tests_test_tunables_LDADD = $(test_ldadd)
# The configuration's tests share one fixture (tests/config-fixture.*).
config_fixture = tests/config-fixture.c tests/config-fixture.h
tests_test_config_string_SOURCES = tests/test-config-string.c tests/tap.h $(config_fixture)
tests_test_config_string_CFLAGS = $(test_cflags)
tests_test_config_string_LDADD = $(test_ldadd)
tests_test_config_file_SOURCES = tests/test-config-file.c tests/tap.h $(config_fixture)
tests_test_config_file_CFLAGS = $(test_cflags)
tests_test_config_file_LDADD = $(test_ldadd)
tests_test_config_open_SOURCES = tests/test-config-open.c tests/tap.h $(config_fixture)
tests_test_config_open_CFLAGS = $(test_cflags)
tests_test_config_open_LDADD = $(test_ldadd)
tests_test_loader_SOURCES = tests/test-loader.c tests/tap.h
tests_test_loader_CFLAGS = $(test_cflags)
tests_test_loader_LDADD = $(test_ldadd)
tests_test_host_SOURCES = tests/test-host.c tests/tap.h
tests_test_host_CFLAGS = $(test_cflags)
tests_test_host_LDADD = $(test_ldadd)
tests_test_tool_SOURCES = tests/test-tool.c tests/tap.h tests/spawn.c tests/spawn.h
tests_test_tool_CFLAGS = $(test_cflags)
tests_test_tool_LDADD = $(test_ldadd)
tests_test_i18n_SOURCES = tests/test-i18n.c tests/tap.h tests/spawn.c tests/spawn.h
tests_test_i18n_CFLAGS = $(test_cflags)
tests_test_i18n_LDADD = $(test_ldadd)
else
check-local:
	@echo "make check needs cmocka (Debian: apt-get install libcmocka-dev), then ./configure again" >&2
	@exit 1
endif

# The exported symbols (lib/libdevcache.map) against the headers and the
# built shared library.
if HAVE_CMOCKA
check_PROGRAMS += tests/test-abi
TESTS += tests/test-abi
tests_test_abi_SOURCES = tests/test-abi.c tests/tap.h
tests_test_abi_CPPFLAGS = $(AM_CPPFLAGS) \
	-DTEST_LIBDEVCACHE=\"$(abs_top_builddir)/.libs/libdevcache.so\"
tests_test_abi_CFLAGS = $(test_cflags)
tests_test_abi_LDADD = $(CMOCKA_LIBS)
EXTRA_tests_test_abi_DEPENDENCIES = libdevcache.la
endif

# The ABI against the stored baseline, lib/libdevcache.abi (abidiff, from
# abigail-tools; skipped, saying so, without it).  TAP, as the C tests.
TESTS += tests/test-abidiff.sh
TEST_EXTENSIONS += .sh
SH_LOG_DRIVER = $(LOG_DRIVER)
SH_LOG_COMPILER = $(SHELL)
EXTRA_DIST += tests/test-abidiff.sh

# The static library defines devcache_* only (build-aux/localize-static),
# and links into a program with functions named like the internals, with
# the flags libdevcache.pc gives for a static link.  automake's plain
# test-driver runs it (.test): exit 77 is a skip, saying why
# (--disable-static, no objcopy).
TESTS += tests/test-static.test
EXTRA_DIST += tests/test-static.test tests/static-client.c

# lib/tunables.h's accessors: the right reads compile, wrong ones do not.
TESTS += tests/test-tunable-accessors.test
EXTRA_DIST += tests/test-tunable-accessors.test
# libdevcache(3)'s engine example, compiled from the page and run (issue 33).
TESTS += tests/test-man-example.test
EXTRA_DIST += tests/test-man-example.test
TEST_EXTENSIONS += .test
TEST_LOG_COMPILER = env CC='$(CC)' CFLAGS='$(CFLAGS)' LDFLAGS='$(LDFLAGS)' NM='$(NM)' PKG_CONFIG='$(PKG_CONFIG)' \
	RELOC_LDFLAGS='$(RELOC_LDFLAGS)' TEST_BUILDDIR='$(abs_top_builddir)' $(SHELL)
