/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf.c - the GGUF header reader: metadata as JSON, tensor infos checked against ggml's type table and the file. */
#include "gguf-json.h"
#include "model-file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The layout (ggml's docs/gguf.md), all little-endian:
 *
 *   "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
 *   metadata_kv_count times: string key | u32 value type | value
 *   tensor_count times: string name | u32 n_dims | n_dims x u64 ne | u32 type | u64 offset
 *   padding to general.alignment, then the data section
 *
 * A string is a u64 byte count and that many bytes, no NUL.  Versions 2 and
 * 3 share this layout (3 only allowed big-endian files, which we do not
 * read); version 1 had 32-bit counts and has been unsupported upstream for
 * years.
 */

enum gguf_vtype {
	GGUF_UINT8 = 0,
	GGUF_INT8 = 1,
	GGUF_UINT16 = 2,
	GGUF_INT16 = 3,
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_UINT64 = 10,
	GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
	GGUF_NTYPES
};

/* The fewest bytes a value of each type takes: what lets a count be
 * checked against the bytes left before anything is looped over.  A string
 * is at least its length; an array at least its type and count. */
static const unsigned char vtype_min[GGUF_NTYPES] = {
	[GGUF_UINT8] = 1, [GGUF_INT8] = 1, [GGUF_UINT16] = 2, [GGUF_INT16] = 2,
	[GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
	[GGUF_STRING] = 8, [GGUF_ARRAY] = 12, [GGUF_UINT64] = 8, [GGUF_INT64] = 8,
	[GGUF_FLOAT64] = 8,
};

#define GGUF_HEADER_SIZE 24u
/* key length, a one-byte key, the value type, a one-byte value */
#define GGUF_MIN_KV (8u + 1u + 4u + 1u)
/* name length, a one-byte name, n_dims, one dimension, type, offset */
#define GGUF_MIN_TENSOR_INFO (8u + 1u + 4u + 8u + 4u + 8u)
#define GGUF_MAX_DIMS 4u /* ggml's GGML_MAX_DIMS */
#define GGUF_DEFAULT_ALIGNMENT 32u

/*
 * ggml's tensor types: block size (elements) and bytes per block, as in
 * ggml.c's type_traits and the block structs of ggml-common.h.  Numbers ggml
 * has retired keep their name so the error can say so; a block size of 0
 * marks them.  The enum only grows at its end, so a number never changes
 * meaning.
 */
struct ggml_type_info {
	const char *name;
	uint32_t blck;
	uint32_t size;
};

static const struct ggml_type_info ggml_types[] = {
	[0] = {"F32", 1, 4},
	[1] = {"F16", 1, 2},
	[2] = {"Q4_0", 32, 18},
	[3] = {"Q4_1", 32, 20},
	[4] = {"Q4_2", 0, 0},
	[5] = {"Q4_3", 0, 0},
	[6] = {"Q5_0", 32, 22},
	[7] = {"Q5_1", 32, 24},
	[8] = {"Q8_0", 32, 34},
	[9] = {"Q8_1", 32, 36},
	[10] = {"Q2_K", 256, 84},
	[11] = {"Q3_K", 256, 110},
	[12] = {"Q4_K", 256, 144},
	[13] = {"Q5_K", 256, 176},
	[14] = {"Q6_K", 256, 210},
	[15] = {"Q8_K", 256, 292},
	[16] = {"IQ2_XXS", 256, 66},
	[17] = {"IQ2_XS", 256, 74},
	[18] = {"IQ3_XXS", 256, 98},
	[19] = {"IQ1_S", 256, 50},
	[20] = {"IQ4_NL", 32, 18},
	[21] = {"IQ3_S", 256, 110},
	[22] = {"IQ2_S", 256, 82},
	[23] = {"IQ4_XS", 256, 136},
	[24] = {"I8", 1, 1},
	[25] = {"I16", 1, 2},
	[26] = {"I32", 1, 4},
	[27] = {"I64", 1, 8},
	[28] = {"F64", 1, 8},
	[29] = {"IQ1_M", 256, 56},
	[30] = {"BF16", 1, 2},
	/* Repacked layouts: ggml makes them at load time, never in a file. */
	[31] = {"Q4_0_4_4", 0, 0},
	[32] = {"Q4_0_4_8", 0, 0},
	[33] = {"Q4_0_8_8", 0, 0},
	[34] = {"TQ1_0", 256, 54},
	[35] = {"TQ2_0", 256, 66},
	[36] = {"IQ4_NL_4_4", 0, 0},
	[37] = {"IQ4_NL_4_8", 0, 0},
	[38] = {"IQ4_NL_8_8", 0, 0},
	[39] = {"MXFP4", 32, 17},
	/* Newer than the published spec's table, already in ggml-common.h. */
	[40] = {"NVFP4", 64, 36},
	[41] = {"Q1_0", 128, 18},
	[42] = {"Q2_0", 64, 18},
};

#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

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

static void cur_describe(const struct cursor *c, char *out, size_t size)
{
	switch (c->what) {
	case W_HEADER:
		snprintf(out, size, "%s", _("the GGUF header"));
		break;
	case W_KEY:
		snprintf(out, size, _("the key of metadata entry %llu"), (unsigned long long)c->index);
		break;
	case W_VALUE:
		snprintf(out, size, _("the value of metadata key '%s'"), c->name);
		break;
	case W_TENSOR_NAME:
		snprintf(out, size, _("the name of tensor %llu"), (unsigned long long)c->index);
		break;
	case W_TENSOR:
		snprintf(out, size, _("the description of tensor '%s'"), c->name);
		break;
	}
}

static uint64_t cur_left(const struct cursor *c)
{
	return c->pos < c->mf->size ? c->mf->size - c->pos : 0;
}

/* Reading straight through mf_read: it checks the bounds and words the
 * error the same way for every reader of model files. */
static int cur_read_direct(struct cursor *c, void *dst, size_t len, uint64_t off)
{
	char what[512];

	cur_describe(c, what, sizeof what);
	return mf_read(c->mf, dst, len, off, what);
}

static int cur_read_slow(struct cursor *c, void *dst, size_t len)
{
	uint64_t left = cur_left(c);
	size_t n = left < CUR_BUF ? (size_t)left : CUR_BUF;
	int rc;

	/* Past the end, or too big to be worth the copy: mf_read does it (and
	 * fails with the end of the file named, without reading). */
	if (len > n || len >= CUR_BUF / 2) {
		if ((rc = cur_read_direct(c, dst, len, c->pos)))
			return rc;
		c->pos += len;
		return 0;
	}
	c->buf_len = 0;
	if ((rc = cur_read_direct(c, c->buf, n, c->pos)))
		return rc;
	c->buf_off = c->pos;
	c->buf_len = n;
	memcpy(dst, c->buf, len);
	c->pos += len;
	return 0;
}

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
static int cur_skip(struct cursor *c, uint64_t len)
{
	if (len > cur_left(c)) {
		unsigned char none;

		/* mf_read refuses before it reads, so one byte of room will do. */
		return cur_read_direct(c, &none, (size_t)len, c->pos);
	}
	c->pos += len;
	return 0;
}

static int cur_u8(struct cursor *c, uint8_t *v)
{
	return cur_read(c, v, 1);
}

static int cur_u16(struct cursor *c, uint16_t *v)
{
	unsigned char b[2];
	int rc = cur_read(c, b, sizeof b);

	*v = rc ? 0 : (uint16_t)(b[0] | b[1] << 8);
	return rc;
}

static int cur_u32(struct cursor *c, uint32_t *v)
{
	unsigned char b[4];
	int rc = cur_read(c, b, sizeof b);

	if (rc)
		return rc;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

static int cur_u64(struct cursor *c, uint64_t *v)
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

/* ---- UTF-8 ------------------------------------------------------------------ */

enum name_fault { NAME_OK, NAME_NOT_UTF8, NAME_NUL };

/* Keys and tensor names become C strings and are printed in messages: they
 * must be text, and a NUL would cut them short. */
static enum name_fault name_check(const char *name, size_t len)
{
	const unsigned char *s = (const unsigned char *)name;

	for (size_t i = 0; i < len;) {
		size_t n = mf_utf8_seq(s + i, len - i);

		if (!n)
			return NAME_NOT_UTF8;
		if (s[i] == '\0')
			return NAME_NUL;
		i += n;
	}
	return NAME_OK;
}

/* ---- metadata values --------------------------------------------------------- */

struct parse {
	struct devcache_model_file *mf;
	unsigned char *scratch;  /* the string value being read */
	size_t scratch_cap;
	size_t *keys;            /* open addressing: index + 1 into mf->meta, 0 free */
	size_t keys_cap;
	struct jreuse json;      /* what values are written through */
	struct cursor c;         /* last: its buffer is large */
};

/* Read a string value's bytes into the scratch buffer; the length has been
 * checked against MF_MAX_STRING and the bytes left in the file. */
static int read_scratch(struct parse *p, size_t len)
{
	if (len == 0)
		return 0; /* scratch may still be NULL, which memcpy may not see */
	if (len > p->scratch_cap) {
		size_t cap = p->scratch_cap ? p->scratch_cap : 256;
		unsigned char *s;

		while (cap < len)
			cap *= 2;
		if (!(s = realloc(p->scratch, cap)))
			return err_set(DEVCACHE_ENOMEM, _("out of memory"));
		p->scratch = s;
		p->scratch_cap = cap;
	}
	return cur_read(&p->c, p->scratch, len);
}

static int read_value(struct parse *p, uint32_t type, unsigned depth, struct cjson *j, bool show,
		      bool *shown_p);

static int read_string_value(struct parse *p, unsigned depth, struct cjson *j, bool show,
			     bool *shown_p)
{
	struct cursor *c = &p->c;
	uint64_t at = c->pos, len;
	int rc;

	if ((rc = cur_u64(c, &len)))
		return rc;
	if (len > MF_MAX_STRING)
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: a string of %llu bytes is longer "
				  "than the %u allowed"),
				c->name, (unsigned long long)at, (unsigned long long)len, MF_MAX_STRING);
	if (len > cur_left(c))
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: a string of %llu bytes runs past "
				  "the end of the %llu-byte file"),
				c->name, (unsigned long long)at, (unsigned long long)len,
				(unsigned long long)p->mf->size);
	if (!show)
		return cur_skip(c, len);
	if ((rc = read_scratch(p, (size_t)len)))
		return rc;
	if (j->len + 2 > JSON_ROOM) {
		j->full = true;
		return 0;
	}
	if ((rc = cjson_put_value(j, cjson_text(&p->json, p->scratch, (size_t)len, NULL), JSON_ROOM)) != 0) {
		*shown_p = rc == 1;
		return rc == 1 ? 0 : rc;
	}
	if (depth > 0) {
		/* In an array an element goes whole or not at all. */
		j->full = true;
		return 0;
	}
	return cjson_put_cut_string(&p->json, j, p->scratch, (size_t)len, shown_p);
}

