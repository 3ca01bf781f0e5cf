/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* safetensors.c - the safetensors reader: every rule of the reference reader, checked before the header is trusted. */
#include "model-file.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The dtypes of the reference reader (huggingface safetensors 0.6 and
 * later), with their width in bits: F4 and the two F6 are packed, so a
 * tensor of them must fill whole bytes. */
static const struct st_dtype {
	const char *name;
	unsigned bits;
} st_dtypes[] = {
	{"BOOL", 8},     {"U8", 8},          {"I8", 8},          {"F8_E5M2", 8},
	{"F8_E4M3", 8},  {"F8_E8M0", 8},     {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
	{"I16", 16},     {"U16", 16},        {"F16", 16},        {"BF16", 16},
	{"I32", 32},     {"U32", 32},        {"F32", 32},        {"C64", 64},
	{"F64", 64},     {"I64", 64},        {"U64", 64},        {"F4", 4},
	{"F6_E2M3", 6},  {"F6_E3M2", 6},
};

/* For the message that rejects an unknown dtype. */
static const char st_dtype_list[] =
	"F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, C64, F8_E5M2, "
	"F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F6_E2M3, F6_E3M2 and F4";

/* json-c keeps strings with their length: a dtype with a NUL in it must
 * not pass for the dtype before the NUL. */
static const struct st_dtype *find_dtype(const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
		if (strlen(st_dtypes[i].name) == len && memcmp(st_dtypes[i].name, s, len) == 0)
			return &st_dtypes[i];
	return NULL;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- what json-c lets through ------------------------------------------------ */

/*
 * json-c, even with JSON_TOKENER_STRICT, accepts what the reference's
 * serde_json rejects: single-quoted strings, NaN and Infinity, control
 * characters inside strings, unpaired surrogate escapes (which it turns
 * into U+FFFD), integers past 2^64 - 1 (which it clamps).  It also keeps
 * one value of a key given twice, silently.  So after json-c has accepted
 * the header, one pass over the raw text rejects those, and collects the
 * keys of the header object and of each object one level down (the tensor
 * entries and __metadata__) to find any key given twice.  Objects deeper
 * than that are never valid in a header, so their keys need no check.
 *
 * The text has passed json-c, so the pass only has to tell tokens apart;
 * it still checks every index, so that it is safe on any input.
 */

struct st_key {
	char *name;  /* decoded: "\u0061" is "a" */
	uint64_t at; /* of its opening quote, in the file */
};

struct st_keys {
	struct st_key *v;
	size_t n, cap;
};

struct st_scan {
	const struct devcache_model_file *mf;
	const unsigned char *s;
	size_t len;
	unsigned depth;
	struct st_keys top;   /* the header object's keys */
	struct st_keys inner; /* keys of the object now open one level down */
};

static void keys_clear(struct st_keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].name);
	k->n = 0;
}

static int hex4(const unsigned char *s, size_t len, size_t i, uint32_t *cp)
{
	*cp = 0;
	if (len - i < 4)
		return -1;
	for (size_t k = i; k < i + 4; k++) {
		unsigned c = s[k];
		unsigned d = c >= '0' && c <= '9' ? c - '0'
			   : c >= 'a' && c <= 'f' ? c - 'a' + 10
			   : c >= 'A' && c <= 'F' ? c - 'A' + 10
			   : 16;

		if (d == 16)
			return -1;
		*cp = *cp << 4 | d;
	}
	return 0;
}

/* Where s[i] of the header is in the file, for the messages. */
static uint64_t at(size_t i)
{
	return 8 + (uint64_t)i;
}

/* The string whose opening quote is at s[i]: checked, and decoded into
 * *out (a NUL-terminated copy, when out is not NULL).  Sets *end to the
 * index of the closing quote and *nul when the string holds U+0000. */
