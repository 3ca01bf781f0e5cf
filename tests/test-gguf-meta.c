/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-gguf-meta.c - GGUF metadata: every value type as JSON, large arrays and the cap on a JSON value, and one malformed key or value per rule. */
#include "config.h"

#include "tap.h"

#include <math.h>

#include <devcache.h>

#include "gguf-bytes.h"

/* The reader's cap, restated: the test says what it must be. */
#define MAX_JSON_VALUE (16u << 20)

/* ---- valid files -------------------------------------------------------------- */

static void metadata_every_type(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 27);
	size_t i = 0;

	(void)state;
	key(&b, "u8", T_UINT8), u8_(&b, 200);
	key(&b, "i8", T_INT8), u8_(&b, (uint8_t)-5);
	key(&b, "u16", T_UINT16), u16_(&b, 65535);
	key(&b, "i16", T_INT16), u16_(&b, (uint16_t)-32768);
	key(&b, "u32", T_UINT32), u32_(&b, 4294967295u);
	key(&b, "i32", T_INT32), u32_(&b, (uint32_t)INT32_MIN);
	key(&b, "f32", T_FLOAT32), f32_(&b, -2.25f);
	key(&b, "f32.tenth", T_FLOAT32), f32_(&b, 0.1f);
	key(&b, "f32.big", T_FLOAT32), f32_(&b, 1e10f);
	key(&b, "f32.nan", T_FLOAT32), f32_(&b, NAN);
	key(&b, "f32.inf", T_FLOAT32), f32_(&b, INFINITY);
	key(&b, "f32.-inf", T_FLOAT32), f32_(&b, -INFINITY);
	key(&b, "bool.t", T_BOOL), u8_(&b, 1);
	key(&b, "bool.f", T_BOOL), u8_(&b, 0);
	kv_str(&b, "str", "he said \"hi\"\n\tback\\slash \x01 \x1f \xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80");
	kv_str(&b, "str.empty", "");
	key(&b, "str.bad-utf8", T_STRING), strn_(&b, "a\xff" "b\xc3", 4);
	key(&b, "u64", T_UINT64), u64_(&b, UINT64_MAX);
	key(&b, "i64", T_INT64), u64_(&b, (uint64_t)INT64_MIN);
	key(&b, "f64", T_FLOAT64), f64_(&b, 0.1);
	key(&b, "f64.negzero", T_FLOAT64), f64_(&b, -0.0);
	key(&b, "f64.nan", T_FLOAT64), f64_(&b, NAN);
	key(&b, "arr.u8", T_ARRAY), u32_(&b, T_UINT8), u64_(&b, 3), u8_(&b, 1), u8_(&b, 2), u8_(&b, 255);
	key(&b, "arr.str", T_ARRAY), u32_(&b, T_STRING), u64_(&b, 3), str_(&b, "a"), str_(&b, "\"q\""),
		str_(&b, "");
	key(&b, "arr.empty", T_ARRAY), u32_(&b, T_FLOAT64), u64_(&b, 0);
	/* [[1, -2], [], [[true]]] is too mixed for GGUF, whose elements share a
	 * type; arrays of arrays each carry their own. */
	key(&b, "arr.nested", T_ARRAY), u32_(&b, T_ARRAY), u64_(&b, 3);
	u32_(&b, T_INT32), u64_(&b, 2), u32_(&b, 1), u32_(&b, (uint32_t)-2);
	u32_(&b, T_BOOL), u64_(&b, 0);
	u32_(&b, T_ARRAY), u64_(&b, 1), u32_(&b, T_BOOL), u64_(&b, 2), u8_(&b, 1), u8_(&b, 0);
	/* Four levels: the deepest allowed. */
	key(&b, "arr.deep", T_ARRAY), u32_(&b, T_ARRAY), u64_(&b, 1);
	u32_(&b, T_ARRAY), u64_(&b, 1), u32_(&b, T_ARRAY), u64_(&b, 1);
	u32_(&b, T_INT16), u64_(&b, 1), u16_(&b, 7);
	mf = open_ok(&b, "types.gguf");

	assert_int_equal(devcache_model_file_metadata_count(mf), 27);
	assert_string_equal(meta(mf, i++, "u8"), "200");
	assert_string_equal(meta(mf, i++, "i8"), "-5");
	assert_string_equal(meta(mf, i++, "u16"), "65535");
	assert_string_equal(meta(mf, i++, "i16"), "-32768");
	assert_string_equal(meta(mf, i++, "u32"), "4294967295");
	assert_string_equal(meta(mf, i++, "i32"), "-2147483648");
	assert_string_equal(meta(mf, i++, "f32"), "-2.25");
	assert_string_equal(meta(mf, i++, "f32.tenth"), "0.100000001");
	assert_string_equal(meta(mf, i++, "f32.big"), "1e+10");
	assert_string_equal(meta(mf, i++, "f32.nan"), "\"nan\"");
	assert_string_equal(meta(mf, i++, "f32.inf"), "\"inf\"");
	assert_string_equal(meta(mf, i++, "f32.-inf"), "\"-inf\"");
	assert_string_equal(meta(mf, i++, "bool.t"), "true");
	assert_string_equal(meta(mf, i++, "bool.f"), "false");
	assert_string_equal(meta(mf, i++, "str"),
			    "\"he said \\\"hi\\\"\\n\\tback\\\\slash \\u0001 \\u001f \xc3\xbc "
			    "\xe2\x82\xac \xf0\x9f\x98\x80\"");
	assert_string_equal(meta(mf, i++, "str.empty"), "\"\"");
	/* Each byte that is not UTF-8 is one U+FFFD. */
	assert_string_equal(meta(mf, i++, "str.bad-utf8"), "\"a\xef\xbf\xbd" "b\xef\xbf\xbd\"");
	assert_string_equal(meta(mf, i++, "u64"), "18446744073709551615");
	assert_string_equal(meta(mf, i++, "i64"), "-9223372036854775808");
	assert_string_equal(meta(mf, i++, "f64"), "0.10000000000000001");
	assert_string_equal(meta(mf, i++, "f64.negzero"), "-0");
	assert_string_equal(meta(mf, i++, "f64.nan"), "\"nan\"");
	assert_string_equal(meta(mf, i++, "arr.u8"), "[1,2,255]");
	assert_string_equal(meta(mf, i++, "arr.str"), "[\"a\",\"\\\"q\\\"\",\"\"]");
	assert_string_equal(meta(mf, i++, "arr.empty"), "[]");
	assert_string_equal(meta(mf, i++, "arr.nested"), "[[1,-2],[],[[true,false]]]");
	assert_string_equal(meta(mf, i++, "arr.deep"), "[[[[7]]]]");
	devcache_model_file_close(mf);
}

