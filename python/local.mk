## SPDX-License-Identifier: LGPL-2.1-or-later
## python/local.mk - the devcache Python package: a C extension over the public API, and its tests.
EXTRA_DIST += python/devcache/__init__.py python/devcache/torch.py python/devcache/_weights.py \
	python/devcache/trace_from_torch.py tests/python/taprun.py

if BUILD_PYTHON
devcachepyexecdir = $(pyexecdir)/devcache
devcachepyexec_PYTHON = python/devcache/__init__.py python/devcache/torch.py python/devcache/_weights.py \
	python/devcache/trace_from_torch.py
devcachepyexec_LTLIBRARIES = python/devcache/_devcache.la
python_devcache__devcache_la_SOURCES = python/devcache/pydevcache.h \
	python/devcache/_devcache.c python/devcache/pycontext.c python/devcache/pydevice.c \
	python/devcache/pymodel.c python/devcache/pytensor.c python/devcache/pypickle.c python/devcache/pycow.c \
	python/devcache/pymanage.c \
	lib/utf8.h lib/utf8.c
python_devcache__devcache_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_CPPFLAGS)
# Python's headers break -Wstrict-prototypes and friends in ways that are
# not ours; the extension's own code is still built with -Wall -Wextra.
python_devcache__devcache_la_CFLAGS = $(AM_CFLAGS) -Wno-cast-function-type \
	-fno-strict-aliasing $(VISIBILITY_CFLAGS)
python_devcache__devcache_la_LDFLAGS = -module -avoid-version -shared \
	-shrext '$(PYTHON_EXT_SUFFIX)' -export-symbols-regex '^PyInit__devcache$$'
python_devcache__devcache_la_LIBADD = libdevcache.la

# The package as the tests import it from the build tree: the sources and
# the built extension side by side in one folder.  The extension is
# renamed into place, never overwritten, so a process that has it loaded
# keeps its copy.
python_pkgdir = python/build/devcache
$(python_pkgdir)/.stamp: python/devcache/_devcache.la $(devcachepyexec_PYTHON)
	$(AM_V_GEN)$(MKDIR_P) $(python_pkgdir) && \
	for f in $(devcachepyexec_PYTHON); do \
		cp -f $(srcdir)/$$f $(python_pkgdir)/ || exit 1; done && \
	cp -f python/devcache/.libs/_devcache$(PYTHON_EXT_SUFFIX) $(python_pkgdir)/.tmp.so && \
	mv -f $(python_pkgdir)/.tmp.so $(python_pkgdir)/_devcache$(PYTHON_EXT_SUFFIX) && \
	touch $@
all-local: $(python_pkgdir)/.stamp

# What runs the package from the build tree (the tests, make bench): its
# folder, and the build tree's library before any installed one.
python_build_env = PYTHONPATH='$(abs_top_builddir)/python/build' PYTHONDONTWRITEBYTECODE=1 \
	LD_LIBRARY_PATH='$(abs_top_builddir)/.libs'"$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}"

python_tests = tests/python/test_package.py tests/python/test_models.py tests/python/test_manage.py \
	tests/python/test_misuse.py tests/python/test_torch.py tests/python/test_load_torch.py \
	tests/python/test_trace_from_torch.py tests/python/test_trace_random.py
TESTS += $(python_tests)
PY_LOG_DRIVER = $(LOG_DRIVER)
PY_LOG_COMPILER = $(PYTHON) $(srcdir)/tests/python/taprun.py
AM_TESTS_ENVIRONMENT += \
	export PYTHON='$(PYTHON)' $(python_build_env);
endif
TEST_EXTENSIONS += .py
clean-local: clean-python-pkg
clean-python-pkg:
	-rm -rf python/build
.PHONY: clean-python-pkg
EXTRA_DIST += tests/python/test_package.py tests/python/test_models.py tests/python/test_manage.py \
	tests/python/test_misuse.py tests/python/test_torch.py tests/python/test_load_torch.py \
	tests/python/test_trace_from_torch.py tests/python/test_trace_random.py tests/python/modelfiles.py
