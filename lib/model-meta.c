/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-meta.c - metadata by key, with typed values: GGUF's scalars and arrays, safetensors' strings. */
#include "model-file.h"

#include <stdlib.h>
#include <string.h>

/*
 * The readers keep each value typed beside its JSON text (struct mf_meta):
 * a scalar's value, a string's bytes, an array's element type, length and
 * where its first element is in the file.  Arrays are not kept: a
 * vocabulary of 256k strings would cost its size again in memory, so
 * devcache_model_file_get_array() and _get_strings() read them from the
 * file (pread, which a shared model file allows from several threads).
 * Keys are found through meta_by_key, sorted once after the file is
 * opened; a file that has no index (a part of a set) is searched in turn.
 */

#define META_READ_CHUNK ((size_t)1 << 16)

static const char *const type_names[] = {
	"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
	"BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

static const unsigned char elem_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const char *type_name(uint32_t type)
{
	return type < sizeof type_names / sizeof *type_names ? type_names[type] : "JSON";
}

static int by_key(const void *x, const void *y, void *arg)
{
	const struct mf_meta *meta = arg;

	return strcmp(meta[*(const size_t *)x].key, meta[*(const size_t *)y].key);
}

int mf_index_meta(struct devcache_model_file *mf)
{
	if (!mf->n_meta || mf->meta_by_key)
		return 0;
	if (!(mf->meta_by_key = malloc(mf->n_meta * sizeof *mf->meta_by_key)))
		return err_oom();
	for (size_t i = 0; i < mf->n_meta; i++)
		mf->meta_by_key[i] = i;
	qsort_r(mf->meta_by_key, mf->n_meta, sizeof *mf->meta_by_key, by_key, mf->meta);
	return 0;
}

static long find_key(const struct devcache_model_file *mf, const char *key)
{
	if (!mf->meta_by_key) {
		for (size_t i = 0; i < mf->n_meta; i++)
			if (strcmp(mf->meta[i].key, key) == 0)
				return (long)i;
		return -1;
	}
	size_t lo = 0, hi = mf->n_meta;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(mf->meta[mf->meta_by_key[mid]].key, key);

		if (c == 0)
			return (long)mf->meta_by_key[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* The entry of key, or an error naming the call, the file and the key. */
static int lookup(const devcache_model_file_t *mf, const char *key, const void *out,
		  const char *fn, const struct mf_meta **m_p)
{
	long i;

	*m_p = NULL;
	if (!mf || !key || !out)
		return err_set(DEVCACHE_EINVAL, _("%s: NULL argument"), fn);
	if ((i = find_key(mf, key)) < 0)
		return err_set(DEVCACHE_ENOENT, _("%s: no metadata key '%s'"), mf->path, key);
	*m_p = &mf->meta[i];
	return 0;
}

static int wrong_type(const devcache_model_file_t *mf, const struct mf_meta *m, const char *want)
{
	return err_set(DEVCACHE_ETYPE, _("%s: metadata key '%s' is %s, not %s"), mf->path, m->key,
		       type_name(m->type), want);
}

static bool is_signed(uint32_t t)
{
	return t == DEVCACHE_META_INT8 || t == DEVCACHE_META_INT16 || t == DEVCACHE_META_INT32 ||
	       t == DEVCACHE_META_INT64;
}

static bool is_unsigned(uint32_t t)
{
	return t == DEVCACHE_META_UINT8 || t == DEVCACHE_META_UINT16 ||
	       t == DEVCACHE_META_UINT32 || t == DEVCACHE_META_UINT64;
}

int devcache_model_file_metadata_find(const devcache_model_file_t *mf, const char *key,
				      size_t *index_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, index_p, "devcache_model_file_metadata_find", &m);

	if (rc == 0)
		*index_p = (size_t)(m - mf->meta);
	return rc;
}

int devcache_model_file_metadata_type(const devcache_model_file_t *mf, const char *key,
				      enum devcache_meta_type *type_p,
				      enum devcache_meta_type *elem_type_p, uint64_t *count_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, type_p, "devcache_model_file_metadata_type", &m);

	if (rc)
		return rc;
	if (m->type == MF_META_JSON)
		return err_set(DEVCACHE_ETYPE,
			       _("%s: metadata key '%s' has only JSON text (an object, an array "
				 "or null)"),
			       mf->path, key);
	*type_p = (enum devcache_meta_type)m->type;
	if (elem_type_p)
		*elem_type_p = (enum devcache_meta_type)m->elem;
	if (count_p)
		*count_p = m->count;
	return 0;
}

int devcache_model_file_get_string(const devcache_model_file_t *mf, const char *key,
				   const char **value_p, size_t *len_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, value_p, "devcache_model_file_get_string", &m);

	if (rc)
		return rc;
	if (m->type != DEVCACHE_META_STRING)
		return wrong_type(mf, m, "STRING");
	*value_p = m->str ? m->str : "";
	if (len_p)
		*len_p = (size_t)m->count;
	return 0;
}

