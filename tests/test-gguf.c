/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-gguf.c - the GGUF reader's header: versions 2 and 3, a file of the header alone, and one malformed header, count or length per rule. */
#include "config.h"

#include "tap.h"

#include <fcntl.h>
#include <unistd.h>

#include <devcache.h>

#include "gguf-bytes.h"

/* The reader's cap, restated: the test says what it must be. */
#define MAX_TENSORS (1u << 20)

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

/* Only the header: no metadata, no tensors.  Its padding to the alignment
 * left out, as ggml accepts, the data section is empty and starts where
 * the file ends, not past it. */
static void header_only(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 0);

	(void)state;
	mf = open_ok(&b, "empty.gguf");
	assert_int_equal(devcache_model_file_tensor_count(mf), 0);
	assert_int_equal(devcache_model_file_metadata_count(mf), 0);
	assert_int_equal(devcache_model_file_size(mf), 24);
	assert_int_equal(devcache_model_file_data_offset(mf), 24);
	devcache_model_file_close(mf);
	/* With the padding, the data section starts after it. */
	b = gguf(3, 0, 0);
	pad(&b, 32);
	mf = open_ok(&b, "padded.gguf");
	assert_int_equal(devcache_model_file_data_offset(mf), 32);
	devcache_model_file_close(mf);
}

/* A vocabulary alone: metadata, no tensors, and the file ends within the
 * padding; the data offset is never past the end. */
static void metadata_without_tensors(void **state)
{
	devcache_model_file_t *mf;
	struct buf b = gguf(3, 0, 2);

	(void)state;
	kv_str(&b, "general.architecture", "llama");
	kv_u32(&b, "general.alignment", 64);
	size_t end = b.len;
	assert_true(end % 64 != 0);
	mf = open_ok(&b, "vocab.gguf");
	assert_int_equal(devcache_model_file_tensor_count(mf), 0);
	assert_int_equal(devcache_model_file_metadata_count(mf), 2);
	assert_int_equal(devcache_model_file_data_offset(mf), end);
	devcache_model_file_close(mf);
	/* Some bytes of padding, but not all. */
	b = gguf(3, 0, 2);
	kv_str(&b, "general.architecture", "llama");
	kv_u32(&b, "general.alignment", 64);
	zeros(&b, 3);
	mf = open_ok(&b, "vocab3.gguf");
	assert_int_equal(devcache_model_file_data_offset(mf), end + 3);
	devcache_model_file_close(mf);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(valid_v3),
		cmocka_unit_test(valid_v2),
		cmocka_unit_test(header_only),
		cmocka_unit_test(metadata_without_tensors),
		cmocka_unit_test(bad_version),
		cmocka_unit_test(truncated),
		cmocka_unit_test(counts_that_lie),
		cmocka_unit_test(lengths_that_lie),
	};

	return GGUF_RUN_TAP(tests);
}
