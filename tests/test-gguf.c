/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-gguf.c - the GGUF reader: metadata of every type as JSON, every ggml tensor type, alignment, and one malformed file per rule. */
#include "config.h"

#include "tap.h"
#include "model-writer.h"

#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

/* The value types, as the spec numbers them. */
enum {
	T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL,
	T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64
};

/* The reader's caps, restated: the test says what they must be. */
#define MAX_JSON_VALUE (16u << 20)
#define MAX_TENSORS (1u << 20)

TEST_TMPDIR_FIXTURE("gguf");

/* ---- the inputs, byte by byte (written to files by mw_bytes()) ----------------- */

struct buf {
	unsigned char *p;
	size_t len, cap;
};

static void put(struct buf *b, const void *s, size_t n)
{
	if (b->cap - b->len < n) {
		while (b->cap - b->len < n)
			b->cap = b->cap ? 2 * b->cap : 4096;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
	unsigned char le[8];

	for (int i = 0; i < bytes; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	put(b, le, (size_t)bytes);
}

static void u8_(struct buf *b, uint8_t v) { put_le(b, v, 1); }
static void u16_(struct buf *b, uint16_t v) { put_le(b, v, 2); }
static void u32_(struct buf *b, uint32_t v) { put_le(b, v, 4); }
static void u64_(struct buf *b, uint64_t v) { put_le(b, v, 8); }

static void f32_(struct buf *b, float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof v);
	u32_(b, v);
}

static void f64_(struct buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof v);
	u64_(b, v);
}

static void strn_(struct buf *b, const char *s, size_t n)
{
	u64_(b, n);
	put(b, s, n);
}

static void str_(struct buf *b, const char *s)
{
	strn_(b, s, strlen(s));
}

static void zeros(struct buf *b, size_t n)
{
	static const unsigned char z[4096];

	while (n) {
		size_t k = n < sizeof z ? n : sizeof z;

		put(b, z, k);
		n -= k;
	}
}

static void pad(struct buf *b, size_t align)
{
	zeros(b, (align - b->len % align) % align);
}

static struct buf gguf(uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	struct buf b = {0};

	put(&b, "GGUF", 4);
	u32_(&b, version);
	u64_(&b, n_tensors);
	u64_(&b, n_kv);
	return b;
}

/* A key and its value's type; the caller writes the value. */
static void key(struct buf *b, const char *k, uint32_t type)
{
	str_(b, k);
	u32_(b, type);
}

static void kv_u32(struct buf *b, const char *k, uint32_t v)
{
	key(b, k, T_UINT32);
	u32_(b, v);
}

static void kv_str(struct buf *b, const char *k, const char *v)
{
	key(b, k, T_STRING);
	str_(b, v);
}

static void tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		   uint32_t type, uint64_t offset)
{
	str_(b, name);
	u32_(b, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		u64_(b, ne[i]);
	u32_(b, type);
	u64_(b, offset);
}

#define NE(...) ((const uint64_t[]){__VA_ARGS__})

static const char *path_of(const char *name)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	return p;
}

/* Write the buffer to dir/name (and free it); the path. */
static const char *write_buf(const char *name, struct buf *b)
{
	const char *path = path_of(name);

	mw_bytes(path, b->p, b->len);
	free(b->p);
	*b = (struct buf){0};
	return path;
}

static devcache_model_file_t *open_ok(struct buf *b, const char *name)
{
	const char *path = write_buf(name, b);
	devcache_model_file_t *mf = NULL;
	int rc = devcache_model_file_open(path, &mf);

	if (rc)
		fail_msg("%s: %d: %s", path, rc, devcache_last_error());
	assert_non_null(mf);
	return mf;
}

/* The file must be refused as malformed, the message naming it and fault. */
static void expect_bad_path(const char *path, const char *fault)
{
	devcache_model_file_t *mf = (devcache_model_file_t *)&mf;
	int rc = devcache_model_file_open(path, &mf);

	if (rc != DEVCACHE_EFORMAT)
		fail_msg("%s: expected DEVCACHE_EFORMAT with \"%s\", got %d: %s", path, fault, rc,
			 devcache_last_error());
	assert_null(mf);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), fault);
}

static void expect_bad(struct buf *b, const char *fault)
{
	expect_bad_path(write_buf("bad.gguf", b), fault);
}

