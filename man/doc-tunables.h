/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* doc-tunables.h - every tunable the manual documents: the core's, then those of the modules shipped with libdevcache. */
#ifndef DEVCACHE_DOC_TUNABLES_H
#define DEVCACHE_DOC_TUNABLES_H

#include "../lib/tunable-table.h"

enum module_tunable_id {
#define TUNABLE(name, type, def, range, flags, group, summary, doc) MODTUN_##name,
#include "../backends/modules.h"
#undef TUNABLE
	MODULE_TUNABLE_COUNT
};

#define DOC_TUNABLE_COUNT (TUN_COUNT + MODULE_TUNABLE_COUNT)

/* The core's table (the same order as tunable_defs), then the modules'. */
extern const struct tunable_def doc_tunable_defs[DOC_TUNABLE_COUNT];
/* The module that declares each, or NULL for the core. */
extern const char *const doc_tunable_module[DOC_TUNABLE_COUNT];

#endif