/* Read count elements of an array for their checks only. */
static int skip_elements(struct parse *p, uint32_t type, unsigned depth, uint64_t count)
{
	int rc;

	if (type != GGUF_STRING && type != GGUF_ARRAY && type != GGUF_BOOL)
		return cur_skip(&p->c, count * vtype_min[type]);
	for (uint64_t i = 0; i < count; i++)
		if ((rc = read_value(p, type, depth + 1, NULL, false, NULL)))
			return rc;
	return 0;
}

static int read_array(struct parse *p, unsigned depth, struct cjson *j, bool show, bool *shown_p)
{
	struct cursor *c = &p->c;
	uint64_t type_at = c->pos, count, hidden = 0;
	bool ready = true; /* the text ends in '[' or ',': no comma before the next */
	uint32_t type;
	int rc;

	if (depth >= MF_MAX_ARRAY_DEPTH)
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: arrays are nested more than %u "
				  "deep"),
				c->name, (unsigned long long)type_at, (unsigned)MF_MAX_ARRAY_DEPTH);
	if ((rc = cur_u32(c, &type)) || (rc = cur_u64(c, &count)))
		return rc;
	if (type >= GGUF_NTYPES)
		return mf_error(p->mf, _("metadata key '%s' at byte %llu: value type %u is unknown"),
				c->name, (unsigned long long)type_at, type);
	/* Before any loop: a count that lies cannot make it run longer, or
	 * skip further, than the file is long. */
	if (count > cur_left(c) / vtype_min[type])
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: %llu array elements cannot fit "
				  "in the %llu bytes left in the file"),
				c->name, (unsigned long long)type_at, (unsigned long long)count,
				(unsigned long long)cur_left(c));
	if (show && j->len + 1 > JSON_ROOM)
		j->full = true;
	if (!show || j->full)
		return skip_elements(p, type, depth, count);
	if ((rc = cjson_put(j, "[", 1)))
		return rc;
	*shown_p = true;
	for (uint64_t i = 0; i < count; i++) {
		bool shown = false;

		if (j->full) {
			hidden += count - i;
			if ((rc = skip_elements(p, type, depth, count - i)))
				return rc;
			break;
		}
		if (!ready && (rc = cjson_put(j, ",", 1)))
			return rc;
		ready = true;
		if ((rc = read_value(p, type, depth + 1, j, true, &shown)))
			return rc;
		if (shown)
			ready = false;
		else
			hidden++;
	}
	if (hidden) {
		char more[64];

		snprintf(more, sizeof more, "\xe2\x80\xa6(%llu more)", (unsigned long long)hidden);
		if ((!ready && (rc = cjson_put(j, ",", 1))) ||
		    (rc = cjson_put_new(j, json_object_new_string(more), SIZE_MAX)) < 0)
			return rc;
	}
	return cjson_put(j, "]", 1);
}

