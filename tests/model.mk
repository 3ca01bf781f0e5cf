## SPDX-License-Identifier: LGPL-2.1-or-later
## tests/model.mk - model files: the safetensors and GGUF readers, devcache inspect, load, dump and demo.
model_tests = tests/test-safetensors tests/test-gguf tests/test-gguf-meta tests/test-gguf-tensors \
	tests/test-inspect tests/test-model-cache tests/test-model-set tests/test-model-split \
	tests/test-model-folder tests/test-model-set-load tests/test-model-partial tests/test-model-copy \
	tests/test-model-guard tests/test-load-tool tests/test-host-faults tests/test-model-manage
# Issue 33, the engines' API: typed metadata, dtypes and alignment, reading into the caller's memory.
model_tests += tests/test-engine-meta tests/test-engine-dtype tests/test-engine-align \
	tests/test-engine-read
# What the GGUF reader's tests share; what the tests of models of several files share.
gguf_bytes = tests/gguf-bytes.c tests/gguf-bytes.h
model_set_fixture = tests/model-set-fixture.c tests/model-set-fixture.h

if HAVE_CMOCKA
check_PROGRAMS += $(model_tests)
TESTS += $(model_tests)
tests_test_safetensors_SOURCES = tests/test-safetensors.c tests/tap.h $(model_writer)
tests_test_safetensors_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_safetensors_LDADD = $(test_ldadd)
tests_test_gguf_SOURCES = tests/test-gguf.c tests/tap.h $(gguf_bytes) $(model_writer)
tests_test_gguf_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_gguf_LDADD = $(test_ldadd)
tests_test_gguf_meta_SOURCES = tests/test-gguf-meta.c tests/tap.h $(gguf_bytes) $(model_writer)
tests_test_gguf_meta_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_gguf_meta_LDADD = $(test_ldadd)
tests_test_engine_meta_SOURCES = tests/test-engine-meta.c tests/tap.h $(gguf_bytes) $(model_writer)
tests_test_engine_meta_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_engine_meta_LDADD = $(test_ldadd)
tests_test_engine_dtype_SOURCES = tests/test-engine-dtype.c tests/tap.h $(gguf_bytes) $(model_writer)
tests_test_engine_dtype_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_engine_dtype_LDADD = $(test_ldadd)
tests_test_engine_align_SOURCES = tests/test-engine-align.c tests/tap.h $(model_writer)
tests_test_engine_align_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_engine_align_LDADD = $(test_ldadd)
tests_test_engine_read_SOURCES = tests/test-engine-read.c tests/tap.h $(model_writer)
tests_test_engine_read_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_engine_read_LDADD = $(test_ldadd)
tests_test_gguf_tensors_SOURCES = tests/test-gguf-tensors.c tests/tap.h $(gguf_bytes) $(model_writer)
tests_test_gguf_tensors_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_gguf_tensors_LDADD = $(test_ldadd)
tests_test_inspect_SOURCES = tests/test-inspect.c tests/tap.h tests/spawn.c tests/spawn.h \
	$(model_writer)
tests_test_inspect_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_inspect_LDADD = $(test_ldadd) $(JSONC_LIBS)
tests_test_model_cache_SOURCES = tests/test-model-cache.c tests/tap.h \
	$(model_writer)
tests_test_model_cache_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_cache_LDADD = $(test_ldadd)
tests_test_model_set_SOURCES = tests/test-model-set.c tests/tap.h \
	$(model_set_fixture) $(model_writer)
tests_test_model_set_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_set_LDADD = $(test_ldadd)
tests_test_model_split_SOURCES = tests/test-model-split.c tests/tap.h \
	$(model_set_fixture) $(model_writer)
tests_test_model_split_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_split_LDADD = $(test_ldadd)
tests_test_model_folder_SOURCES = tests/test-model-folder.c tests/tap.h \
	$(model_set_fixture) $(model_writer)
tests_test_model_folder_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_folder_LDADD = $(test_ldadd)
tests_test_model_set_load_SOURCES = tests/test-model-set-load.c tests/tap.h \
	$(model_set_fixture) $(model_writer)
tests_test_model_set_load_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_set_load_LDADD = $(test_ldadd)
tests_test_load_tool_SOURCES = tests/test-load-tool.c tests/tap.h tests/spawn.c tests/spawn.h \
	$(model_writer)
tests_test_load_tool_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_load_tool_LDADD = $(test_ldadd) $(JSONC_LIBS)
tests_test_model_partial_SOURCES = tests/test-model-partial.c tests/tap.h \
	$(model_writer)
tests_test_model_partial_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_partial_LDADD = $(test_ldadd)
tests_test_model_copy_SOURCES = tests/test-model-copy.c tests/tap.h \
	$(model_writer)
tests_test_model_copy_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_copy_LDADD = $(test_ldadd)
tests_test_model_manage_SOURCES = tests/test-model-manage.c tests/tap.h \
	$(model_writer)
tests_test_model_manage_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_manage_LDADD = $(test_ldadd)
tests_test_model_guard_SOURCES = tests/test-model-guard.c tests/tap.h \
	$(model_writer)
tests_test_model_guard_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_model_guard_LDADD = $(test_ldadd)
# Its own malloc, pread and pthread_create (tests/interpose.c) stand in
# front of libc's for the library linked into it, to fail each in turn.
tests_test_host_faults_SOURCES = tests/test-host-faults.c tests/tap.h \
	tests/interpose.c tests/interpose.h $(model_writer)
tests_test_host_faults_CFLAGS = $(test_cflags) $(JSONC_CFLAGS)
tests_test_host_faults_LDADD = $(test_ldadd)
endif
