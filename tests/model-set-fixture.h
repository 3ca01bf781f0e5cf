/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-set-fixture.h - what the tests of models of several files share: their folder, paths in it, refusals, checks of a set's tensors, shards and bytes, and the sets they write. */
#ifndef DEVCACHE_TEST_MODEL_SET_FIXTURE_H
#define DEVCACHE_TEST_MODEL_SET_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <devcache.h>

#include "model-writer.h"
#include "tap.h"

/* The folder each test runs in: TMPDIR_TEST (tap.h) makes a fresh
 * /tmp/devcache-model-set-XXXXXX for it and removes it after. */
TEST_TMPDIR_FIXTURE_EXTERN;

/* buf = folder/name, failing the test when it does not fit. */
void file_in(char *buf, size_t size, const char *folder, const char *name);

/* buf = dir/name, failing the test when it does not fit. */
void path_of(char *buf, size_t size, const char *name);

/* A fresh folder dir/name, its path in buf. */
void make_dir(char *buf, size_t size, const char *name);

/* The path of shard k of n of STEM in folder. */
void shard_path(char *buf, size_t size, const char *folder, const char *stem, unsigned k,
		unsigned n, const char *ext);

/* The size of the file at path; a failed test when it cannot be stat()ed. */
uint64_t file_size(const char *path);

/* Opening path fails with rc, and the message holds each of the strings
 * (NULL-terminated). */
void refused(const char *path, int rc, ...);

/* The model at path, opened; a failed test with the library's message when it
 * cannot be. */
devcache_model_file_t *opened(const char *path);

/* The set's tensors are t's in shard order, then in the order given
 * (which is each shard's file order), each with its shard and size. */
void expect_order(const devcache_model_file_t *mf, const struct mw_tensor *t, size_t n,
		  unsigned n_shards);

/* Every tensor's bytes where its info says: in its own shard file, at
 * its offset there. */
void expect_bytes_in_shards(const devcache_model_file_t *mf, unsigned seed);

/* The set's shards are these files, with their sizes on disk, and its
 * size their sum. */
void expect_shards(const devcache_model_file_t *mf, const char *const *paths, size_t n);

/* Metadata entry i is key, its value this JSON text. */
void expect_meta(const devcache_model_file_t *mf, size_t i, const char *key,
		 const char *value_json);

/* The sum of the sizes of t[0..n). */
uint64_t sum_sizes(const struct mw_tensor *t, size_t n);

/* Shard paths of STEM's n safetensors shards in folder. */
void st_shards(char paths[][512], const char *folder, const char *stem, unsigned n);

/* Shard paths of PREFIX's n GGUF split shards in folder. */
void gguf_shards(char paths[][512], const char *folder, const char *prefix, unsigned n);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A set of three shards, spread unevenly: the third holds one tensor, and
 * the weight map names it first; each shard's file order is not its name
 * order; a tensor of no bytes. */
static const struct mw_tensor set3[] = {
	{"lm_head.weight", 100003, 2},
	{"model.layers.1.mlp.down", 65536, 1},
	{"model.embed_tokens.weight", 70000, 0},
	{"model.layers.0.attn.v", 1, 0},
	{"model.layers.1.attn.q", 12345, 1},
	{"model.layers.0.attn.k", 4096, 0},
	{"model.norm.bias", 0, 1},
	{"model.layers.0.mlp.up", 200000, 0},
	{"model.layers.1.attn.k", 3, 1},
};

/* A GGUF split whose shards all hold tensors. */
static const struct mw_tensor split3[] = {
	{"token_embd.weight", 70000, 0},
	{"blk.0.attn_q.weight", 4097, 0},
	{"blk.0.ffn_up.weight", 100000, 1},
	{"blk.1.attn_q.weight", 1, 1},
	{"blk.1.ffn_up.weight", 65536, 1},
	{"output.weight", 33333, 2},
};

/* gguf-split --no-tensor-first-split: the first shard holds metadata only. */
static const struct mw_tensor split_nofirst[] = {
	{"token_embd.weight", 70000, 1},
	{"blk.0.attn_q.weight", 4097, 1},
	{"blk.0.ffn_up.weight", 100000, 2},
	{"blk.1.attn_q.weight", 1, 2},
	{"output.weight", 33333, 2},
};

#endif