/* A tokenizer's vocabulary: a big array of short strings, all kept. */
static void large_string_array(void **state)
{
	enum { N = 200000 };
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 2);
	struct buf want = {0};
	char tok[32];

	(void)state;
	key(&b, "tokenizer.ggml.tokens", T_ARRAY), u32_(&b, T_STRING), u64_(&b, N);
	put(&want, "[", 1);
	for (int i = 0; i < N; i++) {
		int n = snprintf(tok, sizeof tok, i % 1000 == 7 ? "t\"%d" : "tok%d", i);

		strn_(&b, tok, (size_t)n);
		if (i)
			put(&want, ",", 1);
		if (i % 1000 == 7)
			n = snprintf(tok, sizeof tok, "\"t\\\"%d\"", i);
		else
			n = snprintf(tok, sizeof tok, "\"tok%d\"", i);
		put(&want, tok, (size_t)n);
	}
	put(&want, "]", 2); /* and the NUL */
	kv_u32(&b, "after", 9);
	mf = open_ok(&b, "vocab.gguf");
	assert_string_equal(meta(mf, 0, "tokenizer.ggml.tokens"), (char *)want.p);
	assert_string_equal(meta(mf, 1, "after"), "9");
	devcache_model_file_close(mf);
	free(want.p);
}

