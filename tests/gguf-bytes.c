/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-bytes.c - GGUF files byte by byte for the reader's tests (test-gguf, -gguf-meta, -gguf-tensors), written by mw_bytes(). */
#include "config.h"

#include "tap.h"
#include "model-writer.h"

#include <devcache.h>

#include "gguf-bytes.h"

TEST_TMPDIR_FIXTURE_SHARED("gguf");

void put(struct buf *b, const void *s, size_t n)
{
	if (b->cap - b->len < n) {
		while (b->cap - b->len < n)
			b->cap = b->cap ? 2 * b->cap : 4096;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
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

void u8_(struct buf *b, uint8_t v) { put_le(b, v, 1); }
void u16_(struct buf *b, uint16_t v) { put_le(b, v, 2); }
void u32_(struct buf *b, uint32_t v) { put_le(b, v, 4); }
void u64_(struct buf *b, uint64_t v) { put_le(b, v, 8); }

void f32_(struct buf *b, float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof v);
	u32_(b, v);
}

void f64_(struct buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof v);
	u64_(b, v);
}

void strn_(struct buf *b, const char *s, size_t n)
{
	u64_(b, n);
	put(b, s, n);
}

void str_(struct buf *b, const char *s)
{
	strn_(b, s, strlen(s));
}

void zeros(struct buf *b, size_t n)
{
	static const unsigned char z[4096];

	while (n) {
		size_t k = n < sizeof z ? n : sizeof z;

		put(b, z, k);
		n -= k;
	}
}

void pad(struct buf *b, size_t align)
{
	zeros(b, (align - b->len % align) % align);
}

struct buf gguf(uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	struct buf b = {0};

	put(&b, "GGUF", 4);
	u32_(&b, version);
	u64_(&b, n_tensors);
	u64_(&b, n_kv);
	return b;
}

void key(struct buf *b, const char *k, uint32_t type)
{
	str_(b, k);
	u32_(b, type);
}

void kv_u32(struct buf *b, const char *k, uint32_t v)
{
	key(b, k, T_UINT32);
	u32_(b, v);
}

void kv_str(struct buf *b, const char *k, const char *v)
{
	key(b, k, T_STRING);
	str_(b, v);
}

void tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
	    uint32_t type, uint64_t offset)
{
	str_(b, name);
	u32_(b, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		u64_(b, ne[i]);
	u32_(b, type);
	u64_(b, offset);
}

const char *path_of(const char *name)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	return p;
}

const char *write_buf(const char *name, struct buf *b)
{
	const char *path = path_of(name);

	mw_bytes(path, b->p, b->len);
	free(b->p);
	*b = (struct buf){0};
	return path;
}

devcache_model_file_t *open_ok(struct buf *b, const char *name)
{
	const char *path = write_buf(name, b);
	devcache_model_file_t *mf = NULL;
	int rc = devcache_model_file_open(path, &mf);

	if (rc)
		fail_msg("%s: %d: %s", path, rc, devcache_last_error());
	assert_non_null(mf);
	return mf;
}

void expect_bad_path(const char *path, const char *fault)
{
	devcache_model_file_t *mf = (devcache_model_file_t *)&mf;
	int rc = devcache_model_file_open(path, &mf);

	if (rc != DEVCACHE_EFORMAT)
		fail_msg("%s: expected DEVCACHE_EFORMAT with \"%s\", got %d: %s", path, fault, rc,
			 devcache_last_error());
	assert_null(mf);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), fault);
}

void expect_bad(struct buf *b, const char *fault)
{
	expect_bad_path(write_buf("bad.gguf", b), fault);
}

__attribute__((noinline)) const char *meta(devcache_model_file_t *mf, size_t i,
					   const char *want_key)
{
	const char *k, *v;

	assert_int_equal(devcache_model_file_metadata(mf, i, &k, &v), 0);
	assert_string_equal(k, want_key);
	return v;
}
