/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf.h - what the GGUF reader's files share: the buffered cursor, names and the parse state. */
#ifndef DEVCACHE_GGUF_H
#define DEVCACHE_GGUF_H

#include <stdint.h>
#include <string.h>

#include "gguf-json.h"
#include "model-file.h"

/* ---- a buffered cursor over mf_read ---------------------------------------- */

/* A header with a million keys or a 150,000-string vocabulary would be
 * millions of preads read field by field; one 64 KiB window makes it a few
 * hundred. */
#define CUR_BUF 65536u

/* What is being read, so that a read past the end can say what it was. */
enum cur_what { W_HEADER, W_KEY, W_VALUE, W_TENSOR_NAME, W_TENSOR };

struct cursor {
	struct devcache_model_file *mf;
	uint64_t pos;         /* the file offset of the next byte */
	uint64_t buf_off;     /* the file offset of buf[0] */
	size_t buf_len;
	enum cur_what what;
	uint64_t index;       /* the metadata entry or tensor being read */
	const char *name;     /* its key or name, once known */
	unsigned char buf[CUR_BUF];
};

static inline uint64_t cur_left(const struct cursor *c)
{
	return c->pos < c->mf->size ? c->mf->size - c->pos : 0;
}

int cur_read_slow(struct cursor *c, void *dst, size_t len);

static inline int cur_read(struct cursor *c, void *dst, size_t len)
{
	/* pos never goes back, and buf_off is set from pos: pos >= buf_off. */
	uint64_t at = c->pos - c->buf_off;

	if (at <= c->buf_len && len <= c->buf_len - at) {
		memcpy(dst, c->buf + at, len);
		c->pos += len;
		return 0;
	}
	return cur_read_slow(c, dst, len);
}

/* Pass over len bytes the caller has no use for; past the end of the file
 * it is the same error as reading them. */
int cur_skip(struct cursor *c, uint64_t len);

static inline int cur_u8(struct cursor *c, uint8_t *v)
{
	return cur_read(c, v, 1);
}

static inline int cur_u16(struct cursor *c, uint16_t *v)
{
	unsigned char b[2];
	int rc = cur_read(c, b, sizeof b);

	*v = rc ? 0 : (uint16_t)(b[0] | b[1] << 8);
	return rc;
}

static inline int cur_u32(struct cursor *c, uint32_t *v)
{
	unsigned char b[4];
	int rc = cur_read(c, b, sizeof b);

	if (rc)
		return rc;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

static inline int cur_u64(struct cursor *c, uint64_t *v)
{
	unsigned char b[8];
	int rc = cur_read(c, b, sizeof b);

	*v = 0;
	if (rc)
		return rc;
	for (int i = 7; i >= 0; i--)
		*v = *v << 8 | b[i];
	return 0;
}

/* One header being read: what the three files share. */
struct parse {
	struct devcache_model_file *mf;
	unsigned char *scratch;  /* the string value being read */
	size_t scratch_cap;
	size_t *keys;            /* open addressing: index + 1 into mf->meta, 0 free */
	size_t keys_cap;
	struct json_scratch json;      /* what values are written through */
	/* The value being read at the top level (not in an array), typed:
	 * a scalar's bits, a string's bytes (owned until kept), an array's
	 * element type, count and first element's offset. */
	struct {
		uint64_t v;
		char *str;
		uint64_t len;
		uint32_t elem;
		uint64_t count, at;
	} top;
	struct cursor c;         /* last: its buffer is large */
};

/* A key or a tensor name: a GGUF string of 1 to MF_MAX_NAME bytes of text.
 * On a fault, *len_p and *fault_p say which (the caller words the error). */
enum name_error { NAME_READ_OK, NAME_EMPTY, NAME_TOO_LONG, NAME_BAD_UTF8, NAME_HAS_NUL };

int read_name(struct parse *p, char **name_p, uint64_t *len_p, enum name_error *fault_p);

/* gguf-meta.c: one metadata entry, its key checked and kept once. */
int read_kv(struct parse *p, uint64_t index);

/* gguf-tensors.c: one tensor info; then, after the last, their offsets made
 * absolute and checked against the file, and against each other. */
int read_tensor_info(struct parse *p, uint64_t index);
int place_tensors(struct parse *p);
int check_overlaps(struct parse *p);

#endif
