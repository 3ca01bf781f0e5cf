/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* safetensors.h - what the safetensors reader's two files share: the scan's state and the helpers the entries borrow. */
#ifndef DEVCACHE_SAFETENSORS_H
#define DEVCACHE_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model-file.h"

/* safetensors-scan.c reads the header's text first, and checks all of it;
 * safetensors.c then reads the entries from the checked text, decoding
 * strings with the scan's scan_string(), which is why struct st_scan is
 * here and not private to the scan. */

/* json-c's default depth: an array in an array 32 deep is refused. */
#define ST_MAX_DEPTH 32

struct st_key {
	const char *name; /* decoded ("\u0061" is "a"), not NUL-terminated: in the
			   * text when it has no escape, else a copy of its own */
	uint32_t len : 31; /* a header is at most 100 MB */
	uint32_t owned : 1;
	uint32_t ord;      /* its place among the object's keys */
	uint64_t at;       /* of its opening quote, in the file */
};

struct st_keys {
	struct st_key *v;
	size_t n, cap;
};

struct st_scan {
	const struct devcache_model_file *mf;
	const unsigned char *s;
	size_t len;
	unsigned depth;                 /* containers open */
	char open[ST_MAX_DEPTH];        /* '{' or '[', outermost first */
	struct st_keys top;   /* the header object's keys */
	struct st_keys inner; /* keys of the object now open one level down */
};

/* Where s[i] of the header is in the file, for the messages. */
static inline uint64_t at(size_t i)
{
	return 8 + (uint64_t)i;
}

static inline bool digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* safetensors-scan.c: a string checked, and decoded when out is not NULL. */
int scan_string(const struct st_scan *sc, size_t i, size_t *end, char **out, size_t *out_len,
		bool *nul);

/* safetensors-scan.c: the whole first pass, and the header's keys in
 * sorted order. */
int scan_header(const struct devcache_model_file *mf, const char *text, size_t len,
		size_t **order_p, size_t *n_p, size_t *meta_p);

/* safetensors-scan.c: what the value at s is, in the messages' words. */
const char *json_kind_at(const char *s);

#endif
