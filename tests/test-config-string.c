/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-config-string.c - option strings: KEY:VALUE syntax, lists, the length limit, PyTorch's keys, errors. */
#include "config.h"

#include "config-fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- option strings ------------------------------------------------------------ */

static void string_pairs(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:8,log_level:debug", "TEST", &fx->log), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_string_equal(origin(fx, TUN_load_workers), "TEST");
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_DEBUG);
	assert_string_equal(origin(fx, TUN_log_level), "TEST");
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");
	assert_int_equal(fx->cap.n, 0);
}

static void string_equals_and_spaces(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     " load_workers = 8 ,\tlog_level=  info , "
					     "staging_buffer_size : 1M ,caching:off",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_INFO);
	assert_int_equal(fx->set.v[TUN_staging_buffer_size].u.size, MiB);
	assert_false(fx->set.v[TUN_caching].u.b);
	assert_string_equal(origin(fx, TUN_caching), "TEST");
}

static void string_brackets_protect_commas(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "backends:[cuda,hip],hip_library:[a.so, b.so],"
					     "roundup_power2_divisions:[64:8,256:4],load_workers:3",
					     "TEST", &fx->log),
			 0);
	assert_string_equal(value(fx, TUN_backends), "[cuda,hip]");
	assert_int_equal(fx->set.v[TUN_backends].n_items, 2);
	assert_string_equal(fx->set.v[TUN_backends].items[1], "hip");
	/* A module's tunable waits, as written, until the modules are found. */
	assert_string_equal(pending(fx, "hip_library"), "[a.so, b.so]");
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[6], 8);
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[7], 0);
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[8], 4);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 3);
}

