/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-json.h - GGUF metadata values as JSON text through json-c, capped as it is read. */
#ifndef DEVCACHE_GGUF_JSON_H
#define DEVCACHE_GGUF_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "model-file.h"

/*
 * A value's JSON text is kept to MF_MAX_JSON_VALUE bytes.  Each scalar,
 * string and marker is a json-c object, serialised by json-c and appended;
 * only the brackets and commas of arrays are written here, because the text
 * is capped as it is read: elements are written while they fit in
 * JSON_ROOM; the first that does not fit marks the text full, and from then
 * on elements are still read and checked but only counted.  (A json-c tree
 * of the whole value would hold every element of a 256k-entry vocabulary in
 * memory at once, and could not know where to stop.)  Each array that lost
 * elements ends with one string element "…(N more)", so the text stays
 * valid JSON and says what is missing.  A string value on its own (not in an
 * array) that does not fit is cut at a character boundary and ends
 * "…(N more bytes)" inside its quotes.  The markers and closing brackets
 * come out of the reserve below JSON_ROOM: at most a comma, a bracket, a
 * marker and a bracket per level of nesting.
 */
#define JSON_RESERVE (64u * (MF_MAX_ARRAY_DEPTH + 1u))
#define JSON_ROOM (MF_MAX_JSON_VALUE - JSON_RESERVE)
#define JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* A metadata value's JSON text as it is written, capped (above). */
struct meta_text {
	char *p;
	size_t len, cap;
	bool full;
};

/* The json-c objects a header's values are written through, made once and
 * set to each value in turn, and the string being built: a vocabulary of
 * 256k tokens costs no allocation per token. */
struct json_scratch {
	struct json_object *str, *i64, *u64, *boolean, *f32, *f64;
	/* "", never set: json-c 0.16 leaks the buffer of a string object set
	 * to the empty string after a longer one (json_object_set_string_len). */
	struct json_object *empty;
	char *text;
	size_t text_cap;
};

int json_scratch_init(struct json_scratch *r);
void json_scratch_free(struct json_scratch *r);
/* Append s to j (no cap: the caller checked). */
int meta_text_put(struct meta_text *j, const char *s, size_t n);
/* Append o's text while the whole stays within limit: 1 when it was
 * appended, 0 when it did not fit, or an error (o NULL: json-c ran out of
 * memory).  meta_text_put_new also drops o, which the caller made for this. */
int meta_text_put_value(struct meta_text *j, struct json_object *o, size_t limit);
int meta_text_put_new(struct meta_text *j, struct json_object *o, size_t limit);
/* s[0..n) as a JSON string in r->str, bytes that are not UTF-8 as U+FFFD,
 * tail appended as it is; NULL when memory ran out. */
struct json_object *json_scratch_string(struct json_scratch *r, const unsigned char *s, size_t n,
			       const char *tail);
/* A top-level string too long for the room left: its first characters and
 * "…(N more bytes)" inside the quotes. */
int meta_text_put_cut_string(struct json_scratch *r, struct meta_text *j, const unsigned char *s, size_t len,
			 bool *shown_p);

#endif