/* A scalar in its json-c object (NULL when memory ran out); v holds its
 * bits, zero-extended. */
static struct json_object *json_scalar(struct jreuse *r, uint32_t type, uint64_t v)
{
	int ok;

	switch (type) {
	case GGUF_INT8:
		return json_object_set_int64(r->i64, (int8_t)v) ? r->i64 : NULL;
	case GGUF_INT16:
		return json_object_set_int64(r->i64, (int16_t)v) ? r->i64 : NULL;
	case GGUF_INT32:
		return json_object_set_int64(r->i64, (int32_t)v) ? r->i64 : NULL;
	case GGUF_INT64:
		return json_object_set_int64(r->i64, (int64_t)v) ? r->i64 : NULL;
	case GGUF_BOOL:
		return json_object_set_boolean(r->boolean, v != 0) ? r->boolean : NULL;
	case GGUF_FLOAT32: {
		uint32_t bits = (uint32_t)v;
		float f;

		memcpy(&f, &bits, sizeof f);
		ok = json_object_set_double(r->f32, f);
		return ok ? r->f32 : NULL;
	}
	case GGUF_FLOAT64: {
		double d;

		memcpy(&d, &v, sizeof d);
		ok = json_object_set_double(r->f64, d);
		return ok ? r->f64 : NULL;
	}
	default: /* the unsigned types */
		return json_object_set_uint64(r->u64, v) ? r->u64 : NULL;
	}
}

