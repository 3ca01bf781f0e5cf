/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-gguf-tensors.c - GGUF tensor infos: every ggml type, one to four dimensions, alignment, and one malformed tensor per rule. */
#include "config.h"

#include "tap.h"

#include <devcache.h>

#include "gguf-bytes.h"

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

/* ---- valid files -------------------------------------------------------------- */

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

/* ---- malformed files, one rule at a time ----------------------------------------- */

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
		cmocka_unit_test(alignment_default_and_custom),
		cmocka_unit_test(every_ggml_type),
		cmocka_unit_test(dims_one_to_four),
		cmocka_unit_test(bad_tensors),
		cmocka_unit_test(bad_tensor_names),
		cmocka_unit_test(overlapping_tensors),
		cmocka_unit_test(duplicate_tensor_names),
	};

	return GGUF_RUN_TAP(tests);
}
