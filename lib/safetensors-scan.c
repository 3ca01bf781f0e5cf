/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* safetensors-scan.c - the safetensors header's first pass: all of its text checked as the reference reads JSON, no tree built. */
#include "safetensors.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/*
 * The first pass checks the whole text as the reference's serde_json
 * would, before any entry is trusted: the grammar (nesting at most 32
 * deep, json-c's limit), strings (no control characters, no unpaired
 * surrogate escapes), numbers (no NaN or Infinity, no integer past
 * 2^64 - 1, which json-c would clamp), nothing after the object.  It
 * collects the keys of the header object and of each object one level
 * down (the tensor entries and __metadata__) to find any key given twice;
 * objects deeper than that are never valid in a header, so their keys
 * need no check.  The header object may hold at most MF_MAX_TENSORS
 * tensors and __metadata__: that bounds the keys it keeps.
 *
 * The steps: scan_text() goes through the text once, byte by byte, with
 * what it wants next (a value, a key, the colon, the comma or the end of
 * a container); the open containers are the array open[], so no input
 * makes it recurse.  A key is checked by scan_key(), kept when it is at
 * depth 1 or 2; an object at those depths is checked for a key given
 * twice by scan_close() when it ends.  scan_header() runs the scan and
 * hands on only the order of the header's keys by name.
 *
 * The invariants: every message names its byte in the file (at()); a
 * kept key points into the text, or owns a copy when it had an escape,
 * and keys_clear() frees those; nothing the scan allocates outlives
 * scan_header() but the order it returns.  The second pass
 * (safetensors.c) relies on the scan's verdict: it walks only text that
 * has passed, and borrows scan_string() to decode the strings with
 * escapes.  json_kind_at() is here, not with the entries, because the
 * scan's first refusal (a header that is not an object) words the value
 * with it too: the entries depend on the scan, never the other way.
 */

static void keys_clear(struct st_keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		if (k->v[i].owned)
			free((char *)k->v[i].name);
	k->n = 0;
}

static int hex4(const unsigned char *s, size_t len, size_t i, uint32_t *cp)
{
	*cp = 0;
	if (i > len || len - i < 4)
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

static int cut_short(const struct st_scan *sc)
{
	return mf_error(sc->mf, _("the header is not JSON: it ends inside the object (byte %llu)"),
			(unsigned long long)at(sc->len));
}

static int unexpected(const struct st_scan *sc, size_t i)
{
	if (i >= sc->len)
		return cut_short(sc);
	return mf_error(sc->mf, _("the header is not JSON: unexpected byte 0x%02x at byte %llu"),
			sc->s[i], (unsigned long long)at(i));
}

/* The string whose opening quote is at s[i]: checked, and decoded into
 * *out (a NUL-terminated copy, when out is not NULL) of *out_len bytes.
 * Sets *end to the index of the closing quote and *nul when the string
 * holds U+0000. */
int scan_string(const struct st_scan *sc, size_t i, size_t *end, char **out, size_t *out_len,
		bool *nul)
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
			return err_oom();
	}
	for (j = i + 1; j < sc->len; j++) {
		uint32_t cp, lo;

		if (s[j] == '"') {
			if (d) {
				d[n] = '\0';
				*out = d;
				*out_len = n;
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
		if (s[j] != 'u' || hex4(s, sc->len, j + 1, &cp)) {
			free(d);
			return mf_error(sc->mf, _("the header is not JSON: a bad string at byte %llu"),
					(unsigned long long)at(i));
		}
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
	return cut_short(sc);
}

static int keys_add(struct st_keys *k, const char *name, size_t len, bool owned, uint64_t pos)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 16;
		struct st_key *v = realloc(k->v, cap * sizeof *v);

		if (!v) {
			if (owned)
				free((char *)name);
			return err_oom();
		}
		k->v = v;
		k->cap = cap;
	}
	k->v[k->n] = (struct st_key){name, (uint32_t)len, owned, (uint32_t)k->n, pos};
	k->n++;
	return 0;
}

static int by_key(const void *x, const void *y)
{
	const struct st_key *a = x, *b = y;
	int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);

	if (!c)
		c = (a->len > b->len) - (a->len < b->len);
	return c ? c : (a->ord > b->ord) - (a->ord < b->ord);
}

/* The first key (in sorted order) given twice in one object, or NULL. */
static const struct st_key *find_twice(struct st_keys *k)
{
	size_t sorted = 1;

	if (k->n < 2)
		return NULL;
	while (sorted < k->n && by_key(&k->v[sorted - 1], &k->v[sorted]) < 0)
		sorted++;
	if (sorted < k->n)
		qsort(k->v, k->n, sizeof *k->v, by_key);
	for (size_t i = 1; i < k->n; i++)
		if (k->v[i - 1].len == k->v[i].len &&
		    memcmp(k->v[i - 1].name, k->v[i].name, k->v[i].len) == 0)
			return &k->v[i - 1];
	return NULL;
}

