/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* safetensors.c - the safetensors reader: every rule of the reference reader, checked before the header is trusted. */
#include "safetensors.h"
#include "dtype.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/*
 * A safetensors file is a little-endian u64 n, n bytes of JSON text (the
 * header: one object, a tensor's dtype, shape and data_offsets by its
 * name, and an optional __metadata__ of strings), then the data section.
 * safetensors_parse() takes these steps, each on what the one before has
 * passed:
 *
 *   1. read_header(): n checked against the limit and the file before
 *      any memory is asked for, then the text read whole;
 *   2. the text checked as UTF-8;
 *   3. scan_header() (safetensors-scan.c): the first pass, all of the
 *      text checked as JSON, each key given once;
 *   4. walk_header(): the second pass, each entry read into the model;
 *   5. check_layout(): the tensors tile the data section;
 *   6. sorted_names(): the index by name, from the order the scan found.
 *
 * The header is read in two passes over its text, and neither builds a
 * tree of it.  json-c's parser used to read the whole header into one
 * (json-c objects cost about 650 bytes each), so that 10 MB of "{}" took
 * 2.6 GB and 11 s before it was refused, and a valid header of 1,000,000
 * tensors 1.8 GB and 13 s.  The grammar of a header is fixed and small, so
 * the reader walks the text itself and keeps only what the model keeps.
 *
 * The second pass (below, "the entries") reads each entry into the model
 * from the checked text: it walks only text the scan has passed, so a
 * fault of the JSON itself is never its to find.  json-c still writes the
 * JSON text of metadata values and of a bad value a message shows, one
 * small value at a time.
 *
 * The files: safetensors.c the steps, the entries and the data section;
 * safetensors-scan.c the first pass; safetensors.h what the two share.
 */

/* The dtypes of the reference reader (huggingface safetensors 0.6 and
 * later) are lib/dtype.c's with DEVCACHE_DTYPE_SAFETENSORS: F4 and the two
 * F6 are packed, so a tensor of them must fill whole bytes. */

/* For the message that rejects an unknown dtype. */
static const char st_dtype_list[] =
	"F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, C64, F8_E5M2, "
	"F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F6_E2M3, F6_E3M2 and F4";

/* json-c keeps strings with their length: a dtype with a NUL in it must
 * not pass for the dtype before the NUL (dtype_safetensors compares len
 * bytes). */
static const struct dtype_desc *find_dtype(const char *s, size_t len)
{
	return dtype_safetensors(s, len);
}

