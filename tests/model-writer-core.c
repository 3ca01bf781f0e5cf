/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer-core.c - write safetensors and GGUF files, sets of them and malformed variants, returning errors (no test framework). */
#include "model-writer-core.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json.h>

/* ---- errors ----------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int fault(struct mw_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static const struct mw_opts no_opts;

static const struct mw_opts *opts_of(const struct mw_opts *o)
{
	return o ? o : &no_opts;
}

/* The message err holds, after "what: " (and "/name" if name is not NULL);
 * -1. */
static int named(struct mw_err *err, const char *what, const char *name)
{
	char msg[sizeof err->msg];

	snprintf(msg, sizeof msg, "%s", err->msg);
	return fault(err, "%s%s%s: %s", what, name ? "/" : "", name ? name : "", msg);
}

/* dir/name into buf. */
static int join(char *buf, size_t size, const char *dir, const char *name, struct mw_err *err)
{
	int len = snprintf(buf, size, "%s/%s", dir, name);

	if (len < 0 || (size_t)len >= size)
		return fault(err, "the path %s/%s does not fit in %zu bytes", dir, name, size);
	return 0;
}

/* buf (a buffer of size bytes, or NULL) gets s. */
static int give_path(char *buf, size_t size, const char *s, struct mw_err *err)
{
	if (!buf)
		return 0;
	if (strlen(s) >= size)
		return fault(err, "the path %s does not fit in %zu bytes", s, size);
	strcpy(buf, s);
	return 0;
}

/* ---- a growing buffer: an allocation failure is remembered, reported once ---------- */

struct buf {
	unsigned char *p;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const void *s, size_t n)
{
	if (b->failed)
		return;
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 4096;
		unsigned char *p;

		while (cap - b->len < n)
			cap *= 2;
		if (!(p = realloc(b->p, cap))) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	if (n)
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

/* ---- files ------------------------------------------------------------------------ */

static FILE *create(const char *path, struct mw_err *err)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		fault(err, "cannot create %s: %s", path, strerror(errno));
	return f;
}

static int write_all(FILE *f, const void *p, size_t n, const char *path, struct mw_err *err)
{
	if (n && fwrite(p, 1, n, f) != n)
		return fault(err, "cannot write %s: %s", path, strerror(errno));
	return 0;
}

/* Closes f whatever happens; rc is what went before. */
static int finish(FILE *f, const char *path, unsigned flags, int rc, struct mw_err *err)
{
	if (rc == 0 && (fflush(f) != 0 || ferror(f) || ((flags & MW_FSYNC) && fsync(fileno(f)))))
		rc = fault(err, "cannot write %s: %s", path, strerror(errno));
	if (fclose(f) != 0 && rc == 0)
		rc = fault(err, "cannot close %s: %s", path, strerror(errno));
	return rc;
}

int mw_file(const char *path, const void *data, size_t len, struct mw_err *err)
{
	FILE *f = create(path, err);

	if (!f)
		return -1;
	return finish(f, path, 0, write_all(f, data, len, path, err), err);
}

int mw_st_raw(const char *path, uint64_t stated, const void *header, size_t hlen,
	      const void *data, size_t dlen, struct mw_err *err)
{
	unsigned char len8[8];
	FILE *f = create(path, err);
	int rc;

	if (!f)
		return -1;
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)(stated >> (8 * i));
	rc = write_all(f, len8, 8, path, err);
	if (rc == 0)
		rc = write_all(f, header, hlen, path, err);
	if (rc == 0)
		rc = write_all(f, data, dlen, path, err);
	return finish(f, path, 0, rc, err);
}

/* ---- the contents ----------------------------------------------------------------- */

uint32_t mw_name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		h ^= *c;
		h *= 16777619u;
	}
	return h;
}

/* Unsigned arithmetic wraps, and only the low 8 bits are kept, so the
 * width it is done in does not matter. */