/* Past MF_MAX_JSON_VALUE the text is cut, and says how much is missing. */
static void json_cap(void **state)
{
	enum { N = 1000000 };
	static const char ellipsis[] = "\xe2\x80\xa6";
	unsigned long long more = 0, bytes = 0;
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 3);
	const char *v, *m;
	size_t shown = 0;

	(void)state;
	/* 21 bytes an element: about 21 MB of JSON. */
	key(&b, "big.array", T_ARRAY), u32_(&b, T_UINT64), u64_(&b, N);
	for (int i = 0; i < N; i++)
		u64_(&b, UINT64_MAX);
	/* A string past the cap on its own is cut inside its quotes. */
	key(&b, "big.string", T_STRING), u64_(&b, MAX_JSON_VALUE + 1000);
	size_t at = b.len;
	zeros(&b, MAX_JSON_VALUE + 1000);
	memset(b.p + at, 'a', MAX_JSON_VALUE + 1000);
	kv_u32(&b, "after", 1);
	mf = open_ok(&b, "cap.gguf");

	v = meta(mf, 0, "big.array");
	assert_true(strlen(v) <= MAX_JSON_VALUE);
	assert_true(strncmp(v, "[18446744073709551615,", 22) == 0);
	m = strstr(v, ellipsis);
	assert_non_null(m);
	assert_int_equal(sscanf(m + 3, "(%llu more)\"]", &more), 1);
	for (const char *s = v; s < m; s++)
		shown += *s == ',';
	assert_int_equal(shown + more, N);
	assert_true(shown > 700000);
	assert_string_equal(strchr(m, ')'), ")\"]");

	v = meta(mf, 1, "big.string");
	assert_true(strlen(v) <= MAX_JSON_VALUE);
	m = strstr(v, ellipsis);
	assert_non_null(m);
	assert_int_equal(sscanf(m + 3, "(%llu more bytes)\"", &bytes), 1);
	assert_int_equal((size_t)(m - v - 1) + bytes, MAX_JSON_VALUE + 1000);
	assert_string_equal(strchr(m, ')'), ")\"");
	assert_string_equal(meta(mf, 2, "after"), "1");
	devcache_model_file_close(mf);
}

/* Cut inside an array of arrays: each level says what it lost, and what is
 * no longer shown is still read and checked. */
static void json_cap_nested(void **state)
{
	enum { STR = 1000, N = 10000 };
	static const char ellipsis[] = "\xe2\x80\xa6";
	unsigned long long more = 0;
	devcache_model_file_t *mf;
	char *x = malloc(STR);
	size_t quotes = 0;
	const char *v, *m;
	struct buf b;

	(void)state;
	assert_non_null(x);
	memset(x, 'x', STR);
	for (int bad = 0; bad < 2; bad++) {
		/* Three arrays of N strings of 1000 bytes: some 30 MB of JSON. */
		b = gguf(3, 0, 1);
		key(&b, "nested", T_ARRAY), u32_(&b, T_ARRAY), u64_(&b, 4);
		for (int i = 0; i < 3; i++) {
			u32_(&b, T_STRING), u64_(&b, N);
			for (int k = 0; k < N; k++)
				strn_(&b, x, STR);
		}
		u32_(&b, T_BOOL), u64_(&b, 2), u8_(&b, 1), u8_(&b, bad ? 2 : 0);
		if (bad) {
			expect_bad(&b, "metadata key 'nested' at byte");
			assert_contains(devcache_last_error(), "a boolean is 2, not 0 or 1");
			continue;
		}
		mf = open_ok(&b, "nested.gguf");
		v = meta(mf, 0, "nested");
		assert_true(strlen(v) <= MAX_JSON_VALUE);
		/* The second array is cut; the third and the booleans are gone. */
		assert_true(strlen(v) > 20);
		assert_string_equal(v + strlen(v) - 17, "\"],\"\xe2\x80\xa6(2 more)\"]");
		m = strstr(v, ellipsis);
		assert_non_null(m);
		assert_int_equal(sscanf(m + 3, "(%llu more)", &more), 1);
		for (const char *s = v; *s; s++)
			quotes += *s == '"';
		assert_int_equal(quotes, 2 * (N + N - more) + 4);
		assert_true(more > 0 && more < N);
		devcache_model_file_close(mf);
	}
	free(x);
}

