/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* module-tunables.h - the tunables that backend modules declare, beside the core's table (tunables.h). */
#ifndef DEVCACHE_MODULE_TUNABLES_H
#define DEVCACHE_MODULE_TUNABLES_H

#include <stddef.h>

#include "tunables.h"

struct devcache_backend_tunable;
struct log_state;

struct module_tunable {
	struct tunable_def def; /* every string owned */
	char *module;
	struct tunable_value v;
	char *text; /* v formatted, for devcache_config_get and the module */
};

struct module_tunables {
	struct module_tunable *t;
	size_t n;
};

/* Check what a module declares and add it, with its defaults; on failure
 * why says what is malformed (DEVCACHE_EBACKEND), or that memory ran out
 * (DEVCACHE_ENOMEM), and nothing is added. */
int module_tunables_declare(struct module_tunables *mt, const char *module,
			    const struct devcache_backend_tunable *decl, char *why, size_t why_size);
const struct module_tunable *module_tunables_find(const struct module_tunables *mt,
						  const char *name);
/* Give mt's tunables the values of set's pending pairs that name them (the
 * pairs leave set).  Errors go to report when it is set, else the first
 * one is returned. */
int module_tunables_apply(struct module_tunables *mt, struct tunable_set *set,
			  config_report_fn report, void *user);
/* Empty set's pending pairs: one that names a module of not_loaded (found,
 * not opened) is ignored with a message, any other is an unknown tunable. */
int module_tunables_leftover(struct tunable_set *set, const struct module_tunables *mt,
			     const char *const *not_loaded, size_t n_not_loaded,
			     struct log_state *log, config_report_fn report, void *user);
void module_tunables_free_one(struct module_tunables *one);
void module_tunables_free(struct module_tunables *mt);

#endif