static void string_list_continuation(void **state)
{
	struct fixture *fx = *state;
	const struct tunable_value *b = &fx->set.v[TUN_backends];

	assert_int_equal(config_apply_string(&fx->set,
					     "backends:cuda,hip,^ze,load_workers:3,"
					     "hip_library:a.so, b.so",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(b->n_items, 3);
	assert_string_equal(b->items[0], "cuda");
	assert_string_equal(b->items[1], "hip");
	assert_string_equal(b->items[2], "^ze");
	assert_string_equal(b->origin, "TEST");
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 3);
	assert_string_equal(pending(fx, "hip_library"), "a.so,b.so");
	assert_int_equal(config_apply_string(&fx->set, "backends=cuda,,hip,", "TEST", &fx->log), 0);
	assert_string_equal(value(fx, TUN_backends), "cuda,hip");
}

static void string_item_without_colon(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:8,oops", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'oops'");
	assert_int_equal(config_apply_string(&fx->set, "log_level:debug, cuda", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'cuda'");
	assert_int_equal(config_apply_string(&fx->set, "oops", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: expected KEY:VALUE, found 'oops'");
	/* a bracketed list is complete: no continuation after it */
	assert_int_equal(config_apply_string(&fx->set, "backends:[cuda],hip", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'hip'");
	assert_int_equal(config_apply_string(&fx->set, ":5", "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: missing key before ':5'");
}

/* "backends:host,host,..." of exactly size bytes, as long lists are
 * written: NULL-terminated, to free; *items_p says how many items. */
static char *long_list(size_t size, size_t *items_p)
{
	static const char head[] = "backends:host";
	char *text = malloc(size + 1);

	assert_non_null(text);
	assert_true(size >= sizeof head - 1);
	memcpy(text, head, sizeof head - 1);
	size_t len = sizeof head - 1, items = 1;
	/* ",host" while more than 6 bytes are left, then ",h" to ",hhhhh"
	 * to end exactly */
	assert_true(size - len > 6);
	for (; size - len > 6; items++, len += 5)
		memcpy(text + len, ",host", 5);
	text[len++] = ',';
	memset(text + len, 'h', size - len);
	text[size] = '\0';
	items++;
	*items_p = items;
	return text;
}

/* A list's continuations once made the parse quadratic (a 1 MB list took
 * most of a minute): a string of one byte more than CONFIG_OPTIONS_MAX is
 * refused, naming the limit, before any of it is parsed; one of exactly
 * CONFIG_OPTIONS_MAX bytes, one long list, parses whole. */
static void string_length_limit(void **state)
{
	struct fixture *fx = *state;
	const struct tunable_value *b = &fx->set.v[TUN_backends];
	char expect[256];
	size_t items;
	char *text = malloc(CONFIG_OPTIONS_MAX + 2);

	/* first one long value, which any parser reads quickly */
	assert_non_null(text);
	memset(text, 'a', CONFIG_OPTIONS_MAX + 1);
	memcpy(text, "backend_path:/", strlen("backend_path:/"));
	text[CONFIG_OPTIONS_MAX + 1] = '\0';
	xsnprintf(expect, sizeof expect,
		  "%s: option string of %u bytes is longer than the limit of %u bytes", "TEST",
		  CONFIG_OPTIONS_MAX + 1, CONFIG_OPTIONS_MAX);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_backend_path), "default");
	free(text);

	text = long_list(CONFIG_OPTIONS_MAX + 1, &items);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_backends), "default");
	/* the same from devcache_open, naming its source */
	assert_int_equal(devcache_open(&fx->ctx, text), DEVCACHE_ECONFIG);
	assert_null(fx->ctx);
	assert_contains(devcache_last_error(), "devcache_open: option string of ");
	free(text);

	text = long_list(CONFIG_OPTIONS_MAX, &items);
	assert_int_equal(strlen(text), CONFIG_OPTIONS_MAX);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), 0);
	assert_int_equal(b->n_items, items);
	assert_string_equal(b->items[0], "host");
	assert_string_equal(b->items[items / 2], "host");
	assert_int_equal(strlen(b->str), CONFIG_OPTIONS_MAX - strlen("backends:"));
	assert_string_equal(origin(fx, TUN_backends), "TEST");
	free(text);
}

static void string_empty_items_skipped(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, ",,load_workers:8,, ,log_level:error,", "TEST",
					     &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_ERROR);
	assert_int_equal(config_apply_string(&fx->set, "", "TEST", &fx->log), 0);
	assert_int_equal(config_apply_string(&fx->set, " , ", "TEST", &fx->log), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
}

static void string_pytorch_paste(void **state)
{
	static const unsigned table[DIVISION_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1,
							   8, 8, 8, 8, 8, 8, 8};
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "max_split_size_mb:512,roundup_power2_divisions:[256:1,"
					     "512:2,>:8],garbage_collection_threshold:0.6,"
					     "expandable_segments:True",
					     "DEVCACHE_OPTIONS", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].special, TV_VALUE);
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].u.size, 512 * MiB);
	assert_memory_equal(fx->set.v[TUN_roundup_power2_divisions].divisions, table, sizeof table);
	assert_string_equal(value(fx, TUN_roundup_power2_divisions), "[256:1,512:2,>:8]");
	assert_true(fx->set.v[TUN_garbage_collection_threshold].u.f == 0.6);
	assert_true(fx->set.v[TUN_expandable_segments].u.b);
	assert_string_equal(origin(fx, TUN_max_split_size_mb), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_roundup_power2_divisions), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_garbage_collection_threshold), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_expandable_segments), "DEVCACHE_OPTIONS");
	assert_int_equal(fx->cap.n, 0);
}

static void string_compat_keys(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "backend:native,release_lock_on_cudamalloc:True,"
					     "pinned_use_cuda_host_register:true,"
					     "pinned_num_register_threads:8,load_workers:5",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 5);
	assert_string_equal(origin(fx, TUN_backends), "default");
	assert_int_equal(fx->cap.n, 4);
	/* PyTorch's default changes nothing: a note at info level; any other
	 * value is a warning that says what PyTorch would do with it. */
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO, "accepts and ignores"), 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_INFO);
	assert_string_equal(fx->cap.text[0],
			    "TEST: backend is a PyTorch option that libdevcache accepts and ignores "
			    "(here native, PyTorch's default)");
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING, "does not act on"), 3);
	assert_string_equal(fx->cap.text[1],
			    "TEST: release_lock_on_cudamalloc:True is a PyTorch option that "
			    "libdevcache accepts but does not act on: with it PyTorch releases its "
			    "allocator's lock while cudaMalloc runs");
	assert_contains(fx->cap.text[3], "TEST: pinned_num_register_threads:8 is a PyTorch option");
	/* any value: PyTorch's, not ours, to check */
	fx->cap.n = 0;
	assert_int_equal(config_apply_string(&fx->set, "backend:cudaMallocAsync,expandable_segments:true",
					     "TEST", &fx->log),
			 0);
	assert_true(fx->set.v[TUN_expandable_segments].u.b);
	assert_int_equal(fx->cap.n, 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_WARNING);
	assert_contains(fx->cap.text[0], "backend:cudaMallocAsync is a PyTorch option that "
					 "libdevcache accepts but does not act on: with it PyTorch "
					 "allocates with cudaMallocAsync");
}