/* One value of the given (known) type: its JSON text appended to j when
 * show is set and it fits (*shown_p says which), else only read and checked. */
static int read_value(struct parse *p, uint32_t type, unsigned depth, struct cjson *j, bool show,
		      bool *shown_p)
{
	struct cursor *c = &p->c;
	uint64_t at = c->pos, v = 0;
	uint32_t u32;
	uint16_t u16;
	uint8_t u8;
	int rc;

	if (type == GGUF_STRING)
		return read_string_value(p, depth, j, show, shown_p);
	if (type == GGUF_ARRAY)
		return read_array(p, depth, j, show, shown_p);
	switch (vtype_min[type]) { /* a scalar's least size is its size */
	case 1:
		rc = cur_u8(c, &u8), v = u8;
		break;
	case 2:
		rc = cur_u16(c, &u16), v = u16;
		break;
	case 4:
		rc = cur_u32(c, &u32), v = u32;
		break;
	default:
		rc = cur_u64(c, &v);
		break;
	}
	if (rc)
		return rc;
	if (type == GGUF_BOOL && v > 1)
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: a boolean is %u, not 0 or 1"),
				c->name, (unsigned long long)at, (unsigned)v);
	if (!show)
		return 0;
	if ((rc = cjson_put_value(j, json_scalar(&p->json, type, v), JSON_ROOM)) == 0)
		j->full = true;
	*shown_p = rc == 1;
	return rc == 1 ? 0 : rc;
}

/* ---- metadata entries ---------------------------------------------------------- */

static uint64_t key_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3u;
	return h;
}

