/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer.c - write small safetensors and GGUF files, and sharded sets of them, with known contents, for the tests. */
#include "tap.h"

#include "model-writer.h"

#include <errno.h>
#include <limits.h>

/* ---- failing --------------------------------------------------------------------- */

/* fail_msg() does not return (cmocka jumps back to the test runner), but
 * its declaration does not say so: this one does. */
__attribute__((format(printf, 1, 2))) static _Noreturn void mw_fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fail_msg("model-writer: %s", msg);
	abort();
}

/* dir/name into buf, failing when it does not fit. */
static void join(char *buf, size_t size, const char *dir, const char *name)
{
	int len = snprintf(buf, size, "%s/%s", dir, name);

	if (len < 0 || (size_t)len >= size)
		mw_fail("the path %s/%s does not fit in %zu bytes", dir, name, size);
}

/* ---- a growing buffer ------------------------------------------------------------ */

struct mw_buf {
	unsigned char *p;
	size_t len, cap;
};

static void put(struct mw_buf *b, const void *s, size_t n)
{
	if (b->cap - b->len < n) {
		while (b->cap - b->len < n)
			b->cap = b->cap ? 2 * b->cap : 4096;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			mw_fail("out of memory");
	}
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
}

__attribute__((format(printf, 2, 3))) static void putf(struct mw_buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (len < 0)
		mw_fail("vsnprintf failed");
	if ((size_t)len < sizeof small) {
		put(b, small, (size_t)len);
		return;
	}
	char *big = malloc((size_t)len + 1);
	if (!big)
		mw_fail("out of memory");
	va_start(ap, fmt);
	vsnprintf(big, (size_t)len + 1, fmt, ap);
	va_end(ap);
	put(b, big, (size_t)len);
	free(big);
}

static void put_le(struct mw_buf *b, uint64_t v, int bytes)
{
	unsigned char le[8];

	for (int i = 0; i < bytes; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	put(b, le, (size_t)bytes);
}

/* s as a JSON string, quotes included. */
static void put_json_str(struct mw_buf *b, const char *s)
{
	put(b, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			putf(b, "\\%c", *c);
		else if (*c < 0x20)
			putf(b, "\\u%04x", *c);
		else
			put(b, c, 1);
	}
	put(b, "\"", 1);
}

/* ---- files ------------------------------------------------------------------------ */

static FILE *create(const char *path)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		mw_fail("cannot create %s: %s", path, strerror(errno));
	return f;
}

/* On an error the file is closed before the test fails, so that a failed
 * write leaks nothing. */
static void write_all(FILE *f, const void *p, size_t n, const char *path)
{
	if (n && fwrite(p, 1, n, f) != n) {
		int e = errno;

		fclose(f);
		mw_fail("cannot write %s: %s", path, strerror(e));
	}
}

/* The buffer's bytes, and the buffer freed. */
static void write_buf(FILE *f, struct mw_buf *b, const char *path)
{
	int ok = !b->len || fwrite(b->p, 1, b->len, f) == b->len, e = errno;

	free(b->p);
	*b = (struct mw_buf){0};
	if (!ok) {
		fclose(f);
		mw_fail("cannot write %s: %s", path, strerror(e));
	}
}

static void finish(FILE *f, const char *path)
{
	if (fflush(f) != 0 || ferror(f)) {
		int e = errno;

		fclose(f);
		mw_fail("cannot write %s: %s", path, strerror(e));
	}
	if (fclose(f) != 0)
		mw_fail("cannot close %s: %s", path, strerror(errno));
}

/* ---- the contents ----------------------------------------------------------------- */

/* FNV-1a, 32 bits. */
static uint32_t name_hash(const char *name)
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
static unsigned char byte_of(uint32_t h, size_t j, unsigned seed)
{
	return (unsigned char)((h * 31u + j * 7u + seed) & 0xff);
}

unsigned char mw_byte(const char *name, size_t j, unsigned seed)
{
	return byte_of(name_hash(name), j, seed);
}

