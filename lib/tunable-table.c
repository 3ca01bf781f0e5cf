/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunable-table.c - tunables.def expanded into the table every other part reads. */
#include "config.h"

#include "tunable-table.h"

#include <string.h>

#ifndef BACKENDDIR
#error "BACKENDDIR must be defined by the build"
#endif

const struct tunable_def tunable_defs[TUN_COUNT] = {
#define TUNABLE(name_, type_, def_, range_, flags_, group_, summary_, doc_)                    \
	[TUN_##name_] = {#name_, TT_##type_, def_, range_, flags_, G_##group_, summary_, doc_},
#define COMPAT(name, pytorch_default, note)
#include "tunables.def"
#undef TUNABLE
#undef COMPAT
};

const struct compat_def compat_defs[] = {
#define TUNABLE(name, type, def, range, flags, group, summary, doc)
#define COMPAT(name_, default_, note_) {#name_, default_, note_},
#include "tunables.def"
#undef TUNABLE
#undef COMPAT
};

const size_t compat_count = sizeof compat_defs / sizeof compat_defs[0];

const char *tunable_type_name(enum tunable_type type)
{
	static const char *const names[] = {"bool", "int", "float", "size", "enum", "string", "list"};
	return names[type];
}

int tunable_type_find(const char *name)
{
	for (int t = TT_BOOL; t <= TT_LIST; t++)
		if (strcmp(tunable_type_name((enum tunable_type)t), name) == 0)
			return t;
	return -1;
}

const char *tunable_group_name(enum tunable_group group)
{
	static const char *const names[] = {"allocator", "model cache", "backends", "logging"};
	return names[group];
}
