/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-json.c - GGUF metadata values as JSON text through json-c, capped as it is read. */
#include "gguf-json.h"

#include <json-c/printbuf.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



static int meta_text_reserve(struct meta_text *j, size_t more)
{
	if (j->cap - j->len > more)
		return 0;
	size_t cap = j->cap ? j->cap : 64;
	while (cap - j->len <= more)
		cap *= 2;
	char *p = realloc(j->p, cap);
	if (!p)
		return err_oom();
	j->p = p;
	j->cap = cap;
	return 0;
}

int meta_text_put(struct meta_text *j, const char *s, size_t n)
{
	int rc = meta_text_reserve(j, n);

	if (rc)
		return rc;
	memcpy(j->p + j->len, s, n);
	j->len += n;
	j->p[j->len] = '\0';
	return 0;
}

/* Append o's text while the whole stays within limit: 1 when it was
 * appended, 0 when it did not fit, or an error (o NULL: json-c ran out of
 * memory). */
int meta_text_put_value(struct meta_text *j, struct json_object *o, size_t limit)
{
	const char *text;
	size_t n;

	if (!o || !(text = json_object_to_json_string_length(o, JSON_FLAGS, &n)))
		return err_oom();
	if (j->len + n > limit)
		return 0;
	return meta_text_put(j, text, n) ? DEVCACHE_ENOMEM : 1;
}

/* As json_put_value, dropping o, which the caller made for this. */
int meta_text_put_new(struct meta_text *j, struct json_object *o, size_t limit)
{
	int rc = meta_text_put_value(j, o, limit);

	json_object_put(o);
	return rc;
}



/* A double as json-c writes it, but with the digits this type needs: 9
 * bring every float back bit for bit, 17 every double.  JSON has no NaN or
 * infinities: they become the strings "nan", "inf" and "-inf".  A program
 * may have set LC_NUMERIC, making printf's decimal point a comma (or
 * several bytes): whatever is not a digit, sign or exponent is the decimal
 * point and is written '.'. */
static int json_double_text(struct json_object *o, struct printbuf *pb, int level, int flags)
{
	int digits = (int)(intptr_t)json_object_get_userdata(o);
	double v = json_object_get_double(o);
	char tmp[64], out[64];
	size_t n = 0;

	(void)level, (void)flags;
	if (isnan(v))
		return printbuf_memappend(pb, "\"nan\"", 5);
	if (isinf(v))
		return v > 0 ? printbuf_memappend(pb, "\"inf\"", 5) : printbuf_memappend(pb, "\"-inf\"", 6);
	snprintf(tmp, sizeof tmp, "%.*g", digits, v);
	for (const char *s = tmp; *s && n + 1 < sizeof out; s++) {
		if ((*s >= '0' && *s <= '9') || *s == '-' || *s == '+' || *s == 'e')
			out[n++] = *s;
		else if (n == 0 || out[n - 1] != '.')
			out[n++] = '.';
	}
	return printbuf_memappend(pb, out, (int)n);
}

static struct json_object *json_new_double(int digits)
{
	struct json_object *o = json_object_new_double(0);

	if (o)
		json_object_set_serializer(o, json_double_text, (void *)(intptr_t)digits, NULL);
	return o;
}

int json_scratch_init(struct json_scratch *r)
{
	*r = (struct json_scratch){
		.str = json_object_new_string(""), .i64 = json_object_new_int64(0),
		.u64 = json_object_new_uint64(0), .boolean = json_object_new_boolean(0),
		.f32 = json_new_double(9), .f64 = json_new_double(17),
		.empty = json_object_new_string(""),
	};
	if (r->str && r->i64 && r->u64 && r->boolean && r->f32 && r->f64 && r->empty)
		return 0;
	return err_oom();
}

void json_scratch_free(struct json_scratch *r)
{
	json_object_put(r->str);
	json_object_put(r->i64);
	json_object_put(r->u64);
	json_object_put(r->boolean);
	json_object_put(r->f32);
	json_object_put(r->f64);
	json_object_put(r->empty);
	free(r->text);
}

/* s as the text of a JSON string, in r->str: bytes that are not UTF-8
 * become U+FFFD, one each.  The spec says strings are UTF-8, but real
 * vocabularies have been seen with raw bytes in them, and llama.cpp reads
 * such files, so refusing them would refuse working models; the
 * replacement keeps the text valid JSON and shows where the bad bytes
 * were.  tail, when not NULL, is appended as it is.  NULL when memory ran
 * out. */
struct json_object *json_scratch_string(struct json_scratch *r, const unsigned char *s, size_t n,
				     const char *tail)
{
	size_t tn = tail ? strlen(tail) : 0, len = 0, in;

	if (n > (INT_MAX - tn) / 3)
		return NULL; /* cannot be: a string is at most MF_MAX_STRING */
	if (3 * n + tn > r->text_cap) {
		size_t cap = r->text_cap ? r->text_cap : 256;
		char *t;

		while (cap < 3 * n + tn)
			cap *= 2;
		if (!(t = realloc(r->text, cap)))
			return NULL;
		r->text = t;
		r->text_cap = cap;
	}
	for (size_t i = 0; i < n; i += in) {
		if (s[i] < 0x80) {
			r->text[len++] = (char)s[i];
			in = 1;
		} else if ((in = mf_utf8_seq(s + i, n - i))) {
			memcpy(r->text + len, s + i, in);
			len += in;
		} else {
			memcpy(r->text + len, "\xef\xbf\xbd", 3);
			len += 3;
			in = 1;
		}
	}
	if (len + tn == 0)
		return r->empty;
	if (tn)
		memcpy(r->text + len, tail, tn);
	return json_object_set_string_len(r->str, r->text ? r->text : "", (int)(len + tn)) ? r->str
											    : NULL;
}

/* A string too long for the room left: as many of its first characters as
 * fit, and "…(N more bytes)" inside the quotes.  Each byte taken off the
 * end takes at least one byte off the text, so taking off what overflowed
 * and trying again ends in a few rounds. */
int meta_text_put_cut_string(struct json_scratch *r, struct meta_text *j, const unsigned char *s, size_t len,
			  bool *shown_p)
{
	size_t keep = len;

	for (;;) {
		struct json_object *o;
		const char *text;
		char more[64];
		size_t n;

		snprintf(more, sizeof more, "\xe2\x80\xa6(%llu more bytes)",
			 (unsigned long long)(len - keep));
		if (!(o = json_scratch_string(r, s, keep, more)) ||
		    !(text = json_object_to_json_string_length(o, JSON_FLAGS, &n)))
			return err_oom();
		if (j->len + n <= JSON_ROOM || keep == 0) {
			int rc = meta_text_put(j, text, n);

			*shown_p = rc == 0;
			return rc;
		}
		size_t over = j->len + n - JSON_ROOM;
		keep -= over < keep ? over : keep;
		/* Cut before a character, not inside one. */
		for (int back = 0; back < 3 && keep > 0 && (s[keep] & 0xc0) == 0x80; back++)
			keep--;
	}
}

