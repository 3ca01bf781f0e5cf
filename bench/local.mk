## SPDX-License-Identifier: LGPL-2.1-or-later
## bench/local.mk - `make bench`: the allocator's benchmarks; never built by `make` or `make check`.
##
## The programs are EXTRA_PROGRAMS, built only when `make bench` asks for
## them; jemalloc, mimalloc and tcmalloc are dlopen()ed at run time (see
## configure.ac), so nothing here needs them to build.  bench/README says
## what the figures mean and records them.

bench_programs = bench/hotpath bench/gentrace bench/replay bench/loadbench bench/soak bench/headerbench
EXTRA_PROGRAMS += $(bench_programs)
bench_cflags = $(AM_CFLAGS) -pthread
bench_ldadd = libdevcache.la $(LIBM) -lpthread

bench_hotpath_SOURCES = bench/hotpath.c bench/bench.h bench/mallocs.c bench/mallocs.h
bench_hotpath_CFLAGS = $(bench_cflags)
bench_hotpath_LDADD = $(bench_ldadd)
# bench/headerbench: the time and memory of reading a header of 1,000,000
# tensors, 10 MB of empty objects and a 10 MB index (README, section 7).
bench_headerbench_SOURCES = bench/headerbench.c
bench_headerbench_CFLAGS = $(bench_cflags)
bench_headerbench_LDADD = $(bench_ldadd)
bench_gentrace_SOURCES = bench/gentrace.c bench/bench.h
bench_gentrace_CFLAGS = $(bench_cflags)
bench_gentrace_LDADD = $(bench_ldadd)
bench_replay_SOURCES = bench/replay.c bench/replay.h bench/replay-warm.c bench/minmem.c \
	bench/bench.h bench/mallocs.c bench/mallocs.h
# The traces are read by the tool's reader, compiled in as tests/test-trace
# does: one reader of devcache-trace(5), with the marks bench/replay needs.
bench_replay_SOURCES += tools/trace-read.c tools/trace-read.h
# bench/replay's minimum-memory search also runs the independent model of
# PyTorch's allocator that the differential test uses (tests/pytorch-model*),
# for PyTorch's figures beside libdevcache's.
bench_replay_SOURCES += tests/pytorch-model.c tests/pytorch-model-expand.c \
	tests/pytorch-model.h tests/pytorch-model-internal.h
bench_replay_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/tests -I$(srcdir)/tools -DHAVE_PYTORCH_MODEL
bench_replay_CFLAGS = $(bench_cflags) $(JSONC_CFLAGS) $(ZLIB_CFLAGS)
bench_replay_LDADD = $(bench_ldadd) $(JSONC_LIBS) $(ZLIB_LIBS)
bench_loadbench_SOURCES = bench/loadbench.c bench/loadbench-measure.c bench/loadbench-models.c \
	bench/loadbench-size.c bench/loadbench-sharded.c bench/loadbench-partial.c \
	bench/loadbench-switch.c bench/loadbench-manager.c bench/loadbench-sweep.c bench/loadbench-engine.c \
	bench/loadbench.h bench/bench.h \
	$(model_writer_core)
bench_loadbench_CPPFLAGS = $(AM_CPPFLAGS) -iquote $(srcdir)/tests
bench_loadbench_CFLAGS = $(bench_cflags) $(JSONC_CFLAGS)
bench_loadbench_LDADD = $(bench_ldadd) $(JSONC_LIBS)

# bench/soak and bench/loadbench write their models with the tests' model
# writer (its core: errors returned, no cmocka); -iquote, as tests/spawn.h
# must not stand in for <spawn.h>.
bench_soak_SOURCES = bench/soak.c bench/soak-work.c bench/soak-check.c bench/soak-models.c \
	bench/soak.h bench/bench.h $(model_writer_core)
bench_soak_CPPFLAGS = $(AM_CPPFLAGS) -iquote $(srcdir)/tests
bench_soak_CFLAGS = $(bench_cflags) $(JSONC_CFLAGS)
bench_soak_LDADD = $(bench_ldadd) $(JSONC_LIBS) -ldl

# bench/soak runs on the host, on each vendor backend that configure
# built on its fake runtime (tests/fakes.mk), which `make bench` builds
# for it, and on the vendor's runtime where the machine has a device;
# SOAK_SECONDS sets its time on each device (default 10 s), and
# SOAK_FLAGS adds options ("-t 8 -S 7").  `make bench-soak` runs it alone.
bench_soak_deps = bench/soak $(backendmod_LTLIBRARIES) $(fake_runtimes)
bench_soak_env = SOAK_SECONDS='$(SOAK_SECONDS)' SOAK_FLAGS='$(SOAK_FLAGS)'