/* The slot holding key, or the free slot where it would go. */
static size_t *key_slot(const struct parse *p, const char *key)
{
	size_t mask = p->keys_cap - 1, i = (size_t)key_hash(key) & mask;

	while (p->keys[i] && strcmp(p->mf->meta[p->keys[i] - 1].key, key) != 0)
		i = (i + 1) & mask;
	return &p->keys[i];
}

/* Kept at most half full, grown with the keys actually read: a lying count
 * allocates nothing. */
static int keys_grow(struct parse *p)
{
	size_t cap = p->keys_cap ? 2 * p->keys_cap : 64, *old = p->keys, old_cap = p->keys_cap;

	if (!(p->keys = calloc(cap, sizeof *p->keys))) {
		p->keys = old;
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	}
	p->keys_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			*key_slot(p, p->mf->meta[old[i] - 1].key) = old[i];
	free(old);
	return 0;
}

/* A key or a tensor name: a GGUF string of 1 to MF_MAX_NAME bytes of text.
 * On a fault, *len_p and *fault_p say which (the caller words the error). */
enum name_error { NAME_READ_OK, NAME_EMPTY, NAME_TOO_LONG, NAME_BAD_UTF8, NAME_HAS_NUL };

static int read_name(struct parse *p, char **name_p, uint64_t *len_p, enum name_error *fault_p)
{
	uint64_t len;
	char *name;
	int rc;

	*name_p = NULL;
	*fault_p = NAME_READ_OK;
	if ((rc = cur_u64(&p->c, &len)))
		return rc;
	*len_p = len;
	if (len == 0 || len > MF_MAX_NAME) {
		*fault_p = len ? NAME_TOO_LONG : NAME_EMPTY;
		return 0;
	}
	if (!(name = malloc((size_t)len + 1)))
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	if ((rc = cur_read(&p->c, name, (size_t)len))) {
		free(name);
		return rc;
	}
	name[len] = '\0';
	switch (name_check(name, (size_t)len)) {
	case NAME_OK:
		*name_p = name;
		return 0;
	case NAME_NOT_UTF8:
		*fault_p = NAME_BAD_UTF8;
		break;
	case NAME_NUL:
		*fault_p = NAME_HAS_NUL;
		break;
	}
	free(name);
	return 0;
}

static int key_error(struct parse *p, enum name_error fault, uint64_t at, uint64_t len)
{
	switch (fault) {
	case NAME_EMPTY:
		return mf_error(p->mf, _("metadata key at byte %llu is empty"), (unsigned long long)at);
	case NAME_TOO_LONG:
		return mf_error(p->mf,
				_("metadata key at byte %llu is %llu bytes long, more than the %u "
				  "allowed"),
				(unsigned long long)at, (unsigned long long)len, MF_MAX_NAME);
	case NAME_BAD_UTF8:
		return mf_error(p->mf, _("metadata key at byte %llu is not valid UTF-8"),
				(unsigned long long)at);
	default:
		return mf_error(p->mf, _("metadata key at byte %llu contains a NUL byte"),
				(unsigned long long)at);
	}
}

/* general.alignment: the spec makes it a UINT32, and the data section and
 * every tensor's offset are multiples of it. */
static int read_alignment(struct parse *p, uint32_t type, uint64_t type_at, struct cjson *j)
{
	struct cursor *c = &p->c;
	uint64_t at;
	uint32_t v;
	int rc;

	if (type != GGUF_UINT32)
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: the alignment must be a UINT32 "
				  "(type 4), not type %u"),
				c->name, (unsigned long long)type_at, type);
	at = c->pos;
	if ((rc = cur_u32(c, &v)))
		return rc;
	if (v == 0 || (v & (v - 1)) != 0)
		return mf_error(p->mf,
				_("metadata key '%s' at byte %llu: the alignment %u is not a power "
				  "of two"),
				c->name, (unsigned long long)at, (unsigned)v);
	p->mf->alignment = v;
	rc = cjson_put_value(j, json_scalar(&p->json, GGUF_UINT32, v), JSON_ROOM);
	return rc == 1 ? 0 : rc;
}