/* A dtype's width in bits, which the reference counts sizes in. */
static unsigned dtype_bits(const struct dtype_desc *dt)
{
	return dt->bytes * 8 / dt->blck;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
/* ---- the entries -------------------------------------------------------------- */

/* The text has passed the scan: the second pass only walks it. */
struct st_walk {
	struct devcache_model_file *mf;
	struct st_scan sc; /* for scan_string()'s decoding */
	const char *s;
};

static size_t skip_ws(const char *s, size_t i)
{
	while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
		i++;
	return i;
}

/* The index just past the value at s[i]. */
/* What ends a number, true, false or null. */
static bool ends_word(char c)
{
	return c == ',' || c == ']' || c == '}' || c == ':' || c == ' ' || c == '\t' || c == '\n' ||
	       c == '\r' || c == '\0';
}

static size_t skip_value(const char *s, size_t i)
{
	size_t depth = 0;

	do {
		if (s[i] == '"') {
			for (i++; s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
			i++;
		} else if (s[i] == '{' || s[i] == '[') {
			depth++;
			i++;
		} else if (s[i] == '}' || s[i] == ']') {
			depth--;
			i++;
		} else if (depth) {
			i++;
		} else {
			while (!ends_word(s[i]))
				i++;
		}
	} while (depth);
	return i;
}

/* The value s[b..e) as json-c writes it, for a message: one small value
 * parsed alone; a long one is cut. */
static const char *value_text(const char *s, size_t b, size_t e, char *buf, size_t size)
{
	struct json_object *v = NULL;
	char small[4096];

	if (e - b < sizeof small) {
		memcpy(small, s + b, e - b);
		small[e - b] = '\0';
		v = json_tokener_parse(small);
	}
	if (v || (e - b == 4 && memcmp(s + b, "null", 4) == 0)) /* json-c's null is NULL */
		snprintf(buf, size, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	else
		snprintf(buf, size, "%.*s...", (int)(e - b < 64 ? e - b : 64), s + b);
	json_object_put(v);
	return buf;
}

/* A JSON integer from 0 to 2^64 - 1 at s[i] (the scan has refused one
 * past that); -0 is 0, as json-c reads it. */
static bool get_count(const char *s, size_t i, uint64_t *n)
{
	bool neg = s[i] == '-', zero = true;
	uint64_t v = 0;

	if (neg)
		i++;
	if (!digit((unsigned char)s[i]))
		return false;
	for (; digit((unsigned char)s[i]); i++) {
		v = v * 10 + (uint64_t)(s[i] - '0');
		zero = zero && s[i] == '0';
	}
	if (s[i] == '.' || s[i] == 'e' || s[i] == 'E' || (neg && !zero))
		return false;
	*n = v;
	return true;
}

static void format_shape(char *buf, size_t size, const uint64_t *shape, unsigned n_dims)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < n_dims && used < size; i++) {
		int k = snprintf(buf + used, size - used, "%s%llu", i ? ", " : "",
				 (unsigned long long)shape[i]);

		if (k < 0)
			break;
		used += (size_t)k;
	}
}

/* The string at s[i] when it holds no escape: its text (len_p bytes, not
 * NUL-terminated), else NULL; *end is its closing quote's index. */
static const char *plain_string(const char *s, size_t i, size_t *len_p, size_t *end)
{
	size_t n = strcspn(s + i + 1, "\"\\");

	if (s[i + 1 + n] != '"')
		return NULL;
	*len_p = n;
	*end = i + 1 + n;
	return s + i + 1;
}

static bool is(const char *p, size_t len, const char *word)
{
	return len == strlen(word) && memcmp(p, word, len) == 0;
}

/* Where each field's value begins in the text. */
struct st_fields {
	size_t dtype, shape, offsets;
};

/* Exactly dtype, shape and data_offsets: the reference refuses others.
 * *next: the index past the entry. */
static int get_fields(struct st_walk *w, const char *name, size_t i, struct st_fields *f,
		      size_t *next)
{
	const char *s = w->s;
	bool nul;
	int rc;

	memset(f, 0, sizeof *f);
	if (s[i] != '{')
		return mf_error(w->mf, _("tensor '%s': the entry is %s, not an object"), name,
				json_kind_at(s + i));
	for (i = skip_ws(s, i + 1); s[i] == '"'; i = skip_ws(s, i + 1)) {
		size_t end, len, *field;
		const char *p = plain_string(s, i, &len, &end);
		char *key = NULL;

		if (!p && (rc = scan_string(&w->sc, i, &end, &key, &len, &nul)))
			return rc;
		if (!p)
			p = key;
		field = is(p, len, "dtype") ? &f->dtype
			: is(p, len, "shape") ? &f->shape
			: is(p, len, "data_offsets") ? &f->offsets
			: NULL;
		if (!field && !key && !(key = strndup(p, len)))
			return err_oom();
		if (!field) {
			rc = mf_error(w->mf, _("tensor '%s': unknown field '%s' (a tensor has only dtype, shape and data_offsets)"),
				      name, key);
			free(key);
			return rc;
		}
		free(key);
		*field = skip_ws(s, skip_ws(s, end + 1) + 1);
		i = skip_ws(s, skip_value(s, *field));
		if (s[i] != ',')
			break;
	}
	*next = i + 1;
	const char *missing = !f->dtype ? "dtype" : !f->shape ? "shape" : !f->offsets ? "data_offsets" : NULL;
	if (missing)
		return mf_error(w->mf, _("tensor '%s': field '%s' is missing"), name, missing);
	return 0;
}

static int get_dtype(struct st_walk *w, const char *name, size_t i, const struct dtype_desc **dt)
{
	size_t end, len;
	char *text;
	bool nul;
	int rc;

	if (w->s[i] != '"')
		return mf_error(w->mf, _("tensor '%s': dtype is %s, not a string"), name,
				json_kind_at(w->s + i));
	const char *p = plain_string(w->s, i, &len, &end);

	if (p) {
		*dt = find_dtype(p, len);
	} else if ((rc = scan_string(&w->sc, i, &end, &text, &len, &nul)) == 0) {
		*dt = find_dtype(text, len);
		free(text);
	} else {
		return rc;
	}
	/* As it is written in the header, escapes and all: "F32\u0000" is
	 * not F32, and the message must not show it as that. */
	if (*dt)
		return 0;
	if (!(text = strndup(w->s + i + 1, end - i - 1 < 256 ? end - i - 1 : 256)))
		return err_oom();
	rc = mf_error(w->mf, _("tensor '%s': dtype '%s' is not one of %s"), name, text, st_dtype_list);
	free(text);
	return rc;
}

/* The elements of the array at s[i]: how many, and where the first
 * max_n of them begin. */
static size_t array_elements(const char *s, size_t i, size_t *begin, size_t max_n)
{
	size_t n = 0;

	for (i = skip_ws(s, i + 1); s[i] != ']'; n++) {
		if (n < max_n)
			begin[n] = i;
		i = skip_ws(s, skip_value(s, i));
		if (s[i] == ',')
			i = skip_ws(s, i + 1);
	}
	return n;
}

static int get_shape(struct st_walk *w, const char *name, size_t i, struct mf_tensor *t)
{
	size_t begin[DEVCACHE_MAX_DIMS];
	char text[256];

	if (w->s[i] != '[')
		return mf_error(w->mf, _("tensor '%s': shape is %s, not an array"), name,
				json_kind_at(w->s + i));
	size_t n = array_elements(w->s, i, begin, DEVCACHE_MAX_DIMS);
	if (n > DEVCACHE_MAX_DIMS)
		return mf_error(w->mf, _("tensor '%s': shape has %zu dimensions, more than %d"), name, n,
				DEVCACHE_MAX_DIMS);
	for (size_t k = 0; k < n; k++)
		if (!get_count(w->s, begin[k], &t->shape[k]))
			return mf_error(w->mf, _("tensor '%s': shape[%zu] is %s, not a non-negative integer"),
					name, k,
					value_text(w->s, begin[k], skip_value(w->s, begin[k]), text,
						   sizeof text));
	t->n_dims = (uint32_t)n;
	return 0;
}

static int get_offsets(struct st_walk *w, const char *name, size_t i, uint64_t off[2])
{
	size_t begin[2];
	char text[256];

	if (w->s[i] != '[')
		return mf_error(w->mf, _("tensor '%s': data_offsets is %s, not an array"), name,
				json_kind_at(w->s + i));
	if (array_elements(w->s, i, begin, 2) != 2)
		return mf_error(w->mf, _("tensor '%s': data_offsets %s is not [begin, end]"), name,
				value_text(w->s, i, skip_value(w->s, i), text, sizeof text));
	for (size_t k = 0; k < 2; k++)
		if (!get_count(w->s, begin[k], &off[k]))
			return mf_error(w->mf, _("tensor '%s': data_offsets[%zu] is %s, not a non-negative integer"),
					name, k,
					value_text(w->s, begin[k], skip_value(w->s, begin[k]), text,
						   sizeof text));
	return 0;
}

/* The bytes that shape and dtype make, as the reference counts them: in
 * bits first, so that a packed dtype must fill whole bytes. */
static int check_size(struct devcache_model_file *mf, const char *name, const struct dtype_desc *dt,
		      const struct mf_tensor *t, const uint64_t off[2])
{
	char shape[DEVCACHE_MAX_DIMS * 22 + 1];
	uint64_t elements = 1, bits;
	bool over = false;

	for (unsigned i = 0; i < t->n_dims; i++)
		over = over || __builtin_mul_overflow(elements, t->shape[i], &elements);
	over = over || __builtin_mul_overflow(elements, (uint64_t)dtype_bits(dt), &bits);
	if (!over && bits % 8 == 0 && bits / 8 == off[1] - off[0])
		return 0;
	/* Only for a message: a million tensors would format a million. */
	format_shape(shape, sizeof shape, t->shape, t->n_dims);
	elements = 1;
	for (unsigned i = 0; i < t->n_dims; i++)
		if (__builtin_mul_overflow(elements, t->shape[i], &elements))
			return mf_error(mf, _("tensor '%s': shape [%s] has more than 2^64 - 1 elements"),
					name, shape);
	if (__builtin_mul_overflow(elements, (uint64_t)dtype_bits(dt), &bits))
		return mf_error(mf, _("tensor '%s': shape [%s] of %s is too large: its size in bits does not fit in 64 bits"),
				name, shape, dt->name);
	if (bits % 8)
		return mf_error(mf, _("tensor '%s': shape [%s] has %llu elements of %s (%u bits each), which do not fill whole bytes"),
				name, shape, (unsigned long long)elements, dt->name, dtype_bits(dt));
	if (bits / 8 != off[1] - off[0])
		return mf_error(mf, _("tensor '%s': shape [%s] has %llu bytes of %s but data_offsets [%llu, %llu] hold %llu"),
				name, shape, (unsigned long long)(bits / 8), dt->name,
				(unsigned long long)off[0], (unsigned long long)off[1],
				(unsigned long long)(off[1] - off[0]));
	return 0;
}

/* The entry at s[i] for the tensor name (taken over); *next: the index
 * past it. */
static int add_tensor(struct st_walk *w, char *name, size_t i, size_t *next)
{
	struct devcache_model_file *mf = w->mf;
	uint64_t data_size = mf->size - mf->data_offset, off[2];
	const struct dtype_desc *dt = NULL;
	struct mf_tensor tmp, *t;
	struct st_fields f;
	int rc;

	memset(&tmp, 0, sizeof tmp);
	if (strlen(name) > MF_MAX_NAME)
		rc = mf_error(mf, _("tensor '%.64s...': the name is longer than %u bytes"), name,
			      MF_MAX_NAME);
	else if ((rc = get_fields(w, name, i, &f, next)) || (rc = get_dtype(w, name, f.dtype, &dt)) ||
		 (rc = get_shape(w, name, f.shape, &tmp)) || (rc = get_offsets(w, name, f.offsets, off)))
		;
	else if (off[0] > off[1])
		rc = mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] end before they begin"), name,
			      (unsigned long long)off[0], (unsigned long long)off[1]);
	/* Checked before the absolute offset is computed, so that it cannot
	 * overflow. */
	else if (off[1] > data_size)
		rc = mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] run past the end of the file (the data section holds %llu bytes)"),
			      name, (unsigned long long)off[0], (unsigned long long)off[1],
			      (unsigned long long)data_size);
	else
		rc = check_size(mf, name, dt, &tmp, off);
	if (rc) {
		free(name);
		return rc;
	}
	/* mf_add_tensor says only NULL: it fails for the tensor limit
	 * (a malformed file) or for want of memory. */
	if (!(t = mf_add_tensor(mf, name)))
		return mf->n_tensors >= MF_MAX_TENSORS ? DEVCACHE_EFORMAT : DEVCACHE_ENOMEM;
	t->dtype = dt->name;
	t->dtype_id = dt->id;
	t->type = 0;
	t->n_dims = tmp.n_dims;
	memcpy(t->shape, tmp.shape, sizeof t->shape);
	t->offset = mf->data_offset + off[0];
	t->size = off[1] - off[0];
	return 0;
}