/* ---- malformed files, one rule at a time ----------------------------------------- */

static void bad_values(void **state)
{
	struct buf b;

	(void)state;
	/* Five arrays deep. */
	b = gguf(3, 0, 1);
	key(&b, "deep", T_ARRAY);
	for (int i = 0; i < 4; i++)
		u32_(&b, T_ARRAY), u64_(&b, 1);
	u32_(&b, T_ARRAY), u64_(&b, 1), u32_(&b, T_UINT8), u64_(&b, 1), u8_(&b, 1);
	expect_bad(&b, "metadata key 'deep' at byte 88: arrays are nested more than 4 deep");
	b = gguf(3, 0, 1);
	key(&b, "general.x", 13);
	u64_(&b, 0);
	expect_bad(&b, "metadata key 'general.x' at byte 41: value type 13 is unknown");
	b = gguf(3, 0, 1);
	key(&b, "arr", T_ARRAY);
	u32_(&b, 99);
	u64_(&b, 1);
	u8_(&b, 0);
	expect_bad(&b, "metadata key 'arr' at byte 39: value type 99 is unknown");
	b = gguf(3, 0, 1);
	key(&b, "b", T_BOOL);
	u8_(&b, 2);
	expect_bad(&b, "metadata key 'b' at byte 37: a boolean is 2, not 0 or 1");
	b = gguf(3, 0, 1);
	key(&b, "b", T_ARRAY);
	u32_(&b, T_BOOL);
	u64_(&b, 3);
	put(&b, "\1\0\377", 3);
	expect_bad(&b, "metadata key 'b' at byte 51: a boolean is 255, not 0 or 1");
}

static void bad_keys(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 0, 1);
	key(&b, "", T_UINT8);
	u8_(&b, 1);
	u8_(&b, 1);
	expect_bad(&b, "metadata key at byte 24 is empty");
	b = gguf(3, 0, 2);
	kv_u32(&b, "a", 1);
	key(&b, "b\xff", T_UINT8);
	u8_(&b, 1);
	expect_bad(&b, "metadata key at byte 41 is not valid UTF-8");
	/* Overlong, a surrogate, past U+10FFFF, cut short. */
	static const char *not_utf8[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "x\xe2\x82"};
	for (size_t i = 0; i < 4; i++) {
		b = gguf(3, 0, 1);
		key(&b, not_utf8[i], T_UINT8);
		u8_(&b, 1);
		expect_bad(&b, "metadata key at byte 24 is not valid UTF-8");
	}
	b = gguf(3, 0, 1);
	strn_(&b, "a\0b", 3);
	u32_(&b, T_UINT8);
	u8_(&b, 1);
	expect_bad(&b, "metadata key at byte 24 contains a NUL byte");
	b = gguf(3, 0, 3);
	kv_u32(&b, "general.a", 1);
	kv_u32(&b, "general.b", 1);
	kv_str(&b, "general.a", "again");
	expect_bad(&b, "metadata key 'general.a' appears twice (again at byte 74)");
}

static void bad_alignment(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 0, 1);
	kv_u32(&b, "general.alignment", 48);
	expect_bad(&b, "metadata key 'general.alignment' at byte 53: the alignment 48 is not a "
		   "power of two");
	b = gguf(3, 0, 1);
	kv_u32(&b, "general.alignment", 0);
	expect_bad(&b, "the alignment 0 is not a power of two");
	b = gguf(3, 0, 1);
	key(&b, "general.alignment", T_UINT64);
	u64_(&b, 64);
	expect_bad(&b, "metadata key 'general.alignment' at byte 49: the alignment must be a "
		   "UINT32 (type 4), not type 10");
}

