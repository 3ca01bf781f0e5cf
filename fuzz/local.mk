## SPDX-License-Identifier: LGPL-2.1-or-later
## fuzz/local.mk - fuzz targets for every parser of outside input: replayed on their corpus by make check, fuzzed by make fuzz.

# Each target fuzz/fuzz-T.c is one LLVMFuzzerTestOneInput, built twice:
#  - fuzz/replay-T, with fuzz/replay.c and any compiler: make check runs it
#    on fuzz/corpus/T (the seeds and past findings), one TAP line each;
#  - fuzz/fuzz-T, a libFuzzer program, where configure --enable-fuzzing
#    made the whole build clang's, with ASan and UBSan: make fuzz runs each
#    for FUZZ_SECONDS (see fuzz/README).
fuzz_targets = model-file model-set model-load options config trace
fuzz_common = fuzz/fuzz.h fuzz/fuzz-common.c
fuzz_model = fuzz/fuzz-model.h fuzz/fuzz-model.c
fuzz_tunables = fuzz/fuzz-tunables.h fuzz/fuzz-tunables.c
fuzz_ldadd = lib/libdevcache-core.la $(LTLIBINTL) $(JSONC_LIBS) -lpthread
fuzz_cflags = $(AM_CFLAGS) $(JSONC_CFLAGS) $(ZLIB_CFLAGS) -pthread
fuzz_cppflags = $(AM_CPPFLAGS) -I$(top_srcdir)/fuzz -I$(top_srcdir)/tools
fuzz_sources_model_file = fuzz/fuzz-model-file.c $(fuzz_common) $(fuzz_model)
fuzz_sources_model_set = fuzz/fuzz-model-set.c $(fuzz_common) $(fuzz_model)
fuzz_sources_model_load = fuzz/fuzz-model-load.c $(fuzz_common) $(fuzz_model)
fuzz_sources_options = fuzz/fuzz-options.c $(fuzz_common) $(fuzz_tunables)
fuzz_sources_config = fuzz/fuzz-config.c $(fuzz_common) $(fuzz_tunables)
# The reader is the tool's, compiled in (as tests/test-trace does).
fuzz_sources_trace = fuzz/fuzz-trace.c $(fuzz_common) tools/trace-read.c tools/trace-read.h

EXTRA_DIST += fuzz/README fuzz/corpus fuzz/run-fuzz.sh fuzz/harvest-seeds fuzz/make-set-input

# ---- the replay programs: make check ----------------------------------------
replay_programs = fuzz/replay-model-file fuzz/replay-model-set fuzz/replay-model-load \
	fuzz/replay-options fuzz/replay-config fuzz/replay-trace
check_PROGRAMS += $(replay_programs)
TESTS += $(replay_programs)

fuzz_replay_model_file_SOURCES = fuzz/replay.c $(fuzz_sources_model_file)
fuzz_replay_model_file_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"model-file\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/model-file\"
fuzz_replay_model_file_CFLAGS = $(fuzz_cflags)
fuzz_replay_model_file_LDADD = $(fuzz_ldadd)
fuzz_replay_model_set_SOURCES = fuzz/replay.c $(fuzz_sources_model_set)
fuzz_replay_model_set_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"model-set\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/model-set\"
fuzz_replay_model_set_CFLAGS = $(fuzz_cflags)
fuzz_replay_model_set_LDADD = $(fuzz_ldadd)
fuzz_replay_model_load_SOURCES = fuzz/replay.c $(fuzz_sources_model_load)
fuzz_replay_model_load_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"model-load\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/model-load\"
fuzz_replay_model_load_CFLAGS = $(fuzz_cflags)
fuzz_replay_model_load_LDADD = $(fuzz_ldadd)
fuzz_replay_options_SOURCES = fuzz/replay.c $(fuzz_sources_options)
fuzz_replay_options_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"options\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/options\"
fuzz_replay_options_CFLAGS = $(fuzz_cflags)
fuzz_replay_options_LDADD = $(fuzz_ldadd)
fuzz_replay_config_SOURCES = fuzz/replay.c $(fuzz_sources_config)
fuzz_replay_config_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"config\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/config\"
fuzz_replay_config_CFLAGS = $(fuzz_cflags)
fuzz_replay_config_LDADD = $(fuzz_ldadd)
fuzz_replay_trace_SOURCES = fuzz/replay.c $(fuzz_sources_trace)
fuzz_replay_trace_CPPFLAGS = $(fuzz_cppflags) -DFUZZ_TARGET=\"trace\" \
	-DFUZZ_CORPUS=\"$(abs_top_srcdir)/fuzz/corpus/trace\"