/* A key: of the header object (depth 1) or of an entry in it (depth 2),
 * kept; deeper, only checked. */
static int scan_key(struct st_scan *sc, size_t i, size_t *end)
{
	char *name;
	size_t len;
	bool nul;
	int rc;

	if ((rc = scan_string(sc, i, end, NULL, NULL, &nul)) || sc->depth > 2)
		return rc;
	/* Most keys have no escape: they are their text. */
	if (!memchr(sc->s + i + 1, '\\', *end - i - 1)) {
		name = (char *)sc->s + i + 1;
		len = *end - i - 1;
	} else if ((rc = scan_string(sc, i, end, &name, &len, &nul))) {
		return rc;
	}
	bool owned = name != (char *)sc->s + i + 1;
	/* Names and keys are C strings from here on. */
	if (nul || (sc->depth == 1 && sc->top.n > MF_MAX_TENSORS)) {
		if (owned)
			free(name);
		if (nul)
			return mf_error(sc->mf, _("the key at byte %llu holds a NUL character (\\u0000)"),
					(unsigned long long)at(i));
		/* The tensors and __metadata__: a bound on what the scan keeps. */
		return mf_error(sc->mf, _("more than %u tensors"), MF_MAX_TENSORS);
	}
	return keys_add(sc->depth == 1 ? &sc->top : &sc->inner, name, len, owned, at(i));
}

/* An object at depth 1 or 2 closes: no key in it may be given twice. */
static int scan_close(struct st_scan *sc)
{
	const struct st_key *k, *owner;
	char *name = NULL, *o = NULL;
	int rc = 0;

	if (sc->depth == 1 && (k = find_twice(&sc->top))) {
		if (!(name = strndup(k->name, k->len)))
			return err_oom();
		rc = mf_error(sc->mf, _("the header gives '%s' twice (bytes %llu and %llu)"), name,
			      (unsigned long long)k[0].at, (unsigned long long)k[1].at);
	} else if (sc->depth == 2 && sc->top.n && (k = find_twice(&sc->inner))) {
		/* The entry belongs to the key read last at depth 1. */
		owner = &sc->top.v[sc->top.n - 1];
		if (!(name = strndup(k->name, k->len)) || !(o = strndup(owner->name, owner->len)))
			rc = err_oom();
		else if (strcmp(o, "__metadata__") == 0)
			rc = mf_error(sc->mf, _("__metadata__ gives '%s' twice (bytes %llu and %llu)"),
				      name, (unsigned long long)k[0].at, (unsigned long long)k[1].at);
		else
			rc = mf_error(sc->mf, _("tensor '%s': field '%s' is given twice (bytes %llu and %llu)"),
				      o, name, (unsigned long long)k[0].at,
				      (unsigned long long)k[1].at);
	} else if (sc->depth == 2) {
		keys_clear(&sc->inner);
	}
	free(name);
	free(o);
	return rc;
}

/* A number at s[i], as JSON has it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * An integer past 2^64 - 1 is refused: json-c clamps one to that value,
 * which would make a wrong offset or dimension look right. */
static int scan_number(const struct st_scan *sc, size_t i, size_t *end)
{
	const unsigned char *s = sc->s;
	size_t j = i, first;
	bool neg = s[j] == '-', integer = true;

	if (neg)
		j++;
	first = j;
	if (j < sc->len && s[j] == '0')
		j++;
	else if (j < sc->len && digit(s[j]))
		while (j < sc->len && digit(s[j]))
			j++;
	else
		return unexpected(sc, j);
	size_t digits = j - first;
	if (j < sc->len && s[j] == '.') {
		integer = false;
		if (++j >= sc->len || !digit(s[j]))
			return unexpected(sc, j);
		while (j < sc->len && digit(s[j]))
			j++;
	}
	if (j < sc->len && (s[j] == 'e' || s[j] == 'E')) {
		integer = false;
		if (++j < sc->len && (s[j] == '+' || s[j] == '-'))
			j++;
		if (j >= sc->len || !digit(s[j]))
			return unexpected(sc, j);
		while (j < sc->len && digit(s[j]))
			j++;
	}
	if (integer && !neg &&
	    (digits > 20 || (digits == 20 && memcmp(s + first, "18446744073709551615", 20) > 0)))
		return mf_error(sc->mf, _("the number at byte %llu is larger than 2^64 - 1"),
				(unsigned long long)at(i));
	*end = j - 1;
	return 0;
}

/* A string, a number, true, false or null at s[i]. */
static int scan_scalar(const struct st_scan *sc, size_t i, size_t *end)
{
	static const char *const words[] = {"true", "false", "null"};
	bool nul;

	if (sc->s[i] == '"')
		return scan_string(sc, i, end, NULL, NULL, &nul);
	if (sc->s[i] == '-' || digit(sc->s[i]))
		return scan_number(sc, i, end);
	for (size_t w = 0; w < 3; w++) {
		size_t n = strlen(words[w]);

		if (sc->len - i >= n && memcmp(sc->s + i, words[w], n) == 0) {
			*end = i + n - 1;
			return 0;
		}
	}
	/* Single quotes, NaN, Infinity, a form feed between tokens... */
	return unexpected(sc, i);
}