/* Not inlined: gcc then takes the returned text for a pointer into k and v. */
__attribute__((noinline)) static const char *meta(devcache_model_file_t *mf, size_t i,
						  const char *want_key)
{
	const char *k, *v;

	assert_int_equal(devcache_model_file_metadata(mf, i, &k, &v), 0);
	assert_string_equal(k, want_key);
	return v;
}

/* ---- valid files -------------------------------------------------------------- */

static void valid_v3(void **state)
{
	devcache_tensor_info_t info;
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 2, 2);
	unsigned version = 0;

	(void)state;
	kv_str(&b, "general.architecture", "llama");
	kv_u32(&b, "general.quantization_version", 2);
	tensor(&b, "token_embd.weight", 2, NE(8, 4), 0, 0);
	tensor(&b, "output_norm.weight", 1, NE(8), 1, 128);
	size_t infos_end = b.len;
	pad(&b, 32);
	size_t data = b.len;
	zeros(&b, 128 + 16);
	mf = open_ok(&b, "v3.gguf");

	assert_int_equal(devcache_model_file_format(mf, &version), DEVCACHE_FORMAT_GGUF);
	assert_int_equal(version, 3);
	assert_int_equal(devcache_model_file_data_offset(mf), data);
	assert_true(data >= infos_end && data % 32 == 0);
	assert_int_equal(devcache_model_file_size(mf), data + 144);
	assert_int_equal(devcache_model_file_metadata_count(mf), 2);
	assert_string_equal(meta(mf, 0, "general.architecture"), "\"llama\"");
	assert_string_equal(meta(mf, 1, "general.quantization_version"), "2");
	assert_int_equal(devcache_model_file_tensor_count(mf), 2);

	assert_int_equal(devcache_model_file_tensor(mf, 0, &info), 0);
	assert_string_equal(info.name, "token_embd.weight");
	assert_string_equal(info.dtype, "F32");
	assert_int_equal(info.n_dims, 2);
	assert_int_equal(info.shape[0], 8);
	assert_int_equal(info.shape[1], 4);
	assert_int_equal(info.offset, data);
	assert_int_equal(info.size, 128);

	assert_int_equal(devcache_model_file_find(mf, "output_norm.weight", &info), 0);
	assert_string_equal(info.dtype, "F16");
	assert_int_equal(info.n_dims, 1);
	assert_int_equal(info.shape[0], 8);
	assert_int_equal(info.offset, data + 128);
	assert_int_equal(info.size, 16);
	assert_int_equal(devcache_model_file_find(mf, "nope", &info), DEVCACHE_ENOENT);
	devcache_model_file_close(mf);
}

static void valid_v2(void **state)
{
	devcache_tensor_info_t info;
	devcache_model_file_t *mf;
	struct buf b = gguf(2, 1, 1);
	unsigned version = 0;

	(void)state;
	kv_str(&b, "general.name", "tiny");
	tensor(&b, "w", 1, NE(4), 0, 0);
	pad(&b, 32);
	zeros(&b, 16);
	mf = open_ok(&b, "v2.gguf");
	assert_int_equal(devcache_model_file_format(mf, &version), DEVCACHE_FORMAT_GGUF);
	assert_int_equal(version, 2);
	assert_int_equal(devcache_model_file_tensor(mf, 0, &info), 0);
	assert_int_equal(info.size, 16);
	devcache_model_file_close(mf);
}

/* Only the header: no metadata, no tensors. */
static void header_only(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 0);

	(void)state;
	mf = open_ok(&b, "empty.gguf");
	assert_int_equal(devcache_model_file_tensor_count(mf), 0);
	assert_int_equal(devcache_model_file_metadata_count(mf), 0);
	assert_int_equal(devcache_model_file_data_offset(mf), 32);
	devcache_model_file_close(mf);
}

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

