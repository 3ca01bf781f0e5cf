/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* runtime.h - what the vendor backend modules share: opening the vendor's runtime from the names a tunable lists. */
#ifndef DEVCACHE_BACKENDS_RUNTIME_H
#define DEVCACHE_BACKENDS_RUNTIME_H

#include <devcache-backend.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dlopen() each name of the comma-separated list in the tunable, in turn,
 * until one loads; its name goes to name_buf.  NULL when none does, with
 * the last failure in why ("the HIP runtime could not be loaded: ..."). */
static inline void *runtime_open(const struct devcache_backend_host *host, const char *tunable,
				 const char *what, char *name_buf, size_t name_size, char *why,
				 size_t why_size)
{
	const char *list = host->tunable(host->cookie, tunable);
	char *copy = strdup(list ? list : ""), *save = NULL;
	void *lib = NULL;

	snprintf(why, why_size, "%s is empty", tunable);
	if (!copy) {
		snprintf(why, why_size, "out of memory");
		return NULL;
	}
	for (char *name = strtok_r(copy, ",", &save); name && !lib;
	     name = strtok_r(NULL, ",", &save)) {
		name += strspn(name, " ");
		if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
			snprintf(name_buf, name_size, "%s", name);
		else
			snprintf(why, why_size, "%s could not be loaded: %s", what, dlerror());
	}
	free(copy);
	return lib;
}

#endif
