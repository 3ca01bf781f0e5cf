/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* dtype.c - tensor dtypes: ggml's type traits and safetensors' dtypes in one table, and the public calls over it. */
#include "internal.h"
#include "dtype.h"

#include <string.h>

/*
 * ggml's tensor types keep ggml's numbers (enum ggml_type), so that a
 * llama.cpp-style engine can use a dtype as a ggml_type; their block size
 * (elements) and bytes per block are ggml.c's type_traits and the block
 * structs of ggml-common.h.  The enum only grows at its end, so a number
 * never changes meaning; numbers ggml has retired keep their name so that
 * the reader's error can say so (a block of 0).  The safetensors dtypes
 * that ggml has not count from 1000; F4 and the F6 types are packed: a
 * block of 2 and 4 elements in 1 and 3 bytes.
 */
#define G DEVCACHE_DTYPE_GGUF
#define S DEVCACHE_DTYPE_SAFETENSORS
#define B DEVCACHE_DTYPE_BLOCKED

static const struct dtype_desc ggml_table[] = {
	{0, "F32", 1, 4, G | S},       {1, "F16", 1, 2, G | S},
	{2, "Q4_0", 32, 18, G | B},    {3, "Q4_1", 32, 20, G | B},
	{4, "Q4_2", 0, 0, 0},          {5, "Q4_3", 0, 0, 0},
	{6, "Q5_0", 32, 22, G | B},    {7, "Q5_1", 32, 24, G | B},
	{8, "Q8_0", 32, 34, G | B},    {9, "Q8_1", 32, 36, G | B},
	{10, "Q2_K", 256, 84, G | B},  {11, "Q3_K", 256, 110, G | B},
	{12, "Q4_K", 256, 144, G | B}, {13, "Q5_K", 256, 176, G | B},
	{14, "Q6_K", 256, 210, G | B}, {15, "Q8_K", 256, 292, G | B},
	{16, "IQ2_XXS", 256, 66, G | B}, {17, "IQ2_XS", 256, 74, G | B},
	{18, "IQ3_XXS", 256, 98, G | B}, {19, "IQ1_S", 256, 50, G | B},
	{20, "IQ4_NL", 32, 18, G | B}, {21, "IQ3_S", 256, 110, G | B},
	{22, "IQ2_S", 256, 82, G | B}, {23, "IQ4_XS", 256, 136, G | B},
	{24, "I8", 1, 1, G | S},       {25, "I16", 1, 2, G | S},
	{26, "I32", 1, 4, G | S},      {27, "I64", 1, 8, G | S},
	{28, "F64", 1, 8, G | S},      {29, "IQ1_M", 256, 56, G | B},
	{30, "BF16", 1, 2, G | S},
	/* Repacked layouts: ggml makes them at load time, never in a file. */
	{31, "Q4_0_4_4", 0, 0, 0},     {32, "Q4_0_4_8", 0, 0, 0},
	{33, "Q4_0_8_8", 0, 0, 0},     {34, "TQ1_0", 256, 54, G | B},
	{35, "TQ2_0", 256, 66, G | B}, {36, "IQ4_NL_4_4", 0, 0, 0},
	{37, "IQ4_NL_4_8", 0, 0, 0},   {38, "IQ4_NL_8_8", 0, 0, 0},
	{39, "MXFP4", 32, 17, G | B},
	/* Newer than the published spec's table, already in ggml-common.h. */
	{40, "NVFP4", 64, 36, G | B},  {41, "Q1_0", 128, 18, G | B},
	{42, "Q2_0", 64, 18, G | B},
};

static const struct dtype_desc st_table[] = {
	{1000, "BOOL", 1, 1, S},        {1001, "U8", 1, 1, S},
	{1002, "U16", 1, 2, S},         {1003, "U32", 1, 4, S},
	{1004, "U64", 1, 8, S},         {1005, "C64", 1, 8, S},
	{1006, "F8_E5M2", 1, 1, S},     {1007, "F8_E4M3", 1, 1, S},
	{1008, "F8_E8M0", 1, 1, S},     {1009, "F8_E4M3FNUZ", 1, 1, S},
	{1010, "F8_E5M2FNUZ", 1, 1, S}, {1011, "F4", 2, 1, S},
	{1012, "F6_E2M3", 4, 3, S},     {1013, "F6_E3M2", 4, 3, S},
};