static void alignment_default_and_custom(void **state)
{
	devcache_tensor_info_t info;
	devcache_model_file_t *mf;
	struct buf b;
	size_t data;

	(void)state;
	/* Default: 32.  The tensor infos end at byte 24 + 25 + 33 = 82. */
	b = gguf(3, 1, 1);
	kv_u32(&b, "general.a", 1);
	tensor(&b, "w", 1, NE(8), 0, 0);
	assert_int_equal(b.len, 82);
	pad(&b, 32);
	zeros(&b, 32);
	mf = open_ok(&b, "align32.gguf");
	assert_int_equal(devcache_model_file_data_offset(mf), 96);
	devcache_model_file_close(mf);

	/* 64: the data section and the offsets follow it. */
	b = gguf(3, 2, 1);
	kv_u32(&b, "general.alignment", 64);
	tensor(&b, "a", 1, NE(4), 0, 0);
	tensor(&b, "b", 1, NE(4), 0, 64);
	pad(&b, 64);
	data = b.len;
	assert_int_equal(data, 128);
	zeros(&b, 64 + 16);
	mf = open_ok(&b, "align64.gguf");
	assert_int_equal(devcache_model_file_data_offset(mf), 128);
	assert_string_equal(meta(mf, 0, "general.alignment"), "64");
	assert_int_equal(devcache_model_file_find(mf, "b", &info), 0);
	assert_int_equal(info.offset, 192);
	devcache_model_file_close(mf);

	/* An offset that is a multiple of 32 but not of 64 is misaligned. */
	b = gguf(3, 1, 1);
	kv_u32(&b, "general.alignment", 64);
	tensor(&b, "a", 1, NE(4), 0, 32);
	pad(&b, 64);
	zeros(&b, 64);
	expect_bad(&b, "tensor 'a': offset 32 is not a multiple of the alignment 64");
}