static int scan_string(struct st_scan *sc, size_t i, size_t *end, char **out, bool *nul)
{
	const unsigned char *s = sc->s;
	size_t j, n = 0;
	char *d = NULL;

	*nul = false;
	if (out) {
		/* Decoding never makes a string longer than its escaped form. */
		for (j = i + 1; j < sc->len && s[j] != '"'; j++)
			if (s[j] == '\\')
				j++;
		if (!(d = malloc(j - i)))
			return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	}
	for (j = i + 1; j < sc->len; j++) {
		uint32_t cp, lo;

		if (s[j] == '"') {
			if (d) {
				d[n] = '\0';
				*out = d;
			}
			*end = j;
			return 0;
		}
		if (s[j] < 0x20) {
			free(d);
			return mf_error(sc->mf, _("the header is not JSON: a control character in a string at byte %llu"),
					(unsigned long long)at(j));
		}
		if (s[j] != '\\') {
			if (d)
				d[n++] = (char)s[j];
			continue;
		}
		if (++j == sc->len)
			break;
		static const char escapes[] = "\"\\/bfnrt", meaning[] = "\"\\/\b\f\n\r\t";
		const char *esc = s[j] ? strchr(escapes, s[j]) : NULL;
		if (esc) {
			if (d)
				d[n++] = meaning[esc - escapes];
			continue;
		}
		if (s[j] != 'u' || hex4(s, sc->len, j + 1, &cp))
			break;
		j += 4;
		/* A high surrogate must come with a low one: the pair is one
		 * character; either alone is not text. */
		if (cp >= 0xd800 && cp <= 0xdbff && j + 2 < sc->len && s[j + 1] == '\\' &&
		    s[j + 2] == 'u' && hex4(s, sc->len, j + 3, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			j += 6;
		} else if (cp >= 0xd800 && cp <= 0xdfff) {
			free(d);
			return mf_error(sc->mf, _("the header is not JSON: an unpaired surrogate escape at byte %llu"),
					(unsigned long long)at(j - 5));
		}
		if (cp == 0)
			*nul = true;
		if (d)
			n += mf_utf8_put(cp, d + n);
	}
	free(d);
	return mf_error(sc->mf, _("the header is not JSON: a bad string at byte %llu"),
			(unsigned long long)at(i));
}

static int keys_add(struct st_keys *k, char *name, uint64_t pos)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 16;
		struct st_key *v = realloc(k->v, cap * sizeof *v);

		if (!v) {
			free(name);
			return err_set(DEVCACHE_ENOMEM, _("out of memory"));
		}
		k->v = v;
		k->cap = cap;
	}
	k->v[k->n++] = (struct st_key){name, pos};
	return 0;
}