static unsigned char byte_of(uint32_t h, uint64_t j, unsigned seed)
{
	return (unsigned char)((h * 31u + j * 7u + seed) & 0xff);
}

unsigned char mw_byte(const char *name, size_t j, unsigned seed)
{
	return byte_of(mw_name_hash(name), j, seed);
}

size_t mw_first_wrong(const char *name, const void *data, size_t size, unsigned seed)
{
	const unsigned char *p = data;
	uint32_t h = mw_name_hash(name);

	for (size_t j = 0; j < size; j++)
		if (p[j] != byte_of(h, j, seed))
			return j;
	return size;
}

/* Tensor t[i]'s bytes, then zero bytes up to a multiple of align (1: none). */
static int write_tensor(FILE *f, const struct mw_tensor *t, size_t i, const struct mw_opts *o,
			size_t align, const char *path, struct mw_err *err)
{
	static const unsigned char zeros[4096];
	unsigned char chunk[65536];
	uint32_t h = mw_name_hash(t[i].name);
	uint64_t j = 0;

	while (j < t[i].size) {
		size_t k = t[i].size - j < sizeof chunk ? (size_t)(t[i].size - j) : sizeof chunk;

		if (o->fill)
			o->fill(o->fill_user, i, j, chunk, k);
		else
			for (size_t x = 0; x < k; x++)
				chunk[x] = byte_of(h, j + x, o->seed);
		if (write_all(f, chunk, k, path, err))
			return -1;
		j += k;
	}
	for (size_t pad = align > 1 && t[i].size % align ? align - t[i].size % align : 0; pad;) {
		size_t k = pad < sizeof zeros ? pad : sizeof zeros;

		if (write_all(f, zeros, k, path, err))
			return -1;
		pad -= k;
	}
	return 0;
}

static int check_tensors(const struct mw_tensor *t, size_t n, struct mw_err *err)
{
	if (n && !t)
		return fault(err, "%zu tensors but no array of them", n);
	for (size_t i = 0; i < n; i++) {
		if (!t[i].name)
			return fault(err, "tensor %zu has no name", i);
		if (t[i].n_dims && !t[i].shape)
			return fault(err, "tensor '%s': %u dimensions but no shape", t[i].name,
				     t[i].n_dims);
	}
	return 0;
}

static int chosen(const struct mw_tensor *t, unsigned only)
{
	return only == MW_ALL_SHARDS || t->shard == only;
}

/* ---- safetensors ------------------------------------------------------------------ */

/* Builds o into obj under key, or says which went wrong. */
static int add(struct json_object *obj, const char *key, struct json_object *v)
{
	if (!v)
		return -1;
	if (json_object_object_add(obj, key, v)) {
		json_object_put(v);
		return -1;
	}
	return 0;
}

static int add_u64s(struct json_object *obj, const char *key, const uint64_t *v, size_t n)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; a && i < n; i++) {
		struct json_object *e = json_object_new_uint64(v[i]);

		if (!e || json_object_array_add(a, e)) {
			json_object_put(e);
			json_object_put(a);
			return -1;
		}
	}
	return add(obj, key, a);
}

/* One tensor's entry: {"dtype": D, "shape": [...], "data_offsets": [b, e]}. */
static struct json_object *tensor_entry(const struct mw_tensor *t, uint64_t off)
{
	struct json_object *e = json_object_new_object();
	uint64_t size = t->size, offsets[2] = {off, off + t->size};
	int bad;

	if (!e)
		return NULL;
	bad = add(e, "dtype", json_object_new_string(t->dtype ? t->dtype : "U8"));
	if (!bad)
		bad = t->dtype ? add_u64s(e, "shape", t->shape, t->n_dims)
			       : add_u64s(e, "shape", &size, 1);
	if (!bad)
		bad = add_u64s(e, "data_offsets", offsets, 2);
	if (bad) {
		json_object_put(e);
		return NULL;
	}
	return e;
}