int devcache_model_file_get_int(const devcache_model_file_t *mf, const char *key, int64_t *value_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, value_p, "devcache_model_file_get_int", &m);

	if (rc)
		return rc;
	if (is_signed(m->type))
		*value_p = m->v.i;
	else if (is_unsigned(m->type) && m->v.u <= INT64_MAX)
		*value_p = (int64_t)m->v.u;
	else if (is_unsigned(m->type))
		return err_set(DEVCACHE_ETYPE,
			       _("%s: metadata key '%s' is %llu, more than an int64_t holds"),
			       mf->path, key, (unsigned long long)m->v.u);
	else
		return wrong_type(mf, m, _("an integer"));
	return 0;
}

int devcache_model_file_get_uint(const devcache_model_file_t *mf, const char *key,
				 uint64_t *value_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, value_p, "devcache_model_file_get_uint", &m);

	if (rc)
		return rc;
	if (is_unsigned(m->type))
		*value_p = m->v.u;
	else if (is_signed(m->type) && m->v.i >= 0)
		*value_p = (uint64_t)m->v.i;
	else if (is_signed(m->type))
		return err_set(DEVCACHE_ETYPE, _("%s: metadata key '%s' is %lld, below 0"), mf->path,
			       key, (long long)m->v.i);
	else
		return wrong_type(mf, m, _("an integer"));
	return 0;
}

int devcache_model_file_get_float(const devcache_model_file_t *mf, const char *key,
				  double *value_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, value_p, "devcache_model_file_get_float", &m);

	if (rc)
		return rc;
	if (m->type != DEVCACHE_META_FLOAT32 && m->type != DEVCACHE_META_FLOAT64)
		return wrong_type(mf, m, "FLOAT32 or FLOAT64");
	*value_p = m->v.f;
	return 0;
}

int devcache_model_file_get_bool(const devcache_model_file_t *mf, const char *key, int *value_p)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, value_p, "devcache_model_file_get_bool", &m);

	if (rc)
		return rc;
	if (m->type != DEVCACHE_META_BOOL)
		return wrong_type(mf, m, "BOOL");
	*value_p = m->v.u != 0;
	return 0;
}

/* An array entry, with an error for anything else. */
static int array_of(const devcache_model_file_t *mf, const struct mf_meta *m)
{
	if (m->type != DEVCACHE_META_ARRAY)
		return wrong_type(mf, m, "ARRAY");
	return 0;
}

static void decode(uint32_t type, const unsigned char *b, void *dst)
{
	uint64_t v = 0;
	unsigned n = elem_size[type];

	for (unsigned k = n; k-- > 0;)
		v = v << 8 | b[k];
	switch (n) {
	case 1: {
		uint8_t x = (uint8_t)v;
		memcpy(dst, &x, 1);
		break;
	}
	case 2: {
		uint16_t x = (uint16_t)v;
		memcpy(dst, &x, 2);
		break;
	}
	case 4: {
		uint32_t x = (uint32_t)v;
		memcpy(dst, &x, 4);
		break;
	}
	default:
		memcpy(dst, &v, 8);
		break;
	}
}