/* What the value at s is, for the message that says it is the wrong thing;
 * in the words the messages have always used for json-c's kinds. */
const char *json_kind_at(const char *s)
{
	switch (*s) {
	case '{':
		return _("an object");
	case '[':
		return _("an array");
	case '"':
		return _("a string");
	case 't': case 'f':
		return _("a boolean");
	case 'n':
		return _("null");
	}
	for (; *s && !strchr(",:]} \t\n\r", *s); s++)
		if (*s == '.' || *s == 'e' || *s == 'E')
			return _("a fractional number");
	return _("an integer");
}

static int scan_open(struct st_scan *sc, size_t i)
{
	if (sc->depth == 0 && sc->s[i] != '{')
		return mf_error(sc->mf, _("the header is %s, not a JSON object"),
				json_kind_at((const char *)sc->s + i));
	if (sc->depth == ST_MAX_DEPTH)
		return mf_error(sc->mf, _("the header is not JSON: %s at byte %llu"),
				json_tokener_error_desc(json_tokener_error_depth),
				(unsigned long long)at(i));
	sc->open[sc->depth++] = (char)sc->s[i];
	if (sc->depth == 2 && sc->s[i] == '{')
		keys_clear(&sc->inner);
	return 0;
}

/* What may come next: a value, a key, the colon after it, or after a
 * value the comma or the end of its container. */
enum st_want { WANT_VALUE, WANT_KEY, WANT_COLON, WANT_NEXT };

static int scan_text(struct st_scan *sc)
{
	const unsigned char *s = sc->s;
	enum st_want want = WANT_VALUE;
	bool first = false, done = false;
	int rc = 0;

	for (size_t i = 0, end; i < sc->len && rc == 0; i++) {
		unsigned char c = s[i];
		char close = sc->depth && sc->open[sc->depth - 1] == '{' ? '}' : ']';

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			continue;
		if (done)
			return mf_error(sc->mf, _("the header has more after its JSON object (byte %llu)"),
					(unsigned long long)at(i));
		if ((want == WANT_NEXT || (first && want != WANT_COLON)) && sc->depth && c == (unsigned char)close) {
			/* The container ends: right after it opened, or after a value. */
			if (close == '}' && (rc = scan_close(sc)))
				return rc;
			done = --sc->depth == 0;
			want = WANT_NEXT;
			first = false;
			continue;
		}
		switch (want) {
		case WANT_KEY:
			if (c != '"')
				return unexpected(sc, i);
			rc = scan_key(sc, i, &end);
			want = WANT_COLON;
			break;
		case WANT_COLON:
			if (c != ':')
				return unexpected(sc, i);
			end = i;
			want = WANT_VALUE;
			break;
		case WANT_NEXT:
			if (c != ',')
				return unexpected(sc, i);
			end = i;
			want = close == '}' ? WANT_KEY : WANT_VALUE;
			break;
		case WANT_VALUE:
			if (c == '{' || c == '[' || sc->depth == 0) {
				rc = scan_open(sc, i);
				end = i;
				want = c == '{' ? WANT_KEY : WANT_VALUE;
				first = true;
				continue;
			}
			rc = scan_scalar(sc, i, &end);
			want = WANT_NEXT;
			break;
		}
		first = false;
		i = end;
	}
	if (rc == 0 && !done)
		rc = cut_short(sc);
	return rc;
}

/* The scan; and the header object's keys sorted by name, as their places
 * in the object (*order_p, n_p of them; __metadata__'s is *meta_p, or
 * SIZE_MAX), which the sorted index of the tensors is made from. */
int scan_header(const struct devcache_model_file *mf, const char *text, size_t len,
		size_t **order_p, size_t *n_p, size_t *meta_p)
{
	struct st_scan sc = {.mf = mf, .s = (const unsigned char *)text, .len = len};
	int rc = scan_text(&sc);

	*order_p = NULL;
	*meta_p = SIZE_MAX;
	if (rc == 0 && !(*order_p = malloc((sc.top.n ? sc.top.n : 1) * sizeof **order_p)))
		rc = err_oom();
	for (size_t i = 0; rc == 0 && i < sc.top.n; i++) {
		const struct st_key *k = &sc.top.v[i];

		(*order_p)[i] = k->ord;
		if (k->len == 12 && memcmp(k->name, "__metadata__", 12) == 0)
			*meta_p = k->ord;
	}
	*n_p = sc.top.n;
	keys_clear(&sc.top);
	keys_clear(&sc.inner);
	free(sc.top.v);
	free(sc.inner.v);
	return rc;
}