/* The header's JSON object; NULL after saying why. */
static struct json_object *header_json(const struct mw_tensor *t, size_t n, unsigned only,
				       const struct mw_opts *o, uint64_t *data_p,
				       struct mw_err *err)
{
	struct json_object *h = json_object_new_object();
	uint64_t off = 0;

	if (!h) {
		fault(err, "out of memory");
		return NULL;
	}
	if (o->metadata_json) {
		struct json_object *m = json_tokener_parse(o->metadata_json);

		if (!m || !json_object_is_type(m, json_type_object)) {
			json_object_put(m);
			json_object_put(h);
			fault(err, "the metadata %s is not a JSON object", o->metadata_json);
			return NULL;
		}
		if (add(h, "__metadata__", m))
			goto oom;
	}
	for (size_t i = 0; i < n; i++) {
		if (!chosen(&t[i], only))
			continue;
		if (json_object_object_get_ex(h, t[i].name, NULL)) {
			json_object_put(h);
			fault(err, "tensor '%s' twice (write such a header with mw_st_raw())",
			      t[i].name);
			return NULL;
		}
		if (add(h, t[i].name, tensor_entry(&t[i], off)))
			goto oom;
		off += t[i].size;
	}
	*data_p = off;
	return h;
oom:
	json_object_put(h);
	fault(err, "out of memory");
	return NULL;
}

int mw_st_header(const struct mw_tensor *t, size_t n, unsigned only, const struct mw_opts *o,
		 unsigned char **hdr_p, size_t *len_p, uint64_t *data_p, struct mw_err *err)
{
	struct json_object *h;
	struct buf b = {0};
	const char *text;
	uint64_t data;

	o = opts_of(o);
	if (check_tensors(t, n, err) || !(h = header_json(t, n, only, o, &data, err)))
		return -1;
	text = json_object_to_json_string_ext(h, JSON_C_TO_STRING_PLAIN |
						      JSON_C_TO_STRING_NOSLASHESCAPE);
	put(&b, "\0\0\0\0\0\0\0\0", 8); /* the header length, filled in below */
	if (text)
		put(&b, text, strlen(text));
	json_object_put(h);
	/* The reference writer pads the header with spaces to a multiple of 8. */
	while (!(o->flags & MW_NO_PAD) && !b.failed && (b.len - 8) % 8)
		put(&b, " ", 1);
	if (!text || b.failed) {
		free(b.p);
		return fault(err, "out of memory");
	}
	for (int i = 0; i < 8; i++)
		b.p[i] = (unsigned char)((uint64_t)(b.len - 8) >> (8 * i));
	*hdr_p = b.p;
	*len_p = b.len;
	if (data_p)
		*data_p = data;
	return 0;
}

int mw_st_write(const char *path, const struct mw_tensor *t, size_t n, unsigned only,
		const struct mw_opts *o, struct mw_err *err)
{
	unsigned char *hdr;
	size_t len;
	FILE *f;
	int rc;

	o = opts_of(o);
	if (mw_st_header(t, n, only, o, &hdr, &len, NULL, err))
		return named(err, path, NULL);
	if (!(f = create(path, err))) {
		free(hdr);
		return -1;
	}
	rc = write_all(f, hdr, len, path, err);
	free(hdr);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (chosen(&t[i], only))
			rc = write_tensor(f, t, i, o, 1, path, err);
	return finish(f, path, o->flags, rc, err);
}

int mw_shard_name_e(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		    const char *ext, struct mw_err *err)
{
	int len = snprintf(buf, size, "%s-%05u-of-%05u.%s", stem, k + 1, n, ext);

	if (len < 0 || (size_t)len >= size)
		return fault(err, "the name of shard %u of %u of %s does not fit in %zu bytes", k,
			     n, stem, size);
	return 0;
}

