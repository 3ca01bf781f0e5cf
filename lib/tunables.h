/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunables.h - parsed tunable values, their origins, and the parsers for each type. */
#ifndef DEVCACHE_TUNABLES_H
#define DEVCACHE_TUNABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* ---- reading a value: the typed accessors ------------------------------------------------
 *
 * The core reads a tunable through these, never through struct tunable_value:
 *
 *   tun_get(set, name)                 its value, with the C type of its kind
 *   tun_auto(set, name, auto_value)    a SIZE that accepts "auto": auto_value for it
 *   tun_unlimited(set, name, value)    a SIZE that accepts "unlimited": value for it
 *   tunable_is_set(set, id)            whether a source set it (not its default)
 *   tunable_origin(set, id)            where its value came from
 *
 * name is the tunable's name as in tunables.def (tun_get(&ctx->tun, caching)).  One
 * function per tunable, generated from the table, picks the union member of its type,
 * so a BOOL read as a size does not compile; tun_get() of a tunable that may say "auto"
 * or "unlimited", and tun_auto() or tun_unlimited() of one that may not, do not compile
 * either. */

/* A LIST: its items; roundup_power2_divisions also resolved per interval. */
struct tunable_list {
	const char *const *items;
	size_t n_items;
	const unsigned *divisions; /* DIVISION_INTERVALS of them, for T_DIVISIONS */
};

static inline struct tunable_list tunable_value_list(const struct tunable_value *v)
{
	return (struct tunable_list){(const char *const *)v->items, v->n_items, v->divisions};
}

#define TUNABLE_CTYPE_BOOL bool
#define TUNABLE_CTYPE_INT long long
#define TUNABLE_CTYPE_FLOAT double
#define TUNABLE_CTYPE_SIZE uint64_t
#define TUNABLE_CTYPE_ENUM int
#define TUNABLE_CTYPE_STRING const char *
#define TUNABLE_CTYPE_LIST struct tunable_list
#define TUNABLE_READ_BOOL(v) ((v)->u.b)
#define TUNABLE_READ_INT(v) ((v)->u.i)
#define TUNABLE_READ_FLOAT(v) ((v)->u.f)
#define TUNABLE_READ_SIZE(v) ((v)->u.size)
#define TUNABLE_READ_ENUM(v) ((v)->u.e)
#define TUNABLE_READ_STRING(v) ((const char *)(v)->str)
#define TUNABLE_READ_LIST(v) tunable_value_list(v)

/* Each tunable's flags and type, as constants for the checks below. */
enum tunable_flags_of {
#define TUNABLE(name, type, def, range, flags, group, summary, doc) TUNF_##name = (flags),
#define COMPAT(name, pytorch_default, note)
#include "tunables.def"
#undef TUNABLE
#undef COMPAT
};
enum tunable_type_of {
#define TUNABLE(name, type, def, range, flags, group, summary, doc) TUNT_##name = TT_##type,
#define COMPAT(name, pytorch_default, note)
#include "tunables.def"
#undef TUNABLE
#undef COMPAT
};

/* tunable_get_NAME(set): the value of tunable NAME, with its type's C type. */
#define TUNABLE(name, type, def, range, flags, group, summary, doc)                                \
	static inline TUNABLE_CTYPE_##type tunable_get_##name(const struct tunable_set *set)       \
	{                                                                                          \
		return TUNABLE_READ_##type(&set->v[TUN_##name]);                                   \
	}
#define COMPAT(name, pytorch_default, note)
#include "tunables.def"
#undef TUNABLE
#undef COMPAT

/* 0, where the constant cond holds; otherwise the build fails. */
#define TUNABLE_REQUIRE(cond) (0 * sizeof(char[(cond) ? 1 : -1]))

/* The value of tunable name, typed; not for one that may say "auto" or "unlimited". */
#define tun_get(set, name)                                                                         \
	((void)TUNABLE_REQUIRE(!(TUNF_##name & (T_AUTO | T_UNLIMITED))), tunable_get_##name(set))

/* The value of a SIZE tunable, or instead where it says special. */
static inline uint64_t tunable_size_or(const struct tunable_value *v, enum tunable_special special,
				       uint64_t instead)
{
	return v->special == special ? instead : v->u.size;
}

/* TUN_name, where tunable name is a SIZE that accepts the word of flag. */
#define TUNABLE_SIZE_WITH(name, flag)                                                              \
	(TUN_##name + TUNABLE_REQUIRE((int)TUNT_##name == (int)TT_SIZE && (TUNF_##name & (flag))))

/* The one place of the "auto" rule: a SIZE tunable with T_AUTO, or
 * auto_value where it says auto. */
#define tun_auto(set, name, auto_value)                                                            \
	tunable_size_or(&(set)->v[TUNABLE_SIZE_WITH(name, T_AUTO)], TV_AUTO, (auto_value))
/* A SIZE tunable with T_UNLIMITED, or unlimited_value where it says unlimited. */
#define tun_unlimited(set, name, unlimited_value)                                                  \
	tunable_size_or(&(set)->v[TUNABLE_SIZE_WITH(name, T_UNLIMITED)], TV_UNLIMITED,             \
			(unlimited_value))

/* Where tunable id's value came from: "default", "FILE:LINE", "DEVCACHE_OPTIONS" ... */
static inline const char *tunable_origin(const struct tunable_set *set, enum tunable_id id)
{
	return set->v[id].origin ? set->v[id].origin : "default";
}

/* Whether a source set tunable id, rather than its default giving its value
 * (memory_fraction set to 1 is set; PyTorch's set_fraction counts it). */
static inline bool tunable_is_set(const struct tunable_set *set, enum tunable_id id)
{
	return strcmp(tunable_origin(set, id), "default") != 0;
}

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