void mw_check(const char *name, const void *data, size_t size, unsigned seed)
{
	const unsigned char *p = data;
	uint32_t h = name_hash(name);

	if (size && !p)
		mw_fail("tensor '%s': no data to check (%zu bytes expected)", name, size);
	for (size_t j = 0; j < size; j++)
		if (p[j] != byte_of(h, j, seed))
			mw_fail("tensor '%s' byte %zu of %zu is %u, not %u (seed %u)", name, j, size,
				p[j], byte_of(h, j, seed), seed);
}

/* Tensor t's bytes, then zero bytes up to a multiple of align (1: none). */
static void write_tensor(FILE *f, const struct mw_tensor *t, unsigned seed, size_t align,
			 const char *path)
{
	unsigned char chunk[8192];
	uint32_t h = name_hash(t->name);
	size_t j = 0;

	while (j < t->size) {
		size_t k = t->size - j < sizeof chunk ? t->size - j : sizeof chunk;

		for (size_t i = 0; i < k; i++)
			chunk[i] = byte_of(h, j + i, seed);
		write_all(f, chunk, k, path);
		j += k;
	}
	if (align > 1 && t->size % align) {
		memset(chunk, 0, sizeof chunk);
		write_all(f, chunk, align - t->size % align, path);
	}
}

static void check_tensors(const struct mw_tensor *t, size_t n)
{
	if (n && !t)
		mw_fail("%zu tensors but no array of them", n);
	for (size_t i = 0; i < n; i++)
		if (!t[i].name)
			mw_fail("tensor %zu has no name", i);
}

/* ---- safetensors ------------------------------------------------------------------ */

/* A shard number meaning every tensor. */
#define ALL_SHARDS UINT_MAX

static int chosen(const struct mw_tensor *t, unsigned only)
{
	return only == ALL_SHARDS || t->shard == only;
}

/* The tensors of t[0..n) whose shard is only (or all of them, if ALL_SHARDS). */
static void write_safetensors(const char *path, const struct mw_tensor *t, size_t n, unsigned only,
			      unsigned seed, const char *metadata_json)
{
	struct mw_buf b = {0};
	uint64_t off = 0;
	const char *sep = "";
	FILE *f;

	check_tensors(t, n);
	f = create(path);
	put(&b, "\0\0\0\0\0\0\0\0", 8); /* the header length, filled in below */
	put(&b, "{", 1);
	if (metadata_json) {
		putf(&b, "\"__metadata__\":%s", metadata_json);
		sep = ",";
	}
	for (size_t i = 0; i < n; i++) {
		if (!chosen(&t[i], only))
			continue;
		putf(&b, "%s", sep);
		put_json_str(&b, t[i].name);
		putf(&b, ":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[%llu,%llu]}", t[i].size,
		     (unsigned long long)off, (unsigned long long)(off + t[i].size));
		off += t[i].size;
		sep = ",";
	}
	put(&b, "}", 1);
	/* The reference writer pads the header with spaces to a multiple of 8. */
	while ((b.len - 8) % 8)
		put(&b, " ", 1);
	uint64_t hl = b.len - 8;
	for (int i = 0; i < 8; i++)
		b.p[i] = (unsigned char)(hl >> (8 * i));
	write_buf(f, &b, path);
	for (size_t i = 0; i < n; i++)
		if (chosen(&t[i], only))
			write_tensor(f, &t[i], seed, 1, path);
	finish(f, path);
}

void mw_safetensors(const char *path, const struct mw_tensor *t, size_t n, unsigned seed,
		    const char *metadata_json)
{
	write_safetensors(path, t, n, ALL_SHARDS, seed, metadata_json);
}

void mw_shard_name(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		   const char *ext)
{
	int len = snprintf(buf, size, "%s-%05u-of-%05u.%s", stem, k + 1, n, ext);

	if (len < 0 || (size_t)len >= size)
		mw_fail("the name of shard %u of %u of %s does not fit in %zu bytes", k, n, stem, size);
}

