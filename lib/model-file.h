/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-file.h - safetensors and GGUF files: the parsed header every later stage works from. */
#ifndef DEVCACHE_MODEL_FILE_H
#define DEVCACHE_MODEL_FILE_H

#include "internal.h"
#include "utf8.h" /* mf_utf8_seq() and mf_utf8_put() for the parsers */

#include <sys/stat.h>
#include <sys/types.h>

/* Hard limits: whatever a header claims, the reader never allocates or
 * loops beyond these (and never beyond what the file's size allows). */
#define MF_MAX_SAFETENSORS_HEADER 100000000u /* bytes, as the reference reader */
#define MF_MAX_TENSORS (1u << 20)
#define MF_MAX_METADATA (1u << 20)            /* key-value pairs */
#define MF_MAX_NAME 65535u                    /* bytes in a tensor name or key */
#define MF_MAX_STRING (64u << 20)             /* bytes in one string value */
#define MF_MAX_ARRAY_DEPTH 4                  /* GGUF arrays of arrays */
#define MF_MAX_JSON_VALUE (16u << 20)         /* bytes of JSON text kept per value */

struct mf_tensor {
	char *name;          /* owned */
	const char *dtype;   /* a static string: "F32", "Q4_K" */
	int32_t dtype_id;    /* enum devcache_dtype (lib/dtype.c) */
	uint32_t type;       /* the format's own type number (GGUF), or 0 */
	uint32_t n_dims;
	uint64_t shape[DEVCACHE_MAX_DIMS];
	uint64_t offset;     /* absolute, from the start of the file */
	uint64_t size;       /* bytes */
	uint32_t part;       /* a set's: the index of the file that holds it */
};

/* A value that has only its JSON text: an object, an array or null in a
 * safetensors index's metadata. */
#define MF_META_JSON 255u

struct mf_meta {
	char *key;   /* owned */
	char *value; /* owned: JSON text */
	/* Typed (model-meta.c): */
	uint32_t type;       /* enum devcache_meta_type, or MF_META_JSON */
	uint32_t elem;       /* an array's element type */
	uint64_t count;      /* an array's elements, a string's bytes, 1 otherwise */
	union {
		int64_t i;   /* the signed integer types */
		uint64_t u;  /* the unsigned ones, a bool */
		double f;    /* the floating-point ones */
	} v;
	char *str;           /* owned: a string's bytes, NUL-terminated */
	uint64_t at;         /* GGUF: an array's first element, in the file src */
	const struct devcache_model_file *src; /* the file that holds it (a set's part) */
};

struct devcache_model_file {
	char *path;
	int fd;
	uint64_t size;          /* of the file when it was opened */
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	int format;             /* enum devcache_model_format */
	unsigned version;       /* GGUF: 2 or 3; safetensors: 0 */
	uint64_t data_offset;   /* where the data section starts */
	uint64_t alignment;     /* GGUF: general.alignment; safetensors: 1 */
	struct mf_tensor *tensors;
	size_t n_tensors, tensors_cap;
	struct mf_meta *meta;
	size_t n_meta, meta_cap;
	struct mf_tensor **by_name; /* sorted, for lookups; built after parsing */
	size_t *meta_by_key;        /* indexes into meta sorted by key, likewise */
	/* A set (model-set.c): its files, each parsed alone, in shard order;
	 * the tensors above are theirs, merged (names owned by the parts).
	 * NULL for a single file, which is its own only part. */
	struct devcache_model_file **parts;
	size_t n_parts;
};

struct devcache_pipeline {
	devcache_component_t *comps;
	size_t n;
};

/* The files of a model: a set's parts, or the file itself. */
static inline size_t mf_part_count(const struct devcache_model_file *mf)
{
	return mf->parts ? mf->n_parts : 1;
}

static inline struct devcache_model_file *mf_part(const struct devcache_model_file *mf, size_t i)
{
	return mf->parts ? mf->parts[i] : (struct devcache_model_file *)mf;
}

/* model-open.c: open and check one file (devcache_model_file_open, beside
 * it, opens sets and folders through it).  When open() fails, errno says why.  The
 * file keeps its descriptor until it is closed: the loads read through it,
 * and it holds the file that was checked, whatever is renamed over its
 * path. */
int mf_open_file(const char *path, struct devcache_model_file **mf_p);
/* The path of the one model the folder dir holds (newly allocated), or an
 * error naming the folder: none, several, a diffusers pipeline. */
int mf_resolve_folder(const char *dir, char **path_p);

/* model-set.c: what the set's files (model-split.c, model-folder.c) share. */

struct json_object;

bool mf_ends_with(const char *s, const char *suffix);
/* dir/name, newly allocated; NULL without memory. */
char *mf_join(const char *dir, const char *name);
/* qsort()'s comparison of two strings (const char *). */
int mf_by_string(const void *x, const void *y);
/* Each shard holds a descriptor while the model is open (mf_open_file):
 * opening shard i (0-based) of n, name, of the set whose file is index
 * failed with e, EMFILE or ENFILE; the error names the limit and the set. */