/* One metadata value: the string at s[i] as JSON text, as json-c writes it,
 * and as it is (*raw_p, *len_p). */
static int meta_value(struct st_walk *w, const char *key, size_t i, char **json_p, char **raw_p,
		      size_t *len_p)
{
	struct json_object *v;
	size_t end, len;
	char *text;
	bool nul;
	int rc;

	*json_p = NULL;
	if ((rc = scan_string(&w->sc, i, &end, &text, &len, &nul)))
		return rc;
	v = json_object_new_string_len(text, (int)len);
	*raw_p = text;
	*len_p = len;
	if (!v)
		return err_oom();
	const char *json = json_object_to_json_string_length(
		v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (!json)
		rc = err_oom();
	else if (len > MF_MAX_JSON_VALUE)
		rc = mf_error(w->mf, _("__metadata__ '%s': the value is longer than %u bytes"), key,
			      MF_MAX_JSON_VALUE);
	else if (!(*json_p = strdup(json)))
		rc = err_oom();
	json_object_put(v);
	return rc;
}

/* __metadata__ at s[i]: string to string, kept in file order as JSON text. */
static int add_metadata(struct st_walk *w, size_t i)
{
	const char *s = w->s;
	bool nul;
	int rc;

	if (s[i] != '{')
		return mf_error(w->mf, _("__metadata__ is %s, not an object of strings"),
				json_kind_at(s + i));
	for (i = skip_ws(s, i + 1); s[i] == '"'; i = skip_ws(s, i + 1)) {
		size_t end, len, v, raw_len = 0;
		char *key, *json, *raw = NULL;

		if ((rc = scan_string(&w->sc, i, &end, &key, &len, &nul)))
			return rc;
		v = skip_ws(s, skip_ws(s, end + 1) + 1);
		if (len > MF_MAX_NAME)
			rc = mf_error(w->mf, _("__metadata__ '%.64s...': the key is longer than %u bytes"),
				      key, MF_MAX_NAME);
		else if (s[v] != '"')
			rc = mf_error(w->mf, _("__metadata__ '%s' is %s, not a string"), key,
				      json_kind_at(s + v));
		else if ((rc = meta_value(w, key, v, &json, &raw, &raw_len)) == 0) {
			rc = mf_add_meta(w->mf, key, json); /* takes both over */
			if (rc == 0) {
				w->mf->meta[w->mf->n_meta - 1].str = raw;
				w->mf->meta[w->mf->n_meta - 1].count = raw_len;
				raw = NULL;
			}
			key = NULL;
		}
		free(raw);
		if (rc) {
			free(key);
			return rc;
		}
		i = skip_ws(s, skip_value(s, v));
		if (s[i] != ',')
			break;
	}
	return 0;
}

/* The header object's members in file order: the tensors and __metadata__. */
static int walk_header(struct devcache_model_file *mf, const char *text, size_t len)
{
	struct st_walk w = {.mf = mf, .sc = {.mf = mf, .s = (const unsigned char *)text, .len = len},
			    .s = text};
	const char *s = text;
	size_t i = skip_ws(s, 0);
	bool nul;
	int rc;

	for (i = skip_ws(s, i + 1); s[i] == '"'; i = skip_ws(s, i + 1)) {
		size_t end, n, v, next = 0;
		const char *p = plain_string(s, i, &n, &end);
		char *key;

		if (p && !(key = strndup(p, n)))
			return err_oom();
		if (!p && (rc = scan_string(&w.sc, i, &end, &key, &n, &nul)))
			return rc;
		v = skip_ws(s, skip_ws(s, end + 1) + 1);
		if (strcmp(key, "__metadata__") == 0) {
			free(key);
			rc = add_metadata(&w, v);
			next = skip_value(s, v);
		} else {
			rc = add_tensor(&w, key, v, &next);
		}
		if (rc)
			return rc;
		i = skip_ws(s, next);
		if (s[i] != ',')
			break;
	}
	return 0;
}

/* ---- the data section ----------------------------------------------------------- */

static int by_offsets(const void *x, const void *y)
{
	const struct mf_tensor *a = *(struct mf_tensor *const *)x, *b = *(struct mf_tensor *const *)y;

	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	/* Equal ranges (two zero-sized tensors): keep file order, so the
	 * messages do not depend on qsort. */
	return (a > b) - (a < b);
}

/* Sorted by (begin, end), as the reference sorts them, the tensors must
 * tile the data section: the first begins at 0, each begins where the one
 * before ends, the last ends at the end of the file. */
static int check_layout(struct devcache_model_file *mf)
{
	uint64_t data_size = mf->size - mf->data_offset, next = 0;
	struct mf_tensor **v;
	const struct mf_tensor *prev = NULL;
	int rc = 0;

	if (!mf->n_tensors) {
		if (data_size)
			return mf_error(mf, _("the header lists no tensors, but %llu bytes of data follow it"),
					(unsigned long long)data_size);
		return 0;
	}
	if (!(v = malloc(mf->n_tensors * sizeof *v)))
		return err_oom();
	for (size_t i = 0; i < mf->n_tensors; i++)
		v[i] = &mf->tensors[i];
	/* Writers mostly list the tensors in the order of their data. */
	size_t sorted = 1;
	while (sorted < mf->n_tensors && by_offsets(&v[sorted - 1], &v[sorted]) < 0)
		sorted++;
	if (sorted < mf->n_tensors)
		qsort(v, mf->n_tensors, sizeof *v, by_offsets);
	for (size_t i = 0; i < mf->n_tensors && rc == 0; i++) {
		const struct mf_tensor *t = v[i];
		unsigned long long begin = t->offset - mf->data_offset, end = begin + t->size;

		if (begin != next && !prev)
			rc = mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] begin after 0, where the first tensor must begin"),
				      t->name, begin, end);
		else if (begin > next)
			rc = mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] leave a gap after tensor '%s', which ends at %llu"),
				      t->name, begin, end, prev->name, (unsigned long long)next);
		else if (begin < next)
			rc = mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s', which ends at %llu"),
				      t->name, begin, end, prev->name, (unsigned long long)next);
		prev = t;
		next = end;
	}
	if (rc == 0 && next != data_size)
		rc = mf_error(mf, _("tensor '%s' ends at byte %llu of the data section, but %llu more bytes follow it"),
			      prev->name, (unsigned long long)next, (unsigned long long)(data_size - next));
	free(v);
	return rc;
}