static int by_key(const void *x, const void *y)
{
	const struct st_key *a = x, *b = y;
	int c = strcmp(a->name, b->name);

	return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* The first key (in sorted order) given twice in one object, or NULL. */
static const struct st_key *find_twice(struct st_keys *k)
{
	if (k->n < 2)
		return NULL;
	qsort(k->v, k->n, sizeof *k->v, by_key);
	for (size_t i = 1; i < k->n; i++)
		if (strcmp(k->v[i - 1].name, k->v[i].name) == 0)
			return &k->v[i - 1];
	return NULL;
}

/* A key of the header object (depth 1) or of an entry in it (depth 2). */
static int scan_key(struct st_scan *sc, size_t i, size_t *end)
{
	char *name;
	bool nul;
	int rc;

	if ((rc = scan_string(sc, i, end, &name, &nul)))
		return rc;
	/* Names and keys are C strings from here on. */
	if (nul) {
		free(name);
		return mf_error(sc->mf, _("the key at byte %llu holds a NUL character (\\u0000)"),
				(unsigned long long)at(i));
	}
	return keys_add(sc->depth == 1 ? &sc->top : &sc->inner, name, at(i));
}

/* An object at depth 1 or 2 closes: no key in it may be given twice. */
static int scan_close(struct st_scan *sc)
{
	const struct st_key *k;

	if (sc->depth == 1 && (k = find_twice(&sc->top)))
		return mf_error(sc->mf, _("the header gives '%s' twice (bytes %llu and %llu)"), k->name,
				(unsigned long long)k[0].at, (unsigned long long)k[1].at);
	if (sc->depth != 2 || !sc->top.n)
		return 0;
	/* The entry belongs to the key read last at depth 1. */
	const char *owner = sc->top.v[sc->top.n - 1].name;
	if ((k = find_twice(&sc->inner)) && strcmp(owner, "__metadata__") == 0)
		return mf_error(sc->mf, _("__metadata__ gives '%s' twice (bytes %llu and %llu)"),
				k->name, (unsigned long long)k[0].at, (unsigned long long)k[1].at);
	if (k)
		return mf_error(sc->mf, _("tensor '%s': field '%s' is given twice (bytes %llu and %llu)"),
				owner, k->name, (unsigned long long)k[0].at,
				(unsigned long long)k[1].at);
	keys_clear(&sc->inner);
	return 0;
}

/* A number token at s[i]: json-c clamps an integer past 2^64 - 1 to that
 * value, which would make a wrong offset or dimension look right. */
static int scan_number(struct st_scan *sc, size_t i, size_t *end)
{
	const unsigned char *s = sc->s;
	size_t j = i, digits;
	bool neg = s[j] == '-';

	if (neg)
		j++;
	for (digits = j; j < sc->len && s[j] >= '0' && s[j] <= '9'; j++)
		;
	digits = j - digits;
	if (!digits)
		return mf_error(sc->mf, _("the header is not JSON: unexpected byte 0x%02x at byte %llu"),
				j < sc->len ? s[j] : 0, (unsigned long long)at(j));
	bool integer = j == sc->len || !strchr(".eE", s[j]) || !s[j];
	if (integer && !neg &&
	    (digits > 20 || (digits == 20 && memcmp(s + j - 20, "18446744073709551615", 20) > 0)))
		return mf_error(sc->mf, _("the number at byte %llu is larger than 2^64 - 1"),
				(unsigned long long)at(i));
	/* The rest of a fraction or an exponent: json-c has checked it. */
	while (j < sc->len && s[j] && strchr("0123456789.eE+-", s[j]))
		j++;
	*end = j - 1;
	return 0;
}

static int scan_token(struct st_scan *sc, size_t i, size_t *end)
{
	const unsigned char *s = sc->s;
	static const char *const words[] = {"true", "false", "null"};
	bool nul;
	size_t j;
	int rc;

	*end = i;
	switch (s[i]) {
	case ' ': case '\t': case '\n': case '\r': case ':': case ',':
		return 0;
	case '{':
		if (++sc->depth == 2)
			keys_clear(&sc->inner);
		return 0;
	case '[':
		sc->depth++;
		return 0;
	case '}':
		if (sc->depth && (rc = scan_close(sc)))
			return rc;
		/* fall through */
	case ']':
		if (!sc->depth)
			break;
		sc->depth--;
		return 0;
	case '"':
		/* A string is a key when a colon follows it. */
		if ((rc = scan_string(sc, i, &j, NULL, &nul)))
			return rc;
		for (size_t k = j + 1; k < sc->len; k++) {
			if (s[k] == ':' && (sc->depth == 1 || sc->depth == 2))
				return scan_key(sc, i, end);
			if (!strchr(" \t\n\r", s[k]) || !s[k])
				break;
		}
		*end = j;
		return 0;
	case '-': case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		return scan_number(sc, i, end);
	default:
		for (size_t w = 0; w < 3; w++) {
			size_t n = strlen(words[w]);

			if (sc->len - i >= n && memcmp(s + i, words[w], n) == 0) {
				*end = i + n - 1;
				return 0;
			}
		}
		break;
	}
	/* Single quotes, NaN, Infinity, a form feed between tokens... */
	return mf_error(sc->mf, _("the header is not JSON: unexpected byte 0x%02x at byte %llu"), s[i],
			(unsigned long long)at(i));
}

static int scan_header(const struct devcache_model_file *mf, const char *text, size_t len)
{
	struct st_scan sc = {.mf = mf, .s = (const unsigned char *)text, .len = len};
	int rc = 0;

	for (size_t i = 0, end; i < len && rc == 0; i = end + 1)
		rc = scan_token(&sc, i, &end);
	keys_clear(&sc.top);
	keys_clear(&sc.inner);
	free(sc.top.v);
	free(sc.inner.v);
	return rc;
}

/* ---- the entries -------------------------------------------------------------- */

/* What a value is, for the message that says it is the wrong thing. */
static const char *json_kind(struct json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return _("null");
	case json_type_boolean:
		return _("a boolean");
	case json_type_double:
		return _("a fractional number");
	case json_type_int:
		return _("an integer");
	case json_type_object:
		return _("an object");
	case json_type_array:
		return _("an array");
	case json_type_string:
		return _("a string");
	}
	return "?";
}