static const struct {
	uint32_t type;
	const char *name;
	uint64_t blck, size;
} types[] = {
	{0, "F32", 1, 4},          {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},
	{3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
	{8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},       {10, "Q2_K", 256, 84},
	{11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
	{14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},
	{17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
	{20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},   {22, "IQ2_S", 256, 82},
	{23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
	{26, "I32", 1, 4},         {27, "I64", 1, 8},         {28, "F64", 1, 8},
	{29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
	{35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},     {40, "NVFP4", 64, 36},
	{41, "Q1_0", 128, 18},     {42, "Q2_0", 64, 18},
};
#define N_TYPES (sizeof types / sizeof types[0])

static void every_ggml_type(void **state)
{
	uint64_t offset[N_TYPES], off = 0;
	devcache_model_file_t *mf;
	struct buf b = gguf(3, N_TYPES, 0);
	char name[N_TYPES][32];
	size_t data;

	(void)state;
	/* Two blocks a row, three rows: size = 2 * type size * 3. */
	for (size_t i = 0; i < N_TYPES; i++) {
		snprintf(name[i], sizeof name[i], "t.%s", types[i].name);
		offset[i] = off;
		tensor(&b, name[i], 2, NE(2 * types[i].blck, 3), types[i].type, off);
		off += (6 * types[i].size + 31) / 32 * 32;
	}
	pad(&b, 32);
	data = b.len;
	zeros(&b, off);
	mf = open_ok(&b, "types.gguf");
	assert_int_equal(devcache_model_file_tensor_count(mf), N_TYPES);
	for (size_t i = 0; i < N_TYPES; i++) {
		devcache_tensor_info_t info;

		assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
		assert_string_equal(info.name, name[i]);
		assert_string_equal(info.dtype, types[i].name);
		assert_int_equal(info.size, 6 * types[i].size);
		assert_int_equal(info.offset, data + offset[i]);
	}
	devcache_model_file_close(mf);
}

static void dims_one_to_four(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 5, 0);

	(void)state;
	tensor(&b, "d1", 1, NE(5), 0, 0);
	tensor(&b, "d2", 2, NE(5, 3), 0, 32);
	tensor(&b, "d3", 3, NE(5, 3, 2), 0, 96);
	tensor(&b, "d4", 4, NE(5, 3, 2, 7), 30, 224);
	/* ggml allows empty dimensions: no bytes, overlapping nothing. */
	tensor(&b, "empty", 3, NE(256, 0, 9), 12, 224);
	pad(&b, 32);
	zeros(&b, 224 + 420);
	mf = open_ok(&b, "dims.gguf");
	static const struct {
		const char *name;
		unsigned n_dims;
		uint64_t size, shape[4];
	} want[] = {
		{"d1", 1, 20, {5}},
		{"d2", 2, 60, {5, 3}},
		{"d3", 3, 120, {5, 3, 2}},
		{"d4", 4, 420, {5, 3, 2, 7}},
		{"empty", 3, 0, {256, 0, 9}},
	};
	for (size_t i = 0; i < 5; i++) {
		devcache_tensor_info_t info;

		assert_int_equal(devcache_model_file_find(mf, want[i].name, &info), 0);
		assert_int_equal(info.n_dims, want[i].n_dims);
		assert_int_equal(info.size, want[i].size);
		for (unsigned d = 0; d < DEVCACHE_MAX_DIMS; d++)
			assert_int_equal(info.shape[d], d < 4 ? want[i].shape[d] : 0);
	}
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

static void bad_version(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(1, 0, 0);
	expect_bad(&b, "GGUF version 1 is not supported (only 2 and 3)");
	b = gguf(4, 0, 0);
	expect_bad(&b, "GGUF version 4 is not supported (only 2 and 3)");
	b = gguf(0x03000000, 0, 0);
	expect_bad(&b, "byte-swapped: big-endian files are not supported");
}

static void truncated(void **state)
{
	struct buf b;

	(void)state;
	/* In the header. */
	b = (struct buf){0};
	put(&b, "GGUF\x03\0\0\0\1\0", 10);
	expect_bad(&b, "the file ends at byte 10, inside the GGUF header");
	/* In a key. */
	b = gguf(3, 0, 1);
	u64_(&b, 20);
	put(&b, "general", 7);
	expect_bad(&b, "inside the key of metadata entry 0");
	/* In a value. */
	b = gguf(3, 0, 1);
	key(&b, "general.x", T_UINT64);
	put(&b, "\1\2\3", 3);
	expect_bad(&b, "inside the value of metadata key 'general.x'");
	b = gguf(3, 0, 1);
	key(&b, "general.name", T_STRING);
	u64_(&b, 100);
	put(&b, "abc", 3);
	expect_bad(&b, "metadata key 'general.name' at byte 48: a string of 100 bytes runs past "
		   "the end of the 59-byte file");
	/* In a tensor's name, and in the rest of its description. */
	b = gguf(3, 1, 0);
	u64_(&b, 40);
	put(&b, "blk.0.attn_q.weight.blk.0.attn", 30);
	expect_bad(&b, "inside the name of tensor 0");
	b = gguf(3, 1, 0);
	str_(&b, "blk.0.attn_q.weight.blk.0.attn");
	u32_(&b, 2);
	u64_(&b, 4096);
	expect_bad(&b, "inside the description of tensor 'blk.0.attn_q.weight.blk.0.attn'");
	/* In the data. */
	b = gguf(3, 1, 0);
	tensor(&b, "w", 1, NE(16), 0, 0);
	pad(&b, 32);
	zeros(&b, 10);
	expect_bad(&b, "tensor 'w': its 64 bytes at data offset 0 run past the end of the "
		   "74-byte file (the data starts at byte 64)");
}

static void counts_that_lie(void **state)
{
	struct buf b;
	int fd;

	(void)state;
	b = gguf(3, UINT64_MAX / 2, 0);
	expect_bad(&b, "tensor count 9223372036854775807 cannot fit in a 24-byte file");
	b = gguf(3, 0, UINT64_MAX);
	expect_bad(&b, "metadata count 18446744073709551615 cannot fit in a 24-byte file");
	/* Each fits alone, not both: 33 + 2 * 14 bytes in 57. */
	b = gguf(3, 1, 2);
	zeros(&b, 57);
	expect_bad(&b, "2 metadata entries and 1 tensors cannot fit in a 81-byte file");
	/* The metadata took more than its least. */
	b = gguf(3, 1, 1);
	kv_str(&b, "general.name", "a name long enough to leave too little");
	zeros(&b, 20);
	expect_bad(&b, "tensor count 1 cannot fit in the 20 bytes left after the metadata (from byte");
	/* Past the hard limits, in a file big enough to hold them (sparse). */
	b = gguf(3, MAX_TENSORS + 1, 0);
	const char *path = write_buf("sparse.gguf", &b);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)64 << 20), 0);
	close(fd);
	expect_bad_path(path, "tensor count 1048577 is more than the 1048576 this reader accepts");
	b = gguf(3, 0, MAX_TENSORS + 1);
	path = write_buf("sparse.gguf", &b);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)64 << 20), 0);
	close(fd);
	expect_bad_path(path, "metadata count 1048577 is more than the 1048576 this reader accepts");
	unlink(path);
}

