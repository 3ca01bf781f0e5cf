/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-engine-dtype.c - the public dtype numbers, names and blocks (ggml's type traits), and each tensor's dtype number and alignment in devcache_tensor_info_t. */
#include "config.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "gguf-bytes.h"
#include "model-writer.h"

/* ggml's type_traits, restated from ggml.c: the table must say the same. */
static const struct {
	enum devcache_dtype id;
	const char *name;
	uint32_t blck, bytes;
} ggml[] = {
	{DEVCACHE_DTYPE_F32, "F32", 1, 4},       {DEVCACHE_DTYPE_F16, "F16", 1, 2},
	{DEVCACHE_DTYPE_Q4_0, "Q4_0", 32, 18},   {DEVCACHE_DTYPE_Q4_1, "Q4_1", 32, 20},
	{DEVCACHE_DTYPE_Q5_0, "Q5_0", 32, 22},   {DEVCACHE_DTYPE_Q5_1, "Q5_1", 32, 24},
	{DEVCACHE_DTYPE_Q8_0, "Q8_0", 32, 34},   {DEVCACHE_DTYPE_Q8_1, "Q8_1", 32, 36},
	{DEVCACHE_DTYPE_Q2_K, "Q2_K", 256, 84},  {DEVCACHE_DTYPE_Q3_K, "Q3_K", 256, 110},
	{DEVCACHE_DTYPE_Q4_K, "Q4_K", 256, 144}, {DEVCACHE_DTYPE_Q5_K, "Q5_K", 256, 176},
	{DEVCACHE_DTYPE_Q6_K, "Q6_K", 256, 210}, {DEVCACHE_DTYPE_Q8_K, "Q8_K", 256, 292},
	{DEVCACHE_DTYPE_IQ2_XXS, "IQ2_XXS", 256, 66}, {DEVCACHE_DTYPE_IQ4_XS, "IQ4_XS", 256, 136},
	{DEVCACHE_DTYPE_I8, "I8", 1, 1},         {DEVCACHE_DTYPE_I64, "I64", 1, 8},
	{DEVCACHE_DTYPE_F64, "F64", 1, 8},       {DEVCACHE_DTYPE_BF16, "BF16", 1, 2},
	{DEVCACHE_DTYPE_TQ2_0, "TQ2_0", 256, 66}, {DEVCACHE_DTYPE_MXFP4, "MXFP4", 32, 17},
};

static void dtype_table(void **state)
{
	devcache_dtype_info_t info;
	enum devcache_dtype d;
	unsigned named = 0;

	(void)state;
	/* ggml's numbers: a dtype is a ggml_type. */
	assert_int_equal(DEVCACHE_DTYPE_Q4_K, 12);
	assert_int_equal(DEVCACHE_DTYPE_BF16, 30);
	for (size_t i = 0; i < sizeof ggml / sizeof *ggml; i++) {
		assert_int_equal(devcache_dtype_describe(ggml[i].id, &info), 0);
		assert_string_equal(info.name, ggml[i].name);
		assert_int_equal(info.block_size, ggml[i].blck);
		assert_int_equal(info.block_bytes, ggml[i].bytes);
		assert_true(info.flags & DEVCACHE_DTYPE_GGUF);
		assert_int_equal(!!(info.flags & DEVCACHE_DTYPE_BLOCKED), ggml[i].blck > 1);
		assert_int_equal(devcache_dtype_from_name(ggml[i].name, &d), 0);
		assert_int_equal(d, ggml[i].id);
		assert_string_equal(devcache_dtype_name(ggml[i].id), ggml[i].name);
	}
	/* Every number that is a dtype has a name that leads back to it. */
	for (int id = -2; id < 1100; id++) {
		const char *name = devcache_dtype_name((enum devcache_dtype)id);

		if (!name) {
			assert_int_equal(devcache_dtype_describe((enum devcache_dtype)id, &info),
					 DEVCACHE_ENOENT);
			continue;
		}
		named++;
		assert_int_equal(devcache_dtype_from_name(name, &d), 0);
		assert_int_equal(d, id);
		assert_int_equal(devcache_dtype_describe(d, &info), 0);
		assert_true(info.align >= 1 && info.align <= 8 && info.block_bytes % info.align == 0);
	}
	assert_int_equal(named, 35 + 14); /* ggml's in files, safetensors' others */
	/* Retired ggml numbers and unknown names are no dtype. */
	assert_null(devcache_dtype_name((enum devcache_dtype)4));
	assert_int_equal(devcache_dtype_from_name("Q4_2", &d), DEVCACHE_ENOENT);
	assert_int_equal(d, DEVCACHE_DTYPE_UNKNOWN);
	assert_int_equal(devcache_dtype_from_name("f32", &d), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "no dtype named 'f32'");
	/* safetensors' packed types. */
	assert_int_equal(devcache_dtype_describe(DEVCACHE_DTYPE_F6_E2M3, &info), 0);
	assert_int_equal(info.block_size, 4);
	assert_int_equal(info.block_bytes, 3);
	assert_true(info.flags & DEVCACHE_DTYPE_SAFETENSORS);
	assert_false(info.flags & DEVCACHE_DTYPE_GGUF);
	assert_int_equal(devcache_dtype_describe(DEVCACHE_DTYPE_F32, &info), 0);
	assert_int_equal(info.flags & (DEVCACHE_DTYPE_GGUF | DEVCACHE_DTYPE_SAFETENSORS),
			 DEVCACHE_DTYPE_GGUF | DEVCACHE_DTYPE_SAFETENSORS);
	assert_int_equal(info.align, 4);
	assert_int_equal(devcache_dtype_describe(DEVCACHE_DTYPE_Q4_0, &info), 0);
	assert_int_equal(info.align, 2); /* 18 bytes a block */
	assert_int_equal(devcache_dtype_describe(DEVCACHE_DTYPE_F32, NULL), DEVCACHE_EINVAL);
}

static void row_size(void **state)
{
	uint64_t bytes;

	(void)state;
	assert_int_equal(devcache_dtype_row_size(DEVCACHE_DTYPE_Q4_K, 4096, &bytes), 0);
	assert_int_equal(bytes, 16 * 144);
	assert_int_equal(devcache_dtype_row_size(DEVCACHE_DTYPE_F16, 3, &bytes), 0);
	assert_int_equal(bytes, 6);
	assert_int_equal(devcache_dtype_row_size(DEVCACHE_DTYPE_F4, 4, &bytes), 0);
	assert_int_equal(bytes, 2);
	assert_int_equal(devcache_dtype_row_size(DEVCACHE_DTYPE_Q8_0, 33, &bytes), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "33 elements of Q8_0 are not a whole number of its blocks of 32");
	assert_int_equal(devcache_dtype_row_size(DEVCACHE_DTYPE_F64, UINT64_MAX / 4, &bytes),
			 DEVCACHE_EINVAL);
	assert_int_equal(devcache_dtype_row_size((enum devcache_dtype)999, 1, &bytes), DEVCACHE_ENOENT);
}

/* Each tensor says its dtype as a number, and how its data is aligned. */
static void tensor_info_gguf(void **state)
{
	devcache_model_file_t *mf;
	devcache_tensor_info_t info;
	struct buf b = gguf(3, 2, 1);

	(void)state;
	kv_u32(&b, "general.alignment", 64);
	tensor(&b, "q", 1, NE(64), DEVCACHE_DTYPE_Q4_0, 0);   /* 36 bytes */
	tensor(&b, "f", 1, NE(4), DEVCACHE_DTYPE_F32, 64);
	pad(&b, 64);
	zeros(&b, 128);
	mf = open_ok(&b, "types.gguf");
	assert_int_equal(devcache_model_file_find(mf, "q", &info), 0);
	assert_int_equal(info.dtype_id, DEVCACHE_DTYPE_Q4_0);
	assert_string_equal(info.dtype, "Q4_0");
	assert_int_equal(info.align % 64, 0);
	assert_int_equal(info.place, 0);
	assert_int_equal(info.flags, 0);
	assert_int_equal(devcache_model_file_find(mf, "f", &info), 0);
	assert_int_equal(info.dtype_id, DEVCACHE_DTYPE_F32);
	assert_int_equal(info.align, (uint32_t)(info.offset & -info.offset) > 4096 ? 4096 : (uint32_t)(info.offset & -info.offset));
	assert_true(info.align >= 64);
	devcache_model_file_close(mf);
}

/* A safetensors header of 62 bytes puts the data at byte 70: an F32
 * tensor's data is aligned to 2 only, and the info says so. */
static void tensor_info_safetensors(void **state)
{
	static const char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	char h[62];
	devcache_model_file_t *mf;
	devcache_tensor_info_t info;
	const unsigned char data[8] = {0};

	(void)state;
	memset(h, ' ', sizeof h);
	memcpy(h, hdr, strlen(hdr));
	mw_raw(path_of("odd.safetensors"), sizeof h, h, sizeof h, data, sizeof data);
	assert_int_equal(devcache_model_file_open(path_of("odd.safetensors"), &mf), 0);
	assert_int_equal(devcache_model_file_find(mf, "w", &info), 0);
	assert_int_equal(info.offset, 70);
	assert_int_equal(info.align, 2);
	assert_int_equal(info.dtype_id, DEVCACHE_DTYPE_F32);
	devcache_model_file_close(mf);
	/* Every safetensors dtype maps to its number. */
	static const char *const names[] = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
					    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16",
					    "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		const struct mw_tensor t[] = {{"x", 8, 0, names[i], 0, NULL}};
		struct mw_opts o = {0};
		enum devcache_dtype want;
		char p[64];

		snprintf(p, sizeof p, "t%zu.safetensors", i);
		uint64_t shape[1] = {0};
		devcache_dtype_info_t di;
		assert_int_equal(devcache_dtype_from_name(names[i], &want), 0);
		assert_int_equal(devcache_dtype_describe(want, &di), 0);
		shape[0] = 8 / di.block_bytes;
		const struct mw_tensor ts[] = {{"x", 8, 0, names[i], 1, shape}};
		(void)t;
		mw_safetensors_opts(path_of(p), ts, 1, &o);
		assert_int_equal(devcache_model_file_open(path_of(p), &mf), 0);
		assert_int_equal(devcache_model_file_tensor(mf, 0, &info), 0);
		assert_int_equal(info.dtype_id, want);
		devcache_model_file_close(mf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dtype_table),
		cmocka_unit_test(row_size),
		cmocka_unit_test(tensor_info_gguf),
		cmocka_unit_test(tensor_info_safetensors),
	};

	return GGUF_RUN_TAP(tests);
}