/* A value as JSON text, for a message (json-c owns the text). */
static const char *json_text(struct json_object *v)
{
	const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);

	return s ? s : "?";
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

/* shape[i] and data_offsets[i]: a JSON integer from 0 to 2^64 - 1 (the
 * scan has already rejected one past that, which json-c would clamp). */
static bool get_count(struct json_object *v, uint64_t *n)
{
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
		return false;
	*n = json_object_get_uint64(v);
	return true;
}

struct st_fields {
	struct json_object *dtype, *shape, *offsets;
};

/* Exactly dtype, shape and data_offsets: the reference refuses others. */
static int get_fields(struct devcache_model_file *mf, const char *name, struct json_object *entry,
		      struct st_fields *f)
{
	memset(f, 0, sizeof *f);
	if (!json_object_is_type(entry, json_type_object))
		return mf_error(mf, _("tensor '%s': the entry is %s, not an object"), name,
				json_kind(entry));
	json_object_object_foreach(entry, key, val) {
		if (strcmp(key, "dtype") == 0)
			f->dtype = val;
		else if (strcmp(key, "shape") == 0)
			f->shape = val;
		else if (strcmp(key, "data_offsets") == 0)
			f->offsets = val;
		else
			return mf_error(mf, _("tensor '%s': unknown field '%s' (a tensor has only dtype, shape and data_offsets)"),
					name, key);
	}
	const char *missing = !f->dtype ? "dtype" : !f->shape ? "shape" : !f->offsets ? "data_offsets" : NULL;
	if (missing)
		return mf_error(mf, _("tensor '%s': field '%s' is missing"), name, missing);
	return 0;
}

static int get_dtype(struct devcache_model_file *mf, const char *name, struct json_object *v,
		     const struct st_dtype **dt)
{
	if (!json_object_is_type(v, json_type_string))
		return mf_error(mf, _("tensor '%s': dtype is %s, not a string"), name, json_kind(v));
	*dt = find_dtype(json_object_get_string(v), (size_t)json_object_get_string_len(v));
	if (!*dt)
		return mf_error(mf, _("tensor '%s': dtype '%s' is not one of %s"), name,
				json_object_get_string(v), st_dtype_list);
	return 0;
}

static int get_shape(struct devcache_model_file *mf, const char *name, struct json_object *v,
		     struct mf_tensor *t)
{
	if (!json_object_is_type(v, json_type_array))
		return mf_error(mf, _("tensor '%s': shape is %s, not an array"), name, json_kind(v));
	size_t n = json_object_array_length(v);
	if (n > DEVCACHE_MAX_DIMS)
		return mf_error(mf, _("tensor '%s': shape has %zu dimensions, more than %d"), name, n,
				DEVCACHE_MAX_DIMS);
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);

		if (!get_count(e, &t->shape[i]))
			return mf_error(mf, _("tensor '%s': shape[%zu] is %s, not a non-negative integer"),
					name, i, json_text(e));
	}
	t->n_dims = (uint32_t)n;
	return 0;
}