fuzz_replay_trace_CFLAGS = $(fuzz_cflags)
fuzz_replay_trace_LDADD = $(fuzz_ldadd) $(ZLIB_LIBS)

# ---- the libFuzzer programs: make fuzz ----------------------------------------
fuzz_programs = fuzz/fuzz-model-file fuzz/fuzz-model-set fuzz/fuzz-model-load \
	fuzz/fuzz-options fuzz/fuzz-config fuzz/fuzz-trace
EXTRA_PROGRAMS += $(fuzz_programs)
CLEANFILES += $(fuzz_programs)
fuzz_fuzz_model_file_SOURCES = $(fuzz_sources_model_file)
fuzz_fuzz_model_file_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_model_file_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_model_file_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_model_file_LDADD = $(fuzz_ldadd)
fuzz_fuzz_model_set_SOURCES = $(fuzz_sources_model_set)
fuzz_fuzz_model_set_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_model_set_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_model_set_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_model_set_LDADD = $(fuzz_ldadd)
fuzz_fuzz_model_load_SOURCES = $(fuzz_sources_model_load)
fuzz_fuzz_model_load_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_model_load_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_model_load_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_model_load_LDADD = $(fuzz_ldadd)
fuzz_fuzz_options_SOURCES = $(fuzz_sources_options)
fuzz_fuzz_options_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_options_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_options_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_options_LDADD = $(fuzz_ldadd)
fuzz_fuzz_config_SOURCES = $(fuzz_sources_config)
fuzz_fuzz_config_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_config_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_config_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_config_LDADD = $(fuzz_ldadd)
fuzz_fuzz_trace_SOURCES = $(fuzz_sources_trace)
fuzz_fuzz_trace_CPPFLAGS = $(fuzz_cppflags)
fuzz_fuzz_trace_CFLAGS = $(fuzz_cflags)
fuzz_fuzz_trace_LDFLAGS = $(FUZZ_LDFLAGS)
fuzz_fuzz_trace_LDADD = $(fuzz_ldadd) $(ZLIB_LIBS)

# make fuzz FUZZ_SECONDS=N [FUZZ_TARGETS='model-file trace'] [FUZZ_FLAGS=...]:
# each target for N seconds on its corpus, new inputs kept in fuzz/work/T,
# a finding's input in fuzz/artifacts/ and printed in the log; fails on any.
FUZZ_SECONDS = 60
FUZZ_TARGETS = $(fuzz_targets)
FUZZ_FLAGS =
if ENABLE_FUZZING
fuzz: $(fuzz_programs)
	@$(SHELL) $(srcdir)/fuzz/run-fuzz.sh '$(FUZZ_SECONDS)' '$(srcdir)/fuzz/corpus' '$(FUZZ_FLAGS)' \
		$(FUZZ_TARGETS)
else
fuzz:
	@echo "make fuzz: configure with --enable-fuzzing (clang, libFuzzer) first; see fuzz/README" >&2
	@exit 1
endif
fuzz-programs: $(fuzz_programs)
.PHONY: fuzz fuzz-programs
clean-local: clean-fuzz
clean-fuzz:
	-rm -rf fuzz/work fuzz/artifacts fuzz/*.log
.PHONY: clean-fuzz