/* A value 1 of the type (a count of a split, as whatever type). */
static void one_of_type(struct buf *b, uint32_t type)
{
	switch (type) {
	case T_UINT8:
	case T_INT8:
	case T_BOOL:
		u8_(b, 1);
		break;
	case T_UINT16:
	case T_INT16:
		u16_(b, 1);
		break;
	case T_UINT32:
	case T_INT32:
		u32_(b, 1);
		break;
	case T_FLOAT32:
		f32_(b, 1.0f);
		break;
	case T_FLOAT64:
		f64_(b, 1.0);
		break;
	case T_STRING:
		str_(b, "1");
		break;
	default:
		u64_(b, 1);
		break;
	}
}

/* split.no, split.count and split.tensors.count are integers of any width
 * (gguf-split writes UINT16, UINT16 and INT32); llama.cpp refuses any other
 * type, and so does the reader, naming the key and the type. */
static void split_counts_must_be_integers(void **state)
{
	static const char *const keys[] = {"split.no", "split.count", "split.tensors.count"};
	static const uint32_t bad[] = {T_FLOAT32, T_FLOAT64, T_BOOL, T_STRING};
	static const char *const names[] = {"FLOAT32", "FLOAT64", "BOOL", "STRING"};
	static const uint32_t good[] = {T_UINT8,  T_INT8,  T_UINT16, T_INT16,
					T_UINT32, T_INT32, T_UINT64, T_INT64};
	char want[256], first[512];
	struct buf b;

	(void)state;
	for (size_t k = 0; k < 3; k++)
		for (size_t t = 0; t < 4; t++) {
			b = gguf(3, 0, 1);
			key(&b, keys[k], bad[t]);
			one_of_type(&b, bad[t]);
			snprintf(want, sizeof want,
				 "metadata key '%s' at byte %zu: a count of a GGUF split must be "
				 "an integer, not type %u (%s)",
				 keys[k], 24 + 8 + strlen(keys[k]), bad[t], names[t]);
			expect_bad(&b, want);
		}
	/* A whole split written with float counts, which read as "3" and "0". */
	for (unsigned no = 0; no < 3; no++) {
		char name[64];

		b = gguf(3, 0, 3);
		key(&b, "split.no", T_FLOAT32);
		f32_(&b, (float)no);
		key(&b, "split.count", T_FLOAT32);
		f32_(&b, 3.0f);
		key(&b, "split.tensors.count", T_FLOAT64);
		f64_(&b, 0.0);
		snprintf(name, sizeof name, "fsplit-%05u-of-00003.gguf", no + 1);
		const char *path = write_buf(name, &b);
		if (no == 0)
			snprintf(first, sizeof first, "%s", path);
	}
	expect_bad_path(first, "metadata key 'split.no' at byte 40: a count of a GGUF split must "
			       "be an integer, not type 6 (FLOAT32)");
	/* Integers of every width are counts. */
	for (size_t t = 0; t < sizeof good / sizeof *good; t++) {
		b = gguf(3, 0, 1);
		key(&b, "split.count", good[t]);
		one_of_type(&b, good[t]);
		devcache_model_file_t *mf = open_ok(&b, "count.gguf");
		assert_string_equal(meta(mf, 0, "split.count"), "1");
		devcache_model_file_close(mf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(metadata_every_type),
		cmocka_unit_test(large_string_array),
		cmocka_unit_test(json_cap),
		cmocka_unit_test(json_cap_nested),
		cmocka_unit_test(bad_values),
		cmocka_unit_test(bad_keys),
		cmocka_unit_test(bad_alignment),
		cmocka_unit_test(split_counts_must_be_integers),
	};

	return GGUF_RUN_TAP(tests);
}