static int get_offsets(struct devcache_model_file *mf, const char *name, struct json_object *v,
		       uint64_t off[2])
{
	if (!json_object_is_type(v, json_type_array))
		return mf_error(mf, _("tensor '%s': data_offsets is %s, not an array"), name, json_kind(v));
	if (json_object_array_length(v) != 2)
		return mf_error(mf, _("tensor '%s': data_offsets %s is not [begin, end]"), name,
				json_text(v));
	for (size_t i = 0; i < 2; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);

		if (!get_count(e, &off[i]))
			return mf_error(mf, _("tensor '%s': data_offsets[%zu] is %s, not a non-negative integer"),
					name, i, json_text(e));
	}
	return 0;
}

/* The bytes that shape and dtype make, as the reference counts them: in
 * bits first, so that a packed dtype must fill whole bytes. */
static int check_size(struct devcache_model_file *mf, const char *name, const struct st_dtype *dt,
		      const struct mf_tensor *t, const uint64_t off[2])
{
	char shape[DEVCACHE_MAX_DIMS * 22 + 1];
	uint64_t elements = 1, bits;

	format_shape(shape, sizeof shape, t->shape, t->n_dims);
	for (unsigned i = 0; i < t->n_dims; i++)
		if (__builtin_mul_overflow(elements, t->shape[i], &elements))
			return mf_error(mf, _("tensor '%s': shape [%s] has more than 2^64 - 1 elements"),
					name, shape);
	if (__builtin_mul_overflow(elements, (uint64_t)dt->bits, &bits))
		return mf_error(mf, _("tensor '%s': shape [%s] of %s is too large: its size in bits does not fit in 64 bits"),
				name, shape, dt->name);
	if (bits % 8)
		return mf_error(mf, _("tensor '%s': shape [%s] has %llu elements of %s (%u bits each), which do not fill whole bytes"),
				name, shape, (unsigned long long)elements, dt->name, dt->bits);
	if (bits / 8 != off[1] - off[0])
		return mf_error(mf, _("tensor '%s': shape [%s] has %llu bytes of %s but data_offsets [%llu, %llu] hold %llu"),
				name, shape, (unsigned long long)(bits / 8), dt->name,
				(unsigned long long)off[0], (unsigned long long)off[1],
				(unsigned long long)(off[1] - off[0]));
	return 0;
}

static int add_tensor(struct devcache_model_file *mf, const char *name, struct json_object *entry)
{
	uint64_t data_size = mf->size - mf->data_offset, off[2];
	const struct st_dtype *dt;
	struct mf_tensor tmp, *t;
	struct st_fields f;
	int rc;

	memset(&tmp, 0, sizeof tmp);
	if (strlen(name) > MF_MAX_NAME)
		return mf_error(mf, _("tensor '%.64s...': the name is longer than %u bytes"), name,
				MF_MAX_NAME);
	if ((rc = get_fields(mf, name, entry, &f)) || (rc = get_dtype(mf, name, f.dtype, &dt)) ||
	    (rc = get_shape(mf, name, f.shape, &tmp)) || (rc = get_offsets(mf, name, f.offsets, off)))
		return rc;
	if (off[0] > off[1])
		return mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] end before they begin"), name,
				(unsigned long long)off[0], (unsigned long long)off[1]);
	/* Checked before the absolute offset is computed, so that it cannot
	 * overflow. */
	if (off[1] > data_size)
		return mf_error(mf, _("tensor '%s': data_offsets [%llu, %llu] run past the end of the file (the data section holds %llu bytes)"),
				name, (unsigned long long)off[0], (unsigned long long)off[1],
				(unsigned long long)data_size);
	if ((rc = check_size(mf, name, dt, &tmp, off)))
		return rc;

	char *copy = strdup(name);
	if (!copy)
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	/* mf_add_tensor says only NULL: it fails for the tensor limit
	 * (a malformed file) or for want of memory. */
	if (!(t = mf_add_tensor(mf, copy)))
		return mf->n_tensors >= MF_MAX_TENSORS ? DEVCACHE_EFORMAT : DEVCACHE_ENOMEM;
	t->dtype = dt->name;
	t->type = 0;
	t->n_dims = tmp.n_dims;
	memcpy(t->shape, tmp.shape, sizeof t->shape);
	t->offset = mf->data_offset + off[0];
	t->size = off[1] - off[0];
	return 0;
}