static int read_kv(struct parse *p, uint64_t index)
{
	struct cursor *c = &p->c;
	uint64_t key_at = c->pos, type_at, len;
	enum name_error fault;
	struct cjson j = {0};
	uint32_t type;
	size_t *slot;
	char *key;
	int rc;

	c->what = W_KEY;
	c->index = index;
	c->name = NULL;
	if ((rc = read_name(p, &key, &len, &fault)))
		return rc;
	if (fault)
		return key_error(p, fault, key_at, len);
	if ((p->mf->n_meta + 1) * 2 > p->keys_cap && (rc = keys_grow(p)))
		goto err;
	slot = key_slot(p, key);
	if (*slot) {
		rc = mf_error(p->mf, _("metadata key '%s' appears twice (again at byte %llu)"), key,
			      (unsigned long long)key_at);
		goto err;
	}
	c->what = W_VALUE;
	c->name = key;
	type_at = c->pos;
	if ((rc = cur_u32(c, &type)))
		goto err;
	if (type >= GGUF_NTYPES) {
		rc = mf_error(p->mf, _("metadata key '%s' at byte %llu: value type %u is unknown"),
			      key, (unsigned long long)type_at, type);
		goto err;
	}
	if (strcmp(key, "general.alignment") == 0) {
		if ((rc = read_alignment(p, type, type_at, &j)))
			goto err;
	} else {
		bool shown = false;

		if ((rc = read_value(p, type, 0, &j, true, &shown)))
			goto err;
		/* The text grew by doubling; keep only what it holds. */
		char *fit = realloc(j.p, j.len + 1);
		if (fit)
			j.p = fit;
	}
	c->name = NULL;
	if ((rc = mf_add_meta(p->mf, key, j.p)))
		return rc;
	*slot = p->mf->n_meta;
	return 0;
err:
	c->name = NULL;
	free(key);
	free(j.p);
	return rc;
}

/* ---- tensor infos ------------------------------------------------------------ */

static int tensor_name_error(struct parse *p, enum name_error fault, uint64_t index, uint64_t at,
			     uint64_t len)
{
	unsigned long long i = index, a = at;

	switch (fault) {
	case NAME_EMPTY:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name is empty"), i, a);
	case NAME_TOO_LONG:
		return mf_error(p->mf,
				_("tensor %llu at byte %llu: the name is %llu bytes long, more than "
				  "the %u allowed"),
				i, a, (unsigned long long)len, MF_MAX_NAME);
	case NAME_BAD_UTF8:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name is not valid UTF-8"), i,
				a);
	default:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name contains a NUL byte"),
				i, a);
	}
}

/* Bytes for the shape, as ggml_nbytes counts them for a contiguous tensor:
 * whole blocks along ne[0], then the other dimensions. */
static int tensor_size(struct parse *p, struct mf_tensor *t, const struct ggml_type_info *ti)
{
	uint64_t elems = 1, size;

	/* ggml holds dimensions and the element count in int64_t. */
	for (uint32_t i = 0; i < t->n_dims; i++)
		if (__builtin_mul_overflow(elems, t->shape[i], &elems) || elems > INT64_MAX)
			goto overflow;
	if (t->shape[0] % ti->blck)
		return mf_error(p->mf,
				_("tensor '%s': its first dimension %llu is not a multiple of the "
				  "%s block size %u"),
				t->name, (unsigned long long)t->shape[0], ti->name,
				(unsigned)ti->blck);
	size = t->shape[0] / ti->blck;
	if (__builtin_mul_overflow(size, (uint64_t)ti->size, &size))
		goto overflow;
	for (uint32_t i = 1; i < t->n_dims; i++)
		if (__builtin_mul_overflow(size, t->shape[i], &size))
			goto overflow;
	t->size = size;
	return 0;
overflow:
	return mf_error(p->mf, _("tensor '%s': its element count or size overflows 64 bits"),
			t->name);
}