/* ---- the header ------------------------------------------------------------------ */

/* The header's length, and the header itself (NUL-terminated, for json-c's
 * messages' sake; the parser is given the length). */
static int read_header(struct devcache_model_file *mf, char **text_p, size_t *len_p)
{
	unsigned char len8[8];
	uint64_t n;
	char *text;
	int rc;

	*text_p = NULL;
	if ((rc = mf_read(mf, len8, sizeof len8, 0, _("the header length"))))
		return rc;
	n = le64(len8);
	/* Both checks come before the allocation: a lying length must not
	 * make the reader ask for memory. */
	if (n > MF_MAX_SAFETENSORS_HEADER)
		return mf_error(mf, _("header length %llu is larger than the limit of %u bytes"),
				(unsigned long long)n, MF_MAX_SAFETENSORS_HEADER);
	if (n > mf->size - 8)
		return mf_error(mf, _("header length %llu is larger than the file (%llu bytes)"),
				(unsigned long long)n, (unsigned long long)mf->size);
	if (!(text = malloc((size_t)n + 1)))
		return err_oom();
	if ((rc = mf_read(mf, text, (size_t)n, 8, _("the header")))) {
		free(text);
		return rc;
	}
	text[n] = '\0';
	*text_p = text;
	*len_p = (size_t)n;
	return 0;
}