/* Every tensor's shard must be below n_shards. */
static int check_shards(const struct mw_tensor *t, size_t n, unsigned n_shards,
			struct mw_err *err)
{
	if (!n_shards || n_shards == MW_ALL_SHARDS)
		return fault(err, "a set of %u shards", n_shards);
	if (check_tensors(t, n, err))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (t[i].shard >= n_shards)
			return fault(err, "tensor '%s' is in shard %u of a set of %u", t[i].name,
				     t[i].shard, n_shards);
	return 0;
}

int mw_index_json(const char *stem, const struct mw_tensor *t, size_t n, unsigned n_shards,
		  unsigned flags, char **text_p, struct mw_err *err)
{
	struct json_object *idx = json_object_new_object(), *meta = json_object_new_object(),
			   *map = json_object_new_object();
	unsigned long long total = 0;
	char name[PATH_MAX];
	const char *text;
	int bad = !idx || !meta || !map;

	if (check_shards(t, n, n_shards, err)) {
		named(err, stem, NULL);
		goto err;
	}
	for (size_t i = 0; i < n; i++)
		total += t[i].size;
	if (flags & MW_TOTAL_SIZE_WRONG)
		total++;
	if (!bad && !(flags & MW_NO_TOTAL_SIZE))
		bad = add(meta, "total_size", json_object_new_uint64(total));
	for (size_t i = 0; !bad && i < n; i++) {
		if (mw_shard_name_e(name, sizeof name, stem, t[i].shard, n_shards, "safetensors",
				    err))
			goto err;
		bad = add(map, t[i].name, json_object_new_string(name));
	}
	if (!bad) {
		bad = add(idx, "metadata", meta);
		meta = NULL;
	}
	if (!bad) {
		bad = add(idx, "weight_map", map);
		map = NULL;
	}
	/* indent 2 and ": " as transformers (json.dumps(indent=2)) writes it,
	 * and its final newline. */
	text = bad ? NULL
		   : json_object_to_json_string_ext(idx, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_SPACED |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text || !(*text_p = malloc(strlen(text) + 2))) {
		fault(err, "the index of %s: out of memory", stem);
		goto err;
	}
	sprintf(*text_p, "%s\n", text);
	json_object_put(idx);
	return 0;
err:
	json_object_put(idx);
	json_object_put(meta);
	json_object_put(map);
	return -1;
}

int mw_sharded_e(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		 unsigned n_shards, const struct mw_opts *o, unsigned flags, char *index_path,
		 size_t index_size, struct mw_err *err)
{
	char name[PATH_MAX], path[PATH_MAX], *text;
	struct mw_opts so = *opts_of(o);
	int rc;

	if (check_shards(t, n, n_shards, err))
		return named(err, dir, stem);
	if (!so.metadata_json)
		so.metadata_json = "{\"format\":\"pt\"}";
	for (unsigned k = 0; k < n_shards; k++)
		if (mw_shard_name_e(name, sizeof name, stem, k, n_shards, "safetensors", err) ||
		    join(path, sizeof path, dir, name, err) ||
		    mw_st_write(path, t, n, k, &so, err))
			return -1;
	if (snprintf(name, sizeof name, "%s.safetensors.index.json", stem) >= (int)sizeof name)
		return fault(err, "the index name of %s is too long", stem);
	if (join(path, sizeof path, dir, name, err) ||
	    mw_index_json(stem, t, n, n_shards, flags, &text, err))
		return -1;
	rc = mw_file(path, text, strlen(text), err);
	free(text);
	return rc ? rc : give_path(index_path, index_size, path, err);
}

/* ---- GGUF ------------------------------------------------------------------------- */

enum { GGUF_VERSION = 3, GGUF_ALIGNMENT = 32 };
/* The value types, as the spec numbers them. */
enum { GGUF_UINT16 = 2, GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_STRING = 8 };

static const struct {
	const char *dtype;
	uint32_t ggml;
} ggml_types[] = {{"F32", 0}, {"F16", 1}, {"I8", 24}, {"U8", 24}, {"BF16", 30}};