#undef G
#undef S
#undef B

#define N_GGML (sizeof ggml_table / sizeof *ggml_table)
#define N_ST (sizeof st_table / sizeof *st_table)

const struct dtype_desc *dtype_ggml(uint32_t type)
{
	return type < N_GGML ? &ggml_table[type] : NULL;
}

static const struct dtype_desc *by_name(const char *s, size_t len, uint32_t need)
{
	for (size_t i = 0; i < N_GGML + N_ST; i++) {
		const struct dtype_desc *d = i < N_GGML ? &ggml_table[i] : &st_table[i - N_GGML];

		if ((d->flags & need) && strlen(d->name) == len && memcmp(d->name, s, len) == 0)
			return d;
	}
	return NULL;
}

const struct dtype_desc *dtype_safetensors(const char *s, size_t len)
{
	return by_name(s, len, DEVCACHE_DTYPE_SAFETENSORS);
}

const struct dtype_desc *dtype_by_id(int32_t id)
{
	const struct dtype_desc *d = NULL;

	if (id >= 0 && (size_t)id < N_GGML)
		d = &ggml_table[id];
	else if (id >= 1000 && (size_t)(id - 1000) < N_ST)
		d = &st_table[id - 1000];
	return d && d->blck ? d : NULL;
}

int32_t dtype_id_of(const char *name)
{
	const struct dtype_desc *d =
		by_name(name, strlen(name), DEVCACHE_DTYPE_GGUF | DEVCACHE_DTYPE_SAFETENSORS);

	return d ? d->id : DEVCACHE_DTYPE_UNKNOWN;
}

/* ---- the public calls ------------------------------------------------------------ */

int devcache_dtype_describe(enum devcache_dtype dtype, devcache_dtype_info_t *info)
{
	const struct dtype_desc *d = dtype_by_id(dtype);
	uint32_t align = 1;

	if (!info)
		return err_set(DEVCACHE_EINVAL, _("devcache_dtype_describe: NULL argument"));
	memset(info, 0, sizeof *info);
	if (!d)
		return err_set(DEVCACHE_ENOENT, _("no dtype numbered %d"), (int)dtype);
	while (align < 8 && d->bytes % (align * 2) == 0)
		align *= 2;
	*info = (devcache_dtype_info_t){.name = d->name, .block_size = d->blck,
					.block_bytes = d->bytes, .align = align, .flags = d->flags};
	return 0;
}

int devcache_dtype_from_name(const char *name, enum devcache_dtype *dtype_p)
{
	if (!name || !dtype_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_dtype_from_name: NULL argument"));
	*dtype_p = (enum devcache_dtype)dtype_id_of(name);
	if (*dtype_p == DEVCACHE_DTYPE_UNKNOWN)
		return err_set(DEVCACHE_ENOENT, _("no dtype named '%s'"), name);
	return 0;
}

const char *devcache_dtype_name(enum devcache_dtype dtype)
{
	const struct dtype_desc *d = dtype_by_id(dtype);

	return d ? d->name : NULL;
}

int devcache_dtype_row_size(enum devcache_dtype dtype, uint64_t n, uint64_t *bytes_p)
{
	const struct dtype_desc *d = dtype_by_id(dtype);

	if (!bytes_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_dtype_row_size: NULL argument"));
	*bytes_p = 0;
	if (!d)
		return err_set(DEVCACHE_ENOENT, _("no dtype numbered %d"), (int)dtype);
	if (n % d->blck)
		return err_set(DEVCACHE_EINVAL,
			       _("%llu elements of %s are not a whole number of its blocks of %u"),
			       (unsigned long long)n, d->name, (unsigned)d->blck);
	if (__builtin_mul_overflow(n / d->blck, (uint64_t)d->bytes, bytes_p))
		return err_set(DEVCACHE_EINVAL, _("%llu elements of %s take more than 2^64 bytes"),
			       (unsigned long long)n, d->name);
	return 0;
}