/* json-c 0.16 gives no object and no error when an allocation fails (its
 * newlocale(), a new object), as for the text "null"; 0.17 and later say
 * json_tokener_error_memory.  Either way the file is not malformed. */
bool mf_json_out_of_memory(int jerr, const char *text, size_t len)
{
	size_t ws = 0;

#if JSON_C_MAJOR_VERSION > 0 || JSON_C_MINOR_VERSION >= 17
	if (jerr == json_tokener_error_memory)
		return true;
#endif
	while (ws < len && strchr(" \t\n\r", text[ws]) && text[ws])
		ws++;
	return jerr == json_tokener_success &&
	       !(len - ws >= 4 && memcmp(text + ws, "null", 4) == 0);
}

/* The index by name that mf_open_file() would sort, from the scan's
 * order of the keys: a million names sorted once, not twice. */
static int sorted_names(struct devcache_model_file *mf, const size_t *order, size_t n, size_t meta)
{
	size_t k = 0;

	if (!mf->n_tensors)
		return 0;
	if (!(mf->by_name = malloc(mf->n_tensors * sizeof *mf->by_name)))
		return err_oom();
	for (size_t i = 0; i < n; i++)
		if (order[i] != meta)
			mf->by_name[k++] = &mf->tensors[order[i] - (order[i] > meta && meta != SIZE_MAX)];
	return 0;
}

int safetensors_parse(struct devcache_model_file *mf)
{
	size_t *order = NULL, n = 0, meta;
	char *text;
	size_t len = 0, bad;
	int rc;

	mf->version = 0;
	mf->alignment = 1;
	if ((rc = read_header(mf, &text, &len)))
		return rc;
	mf->data_offset = 8 + (uint64_t)len;
	if ((bad = mf_utf8_invalid_at((const unsigned char *)text, len)) < len)
		rc = mf_error(mf, _("the header is not valid UTF-8 (byte %llu)"),
			      (unsigned long long)at(bad));
	else if ((rc = scan_header(mf, text, len, &order, &n, &meta)) == 0 &&
		 (rc = walk_header(mf, text, len)) == 0 && (rc = check_layout(mf)) == 0)
		rc = sorted_names(mf, order, n, meta);
	free(order);
	free(text);
	return rc;
}
