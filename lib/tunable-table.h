/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunable-table.h - the compiled form of tunables.def, shared by the library and the man page generator. */
#ifndef DEVCACHE_TUNABLE_TABLE_H
#define DEVCACHE_TUNABLE_TABLE_H

#include <stddef.h>

#ifndef N_
#define N_(s) s
#endif

enum tunable_type { TT_BOOL, TT_INT, TT_FLOAT, TT_SIZE, TT_ENUM, TT_STRING, TT_LIST };

enum tunable_flag {
	T_MIB = 0x1,       /* a bare SIZE number is in MiB */
	T_AUTO = 0x2,      /* accepts "auto" */
	T_UNLIMITED = 0x4, /* accepts "unlimited" */
	T_PENDING = 0x8,   /* declared, no effect yet */
	T_DIVISIONS = 0x10 /* PyTorch's roundup_power2_divisions list */
};

enum tunable_group { G_ALLOCATOR, G_MODEL_CACHE, G_BACKENDS, G_LOGGING, G_COUNT };

struct tunable_def {
	const char *name;
	enum tunable_type type;
	const char *defval;
	const char *range;
	unsigned flags;
	enum tunable_group group;
	const char *summary;
	const char *doc;
};

struct compat_def {
	const char *name;
	const char *pytorch_default; /* the value that changes nothing in PyTorch */
	const char *note;            /* what PyTorch does with another value */
};

enum tunable_id {
#define TUNABLE(name, type, def, range, flags, group, summary, doc) TUN_##name,
#define COMPAT(name, pytorch_default, note)
#include "tunables.def"
#undef TUNABLE
#undef COMPAT
	TUN_COUNT
};

extern const struct tunable_def tunable_defs[TUN_COUNT];
extern const struct compat_def compat_defs[];
extern const size_t compat_count;

const char *tunable_type_name(enum tunable_type type);
/* The type named "bool", "int" ... "list", or -1. */
int tunable_type_find(const char *name);
const char *tunable_group_name(enum tunable_group group);

#endif
