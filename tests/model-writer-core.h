/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer-core.h - safetensors and GGUF files, sets of them and malformed variants, returning errors: the one writer of the tests (through model-writer.h) and of bench/. */
#ifndef DEVCACHE_TEST_MODEL_WRITER_CORE_H
#define DEVCACHE_TEST_MODEL_WRITER_CORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * No test framework here: every function that can fail returns 0, or -1
 * with err->msg naming the path (or the argument) and the fault.  The
 * cmocka wrappers of model-writer.h fail the test with that message;
 * bench/ programs print it.
 */
struct mw_err {
	char msg[512];
};

/* One tensor to write: its name, its size in bytes, and which shard of a
 * set holds it (0-based; ignored for single files).  dtype NULL: "U8"
 * (safetensors) or I8 (GGUF), shape [size].  Otherwise shape[0..n_dims)
 * is written as given (n_dims 0: a scalar), and size must be its bytes:
 * the writer does not check it, so that a test may make it lie.  GGUF
 * knows the dtypes "F32", "F16", "BF16", "I8" and "U8" (as I8). */
struct mw_tensor {
	const char *name;
	size_t size;
	unsigned shard;
	const char *dtype;
	unsigned n_dims;
	const uint64_t *shape;
};

/* Fill buf with bytes [off, off + n) of tensor t[i] (i indexes the array
 * given to the writer); called for each tensor in the order written, with
 * off rising from 0 without gaps. */
typedef void mw_fill_fn(void *user, size_t i, uint64_t off, unsigned char *buf, size_t n);

/* How to write.  A zeroed struct (or NULL) writes the tensors' bytes as
 * mw_byte(name, j, 0), a safetensors header padded with spaces to a
 * multiple of 8 and no __metadata__. */
struct mw_opts {
	unsigned seed;             /* of mw_byte() */
	mw_fill_fn *fill;          /* NULL: mw_byte(name, j, seed) */
	void *fill_user;
	const char *metadata_json; /* safetensors: the text of a JSON object of
				    * string values, written first as
				    * "__metadata__", e.g. "{\"format\":\"pt\"}" */
	unsigned flags;            /* MW_* below */
};

#define MW_NO_PAD 0x100u /* safetensors: the header not padded to a multiple of 8 */
#define MW_FSYNC 0x200u  /* the file on disk (fsync) before it is closed */

/* Byte j of the tensor named name, for seed: the contents every writer uses
 * and every test checks.  (h * 31 + j * 7 + seed) & 0xff, h being the
 * 32-bit FNV-1a hash of name. */
unsigned char mw_byte(const char *name, size_t j, unsigned seed);
/* The 32-bit FNV-1a hash of name. */
uint32_t mw_name_hash(const char *name);
/* The first byte of data[0..size) that is not tensor name's for seed, or
 * size when all are. */
size_t mw_first_wrong(const char *name, const void *data, size_t size, unsigned seed);

/* ---- safetensors ---------------------------------------------------------------- */

/* The header of a safetensors file holding every tensor of t[0..n) whose
 * shard is only (MW_ALL_SHARDS: every one), in the order given, the data
 * packed with no gaps: the 8-byte little-endian length, then the JSON
 * (written by json-c: compact, "/" not escaped), padded with spaces to a
 * multiple of 8 as the reference writer pads it (unless MW_NO_PAD).
 * *hdr_p (malloc()ed, the caller frees it) and *len_p get it; *data_p (if
 * not NULL) the bytes of data that follow. */
#define MW_ALL_SHARDS UINT32_MAX
int mw_st_header(const struct mw_tensor *t, size_t n, unsigned only, const struct mw_opts *o,
		 unsigned char **hdr_p, size_t *len_p, uint64_t *data_p, struct mw_err *err);

/* The whole file: that header, then the tensors' bytes. */
int mw_st_write(const char *path, const struct mw_tensor *t, size_t n, unsigned only,
		const struct mw_opts *o, struct mw_err *err);

/* A file that need not be valid: the 8-byte little-endian number stated
 * (which need not be the truth), then header[0..hlen), then data[0..dlen). */
int mw_st_raw(const char *path, uint64_t stated, const void *header, size_t hlen,
	      const void *data, size_t dlen, struct mw_err *err);

/* Flags of the index, to make broken sets. */
#define MW_NO_TOTAL_SIZE 0x1u    /* the index has no metadata.total_size */
#define MW_TOTAL_SIZE_WRONG 0x2u /* total_size is one more than the sum */

/* The file name (no directory) of shard k (0-based) of n:
 * "STEM-%05u-of-%05u.EXT" with k + 1 and n, ext being "safetensors" or
 * "gguf". */
int mw_shard_name_e(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		    const char *ext, struct mw_err *err);

/* The text of STEM.safetensors.index.json for the tensors t[0..n) of a
 * set of n_shards, laid out as transformers writes it (indent 2, by
 * json-c): {"metadata": {"total_size": SUM}, "weight_map": {NAME: FILE,
 * ...}}, the weight map in the order given.  *text_p: malloc()ed. */
int mw_index_json(const char *stem, const struct mw_tensor *t, size_t n, unsigned n_shards,
		  unsigned flags, char **text_p, struct mw_err *err);

/* Hugging Face sharded safetensors in dir: STEM-0000K-of-0000N.safetensors
 * (K = 1..n_shards), each holding the tensors whose shard is K - 1, written
 * with o (o->metadata_json NULL: {"format":"pt"}); and the index
 * (mw_index_json()), whose path goes into index_path (if not NULL: a
 * buffer of index_size bytes). */
int mw_sharded_e(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		 unsigned n_shards, const struct mw_opts *o, unsigned flags, char *index_path,
		 size_t index_size, struct mw_err *err);

/* ---- GGUF ------------------------------------------------------------------------ */

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
 * every tensor of t[0..n) whose shard is only (MW_ALL_SHARDS: all), shape
 * as ne[0..n_dims) in ggml's order (ne[0] the innermost).  The alignment is 32, or
 * general.alignment if kv gives it (an MW_U32 power of two): the data
 * section starts aligned, and each tensor's data is followed by zero bytes
 * up to the next multiple of it (the last one's too, as ggml writes it). */
int mw_gguf_write(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
		  size_t n, unsigned only, const struct mw_opts *o, struct mw_err *err);

/* Flags of mw_gguf_split_e(), to make broken sets. */
#define MW_SPLIT_NO_KEYS_IN_LAST 0x1u     /* the last shard has no split.* keys */
#define MW_SPLIT_WRONG_NO_IN_LAST 0x2u    /* the last shard's split.no is 0 */
#define MW_SPLIT_WRONG_TENSOR_COUNT 0x4u  /* split.tensors.count is n + 1 in every shard */
#define MW_SPLIT_WRONG_COUNT_IN_LAST 0x8u /* the last shard's split.count is n_splits + 1 */

/* A GGUF split as llama.cpp's gguf-split writes it: see mw_gguf_split()
 * in model-writer.h. */
int mw_gguf_split_e(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		    unsigned n_splits, const struct mw_opts *o, unsigned flags, char *first_path,
		    size_t first_size, struct mw_err *err);

/* ---- any file -------------------------------------------------------------------- */

/* data[0..len) as the whole of path. */
int mw_file(const char *path, const void *data, size_t len, struct mw_err *err);

#endif