/* Every tensor's shard must be below n_shards. */
static void check_shards(const struct mw_tensor *t, size_t n, unsigned n_shards)
{
	if (!n_shards || n_shards == ALL_SHARDS)
		mw_fail("a set of %u shards", n_shards);
	check_tensors(t, n);
	for (size_t i = 0; i < n; i++)
		if (t[i].shard >= n_shards)
			mw_fail("tensor '%s' is in shard %u of a set of %u", t[i].name, t[i].shard,
				n_shards);
}

/* path (a buffer of size bytes, or NULL) gets s. */
static void give_path(char *buf, size_t size, const char *s)
{
	if (!buf)
		return;
	if (strlen(s) >= size)
		mw_fail("the path %s does not fit in %zu bytes", s, size);
	strcpy(buf, s);
}

void mw_sharded(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		unsigned n_shards, unsigned seed, unsigned flags, char *index_path, size_t index_size)
{
	char name[PATH_MAX], path[PATH_MAX];
	struct mw_buf b = {0};
	unsigned long long total = 0;
	FILE *f;

	check_shards(t, n, n_shards);
	for (unsigned k = 0; k < n_shards; k++) {
		mw_shard_name(name, sizeof name, stem, k, n_shards, "safetensors");
		join(path, sizeof path, dir, name);
		write_safetensors(path, t, n, k, seed, "{\"format\":\"pt\"}");
	}

	/* The index, laid out as transformers writes it (indent 2). */
	if (snprintf(name, sizeof name, "%s.safetensors.index.json", stem) >= (int)sizeof name)
		mw_fail("the index name of %s is too long", stem);
	join(path, sizeof path, dir, name);
	f = create(path);
	for (size_t i = 0; i < n; i++)
		total += t[i].size;
	if (flags & MW_TOTAL_SIZE_WRONG)
		total++;
	putf(&b, "{\n  \"metadata\": {");
	if (!(flags & MW_NO_TOTAL_SIZE))
		putf(&b, "\n    \"total_size\": %llu\n  ", total);
	putf(&b, "},\n  \"weight_map\": {");
	for (size_t i = 0; i < n; i++) {
		putf(&b, "%s\n    ", i ? "," : "");
		put_json_str(&b, t[i].name);
		putf(&b, ": ");
		mw_shard_name(name, sizeof name, stem, t[i].shard, n_shards, "safetensors");
		put_json_str(&b, name);
	}
	putf(&b, "%s}\n}\n", n ? "\n  " : "");
	write_buf(f, &b, path);
	finish(f, path);
	give_path(index_path, index_size, path);
}

/* ---- GGUF ------------------------------------------------------------------------- */

enum { GGUF_VERSION = 3, GGUF_ALIGNMENT = 32, GGML_TYPE_I8 = 24 };
/* The value types, as the spec numbers them. */
enum { GGUF_UINT16 = 2, GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_STRING = 8 };

static void put_gguf_str(struct mw_buf *b, const char *s)
{
	size_t len = strlen(s);

	put_le(b, len, 8);
	put(b, s, len);
}

/* Before anything is written: a key, a known type, a value that fits. */
static void check_kv(const struct mw_kv *kv)
{
	if (!kv->key)
		mw_fail("a metadata entry has no key");
	switch (kv->type) {
	case MW_U16:
		if (kv->i < 0 || kv->i > UINT16_MAX)
			mw_fail("'%s': %lld does not fit a UINT16", kv->key, kv->i);
		break;
	case MW_I32:
		if (kv->i < INT32_MIN || kv->i > INT32_MAX)
			mw_fail("'%s': %lld does not fit an INT32", kv->key, kv->i);
		break;
	case MW_U32:
		if (kv->i < 0 || kv->i > UINT32_MAX)
			mw_fail("'%s': %lld does not fit a UINT32", kv->key, kv->i);
		break;
	case MW_STRING:
		if (!kv->s)
			mw_fail("'%s': a string with no text", kv->key);
		break;
	default:
		mw_fail("'%s': unknown type %d", kv->key, (int)kv->type);
	}
}