/* __metadata__: string to string, kept in file order as JSON text. */
static int add_metadata(struct devcache_model_file *mf, struct json_object *meta)
{
	if (!json_object_is_type(meta, json_type_object))
		return mf_error(mf, _("__metadata__ is %s, not an object of strings"), json_kind(meta));
	json_object_object_foreach(meta, key, val) {
		if (strlen(key) > MF_MAX_NAME)
			return mf_error(mf, _("__metadata__ '%.64s...': the key is longer than %u bytes"),
					key, MF_MAX_NAME);
		if (!json_object_is_type(val, json_type_string))
			return mf_error(mf, _("__metadata__ '%s' is %s, not a string"), key,
					json_kind(val));

		size_t len;
		const char *json = json_object_to_json_string_length(
			val, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
		if (!json)
			return err_set(DEVCACHE_ENOMEM, _("out of memory"));
		if (len > MF_MAX_JSON_VALUE)
			return mf_error(mf, _("__metadata__ '%s': the value is longer than %u bytes"), key,
					MF_MAX_JSON_VALUE);
		char *k = strdup(key), *v = strdup(json);
		if (!k || !v) {
			free(k);
			free(v);
			return err_set(DEVCACHE_ENOMEM, _("out of memory"));
		}
		int rc = mf_add_meta(mf, k, v);
		if (rc)
			return rc;
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
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	for (size_t i = 0; i < mf->n_tensors; i++)
		v[i] = &mf->tensors[i];
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
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
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

/* json-c, strict, on exactly len bytes; only JSON whitespace may follow
 * the object (the reference pads the header with spaces). */
static int parse_json(struct devcache_model_file *mf, const char *text, size_t len,
		      struct json_object **root_p)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *root;
	int rc = 0;

	*root_p = NULL;
	if (!tok)
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error e = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);

	if (!root && mf_json_out_of_memory(e, text, len))
		rc = err_set(DEVCACHE_ENOMEM, "%s: %s", mf->path, _("out of memory"));
	else if (!root && e == json_tokener_continue)
		rc = mf_error(mf, _("the header is not JSON: it ends inside the object (byte %llu)"),
			      (unsigned long long)at(len));
	else if (!root)
		rc = mf_error(mf, _("the header is not JSON: %s at byte %llu"), json_tokener_error_desc(e),
			      (unsigned long long)at(end));
	else if (!json_object_is_type(root, json_type_object))
		rc = mf_error(mf, _("the header is %s, not a JSON object"), json_kind(root));
	for (; rc == 0 && end < len; end++)
		if (!strchr(" \t\n\r", text[end]) || !text[end])
			rc = mf_error(mf, _("the header has more after its JSON object (byte %llu)"),
				      (unsigned long long)at(end));
	json_tokener_free(tok);
	if (rc)
		json_object_put(root);
	else
		*root_p = root;
	return rc;
}

int safetensors_parse(struct devcache_model_file *mf)
{
	struct json_object *root = NULL;
	char *text;
	size_t len = 0, bad;
	int rc;

	mf->version = 0;
	mf->alignment = 1;
	if ((rc = read_header(mf, &text, &len)))
		return rc;
	mf->data_offset = 8 + (uint64_t)len;
	if ((bad = mf_utf8_invalid_at((const unsigned char *)text, len)) < len) {
		rc = mf_error(mf, _("the header is not valid UTF-8 (byte %llu)"),
			      (unsigned long long)at(bad));
		goto out;
	}
	if ((rc = parse_json(mf, text, len, &root)) || (rc = scan_header(mf, text, len)))
		goto out;
	/* json-c walks an object in the order its keys came: file order. */
	json_object_object_foreach(root, key, val) {
		if (strcmp(key, "__metadata__") == 0)
			rc = add_metadata(mf, val);
		else
			rc = add_tensor(mf, key, val);
		if (rc)
			goto out;
	}
	rc = check_layout(mf);
out:
	json_object_put(root);
	free(text);
	return rc;
}