static void put_gguf_str(struct buf *b, const char *s)
{
	size_t len = strlen(s);

	put_le(b, len, 8);
	put(b, s, len);
}

/* Before anything is written: a key, a known type, a value that fits. */
static int check_kv(const struct mw_kv *kv, struct mw_err *err)
{
	if (!kv->key)
		return fault(err, "a metadata entry has no key");
	switch (kv->type) {
	case MW_U16:
		if (kv->i < 0 || kv->i > UINT16_MAX)
			return fault(err, "'%s': %lld does not fit a UINT16", kv->key, kv->i);
		return 0;
	case MW_I32:
		if (kv->i < INT32_MIN || kv->i > INT32_MAX)
			return fault(err, "'%s': %lld does not fit an INT32", kv->key, kv->i);
		return 0;
	case MW_U32:
		if (kv->i < 0 || kv->i > UINT32_MAX)
			return fault(err, "'%s': %lld does not fit a UINT32", kv->key, kv->i);
		return 0;
	case MW_STRING:
		if (!kv->s)
			return fault(err, "'%s': a string with no text", kv->key);
		return 0;
	}
	return fault(err, "'%s': unknown type %d", kv->key, (int)kv->type);
}

static void put_kv(struct buf *b, const struct mw_kv *kv)
{
	put_gguf_str(b, kv->key);
	switch (kv->type) {
	case MW_U16:
		put_le(b, GGUF_UINT16, 4);
		put_le(b, (uint64_t)kv->i, 2);
		break;
	case MW_I32:
		put_le(b, GGUF_INT32, 4);
		put_le(b, (uint32_t)(int32_t)kv->i, 4);
		break;
	case MW_U32:
		put_le(b, GGUF_UINT32, 4);
		put_le(b, (uint64_t)kv->i, 4);
		break;
	case MW_STRING:
		put_le(b, GGUF_STRING, 4);
		put_gguf_str(b, kv->s);
		break;
	}
}

static int ggml_type(const struct mw_tensor *t, uint32_t *type_p, struct mw_err *err)
{
	if (!t->dtype) {
		*type_p = 24; /* I8: one byte an element */
		return 0;
	}
	for (size_t i = 0; i < sizeof ggml_types / sizeof *ggml_types; i++)
		if (strcmp(t->dtype, ggml_types[i].dtype) == 0) {
			*type_p = ggml_types[i].ggml;
			return 0;
		}
	return fault(err, "tensor '%s': no ggml type for dtype %s", t->name, t->dtype);
}

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* The alignment kv gives (general.alignment), or the default. */
static int gguf_alignment(const struct mw_kv *kv, size_t n_kv, size_t *align_p,
			  struct mw_err *err)
{
	*align_p = GGUF_ALIGNMENT;
	for (size_t i = 0; i < n_kv; i++) {
		if (check_kv(&kv[i], err))
			return -1;
		if (strcmp(kv[i].key, "general.alignment") == 0 && kv[i].type == MW_U32) {
			if (kv[i].i <= 0 || (kv[i].i & (kv[i].i - 1)))
				return fault(err, "general.alignment %lld is not a power of two",
					     kv[i].i);
			*align_p = (size_t)kv[i].i;
		}
	}
	return 0;
}

/* The header and tensor infos, padded to align; -1 after saying why. */
static int gguf_header(struct buf *b, const struct mw_kv *kv, size_t n_kv,
		       const struct mw_tensor *t, size_t n, unsigned only, size_t align,
		       struct mw_err *err)
{
	size_t off = 0, m = 0;