static void lengths_that_lie(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 0, 1);
	u64_(&b, (uint64_t)1 << 40);
	zeros(&b, 16);
	expect_bad(&b, "metadata key at byte 24 is 1099511627776 bytes long, more than the 65535 "
		   "allowed");
	b = gguf(3, 0, 1);
	key(&b, "s", T_STRING);
	u64_(&b, (uint64_t)1 << 40);
	expect_bad(&b, "metadata key 's' at byte 37: a string of 1099511627776 bytes is longer "
		   "than the 67108864 allowed");
	b = gguf(3, 0, 1);
	key(&b, "arr", T_ARRAY);
	u32_(&b, T_UINT32);
	u64_(&b, (uint64_t)1 << 60);
	zeros(&b, 8);
	expect_bad(&b, "metadata key 'arr' at byte 39: 1152921504606846976 array elements cannot "
		   "fit in the 8 bytes left in the file");
	/* Strings take 8 bytes at least, whatever their count says. */
	b = gguf(3, 0, 1);
	key(&b, "arr", T_ARRAY);
	u32_(&b, T_STRING);
	u64_(&b, 3);
	str_(&b, "a");
	str_(&b, "b");
	expect_bad(&b, "metadata key 'arr' at byte 39: 3 array elements cannot fit in the 18 bytes "
		   "left in the file");
	b = gguf(3, 1, 0);
	u64_(&b, 70000);
	zeros(&b, 40);
	expect_bad(&b, "tensor 0 at byte 24: the name is 70000 bytes long, more than the 65535 "
		   "allowed");
}

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

static void bad_tensors(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 1, 0);
	tensor(&b, "w", 0, NE(0), 0, 0);
	zeros(&b, 40);
	expect_bad(&b, "tensor 'w': 0 dimensions (only 1 to 4)");
	b = gguf(3, 1, 0);
	tensor(&b, "w", 5, NE(1, 1, 1, 1, 1), 0, 0);
	zeros(&b, 40);
	expect_bad(&b, "tensor 'w': 5 dimensions (only 1 to 4)");
	static const uint32_t unknown[] = {43, 1000, UINT32_MAX};
	for (size_t i = 0; i < 3; i++) {
		char want[128];

		b = gguf(3, 1, 0);
		tensor(&b, "w", 1, NE(32), unknown[i], 0);
		zeros(&b, 64);
		snprintf(want, sizeof want, "tensor 'w': type %u is not a ggml type this reader knows",
			 unknown[i]);
		expect_bad(&b, want);
	}
	static const struct {
		uint32_t type;
		const char *name;
	} removed[] = {{4, "Q4_2"}, {5, "Q4_3"}, {31, "Q4_0_4_4"}, {32, "Q4_0_4_8"},
		       {33, "Q4_0_8_8"}, {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}};
	for (size_t i = 0; i < 8; i++) {
		char want[128];

		b = gguf(3, 1, 0);
		tensor(&b, "w", 1, NE(256), removed[i].type, 0);
		zeros(&b, 256);
		snprintf(want, sizeof want, "tensor 'w': type %u (%s) has been removed from GGUF files",
			 removed[i].type, removed[i].name);
		expect_bad(&b, want);
	}
	b = gguf(3, 1, 0);
	tensor(&b, "w", 2, NE(100, 2), 12, 0);
	zeros(&b, 512);
	expect_bad(&b, "tensor 'w': its first dimension 100 is not a multiple of the Q4_K block size 256");
	b = gguf(3, 1, 0);
	tensor(&b, "w", 2, NE((uint64_t)1 << 40, (uint64_t)1 << 30), 0, 0);
	expect_bad(&b, "tensor 'w': its element count or size overflows 64 bits");
	/* Elements fit in int64, bytes do not. */
	b = gguf(3, 1, 0);
	tensor(&b, "w", 2, NE((uint64_t)1 << 40, (uint64_t)1 << 22), 28, 0);
	expect_bad(&b, "tensor 'w': its element count or size overflows 64 bits");
	b = gguf(3, 1, 0);
	tensor(&b, "w", 1, NE((uint64_t)1 << 63), 24, 0);
	expect_bad(&b, "tensor 'w': dimension 0 is 9223372036854775808, more than ggml can hold");
	b = gguf(3, 1, 0);
	tensor(&b, "w", 1, NE(4), 0, 4);
	pad(&b, 32);
	zeros(&b, 64);
	expect_bad(&b, "tensor 'w': offset 4 is not a multiple of the alignment 32");
	b = gguf(3, 2, 0);
	tensor(&b, "a", 1, NE(16), 0, 0);
	tensor(&b, "b", 1, NE(16), 0, UINT64_MAX - 31);
	pad(&b, 32);
	zeros(&b, 64);
	expect_bad(&b, "tensor 'b': its 64 bytes at data offset 18446744073709551584 run past the end");
}

