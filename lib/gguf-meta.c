/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-meta.c - GGUF metadata: each key checked and kept once, each value checked and kept as JSON text. */
#include "gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Every count in a value is held to the bytes left in the file before
 * anything is looped over or allocated, so a count that lies costs
 * nothing.  A value's JSON text (gguf-json.h) takes elements while they
 * fit; past that they are still read and checked, and the text says how
 * many it left out.  Keys are found through an open-addressing table of
 * indexes into mf->meta, so a key that appears twice is refused.
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

static const char *const vtype_name[GGUF_NTYPES] = {
	[GGUF_UINT8] = "UINT8",     [GGUF_INT8] = "INT8",     [GGUF_UINT16] = "UINT16",
	[GGUF_INT16] = "INT16",     [GGUF_UINT32] = "UINT32", [GGUF_INT32] = "INT32",
	[GGUF_FLOAT32] = "FLOAT32", [GGUF_BOOL] = "BOOL",     [GGUF_STRING] = "STRING",
	[GGUF_ARRAY] = "ARRAY",     [GGUF_UINT64] = "UINT64", [GGUF_INT64] = "INT64",
	[GGUF_FLOAT64] = "FLOAT64",
};

/* ---- metadata values --------------------------------------------------------- */

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
			return err_oom();
		p->scratch = s;
		p->scratch_cap = cap;
	}
	return cur_read(&p->c, p->scratch, len);
}

static int read_value(struct parse *p, uint32_t type, unsigned depth, struct meta_text *j, bool show,
		      bool *shown_p);

static int read_string_value(struct parse *p, unsigned depth, struct meta_text *j, bool show,
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
	if (depth == 0) {
		if (!(p->top.str = malloc((size_t)len + 1)))
			return err_oom();
		if (len)
			memcpy(p->top.str, p->scratch, (size_t)len);
		p->top.str[len] = '\0';
		p->top.len = len;
	}
	if (j->len + 2 > JSON_ROOM) {
		j->full = true;
		return 0;
	}
	if ((rc = meta_text_put_value(j, json_scratch_string(&p->json, p->scratch, (size_t)len, NULL), JSON_ROOM)) != 0) {
		*shown_p = rc == 1;
		return rc == 1 ? 0 : rc;
	}
	if (depth > 0) {
		/* In an array an element goes whole or not at all. */
		j->full = true;
		return 0;
	}
	return meta_text_put_cut_string(&p->json, j, p->scratch, (size_t)len, shown_p);
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

static int read_array(struct parse *p, unsigned depth, struct meta_text *j, bool show, bool *shown_p)
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
	if (depth == 0) {
		p->top.elem = type;
		p->top.count = count;
		p->top.at = c->pos;
	}
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
	if ((rc = meta_text_put(j, "[", 1)))
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
		if (!ready && (rc = meta_text_put(j, ",", 1)))
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
		if ((!ready && (rc = meta_text_put(j, ",", 1))) ||
		    (rc = meta_text_put_new(j, json_object_new_string(more), SIZE_MAX)) < 0)
			return rc;
	}
	return meta_text_put(j, "]", 1);
}

/* A scalar in its json-c object (NULL when memory ran out); v holds its
 * bits, zero-extended. */
static struct json_object *json_scalar(struct json_scratch *r, uint32_t type, uint64_t v)
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
static int read_value(struct parse *p, uint32_t type, unsigned depth, struct meta_text *j, bool show,
		      bool *shown_p)
{
	struct cursor *c = &p->c;
	uint64_t at = c->pos, v = 0;
	uint32_t u32 = 0;
	uint16_t u16 = 0;
	uint8_t u8 = 0;
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
	if (depth == 0)
		p->top.v = v;
	if (!show)
		return 0;
	if ((rc = meta_text_put_value(j, json_scalar(&p->json, type, v), JSON_ROOM)) == 0)
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
		return err_oom();
	}
	p->keys_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			*key_slot(p, p->mf->meta[old[i] - 1].key) = old[i];
	free(old);
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
static int read_alignment(struct parse *p, uint32_t type, uint64_t type_at, struct meta_text *j)
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
	p->top.v = v;
	rc = meta_text_put_value(j, json_scalar(&p->json, GGUF_UINT32, v), JSON_ROOM);
	return rc == 1 ? 0 : rc;
}

/* The keys of a split count shards and tensors: llama.cpp reads them as
 * integers and refuses the file when they are not, so a count stored as a
 * float (1.0 written as "1") is refused here too, whatever its value. */
static int check_split_key(struct parse *p, const char *key, uint32_t type, uint64_t type_at)
{
	static const char *const keys[] = {"split.no", "split.count", "split.tensors.count"};

	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		if (strcmp(key, keys[i]) == 0 && type > GGUF_INT32 && type != GGUF_UINT64 &&
		    type != GGUF_INT64)
			return mf_error(p->mf,
					_("metadata key '%s' at byte %llu: a count of a GGUF split "
					  "must be an integer, not type %u (%s)"),
					key, (unsigned long long)type_at, type, vtype_name[type]);
	return 0;
}

/* The value just read, typed, into its entry (model-meta.c reads it). */
static void keep_typed(struct parse *p, struct mf_meta *m, uint32_t type)
{
	uint64_t v = p->top.v;

	m->type = type;
	m->count = 1;
	switch (type) {
	case GGUF_STRING:
		m->str = p->top.str;
		m->count = p->top.len;
		p->top.str = NULL;
		break;
	case GGUF_ARRAY:
		m->elem = p->top.elem;
		m->count = p->top.count;
		m->at = p->top.at;
		break;
	case GGUF_INT8:
		m->v.i = (int8_t)v;
		break;
	case GGUF_INT16:
		m->v.i = (int16_t)v;
		break;
	case GGUF_INT32:
		m->v.i = (int32_t)v;
		break;
	case GGUF_INT64:
		m->v.i = (int64_t)v;
		break;
	case GGUF_FLOAT32: {
		uint32_t bits = (uint32_t)v;
		float f;

		memcpy(&f, &bits, sizeof f);
		m->v.f = f;
		break;
	}
	case GGUF_FLOAT64:
		memcpy(&m->v.f, &v, sizeof m->v.f);
		break;
	default: /* the unsigned types, BOOL */
		m->v.u = v;
		break;
	}
}

int read_kv(struct parse *p, uint64_t index)
{
	struct cursor *c = &p->c;
	uint64_t key_at = c->pos, type_at, len;
	enum name_error fault;
	struct meta_text j = {0};
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
	if ((rc = check_split_key(p, key, type, type_at)))
		goto err;
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
		goto out;
	*slot = p->mf->n_meta;
	keep_typed(p, &p->mf->meta[p->mf->n_meta - 1], type);
	return 0;
err:
	c->name = NULL;
	free(key);
	free(j.p);
out:
	free(p->top.str);
	p->top.str = NULL;
	return rc;
}
