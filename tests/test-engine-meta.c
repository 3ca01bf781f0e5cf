/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-engine-meta.c - metadata by key with typed values (GGUF's every type, arrays read from the file, safetensors' strings, an index's JSON), and missing keys told from wrong types. */
#include "config.h"

#include "tap.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "gguf-bytes.h"
#include "model-writer.h"

static void gguf_scalars(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 12);
	enum devcache_meta_type type, elem;
	const char *s;
	uint64_t u, count;
	int64_t i;
	double f;
	size_t len, index;
	int v;

	(void)state;
	kv_str(&b, "general.architecture", "llama");
	key(&b, "llama.context_length", T_UINT32), u32_(&b, 4096);
	key(&b, "i8", T_INT8), u8_(&b, (uint8_t)-5);
	key(&b, "u64", T_UINT64), u64_(&b, UINT64_MAX);
	key(&b, "i64", T_INT64), u64_(&b, (uint64_t)INT64_MIN);
	key(&b, "f32", T_FLOAT32), f32_(&b, 0.1f);
	key(&b, "f64", T_FLOAT64), f64_(&b, -2.5);
	key(&b, "bool", T_BOOL), u8_(&b, 1);
	key(&b, "nul", T_STRING), strn_(&b, "a\0b", 3);
	kv_str(&b, "empty", "");
	key(&b, "u16", T_UINT16), u16_(&b, 65535);
	key(&b, "i32", T_INT32), u32_(&b, (uint32_t)-7);
	mf = open_ok(&b, "scalars.gguf");

	assert_int_equal(devcache_model_file_get_string(mf, "general.architecture", &s, &len), 0);
	assert_string_equal(s, "llama"); /* no quotes: the value, not its JSON */
	assert_int_equal(len, 5);
	assert_int_equal(devcache_model_file_get_uint(mf, "llama.context_length", &u), 0);
	assert_int_equal(u, 4096);
	assert_int_equal(devcache_model_file_get_int(mf, "llama.context_length", &i), 0);
	assert_int_equal(i, 4096);
	assert_int_equal(devcache_model_file_get_int(mf, "i8", &i), 0);
	assert_int_equal(i, -5);
	assert_int_equal(devcache_model_file_get_uint(mf, "u64", &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(devcache_model_file_get_int(mf, "i64", &i), 0);
	assert_true(i == INT64_MIN);
	assert_int_equal(devcache_model_file_get_int(mf, "i32", &i), 0);
	assert_int_equal(i, -7);
	assert_int_equal(devcache_model_file_get_uint(mf, "u16", &u), 0);
	assert_int_equal(u, 65535);
	assert_int_equal(devcache_model_file_get_float(mf, "f32", &f), 0);
	assert_true(f == (double)0.1f);
	assert_int_equal(devcache_model_file_get_float(mf, "f64", &f), 0);
	assert_true(f == -2.5);
	assert_int_equal(devcache_model_file_get_bool(mf, "bool", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(devcache_model_file_get_string(mf, "nul", &s, &len), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(s, "a\0b", 4);
	assert_int_equal(devcache_model_file_get_string(mf, "empty", &s, NULL), 0);
	assert_string_equal(s, "");

	assert_int_equal(devcache_model_file_metadata_type(mf, "f32", &type, &elem, &count), 0);
	assert_int_equal(type, DEVCACHE_META_FLOAT32);
	assert_int_equal(count, 1);
	assert_int_equal(devcache_model_file_metadata_type(mf, "nul", &type, NULL, &count), 0);
	assert_int_equal(type, DEVCACHE_META_STRING);
	assert_int_equal(count, 3);
	assert_int_equal(devcache_model_file_metadata_find(mf, "bool", &index), 0);
	assert_int_equal(index, 7);
	const char *k, *json;
	assert_int_equal(devcache_model_file_metadata(mf, index, &k, &json), 0);
	assert_string_equal(k, "bool");
	assert_string_equal(json, "true"); /* the JSON text is still there */

	/* A missing key and a wrong type are told apart, each message naming
	 * the file and the key. */
	assert_int_equal(devcache_model_file_get_uint(mf, "llama.block_count", &u), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "scalars.gguf: no metadata key 'llama.block_count'");
	assert_int_equal(devcache_model_file_metadata_find(mf, "nope", &index), DEVCACHE_ENOENT);
	assert_int_equal(devcache_model_file_get_string(mf, "llama.context_length", &s, NULL),
			 DEVCACHE_ETYPE);
	assert_contains(devcache_last_error(),
			"scalars.gguf: metadata key 'llama.context_length' is UINT32, not STRING");
	assert_int_equal(devcache_model_file_get_float(mf, "i8", &f), DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_bool(mf, "f64", &v), DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_int(mf, "general.architecture", &i), DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_int(mf, "u64", &i), DEVCACHE_ETYPE);
	assert_contains(devcache_last_error(), "18446744073709551615, more than an int64_t holds");
	assert_int_equal(devcache_model_file_get_uint(mf, "i8", &u), DEVCACHE_ETYPE);
	assert_contains(devcache_last_error(), "'i8' is -5, below 0");
	assert_int_equal(devcache_model_file_get_array(mf, "i8", DEVCACHE_META_INT8, 0, 1, &v),
			 DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_string(NULL, "x", &s, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_file_get_string(mf, "x", NULL, NULL), DEVCACHE_EINVAL);
	assert_string_not_equal(devcache_strerror(DEVCACHE_ETYPE), devcache_strerror(DEVCACHE_ENOENT));
	devcache_model_file_close(mf);
}

struct seen {
	uint64_t n, stop_at;
	char last[32];
	bool in_order;
};

static int each_token(void *user, uint64_t index, const char *s, size_t len)
{
	struct seen *w = user;
	char want[32];

	snprintf(want, sizeof want, "tok%llu", (unsigned long long)index);
	if (index != w->n || strlen(want) != len || strcmp(s, want) != 0)
		w->in_order = false;
	snprintf(w->last, sizeof w->last, "%s", s);
	w->n++;
	return w->stop_at && w->n == w->stop_at;
}

static void gguf_arrays(void **state)
{
	enum { N = 100000 };
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 6);
	enum devcache_meta_type type, elem;
	uint64_t count;
	char tok[32];

	(void)state;
	key(&b, "tokenizer.ggml.tokens", T_ARRAY), u32_(&b, T_STRING), u64_(&b, N);
	for (int i = 0; i < N; i++)
		str_(&b, (snprintf(tok, sizeof tok, "tok%d", i), tok));
	key(&b, "scores", T_ARRAY), u32_(&b, T_FLOAT32), u64_(&b, N);
	for (int i = 0; i < N; i++)
		f32_(&b, (float)i / 4);
	key(&b, "i16s", T_ARRAY), u32_(&b, T_INT16), u64_(&b, 3);
	u16_(&b, (uint16_t)-1), u16_(&b, 2), u16_(&b, 32767);
	key(&b, "bools", T_ARRAY), u32_(&b, T_BOOL), u64_(&b, 2), u8_(&b, 0), u8_(&b, 1);
	key(&b, "u64s", T_ARRAY), u32_(&b, T_UINT64), u64_(&b, 2), u64_(&b, 1), u64_(&b, UINT64_MAX);
	key(&b, "nested", T_ARRAY), u32_(&b, T_ARRAY), u64_(&b, 1), u32_(&b, T_UINT8), u64_(&b, 1),
		u8_(&b, 9);
	mf = open_ok(&b, "arrays.gguf");

	assert_int_equal(devcache_model_file_metadata_type(mf, "tokenizer.ggml.tokens", &type, &elem,
							   &count), 0);
	assert_int_equal(type, DEVCACHE_META_ARRAY);
	assert_int_equal(elem, DEVCACHE_META_STRING);
	assert_int_equal(count, N);
	struct seen w = {.in_order = true};
	assert_int_equal(devcache_model_file_get_strings(mf, "tokenizer.ggml.tokens", each_token, &w), 0);
	assert_int_equal(w.n, N);
	assert_true(w.in_order);
	assert_string_equal(w.last, "tok99999");
	/* The callback stops the walk. */
	w = (struct seen){.in_order = true, .stop_at = 10};
	assert_int_equal(devcache_model_file_get_strings(mf, "tokenizer.ggml.tokens", each_token, &w),
			 DEVCACHE_ECANCELED);
	assert_int_equal(w.n, 10);

	float *scores = malloc(N * sizeof *scores);
	assert_non_null(scores);
	assert_int_equal(devcache_model_file_get_array(mf, "scores", DEVCACHE_META_FLOAT32, 0, N,
						       scores), 0);
	for (int i = 0; i < N; i++)
		if (scores[i] != (float)i / 4)
			fail_msg("scores[%d] is %g, not %g", i, scores[i], (double)((float)i / 4));
	float two[2];
	assert_int_equal(devcache_model_file_get_array(mf, "scores", DEVCACHE_META_FLOAT32, N - 2, 2,
						       two), 0);
	assert_true(two[1] == (float)(N - 1) / 4);
	assert_int_equal(devcache_model_file_get_array(mf, "scores", DEVCACHE_META_FLOAT32, N - 1, 2,
						       two), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_file_get_array(mf, "scores", DEVCACHE_META_FLOAT64, 0, 1,
						       two), DEVCACHE_ETYPE);
	assert_contains(devcache_last_error(), "is an array of FLOAT32, not of FLOAT64");
	free(scores);

	int16_t i16[3];
	assert_int_equal(devcache_model_file_get_array(mf, "i16s", DEVCACHE_META_INT16, 0, 3, i16), 0);
	assert_int_equal(i16[0], -1);
	assert_int_equal(i16[2], 32767);
	uint8_t bools[2];
	assert_int_equal(devcache_model_file_get_array(mf, "bools", DEVCACHE_META_BOOL, 0, 2, bools), 0);
	assert_int_equal(bools[0], 0);
	assert_int_equal(bools[1], 1);
	uint64_t u64s[2];
	assert_int_equal(devcache_model_file_get_array(mf, "u64s", DEVCACHE_META_UINT64, 0, 2, u64s), 0);
	assert_true(u64s[1] == UINT64_MAX);
	/* Arrays of arrays have only their JSON text. */
	uint8_t x;
	assert_int_equal(devcache_model_file_get_array(mf, "nested", DEVCACHE_META_ARRAY, 0, 1, &x),
			 DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_strings(mf, "scores", each_token, &w), DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_string(mf, "scores", &(const char *){NULL}, NULL),
			 DEVCACHE_ETYPE);
	devcache_model_file_close(mf);
}

static void safetensors_strings(void **state)
{
	const struct mw_tensor t[] = {{"w", 16, 0, NULL, 0, NULL}};
	devcache_model_file_t *mf;
	enum devcache_meta_type type;
	const char *s;
	size_t len;
	int64_t i;

	(void)state;
	mw_safetensors(path_of("m.safetensors"), t, 1, 1,
		       "{\"format\":\"pt\",\"q\":\"a \\\"b\\\"\\u0000c\",\"n\":\"7\"}");
	assert_int_equal(devcache_model_file_open(path_of("m.safetensors"), &mf), 0);
	assert_int_equal(devcache_model_file_get_string(mf, "format", &s, &len), 0);
	assert_string_equal(s, "pt");
	assert_int_equal(devcache_model_file_get_string(mf, "q", &s, &len), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(s, "a \"b\"\0c", 8);
	assert_int_equal(devcache_model_file_metadata_type(mf, "n", &type, NULL, NULL), 0);
	assert_int_equal(type, DEVCACHE_META_STRING);
	/* safetensors' values are strings, whatever they spell. */
	assert_int_equal(devcache_model_file_get_int(mf, "n", &i), DEVCACHE_ETYPE);
	assert_int_equal(devcache_model_file_get_string(mf, "missing", &s, NULL), DEVCACHE_ENOENT);
	devcache_model_file_close(mf);
}

/* A Hugging Face index's metadata is JSON: total_size is an integer. */
static void index_json(void **state)
{
	const struct mw_tensor t[] = {{"a", 100, 0, NULL, 0, NULL}, {"b", 28, 1, NULL, 0, NULL}};
	devcache_model_file_t *mf;
	char index[256];
	const char *s;
	int64_t i;

	(void)state;
	mw_sharded(dir, "model", t, 2, 2, 3, 0, index, sizeof index);
	assert_int_equal(devcache_model_file_open(index, &mf), 0);
	assert_int_equal(devcache_model_file_get_int(mf, "total_size", &i), 0);
	assert_int_equal(i, 128);
	assert_int_equal(devcache_model_file_get_string(mf, "format", &s, NULL), 0);
	assert_string_equal(s, "pt");
	devcache_model_file_close(mf);
}

/* A GGUF split reads its first shard's metadata, arrays from that file. */
static void split_arrays(void **state)
{
	const struct mw_tensor t[] = {{"a", 64, 0, NULL, 0, NULL}, {"b", 64, 1, NULL, 0, NULL}};
	devcache_model_file_t *mf;
	char first[256];
	const char *s;
	uint64_t u;

	(void)state;
	mw_gguf_split(dir, "sp", t, 2, 2, 5, 0, first, sizeof first);
	assert_int_equal(devcache_model_file_open(first, &mf), 0);
	assert_int_equal(devcache_model_file_get_string(mf, "general.architecture", &s, NULL), 0);
	assert_string_equal(s, "llama");
	assert_int_equal(devcache_model_file_get_uint(mf, "split.count", &u), 0);
	assert_int_equal(u, 2);
	devcache_model_file_close(mf);
}

static int count_all(void *user, uint64_t index, const char *s, size_t len)
{
	(void)index, (void)s, (void)len;
	++*(uint64_t *)user;
	return 0;
}

/* A file written over after it was opened: a string's length in an array
 * that is not what the reader checked is an error naming the file, not a
 * read past a buffer. */
static void array_changed_under_us(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 1);
	uint64_t n = 0;
	const char *path;
	size_t at;
	FILE *f;

	(void)state;
	key(&b, "tokens", T_ARRAY), u32_(&b, T_STRING), u64_(&b, 3);
	str_(&b, "first"), str_(&b, "second"), str_(&b, "third");
	at = b.len - (8 + 5) - (8 + 6); /* the length of "second" */
	path = write_buf("changed.gguf", &b);
	assert_int_equal(devcache_model_file_open(path, &mf), 0);
	assert_int_equal(devcache_model_file_get_strings(mf, "tokens", count_all, &n), 0);
	assert_int_equal(n, 3);
	assert_non_null(f = fopen(path, "r+b"));
	assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
	assert_int_equal(fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f), 8);
	assert_int_equal(fclose(f), 0);
	n = 0;
	assert_int_equal(devcache_model_file_get_strings(mf, "tokens", count_all, &n),
			 DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), "changed.gguf: a string of 18446744073709551615 bytes "
					       "in a metadata array: the file changed since it was opened");
	assert_int_equal(n, 1);
	devcache_model_file_close(mf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(gguf_scalars),
		cmocka_unit_test(gguf_arrays),
		cmocka_unit_test(safetensors_strings),
		cmocka_unit_test(index_json),
		cmocka_unit_test(split_arrays),
		cmocka_unit_test(array_changed_under_us),
	};

	return GGUF_RUN_TAP(tests);
}