# bench/torchtrace.so: the LD_PRELOAD shim that records the tensor
# allocations of a PyTorch CPU program (libc10's posix_memalign and their
# frees) as a trace; bench/torchwork.py's workloads made the committed
# bench/torch-*.trace.gz with it (bench/README, section 2.1).  Built for
# `make bench` and for tests/test-torchtrace, never installed.
check_LTLIBRARIES += bench/torchtrace.la
bench_torchtrace_la_SOURCES = bench/torchtrace.c
bench_torchtrace_la_CFLAGS = $(AM_CFLAGS) -pthread
bench_torchtrace_la_LIBADD = -ldl -lpthread
bench_torchtrace_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
bench_torch_traces = bench/torch-resnet.trace.gz bench/torch-decode.trace.gz \
	bench/torch-unet.trace.gz bench/torch-switch.trace.gz bench/torch-llm.trace.gz

# The emulated device that bench/loadbench stages models onto and
# bench/replay finds each trace's minimum memory on: a backend module like
# tests/modules/, built only for `make bench`, loaded from the build tree
# (bench/modules/.libs) and never installed.
bench_modules = bench/modules/benchdev.la
EXTRA_LTLIBRARIES = $(bench_modules)
bench_modules_benchdev_la_SOURCES = bench/modules/benchdev.c
bench_modules_benchdev_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

EXTRA_DIST += bench/README bench/HISTORY bench/run.sh bench/soak.sh bench/pybench.py \
	bench/tunebench.sh \
	bench/torchbench.py bench/torchwork.py bench/callgrind.sh $(bench_torch_traces)
CLEANFILES += $(bench_programs) $(bench_modules) bench/*.trace bench/tune.json bench/report.txt bench/report.tmp* \
	bench/*.safetensors bench/*.safetensors.tmp \
	bench/*.safetensors.index.json bench/*.safetensors.index.json.tmp bench/headerbench-* \
	bench/pybench-*.pt bench/pybench-*.pt.tmp bench/report-python.txt bench/report-python.rc

# The Python package's benchmarks: bench/pybench.py, its models into numpy
# arrays, against numpy.fromfile and torch.load; bench/torchbench.py, the
# same checkpoints into a meta-device torch module; cold and warm.  They run
# from the build tree's package, as the Python tests do; BENCH_RUNS sets
# their runs per figure; the status is the worse of the two.  Without the
# package it says so and measures nothing.
if BUILD_PYTHON
bench_python_deps = $(python_pkgdir)/.stamp
bench_python_run = ( $(python_build_env) BENCH_STRICT='$(BENCH_STRICT)' \
	$(PYTHON) $(srcdir)/bench/pybench.py -d bench; rc=$$?; echo; \
	$(python_build_env) BENCH_STRICT='$(BENCH_STRICT)' \
	$(PYTHON) $(srcdir)/bench/torchbench.py -d bench; trc=$$?; \
	test $$trc -gt $$rc && rc=$$trc; exit $$rc )
else
bench_python_deps =
bench_python_run = echo "== Python package: not built (configure found no Python 3 with its headers, or --without-python): not measured"
endif

# Builds the programs, generates the traces, runs everything and prints the
# report (also left in bench/report.txt).  BENCH_FLAGS go to bench/hotpath
# ("-r 9" for more runs per figure); BENCH_STRICT=yes fails on a missed target.
# The model files bench/loadbench generates (10 GiB: the 4G model also as
# shards) stay for the next run, as do bench/pybench.py's (10 GiB: 1G and 4G
# as safetensors and as torch.save files); `make clean` removes them.  The
# Python benchmark runs last (also alone: `make bench-python`) and leaves its
# report in bench/report-python.txt; the exit status is the worse of the two.
bench: $(bench_programs) $(bench_modules) bench/torchtrace.la $(bench_soak_deps) $(bench_python_deps) \
	tools/devcache
	@CC='$(CC)' CFLAGS='$(CFLAGS)' BENCH_FLAGS='$(BENCH_FLAGS)' $(bench_soak_env) \
	BENCH_STRICT='$(BENCH_STRICT)' $(SHELL) $(srcdir)/bench/run.sh .; rc=$$?; \
	echo; ( $(bench_python_recipe) ); prc=$$?; \
	test $$prc -gt $$rc && rc=$$prc; exit $$rc
bench-soak: $(bench_soak_deps)
	@$(bench_soak_env) $(SHELL) $(srcdir)/bench/soak.sh . $(srcdir)
bench-python: $(bench_python_deps)
	@$(bench_python_recipe)
bench_python_recipe = $(MKDIR_P) bench && { $(bench_python_run); echo $$? > bench/report-python.rc; } 2>&1 | \
	tee bench/report-python.txt; exit `cat bench/report-python.rc; rm -f bench/report-python.rc`
.PHONY: bench bench-soak bench-python