int mf_too_many_files(const char *index, const char *name, size_t i, size_t n, int e);
/* A new, empty set named path. */
int mf_new_set(const char *path, struct devcache_model_file **set_p);
/* Append a part (taken over: closed on failure). */
int mf_add_part(struct devcache_model_file *set, struct devcache_model_file *part);
/* Merge the parts' tensors, in shard then file order, and index them by
 * name; a name in two shards makes the set bad. */
int mf_merge_tensors(struct devcache_model_file *set);
/* The set's figures from its parts: size, format, data offset. */
void mf_sum_parts(struct devcache_model_file *set);
/* The part's metadata pairs into the set, but for keys the set has. */
int mf_copy_part_meta(struct devcache_model_file *set, const struct devcache_model_file *part);
/* Open the Hugging Face index at path and its shards, as one set. */
int mf_open_index(const char *path, struct devcache_model_file **set_p);
/* Read a JSON object from the file path (a safetensors index, a
 * diffusers model_index.json): its root, for json_object_put(). */
int mf_read_index(const char *path, struct json_object **root_p);

/* model-split.c: GGUF splits. */

/* Where the name says "-NNNNN-of-MMMMM.gguf": the prefix's length and the
 * two numbers; false for a name that does not follow it. */
bool mf_split_name(const char *path, size_t *prefix_len_p, unsigned *no_p, unsigned *count_p);
/* A GGUF file that is one of a split becomes the split (*out_p); anything
 * else stays itself.  Takes mf over. */
int mf_maybe_split(struct devcache_model_file *mf, struct devcache_model_file **out_p);

/* model-file.c: for the parsers. */

/* Fail with DEVCACHE_EFORMAT: "PATH: " and the formatted fault.  fmt is
 * translated by the caller (_("...")). */
int mf_error(const struct devcache_model_file *mf, const char *fmt, ...) DEVCACHE_PRINTF(2, 3);
/* rc, and when it is DEVCACHE_ENOMEM from a place that did not say which
 * file it was reading, the detail message begins "PATH: " (the public
 * calls that take a path name it in every failure). */
int mf_name_oom(const char *path, int rc);
/* Read exactly len bytes at off; reading past the end of the file is a
 * DEVCACHE_EFORMAT error saying what was being read (what: "the header"). */
int mf_read(const struct devcache_model_file *mf, void *buf, size_t len, uint64_t off,
	    const char *what);
/* Append a tensor (name is taken over, even on failure); the parser fills
 * in the rest of the returned entry.  NULL with the error set. */
struct mf_tensor *mf_add_tensor(struct devcache_model_file *mf, char *name);
/* Append a metadata pair (both are taken over, even on failure); the
 * caller fills in its type (model-meta.c's fields) in mf->meta[n_meta - 1],
 * which is a STRING of no bytes until then. */
int mf_add_meta(struct devcache_model_file *mf, char *key, char *value_json);
/* model-meta.c: index the metadata by key, after parsing (a single file's
 * or a set's). */
int mf_index_meta(struct devcache_model_file *mf);
/* Index the tensors by name (sorted, for mf_index()), a single file's or
 * a set's merged ones; two tensors of one name make the file bad, and a
 * set's error names the two shards that hold it. */
int mf_index_tensors(struct devcache_model_file *mf);

void mf_tensor_info(const struct mf_tensor *t, devcache_tensor_info_t *info);

/* The largest power of two, at most 4096 (a page: a mapping's base is
 * page-aligned, so a file offset's alignment is its mapped address's), that
 * divides an offset or an address: devcache_tensor_info_t.align. */
#define MF_ALIGN_MAX 4096u
static inline uint32_t mf_align_of(uint64_t x)
{
	x |= MF_ALIGN_MAX;
	return (uint32_t)(x & -x);
}
/* json-c's parser returned no object for text[0..len) with error jerr
 * (its enum json_tokener_error): whether it ran out of memory, rather than
 * found the text malformed or JSON's null (safetensors.c). */
bool mf_json_out_of_memory(int jerr, const char *text, size_t len);
/* The index of the tensor of that name, or -1. */
long mf_index(const struct devcache_model_file *mf, const char *name);

/* The parsers: fill tensors, meta, data_offset, alignment and version from
 * the open file, checking every rule of the format; return 0 or a negative
 * DEVCACHE_E* code with the detail message set (through mf_error for a
 * malformed file).  The caller checks again, after parsing, that no two
 * tensors share a name; the safetensors parser must itself catch duplicate
 * keys, which json-c would silently merge into one. */
int safetensors_parse(struct devcache_model_file *mf);
int gguf_parse(struct devcache_model_file *mf);

#endif