static int read_tensor_info(struct parse *p, uint64_t index)
{
	struct cursor *c = &p->c;
	uint64_t at = c->pos, len;
	const struct ggml_type_info *ti;
	enum name_error fault;
	struct mf_tensor *t;
	uint32_t n_dims, type;
	char *name;
	int rc;

	c->what = W_TENSOR_NAME;
	c->index = index;
	c->name = NULL;
	if ((rc = read_name(p, &name, &len, &fault)))
		return rc;
	if (fault)
		return tensor_name_error(p, fault, index, at, len);
	/* It fails only for memory: the count was held to MF_MAX_TENSORS. */
	if (!(t = mf_add_tensor(p->mf, name)))
		return DEVCACHE_ENOMEM;
	c->what = W_TENSOR;
	c->name = t->name;
	if ((rc = cur_u32(c, &n_dims)))
		return rc;
	/* ggml's own reader takes 1 to GGML_MAX_DIMS (4). */
	if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
		return mf_error(p->mf, _("tensor '%s': %u dimensions (only 1 to 4)"), t->name,
				(unsigned)n_dims);
	t->n_dims = n_dims;
	/* A dimension of 0 is allowed, as ggml allows it: an empty tensor of
	 * no bytes (ggml rejects only negative ones, which here are past
	 * INT64_MAX). */
	for (uint32_t i = 0; i < n_dims; i++) {
		if ((rc = cur_u64(c, &t->shape[i])))
			return rc;
		if (t->shape[i] > INT64_MAX)
			return mf_error(p->mf,
					_("tensor '%s': dimension %u is %llu, more than ggml can hold"),
					t->name, (unsigned)i, (unsigned long long)t->shape[i]);
	}
	if ((rc = cur_u32(c, &type)) || (rc = cur_u64(c, &t->offset)))
		return rc;
	ti = type < N_GGML_TYPES ? &ggml_types[type] : NULL;
	if (!ti || !ti->name)
		return mf_error(p->mf, _("tensor '%s': type %u is not a ggml type this reader knows"),
				t->name, (unsigned)type);
	if (!ti->blck)
		return mf_error(p->mf,
				_("tensor '%s': type %u (%s) has been removed from GGUF files"),
				t->name, (unsigned)type, ti->name);
	t->type = type;
	t->dtype = ti->name;
	c->name = NULL;
	return tensor_size(p, t, ti);
}

/* Offsets are read relative to the data section, which starts only after
 * the last tensor info: they are checked, and made absolute, here. */
static int place_tensors(struct parse *p)
{
	struct devcache_model_file *mf = p->mf;
	uint64_t a = mf->alignment;

	/* No overflow: pos is within the file (an off_t), a at most 2^31. */
	mf->data_offset = (p->c.pos + a - 1) / a * a;
	for (size_t i = 0; i < mf->n_tensors; i++) {
		struct mf_tensor *t = &mf->tensors[i];
		uint64_t start, end;

		if (t->offset % a)
			return mf_error(mf, _("tensor '%s': offset %llu is not a multiple of the "
					      "alignment %llu"),
					t->name, (unsigned long long)t->offset, (unsigned long long)a);
		if (__builtin_add_overflow(mf->data_offset, t->offset, &start) ||
		    __builtin_add_overflow(start, t->size, &end) || end > mf->size)
			return mf_error(mf,
					_("tensor '%s': its %llu bytes at data offset %llu run past "
					  "the end of the %llu-byte file (the data starts at byte %llu)"),
					t->name, (unsigned long long)t->size,
					(unsigned long long)t->offset, (unsigned long long)mf->size,
					(unsigned long long)mf->data_offset);
		t->offset = start;
	}
	return 0;
}

struct span {
	uint64_t start, end;
	size_t index;
};

static int by_start(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return a->start < b->start ? -1 : a->start > b->start;
}

/* Two tensors sharing bytes would be two views of one buffer, which a
 * loader copying each to its own device memory cannot honour. */
static int check_overlaps(struct parse *p)
{
	struct devcache_model_file *mf = p->mf;
	struct span *s, far = {0, 0, 0};
	size_t n = 0;
	int rc = 0;

	if (mf->n_tensors < 2)
		return 0;
	if (!(s = malloc(mf->n_tensors * sizeof *s)))
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	/* An empty tensor holds no bytes, so it overlaps nothing. */
	for (size_t i = 0; i < mf->n_tensors; i++)
		if (mf->tensors[i].size)
			s[n++] = (struct span){mf->tensors[i].offset,
					       mf->tensors[i].offset + mf->tensors[i].size, i};
	qsort(s, n, sizeof *s, by_start);
	for (size_t i = 0; i < n && !rc; i++) {
		if (i && s[i].start < far.end) {
			const struct mf_tensor *a = &mf->tensors[far.index], *b = &mf->tensors[s[i].index];

			rc = mf_error(mf,
				      _("tensors '%s' and '%s' overlap (bytes %llu to %llu and %llu to "
					"%llu)"),
				      a->name, b->name, (unsigned long long)far.start,
				      (unsigned long long)far.end, (unsigned long long)s[i].start,
				      (unsigned long long)s[i].end);
		}
		if (s[i].end > far.end)
			far = s[i];
	}
	free(s);
	return rc;
}

