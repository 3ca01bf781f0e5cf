/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* doc-tunables.c - the core's tunables.def and the modules' in one table, for mkman and the documentation test. */
#include "config.h"

#include "doc-tunables.h"

#define ENTRY(name_, type_, def_, range_, flags_, group_, summary_, doc_)                       \
	{#name_, TT_##type_, def_, range_, flags_, G_##group_, summary_, doc_},
#define COMPAT(name, pytorch_default, note)

const struct tunable_def doc_tunable_defs[DOC_TUNABLE_COUNT] = {
#define TUNABLE ENTRY
#include "../lib/tunables.def"
#include "../backends/modules.h"
#undef TUNABLE
};

#define NONE(name, type, def, range, flags, group, summary, doc) NULL,
#define MODULE(name, type, def, range, flags, group, summary, doc) BACKEND_MODULE,

const char *const doc_tunable_module[DOC_TUNABLE_COUNT] = {
#define TUNABLE NONE
#include "../lib/tunables.def"
#undef TUNABLE
#define TUNABLE MODULE
#include "../backends/modules.h"
#undef TUNABLE
};