static void bad_tensor_names(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 1, 0);
	tensor(&b, "", 1, NE(4), 0, 0);
	zeros(&b, 64);
	expect_bad(&b, "tensor 0 at byte 24: the name is empty");
	b = gguf(3, 2, 0);
	tensor(&b, "ok", 1, NE(4), 0, 0);
	tensor(&b, "bad\xc3(", 1, NE(4), 0, 32);
	zeros(&b, 96);
	expect_bad(&b, "tensor 1 at byte 58: the name is not valid UTF-8");
	b = gguf(3, 1, 0);
	strn_(&b, "a\0", 2);
	u32_(&b, 1), u64_(&b, 4), u32_(&b, 0), u64_(&b, 0);
	zeros(&b, 64);
	expect_bad(&b, "tensor 0 at byte 24: the name contains a NUL byte");
}

static void overlapping_tensors(void **state)
{
	struct buf b;

	(void)state;
	b = gguf(3, 3, 0);
	tensor(&b, "big", 1, NE(64), 0, 0);  /* bytes 0 to 256 */
	tensor(&b, "empty", 2, NE(8, 0), 0, 64);
	tensor(&b, "inside", 1, NE(8), 0, 192); /* 192 to 224: within big */
	pad(&b, 32);
	size_t data = b.len;
	zeros(&b, 256);
	char want[160];
	snprintf(want, sizeof want, "tensors 'big' and 'inside' overlap (bytes %zu to %zu and %zu to %zu)",
		 data, data + 256, data + 192, data + 224);
	expect_bad(&b, want);
	/* Touching is not overlapping; a zero-size tensor anywhere is fine. */
	b = gguf(3, 3, 0);
	tensor(&b, "a", 1, NE(8), 0, 32);
	tensor(&b, "b", 1, NE(8), 0, 0);
	tensor(&b, "c", 1, NE(0), 0, 32);
	pad(&b, 32);
	zeros(&b, 64);
	devcache_model_file_close(open_ok(&b, "touching.gguf"));
}

static void duplicate_tensor_names(void **state)
{
	struct buf b = gguf(3, 2, 0);

	(void)state;
	tensor(&b, "w", 1, NE(8), 0, 0);
	tensor(&b, "w", 1, NE(8), 0, 32);
	pad(&b, 32);
	zeros(&b, 64);
	expect_bad(&b, "two tensors are named 'w'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(valid_v3),
		cmocka_unit_test(valid_v2),
		cmocka_unit_test(header_only),
		cmocka_unit_test(metadata_every_type),
		cmocka_unit_test(alignment_default_and_custom),
		cmocka_unit_test(every_ggml_type),
		cmocka_unit_test(dims_one_to_four),
		cmocka_unit_test(large_string_array),
		cmocka_unit_test(json_cap),
		cmocka_unit_test(json_cap_nested),
		cmocka_unit_test(bad_version),
		cmocka_unit_test(truncated),
		cmocka_unit_test(counts_that_lie),
		cmocka_unit_test(lengths_that_lie),
		cmocka_unit_test(bad_values),
		cmocka_unit_test(bad_keys),
		cmocka_unit_test(bad_alignment),
		cmocka_unit_test(bad_tensors),
		cmocka_unit_test(bad_tensor_names),
		cmocka_unit_test(overlapping_tensors),
		cmocka_unit_test(duplicate_tensor_names),
	};

	/* The messages are checked in English. */
	setenv("LANGUAGE", "C", 1);
	setenv("LC_ALL", "C", 1);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