/* ---- the header ---------------------------------------------------------------- */

static int read_header(struct parse *p, uint64_t *n_tensors_p, uint64_t *n_kv_p)
{
	struct devcache_model_file *mf = p->mf;
	struct cursor *c = &p->c;
	unsigned char magic[4];
	uint64_t nt, nkv, room;
	uint32_t version;
	int rc;

	c->what = W_HEADER;
	/* The magic was matched by the caller. */
	if ((rc = cur_read(c, magic, sizeof magic)) || (rc = cur_u32(c, &version)))
		return rc;
	if (version != 2 && version != 3) {
		uint32_t swapped = __builtin_bswap32(version);

		if (swapped == 2 || swapped == 3)
			return mf_error(mf, _("GGUF version %u is version %u byte-swapped: "
					      "big-endian files are not supported"),
					(unsigned)version, (unsigned)swapped);
		return mf_error(mf, _("GGUF version %u is not supported (only 2 and 3)"),
				(unsigned)version);
	}
	mf->version = version;
	if ((rc = cur_u64(c, &nt)) || (rc = cur_u64(c, &nkv)))
		return rc;
	/* Every count is held to what the file could hold, and to the hard
	 * limits, before anything is allocated or looped over. */
	room = mf->size - GGUF_HEADER_SIZE;
	if (nt > room / GGUF_MIN_TENSOR_INFO)
		return mf_error(mf, _("tensor count %llu cannot fit in a %llu-byte file"),
				(unsigned long long)nt, (unsigned long long)mf->size);
	if (nkv > room / GGUF_MIN_KV)
		return mf_error(mf, _("metadata count %llu cannot fit in a %llu-byte file"),
				(unsigned long long)nkv, (unsigned long long)mf->size);
	if (nt > MF_MAX_TENSORS)
		return mf_error(mf, _("tensor count %llu is more than the %u this reader accepts"),
				(unsigned long long)nt, MF_MAX_TENSORS);
	if (nkv > MF_MAX_METADATA)
		return mf_error(mf, _("metadata count %llu is more than the %u this reader accepts"),
				(unsigned long long)nkv, MF_MAX_METADATA);
	if (nt * GGUF_MIN_TENSOR_INFO + nkv * GGUF_MIN_KV > room)
		return mf_error(mf,
				_("%llu metadata entries and %llu tensors cannot fit in a %llu-byte "
				  "file"),
				(unsigned long long)nkv, (unsigned long long)nt,
				(unsigned long long)mf->size);
	*n_tensors_p = nt;
	*n_kv_p = nkv;
	return 0;
}

int gguf_parse(struct devcache_model_file *mf)
{
	uint64_t n_tensors = 0, n_kv = 0;
	struct parse *p;
	int rc;

	if (!(p = calloc(1, sizeof *p)))
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	p->mf = mf;
	p->c.mf = mf;
	mf->alignment = GGUF_DEFAULT_ALIGNMENT;
	if ((rc = jreuse_init(&p->json)) || (rc = read_header(p, &n_tensors, &n_kv)))
		goto out;
	for (uint64_t i = 0; i < n_kv && !rc; i++)
		rc = read_kv(p, i);
	if (rc)
		goto out;
	/* Counted again now that the metadata's true length is known. */
	if (n_tensors > cur_left(&p->c) / GGUF_MIN_TENSOR_INFO) {
		rc = mf_error(mf,
			      _("tensor count %llu cannot fit in the %llu bytes left after the "
				"metadata (from byte %llu)"),
			      (unsigned long long)n_tensors, (unsigned long long)cur_left(&p->c),
			      (unsigned long long)p->c.pos);
		goto out;
	}
	for (uint64_t i = 0; i < n_tensors && !rc; i++)
		rc = read_tensor_info(p, i);
	if (!rc)
		rc = place_tensors(p);
	if (!rc)
		rc = check_overlaps(p);
out:
	jreuse_free(&p->json);
	free(p->scratch);
	free(p->keys);
	free(p);
	return rc;
}