static void put_kv(struct mw_buf *b, const struct mw_kv *kv)
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

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* The tensors of t[0..n) whose shard is only (or all of them, if ALL_SHARDS). */
static void write_gguf(const char *path, const struct mw_kv *kv, size_t n_kv,
		       const struct mw_tensor *t, size_t n, unsigned only, unsigned seed)
{
	struct mw_buf b = {0};
	size_t align = GGUF_ALIGNMENT, off = 0, m = 0;
	FILE *f;

	check_tensors(t, n);
	if (n_kv && !kv)
		mw_fail("%zu metadata entries but no array of them", n_kv);
	for (size_t i = 0; i < n_kv; i++)
		check_kv(&kv[i]);
	for (size_t i = 0; i < n; i++)
		m += chosen(&t[i], only);
	for (size_t i = 0; i < n_kv; i++)
		if (strcmp(kv[i].key, "general.alignment") == 0 && kv[i].type == MW_U32) {
			if (kv[i].i <= 0 || kv[i].i > UINT32_MAX || (kv[i].i & (kv[i].i - 1)))
				mw_fail("%s: general.alignment %lld is not a power of two", path,
					kv[i].i);
			align = (size_t)kv[i].i;
		}

	f = create(path);
	put(&b, "GGUF", 4);
	put_le(&b, GGUF_VERSION, 4);
	put_le(&b, m, 8);
	put_le(&b, n_kv, 8);
	for (size_t i = 0; i < n_kv; i++)
		put_kv(&b, &kv[i]);
	for (size_t i = 0; i < n; i++) {
		if (!chosen(&t[i], only))
			continue;
		put_gguf_str(&b, t[i].name);
		put_le(&b, 1, 4);          /* n_dims */
		put_le(&b, t[i].size, 8);  /* ne[0]: I8 is one byte an element */
		put_le(&b, GGML_TYPE_I8, 4);
		put_le(&b, off, 8);        /* from the start of the data section */
		off += round_up(t[i].size, align);
	}
	while (b.len % align)
		put(&b, "", 1);
	write_buf(f, &b, path);
	for (size_t i = 0; i < n; i++)
		if (chosen(&t[i], only))
			write_tensor(f, &t[i], seed, align, path);
	finish(f, path);
}

void mw_gguf(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
	     size_t n, unsigned seed)
{
	write_gguf(path, kv, n_kv, t, n, ALL_SHARDS, seed);
}

void mw_gguf_split(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		   unsigned n_splits, unsigned seed, unsigned flags, char *first_path,
		   size_t first_size)
{
	char name[PATH_MAX], path[PATH_MAX];

	check_shards(t, n, n_splits);
	if (n_splits > UINT16_MAX)
		mw_fail("%u splits: split.count is a UINT16", n_splits);
	if (n >= INT32_MAX)
		mw_fail("%zu tensors: split.tensors.count is an INT32", n);
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
		mw_shard_name(name, sizeof name, prefix, k, n_splits, "gguf");
		join(path, sizeof path, dir, name);
		write_gguf(path, kv, n_kv, t, n, k, seed);
		if (k == 0)
			give_path(first_path, first_size, path);
	}
}

/* ---- text ------------------------------------------------------------------------- */

void mw_text(const char *path, const char *text)
{
	FILE *f = create(path);

	write_all(f, text, strlen(text), path);
	finish(f, path);
}

devcache_ctx_t *mw_open_ctx(const char *options)
{
	char opts[1024];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:good%s%s",
		 test_env("TEST_MODULES"), options ? "," : "", options ? options : "");
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	return ctx;
}

devcache_device_t *mw_device(devcache_ctx_t *ctx, const char *name)
{
	devcache_device_t *dev;

	assert_int_equal(devcache_device_get(ctx, name, &dev), 0);
	return dev;
}
