/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer.h - small safetensors and GGUF files, and sharded sets of them, with known contents, for the tests. */
#ifndef DEVCACHE_TEST_MODEL_WRITER_H
#define DEVCACHE_TEST_MODEL_WRITER_H

#include <stddef.h>

#include <devcache.h>

/*
 * Every function fails the current test (cmocka's fail_msg) on any I/O
 * error or bad argument, naming the path; none returns an error.
 */

/* One tensor to write: its name, its size in bytes, and which shard of a
 * set holds it (0-based; ignored for single files). */
struct mw_tensor {
	const char *name;
	size_t size;
	unsigned shard;
};

/* Byte j of the tensor named name, for seed: the contents every writer uses
 * and every test checks.  (h * 31 + j * 7 + seed) & 0xff, h being the
 * 32-bit FNV-1a hash of name. */
unsigned char mw_byte(const char *name, size_t j, unsigned seed);

/* Check that data holds tensor name's size bytes for seed; a failed test
 * naming the tensor, the byte, what it holds and what it should otherwise. */
void mw_check(const char *name, const void *data, size_t size, unsigned seed);

/* A safetensors file holding every tensor of t[0..n) (the shard field is
 * ignored), dtype "U8", shape [size], in the order given, the data packed
 * with no gaps.  The header is padded with spaces to a multiple of 8 bytes,
 * as the reference writer pads it.  metadata_json: NULL, or the text of a
 * JSON object of string values, written as "__metadata__" (first, as the
 * reference writer puts it), e.g. "{\"format\":\"pt\"}". */
void mw_safetensors(const char *path, const struct mw_tensor *t, size_t n, unsigned seed,
		    const char *metadata_json);

/* Flags of mw_sharded(), to make broken sets. */
#define MW_NO_TOTAL_SIZE 0x1u    /* the index has no metadata.total_size */
#define MW_TOTAL_SIZE_WRONG 0x2u /* total_size is one more than the sum */

/* Hugging Face sharded safetensors in dir: STEM-0000K-of-0000N.safetensors
 * (K = 1..n_shards, five digits each, as transformers names them), each
 * holding the tensors whose shard is K - 1, in the order given, each with
 * __metadata__ {"format":"pt"}; and STEM.safetensors.index.json =
 * {"metadata": {"total_size": SUM}, "weight_map": {NAME: FILE, ...}}, SUM
 * being the sum of every tensor's size and the weight map in the order
 * given.  A tensor's shard must be below n_shards; a shard may hold none.
 * The index's path goes into index_path (if not NULL: a buffer of
 * index_size bytes). */
void mw_sharded(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		unsigned n_shards, unsigned seed, unsigned flags, char *index_path, size_t index_size);

/* The file name (no directory) of shard k (0-based) of n:
 * "STEM-%05u-of-%05u.EXT" with k + 1 and n, ext being "safetensors" or
 * "gguf". */
void mw_shard_name(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		   const char *ext);

/* A GGUF metadata value: i for the integer types (which must fit the type),
 * s for MW_STRING. */
enum mw_kv_type { MW_U16, MW_I32, MW_U32, MW_STRING };
struct mw_kv {
	const char *key;
	enum mw_kv_type type;
	long long i;
	const char *s;
};

/* A GGUF v3 file: the key-value pairs kv[0..n_kv) in that order, then
 * every tensor of t[0..n) (shard ignored) as ggml type I8 (24), n_dims 1,
 * ne[0] = size.  The alignment is 32, or general.alignment if kv gives it
 * (an MW_U32 power of two): the data section starts aligned, and each
 * tensor's data is followed by zero bytes up to the next multiple of it
 * (the last one's too, as ggml writes it). */
void mw_gguf(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
	     size_t n, unsigned seed);

/* Flags of mw_gguf_split(), to make broken sets. */
#define MW_SPLIT_NO_KEYS_IN_LAST 0x1u     /* the last shard has no split.* keys */
#define MW_SPLIT_WRONG_NO_IN_LAST 0x2u    /* the last shard's split.no is 0 */
#define MW_SPLIT_WRONG_TENSOR_COUNT 0x4u  /* split.tensors.count is n + 1 in every shard */
#define MW_SPLIT_WRONG_COUNT_IN_LAST 0x8u /* the last shard's split.count is n_splits + 1 */

/* A GGUF split as llama.cpp's gguf-split writes it, in dir:
 * PREFIX-0000K-of-0000N.gguf (five digits, K = 1..n_splits), shard k
 * holding the tensors whose shard is k, in the order given.  Shard 0 carries
 * general.architecture = "llama" and general.name = PREFIX (strings), then
 * split.no (u16) = 0, split.count (u16) = n_splits and split.tensors.count
 * (i32) = n; the others carry only split.no = k, split.count and
 * split.tensors.count.  (For gguf-split --no-tensor-first-split, put no
 * tensor in shard 0.)  The path of shard 0 goes into first_path (if not
 * NULL: a buffer of first_size bytes). */
void mw_gguf_split(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		   unsigned n_splits, unsigned seed, unsigned flags, char *first_path,
		   size_t first_size);

/* Write text to path (hand-made index files, model_index.json). */
void mw_text(const char *path, const char *text);

/* A context on the test backend module "good" (from TEST_MODULES), reading
 * no configuration file or environment, with options appended (NULL: none);
 * the test fails when it cannot be opened. */
devcache_ctx_t *mw_open_ctx(const char *options);
/* A device of ctx by name, or a failed test. */
devcache_device_t *mw_device(devcache_ctx_t *ctx, const char *name);

#endif
