/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunables.h - parsed tunable values, their origins, and the parsers for each type. */
#ifndef DEVCACHE_TUNABLES_H
#define DEVCACHE_TUNABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "tunable-table.h"

enum tunable_special { TV_VALUE = 0, TV_AUTO, TV_UNLIMITED };

/* roundup_power2_divisions, resolved: one entry per power-of-two interval
 * from 1 MiB (index 0) to 32 GiB and above (index 15), as PyTorch. */
#define DIVISION_INTERVALS 16

struct tunable_value {
	enum tunable_special special;
	union {
		bool b;
		long long i;
		double f;
		uint64_t size;
		int e;
	} u;
	char *str;      /* STRING; LIST: the items joined by commas */
	char **items;   /* LIST */
	size_t n_items;
	unsigned divisions[DIVISION_INTERVALS]; /* T_DIVISIONS */
	char *origin;   /* "default", "FILE:LINE", "DEVCACHE_OPTIONS", ... */
};

/* A pair whose key is no tunable of the core's: it may be a backend
 * module's, known only once the modules are found (lib/module-tunables.c). */
struct pending_pair {
	char *key, *value, *origin;
};

/* Receives each error of a configuration source when a caller wants all of
 * them rather than the first. */
typedef void (*config_report_fn)(void *user, const char *message);

/* At most this many distinct pending keys: more is an error (devcache.conf(5)). */
#define PENDING_MAX 256u

struct tunable_set {
	struct tunable_value v[TUN_COUNT];
	struct pending_pair *pending;
	size_t n_pending;
};

/* tunable-names.c */
int tunable_find(const char *name);
int compat_find(const char *name);
/* Case-insensitive edit distance, capped: enough to catch typos.  SIZE_MAX
 * for names further apart than 3, or of 63 bytes or more. */
size_t name_distance(const char *a, const char *b);
/* The known name closest to name, or NULL when none is close. */
const char *tunable_suggest(const char *name);

/* tunables.c */
/* Parse text as the value of tunable id into out.  On failure returns
 * DEVCACHE_ECONFIG and writes what is wrong and what is accepted to why. */
int tunable_parse(enum tunable_id id, const char *text, struct tunable_value *out, char *why,
		  size_t why_size);
int tunable_parse_def(const struct tunable_def *def, const char *text, struct tunable_value *out,
		      char *why, size_t why_size);
void tunable_value_free(struct tunable_value *v);
/* Replace set->v[id] by value (taken over), recording origin. */
int tunable_assign(struct tunable_set *set, enum tunable_id id, struct tunable_value *value,
		   const char *origin);
int tunable_set_defaults(struct tunable_set *set);
/* Keep key = value for later; a later source replaces an earlier one. */
int tunable_set_pending(struct tunable_set *set, const char *key, const char *value,
			const char *origin);
void tunable_set_free(struct tunable_set *set);
/* Format as it would be written in devcache.conf. */
void tunable_format(enum tunable_id id, const struct tunable_value *v, char *buf, size_t size);
void tunable_format_def(const struct tunable_def *def, const struct tunable_value *v, char *buf,
			size_t size);
/* s past its leading white space. */
const char *skip_space(const char *s);

/* tunable-lists.c: what tunable_parse_def() hands on */
/* A copy of len bytes at s without the white space at either end; NULL
 * when out of memory. */
char *trim_dup(const char *s, size_t len);
/* Parse text as the list value of def into v: its items, v->str the
 * list as it is written back, and for roundup_power2_divisions
 * v->divisions; DEVCACHE_ECONFIG or DEVCACHE_ENOMEM with why written. */
int parse_list(const struct tunable_def *def, const char *text, struct tunable_value *v,
	       char *why, size_t why_size);

#endif
