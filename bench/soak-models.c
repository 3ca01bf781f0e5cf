/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak-models.c - bench/soak's models: safetensors, GGUF and a sharded set of different sizes, written with known bytes. */
#include "soak.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum format { SAFETENSORS, GGUF, SHARDED };

/* The models, the same on every run: the seed of the soak drives the
 * threads, not the files.  huge.gguf is larger than the soak's VRAM
 * budget: only partial_loading places it on a device. */
static const struct spec {
	const char *label;
	enum format format;
	unsigned tensors, shards;
	size_t min, max; /* tensor sizes, bytes */
} specs[] = {
	{"small.safetensors", SAFETENSORS, 7, 1, 1, 512 << 10},
	{"medium.gguf", GGUF, 10, 1, 100 << 10, 800 << 10},
	{"set.safetensors.index.json", SHARDED, 12, 3, 300 << 10, 900 << 10},
	{"large.safetensors", SAFETENSORS, 8, 1, 1 << 20, 2 << 20},
	{"huge.gguf", GGUF, 16, 1, 1536 << 10, 2560 << 10},
};

enum { GGUF_ALIGN = 32, GGML_TYPE_I8 = 24, GGUF_STRING = 8 };

/* ---- a growing buffer ------------------------------------------------------------ */

struct buf {
	unsigned char *p;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const void *s, size_t n)
{
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
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

__attribute__((format(printf, 2, 3))) static void putf(struct buf *b, const char *fmt, ...)
{
	char s[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(s, sizeof s, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof s)
		b->failed = 1;
	else
		put(b, s, (size_t)n);
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
	unsigned char le[8];

	for (int i = 0; i < bytes; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	put(b, le, (size_t)bytes);
}

static void put_gguf_str(struct buf *b, const char *s)
{
	put_le(b, strlen(s), 8);
	put(b, s, strlen(s));
}

/* ---- files ----------------------------------------------------------------------- */

/* A new file in ms->dir, listed for removal; NULL after saying why. */
static FILE *create(struct soak_models *ms, const char *name, char *path, size_t size)
{
	FILE *f;

	if ((size_t)snprintf(path, size, "%s/%s", ms->dir, name) >= size ||
	    ms->n_files == SOAK_MAX_FILES) {
		fprintf(stderr, "soak: %s/%s: name too long or too many files\n", ms->dir, name);
		return NULL;
	}
	if (!(f = fopen(path, "wb"))) {
		fprintf(stderr, "soak: cannot create %s: %s\n", path, strerror(errno));
		return NULL;
	}
	ms->files[ms->n_files++] = strdup(path);
	return f;
}

static int finish(FILE *f, const char *path, struct buf *b)
{
	int bad = b->failed || ferror(f);

	free(b->p);
	*b = (struct buf){0};
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "soak: cannot write %s: %s\n", path,
			errno ? strerror(errno) : "out of memory");
		return -1;
	}
	return 0;
}

/* A tensor's bytes, then zeros up to a multiple of align. */
static void put_tensor(struct buf *b, const struct soak_tensor *t, size_t align)
{
	unsigned char chunk[4096];

	for (size_t j = 0; j < t->size;) {
		size_t k = t->size - j < sizeof chunk ? t->size - j : sizeof chunk;

		for (size_t i = 0; i < k; i++)
			chunk[i] = soak_byte(t->hash, j + i);
		put(b, chunk, k);
		j += k;
	}
	memset(chunk, 0, align);
	if (t->size % align)
		put(b, chunk, align - t->size % align);
}

/* Tensors t[0..n) as one safetensors file. */
static int write_safetensors(struct soak_models *ms, const char *name, const struct soak_tensor *t,
			     size_t n, char *path, size_t size)
{
	struct buf b = {0};
	uint64_t off = 0, hl;
	FILE *f = create(ms, name, path, size);

	if (!f)
		return -1;
	put(&b, "\0\0\0\0\0\0\0", 8); /* the header's length, filled in below */
	putf(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (size_t i = 0; i < n; i++) {
		putf(&b, ",\"%s\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[%llu,%llu]}",
		     t[i].name, t[i].size, (unsigned long long)off,
		     (unsigned long long)(off + t[i].size));
		off += t[i].size;
	}
	put(&b, "}", 1);
	while ((b.len - 8) % 8)
		put(&b, " ", 1);
	hl = b.len - 8;
	for (int i = 0; !b.failed && i < 8; i++)
		b.p[i] = (unsigned char)(hl >> (8 * i));
	for (size_t i = 0; i < n; i++)
		put_tensor(&b, &t[i], 1);
	if (!b.failed && fwrite(b.p, 1, b.len, f) != b.len)
		b.failed = 1;
	return finish(f, path, &b);
}

/* Tensors t[0..n) as a GGUF v3 file of I8 tensors. */
static int write_gguf(struct soak_models *ms, const char *name, const struct soak_tensor *t,
		      size_t n, char *path, size_t size)
{
	struct buf b = {0};
	uint64_t off = 0;
	FILE *f = create(ms, name, path, size);

	if (!f)
		return -1;
	put(&b, "GGUF", 4);
	put_le(&b, 3, 4);
	put_le(&b, n, 8);
	put_le(&b, 1, 8);
	put_gguf_str(&b, "general.architecture");
	put_le(&b, GGUF_STRING, 4);
	put_gguf_str(&b, "soak");
	for (size_t i = 0; i < n; i++) {
		put_gguf_str(&b, t[i].name);
		put_le(&b, 1, 4);
		put_le(&b, t[i].size, 8);
		put_le(&b, GGML_TYPE_I8, 4);
		put_le(&b, off, 8);
		off += (t[i].size + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
	}
	while (b.len % GGUF_ALIGN)
		put(&b, "", 1);
	for (size_t i = 0; i < n; i++)
		put_tensor(&b, &t[i], GGUF_ALIGN);
	if (!b.failed && fwrite(b.p, 1, b.len, f) != b.len)
		b.failed = 1;
	return finish(f, path, &b);
}

/* Hugging Face shards, tensor i in shard i * shards / n, and their index. */
static int write_sharded(struct soak_models *ms, const struct spec *sp, struct soak_model *m)
{
	char name[64], path[PATH_MAX];
	struct buf b = {0};
	FILE *f;

	for (unsigned k = 0, first = 0; k < sp->shards; k++) {
		unsigned end = (unsigned)((k + 1) * m->n / sp->shards);

		snprintf(name, sizeof name, "set-%05u-of-%05u.safetensors", k + 1, sp->shards);
		if (write_safetensors(ms, name, m->t + first, end - first, path, sizeof path))
			return -1;
		first = end;
	}
	if (!(f = create(ms, sp->label, m->path, sizeof m->path)))
		return -1;
	putf(&b, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
	     (unsigned long long)m->bytes);
	for (size_t i = 0; i < m->n; i++)
		putf(&b, "%s\n    \"%s\": \"set-%05u-of-%05u.safetensors\"", i ? "," : "",
		     m->t[i].name, (unsigned)(i * sp->shards / m->n) + 1, sp->shards);
	putf(&b, "\n  }\n}\n");
	if (!b.failed && fwrite(b.p, 1, b.len, f) != b.len)
		b.failed = 1;
	return finish(f, m->path, &b);
}

/* ---- the models ------------------------------------------------------------------ */

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* Sizes from a fixed generator; the first tensors of small.safetensors are
 * 1 and 255 bytes, so that odd sizes and the 256-byte packing are used. */
static void make_tensors(size_t k, const struct spec *sp, struct soak_model *m, uint64_t *seed)
{
	for (size_t i = 0; i < m->n; i++) {
		struct soak_tensor *t = &m->t[i];

		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		snprintf(t->name, sizeof t->name, "m%u.layer%u.weight", (unsigned)k % 100, (unsigned)i % 100);
		t->size = sp->min + (size_t)(*seed >> 33) % (sp->max - sp->min + 1);
		if (sp->min == 1 && i < 2)
			t->size = i ? 255 : 1;
		t->hash = fnv1a(t->name);
		m->bytes += t->size;
	}
}

int soak_models_write(struct soak_models *ms, const char *parent)
{
	uint64_t seed = 20261126;

	memset(ms, 0, sizeof *ms);
	if ((size_t)snprintf(ms->dir, sizeof ms->dir, "%s/devcache-soak-XXXXXX", parent) >=
		    sizeof ms->dir ||
	    !mkdtemp(ms->dir)) {
		fprintf(stderr, "soak: cannot make a directory in %s: %s\n", parent, strerror(errno));
		ms->dir[0] = 0;
		return -1;
	}
	for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
		const struct spec *sp = &specs[k];
		struct soak_model *m = &ms->m[ms->n++];
		int rc;

		m->label = sp->label;
		m->n = sp->tensors;
		if (!(m->t = calloc(m->n, sizeof *m->t))) {
			fprintf(stderr, "soak: out of memory\n");
			return -1;
		}
		make_tensors(k, sp, m, &seed);
		rc = sp->format == SHARDED ? write_sharded(ms, sp, m)
		     : sp->format == GGUF  ? write_gguf(ms, sp->label, m->t, m->n, m->path,
						       sizeof m->path)
					   : write_safetensors(ms, sp->label, m->t, m->n, m->path,
							       sizeof m->path);
		if (rc)
			return -1;
	}
	return 0;
}

void soak_models_remove(struct soak_models *ms)
{
	for (size_t i = 0; i < ms->n_files; i++) {
		unlink(ms->files[i]);
		free(ms->files[i]);
	}
	for (size_t k = 0; k < ms->n; k++)
		free(ms->m[k].t);
	if (ms->dir[0])
		rmdir(ms->dir);
	memset(ms, 0, sizeof *ms);
}