int devcache_model_file_get_array(const devcache_model_file_t *mf, const char *key,
				  enum devcache_meta_type elem_type, uint64_t first, uint64_t count,
				  void *dst)
{
	const struct mf_meta *m;
	unsigned char *buf;
	int rc = lookup(mf, key, dst, "devcache_model_file_get_array", &m);

	if (rc || (rc = array_of(mf, m)))
		return rc;
	if ((uint32_t)elem_type != m->elem || m->elem >= sizeof elem_size || !elem_size[m->elem])
		return err_set(DEVCACHE_ETYPE,
			       _("%s: metadata key '%s' is an array of %s, not of %s"), mf->path,
			       key, type_name(m->elem), type_name((uint32_t)elem_type));
	if (first > m->count || count > m->count - first)
		return err_set(DEVCACHE_EINVAL,
			       _("%s: metadata key '%s': elements %llu to %llu asked of an array of "
				 "%llu"),
			       mf->path, key, (unsigned long long)first,
			       (unsigned long long)(first + count), (unsigned long long)m->count);
	unsigned size = elem_size[m->elem];
	if (!(buf = malloc(META_READ_CHUNK)))
		return err_oom();
	for (uint64_t done = 0; rc == 0 && done < count;) {
		uint64_t n = count - done < META_READ_CHUNK / size ? count - done
								    : META_READ_CHUNK / size;

		rc = mf_read(m->src, buf, (size_t)(n * size), m->at + (first + done) * size,
			     _("a metadata array"));
		for (uint64_t k = 0; rc == 0 && k < n; k++)
			decode(m->elem, buf + k * size, (char *)dst + (done + k) * size);
		done += n;
	}
	free(buf);
	return rc;
}

/* The next string of an array read through a window of the file. */
struct str_reader {
	const struct devcache_model_file *f;
	uint64_t pos;
	char *s;
	size_t cap;
};

static int next_string(struct str_reader *r, size_t *len_p)
{
	unsigned char b[8];
	uint64_t len = 0;
	int rc;

	if ((rc = mf_read(r->f, b, 8, r->pos, _("a metadata array"))))
		return rc;
	for (int k = 7; k >= 0; k--)
		len = len << 8 | b[k];
	/* The reader checked every length when it opened the file: another
	 * is a file written over since. */
	if (len > MF_MAX_STRING)
		return mf_error(r->f,
				_("a string of %llu bytes in a metadata array: the file changed "
				  "since it was opened"),
				(unsigned long long)len);
	if (len + 1 > r->cap) {
		char *s = realloc(r->s, (size_t)len + 1);

		if (!s)
			return err_oom();
		r->s = s;
		r->cap = (size_t)len + 1;
	}
	if (len && (rc = mf_read(r->f, r->s, (size_t)len, r->pos + 8, _("a metadata array"))))
		return rc;
	r->s[len] = '\0';
	r->pos += 8 + len;
	*len_p = (size_t)len;
	return 0;
}

int devcache_model_file_get_strings(const devcache_model_file_t *mf, const char *key,
				    devcache_meta_string_fn fn, void *user)
{
	const struct mf_meta *m;
	int rc = lookup(mf, key, fn ? key : NULL, "devcache_model_file_get_strings", &m);

	if (rc || (rc = array_of(mf, m)))
		return rc;
	if (m->elem != DEVCACHE_META_STRING)
		return err_set(DEVCACHE_ETYPE,
			       _("%s: metadata key '%s' is an array of %s, not of %s"), mf->path,
			       key, type_name(m->elem), "STRING");
	struct str_reader r = {.f = m->src, .pos = m->at};
	for (uint64_t i = 0; rc == 0 && i < m->count; i++) {
		size_t len = 0;

		if ((rc = next_string(&r, &len)) == 0 && fn(user, i, r.s, len))
			rc = err_set(DEVCACHE_ECANCELED, _("%s: metadata key '%s': stopped at element %llu"),
				     mf->path, key, (unsigned long long)i);
	}
	free(r.s);
	return rc;
}
