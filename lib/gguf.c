/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf.c - the GGUF header reader: the buffered cursor, names, the header and the order of the parse. */
#include "gguf.h"

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
 *
 * The files: gguf.c the cursor, names, the header and gguf_parse();
 * gguf-meta.c the metadata entries and their values, written as JSON
 * through gguf-json.c; gguf-tensors.c the tensor infos, checked against
 * ggml's type table and placed in the data section.
 */

#define GGUF_HEADER_SIZE 24u
/* key length, a one-byte key, the value type, a one-byte value */
#define GGUF_MIN_KV (8u + 1u + 4u + 1u)
/* name length, a one-byte name, n_dims, one dimension, type, offset */
#define GGUF_MIN_TENSOR_INFO (8u + 1u + 4u + 8u + 4u + 8u)
#define GGUF_DEFAULT_ALIGNMENT 32u

/* ---- a buffered cursor over mf_read ---------------------------------------- */

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

/* Reading straight through mf_read: it checks the bounds and words the
 * error the same way for every reader of model files. */
static int cur_read_direct(struct cursor *c, void *dst, size_t len, uint64_t off)
{
	char what[512];

	cur_describe(c, what, sizeof what);
	return mf_read(c->mf, dst, len, off, what);
}

int cur_read_slow(struct cursor *c, void *dst, size_t len)
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

int cur_skip(struct cursor *c, uint64_t len)
{
	if (len > cur_left(c)) {
		unsigned char none;

		/* mf_read refuses before it reads, so one byte of room will do. */
		return cur_read_direct(c, &none, (size_t)len, c->pos);
	}
	c->pos += len;
	return 0;
}

/* ---- names: UTF-8 text ------------------------------------------------------- */

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

int read_name(struct parse *p, char **name_p, uint64_t *len_p, enum name_error *fault_p)
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
		return err_oom();
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
		return err_oom();
	p->mf = mf;
	p->c.mf = mf;
	mf->alignment = GGUF_DEFAULT_ALIGNMENT;
	if ((rc = json_scratch_init(&p->json)) || (rc = read_header(p, &n_tensors, &n_kv)))
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
	json_scratch_free(&p->json);
	free(p->scratch);
	free(p->top.str);
	free(p->keys);
	free(p);
	return rc;
}