static void string_unknown_key(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "max_split_size:512", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: unknown tunable 'max_split_size' "
						   "(did you mean 'max_split_size_mb'?)");
	assert_int_equal(config_apply_string(&fx->set, "garbage_colection_threshold:0.6", "devcache_open",
					     &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: unknown tunable 'garbage_colection_threshold' (did you mean "
			    "'garbage_collection_threshold'?)");
	/* Abbreviations, word by word. */
	assert_int_equal(config_apply_string(&fx->set, "max_split_sz:5", "devcache_open", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "devcache_open: unknown tunable 'max_split_sz' "
						   "(did you mean 'max_split_size_mb'?)");
	assert_int_equal(config_apply_string(&fx->set, "exp_seg:true", "devcache_open", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "devcache_open: unknown tunable 'exp_seg' "
						   "(did you mean 'expandable_segments'?)");
	assert_int_equal(config_apply_string(&fx->set, "frobnicate:1", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: unknown tunable 'frobnicate' "
						   "(devcache config lists them all)");
	assert_string_equal(origin(fx, TUN_max_split_size_mb), "default");
}

static void string_bad_value(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:0", "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "TEST: load_workers: '0' is out of range (accepted: at least 1 and at most 64)");
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 2);
	assert_string_equal(origin(fx, TUN_load_workers), "default");
	assert_int_equal(config_apply_string(&fx->set, "max_split_size_mb:abc", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc' (expected a size in "
			    "MiB such as 512, or with a unit such as 2G, or unlimited)");
}

/* Control bytes in DEVCACHE_OPTIONS reach the message, and the terminal
 * that prints it, only as \xNN; a long value is cut, not the reason. */
static void string_control_bytes_are_shown_escaped(void **state)
{
	struct fixture *fx = *state;
	char *text = malloc(3000);

	assert_int_equal(setenv("DEVCACHE_OPTIONS", "log_level:\x1b]0;pwned\x07\x1b[2J", 1), 0);
	assert_int_equal(devcache_open(&fx->ctx, NULL), DEVCACHE_ECONFIG);
	assert_null(fx->ctx);
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: log_level: invalid enum '\\x1b]0;pwned\\x07\\x1b[2J' "
			    "(expected one of: none, error, warning, info, debug)");
	assert_int_equal(config_apply_string(&fx->set, "fr\xc2\x9b" "2J\xffob:1", "DEVCACHE_OPTIONS",
					     &fx->log),
			 DEVCACHE_ECONFIG);
	assert_contains(devcache_last_error(), "DEVCACHE_OPTIONS: unknown tunable 'fr\\xc2\\x9b2J\\xffob'");
	assert_non_null(text);
	strcpy(text, "load_workers:");
	memset(text + strlen(text), 'x', 2900);
	text[2913] = '\0';
	assert_int_equal(config_apply_string(&fx->set, text, "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_contains(devcache_last_error(), "DEVCACHE_OPTIONS: load_workers: invalid int 'xxx");
	assert_contains(devcache_last_error(), "bytes left out)");
	assert_contains(devcache_last_error(), "xxx' (expected an integer)");
	assert_true(strlen(devcache_last_error()) < 400);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(string_pairs),
		T(string_equals_and_spaces),
		T(string_brackets_protect_commas),
		T(string_list_continuation),
		T(string_item_without_colon),
		T(string_length_limit),
		T(string_empty_items_skipped),
		T(string_pytorch_paste),
		T(string_compat_keys),
		T(string_unknown_key),
		T(string_bad_value),
		T(string_control_bytes_are_shown_escaped),
	};

	no_outside_config();
	return RUN_TAP(tests);
}
