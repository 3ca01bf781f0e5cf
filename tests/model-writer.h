/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer.h - small safetensors and GGUF files, and sharded sets of them, with known contents, for the tests. */
#ifndef DEVCACHE_TEST_MODEL_WRITER_H
#define DEVCACHE_TEST_MODEL_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include <devcache.h>

#include "model-writer-core.h"

/*
 * The cmocka face of model-writer-core.h: every function fails the current
 * test (cmocka's fail_msg) with the core's message, naming the path, on
 * any I/O error or bad argument; none returns an error.  struct mw_tensor,
 * struct mw_kv, struct mw_opts and the MW_* flags are the core's.
 */

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
/* The same with any dtypes, shapes, contents and flags (o: see the core). */
void mw_safetensors_opts(const char *path, const struct mw_tensor *t, size_t n,
			 const struct mw_opts *o);
/* A safetensors file that need not be valid: the 8-byte little-endian
 * number stated, then header[0..hlen), then data[0..dlen). */
void mw_raw(const char *path, uint64_t stated, const void *header, size_t hlen, const void *data,
	    size_t dlen);

/* Hugging Face sharded safetensors in dir: STEM-0000K-of-0000N.safetensors
 * (K = 1..n_shards, five digits each, as transformers names them), each
 * holding the tensors whose shard is K - 1, in the order given, each with
 * __metadata__ {"format":"pt"}; and STEM.safetensors.index.json =
 * {"metadata": {"total_size": SUM}, "weight_map": {NAME: FILE, ...}}, SUM
 * being the sum of every tensor's size and the weight map in the order
 * given.  A tensor's shard must be below n_shards; a shard may hold none.
 * flags: MW_NO_TOTAL_SIZE, MW_TOTAL_SIZE_WRONG.  The index's path goes
 * into index_path (if not NULL: a buffer of index_size bytes). */
void mw_sharded(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		unsigned n_shards, unsigned seed, unsigned flags, char *index_path, size_t index_size);

/* The file name (no directory) of shard k (0-based) of n:
 * "STEM-%05u-of-%05u.EXT" with k + 1 and n, ext being "safetensors" or
 * "gguf". */
void mw_shard_name(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		   const char *ext);

/* A GGUF v3 file: the key-value pairs kv[0..n_kv) in that order, then
 * every tensor of t[0..n) (shard ignored) as ggml type I8 (24), n_dims 1,
 * ne[0] = size (or its dtype and shape: see the core).  The alignment is
 * 32, or general.alignment if kv gives it (an MW_U32 power of two): the
 * data section starts aligned, and each tensor's data is followed by zero
 * bytes up to the next multiple of it (the last one's too, as ggml writes
 * it). */
void mw_gguf(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
	     size_t n, unsigned seed);

/* A GGUF split as llama.cpp's gguf-split writes it, in dir:
 * PREFIX-0000K-of-0000N.gguf (five digits, K = 1..n_splits), shard k
 * holding the tensors whose shard is k, in the order given.  Shard 0 carries
 * general.architecture = "llama" and general.name = PREFIX (strings), then
 * split.no (u16) = 0, split.count (u16) = n_splits and split.tensors.count
 * (i32) = n; the others carry only split.no = k, split.count and
 * split.tensors.count.  (For gguf-split --no-tensor-first-split, put no
 * tensor in shard 0.)  flags: MW_SPLIT_*.  The path of shard 0 goes into
 * first_path (if not NULL: a buffer of first_size bytes). */
void mw_gguf_split(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		   unsigned n_splits, unsigned seed, unsigned flags, char *first_path,
		   size_t first_size);

/* Write text to path (hand-made index files, model_index.json). */
void mw_text(const char *path, const char *text);
/* Write data[0..len) to path (files that are no model). */
void mw_bytes(const char *path, const void *data, size_t len);

/* A context on the test backend module "good" (from TEST_MODULES), reading
 * no configuration file or environment, with options appended (NULL: none);
 * the test fails when it cannot be opened. */
devcache_ctx_t *mw_open_ctx(const char *options);
/* A device of ctx by name, or a failed test. */
devcache_device_t *mw_device(devcache_ctx_t *ctx, const char *name);

/* Open path with devcache_model_file_open() in a child process: its
 * result (0 or a negative code), the memory it took beyond what it started
 * with (its peak resident size less ours at the fork, which it shares at
 * first) in *extra_p, and its devcache_last_error() in msg (NULL: not
 * wanted).  nofile: the child's RLIMIT_NOFILE, or 0 to keep ours. */
int mw_open_in_child(const char *path, rlim_t nofile, uint64_t *extra_p, char *msg, size_t size);

#endif