	for (size_t i = 0; i < n; i++)
		m += chosen(&t[i], only);
	put(b, "GGUF", 4);
	put_le(b, GGUF_VERSION, 4);
	put_le(b, m, 8);
	put_le(b, n_kv, 8);
	for (size_t i = 0; i < n_kv; i++)
		put_kv(b, &kv[i]);
	for (size_t i = 0; i < n; i++) {
		uint32_t type = 0;

		if (!chosen(&t[i], only))
			continue;
		if (ggml_type(&t[i], &type, err))
			return -1;
		put_gguf_str(b, t[i].name);
		if (t[i].dtype) {
			put_le(b, t[i].n_dims, 4);
			for (unsigned d = 0; d < t[i].n_dims; d++)
				put_le(b, t[i].shape[d], 8);
		} else {
			put_le(b, 1, 4);         /* n_dims */
			put_le(b, t[i].size, 8); /* ne[0]: I8 is one byte an element */
		}
		put_le(b, type, 4);
		put_le(b, off, 8); /* from the start of the data section */
		off += round_up(t[i].size, align);
	}
	while (!b->failed && b->len % align)
		put(b, "", 1);
	return b->failed ? fault(err, "out of memory") : 0;
}

int mw_gguf_write(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
		  size_t n, unsigned only, const struct mw_opts *o, struct mw_err *err)
{
	struct buf b = {0};
	size_t align;
	FILE *f;
	int rc;

	o = opts_of(o);
	if (n_kv && !kv)
		return fault(err, "%s: %zu metadata entries but no array of them", path, n_kv);
	if (check_tensors(t, n, err) || gguf_alignment(kv, n_kv, &align, err) ||
	    gguf_header(&b, kv, n_kv, t, n, only, align, err)) {
		free(b.p);
		return named(err, path, NULL);
	}
	if (!(f = create(path, err))) {
		free(b.p);
		return -1;
	}
	rc = write_all(f, b.p, b.len, path, err);
	free(b.p);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (chosen(&t[i], only))
			rc = write_tensor(f, t, i, o, align, path, err);
	return finish(f, path, o->flags, rc, err);
}

int mw_gguf_split_e(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		    unsigned n_splits, const struct mw_opts *o, unsigned flags, char *first_path,
		    size_t first_size, struct mw_err *err)
{
	char name[PATH_MAX], path[PATH_MAX];

	if (check_shards(t, n, n_splits, err))
		return named(err, dir, prefix);
	if (n_splits > UINT16_MAX)
		return fault(err, "%s/%s: %u splits: split.count is a UINT16", dir, prefix, n_splits);
	if (n >= INT32_MAX)
		return fault(err, "%s/%s: %zu tensors: split.tensors.count is an INT32", dir, prefix,
			     n);
	for (unsigned k = 0; k < n_splits; k++) {
		int last = k == n_splits - 1;
		struct mw_kv kv[5];
		size_t n_kv = 0;

		if (k == 0) {
			kv[n_kv++] = (struct mw_kv){"general.architecture", MW_STRING, 0, "llama"};
			kv[n_kv++] = (struct mw_kv){"general.name", MW_STRING, 0, prefix};
		}
		if (!(last && (flags & MW_SPLIT_NO_KEYS_IN_LAST))) {
			unsigned no = last && (flags & MW_SPLIT_WRONG_NO_IN_LAST) ? 0 : k;
			unsigned count = n_splits + (last && (flags & MW_SPLIT_WRONG_COUNT_IN_LAST));
			size_t tensors = n + !!(flags & MW_SPLIT_WRONG_TENSOR_COUNT);

			kv[n_kv++] = (struct mw_kv){"split.no", MW_U16, no, NULL};
			kv[n_kv++] = (struct mw_kv){"split.count", MW_U16, count, NULL};
			kv[n_kv++] = (struct mw_kv){"split.tensors.count", MW_I32, (long long)tensors,
						    NULL};
		}
		if (mw_shard_name_e(name, sizeof name, prefix, k, n_splits, "gguf", err) ||
		    join(path, sizeof path, dir, name, err) ||
		    mw_gguf_write(path, kv, n_kv, t, n, k, o, err))
			return -1;
		if (k == 0 && give_path(first_path, first_size, path, err))
			return -1;
	}
	return 0;
}
