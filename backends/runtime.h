/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* runtime.h - what the vendor backend modules share: opening the vendor's runtime from the names a tunable lists. */
#ifndef DEVCACHE_BACKENDS_RUNTIME_H
#define DEVCACHE_BACKENDS_RUNTIME_H

#include "config.h"

#include <devcache-backend.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if ENABLE_NLS
#include <libintl.h>

/* A module's messages are in the library's catalogue (po/POTFILES.in lists
 * the modules).  The module binds the domain itself, as lib/i18n.c does and
 * to the same directory: it cannot know whether the core has translated
 * anything yet, and binding twice to one place is harmless. */
static inline void module_bind_domain(void)
{
	const char *dir = secure_getenv("DEVCACHE_LOCALEDIR");

	bindtextdomain(PACKAGE, dir && *dir ? dir : LOCALEDIR);
	bind_textdomain_codeset(PACKAGE, "UTF-8");
}

__attribute__((format_arg(1))) static inline const char *module_gettext(const char *msgid)
{
	static pthread_once_t bound = PTHREAD_ONCE_INIT;

	pthread_once(&bound, module_bind_domain);
	return dgettext(PACKAGE, msgid);
}
#define _(s) module_gettext(s)
#else
#define _(s) (s)
#endif

/* A module's tunables.def turned into its table, with TUNABLE defined as
 * MODULE_TUNABLE around the #include (see cuda.c). */
#define N_(s) s
#define MODULE_TYPE_BOOL "bool"
#define MODULE_TYPE_INT "int"
#define MODULE_TYPE_FLOAT "float"
#define MODULE_TYPE_SIZE "size"
#define MODULE_TYPE_ENUM "enum"
#define MODULE_TYPE_STRING "string"
#define MODULE_TYPE_LIST "list"
#define MODULE_TUNABLE(name_, type_, def_, range_, flags_, group_, summary_, doc_)             \
	{.name = #name_, .type = MODULE_TYPE_##type_, .default_value = def_, .range = range_,    \
	 .summary = summary_, .description = doc_},

/* dlopen() each name of the comma-separated list in the tunable, in turn,
 * until one loads; its name goes to name_buf, and why is emptied.  NULL
 * when none does, with the last failure in why ("the HIP runtime could not
 * be loaded: ..."). */
static inline void *runtime_open(const struct devcache_backend_host *host, const char *tunable,
				 const char *what, char *name_buf, size_t name_size, char *why,
				 size_t why_size)
{
	const char *list = host->tunable(host->cookie, tunable);
	char *copy = strdup(list ? list : ""), *save = NULL;
	void *lib = NULL;

	snprintf(why, why_size, _("%s is empty"), tunable);
	if (!copy) {
		snprintf(why, why_size, "%s", _("out of memory"));
		return NULL;
	}
	for (char *name = strtok_r(copy, ",", &save); name && !lib;
	     name = strtok_r(NULL, ",", &save)) {
		name += strspn(name, " ");
		if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
			snprintf(name_buf, name_size, "%s", name);
		else
			snprintf(why, why_size, _("%s could not be loaded: %s"), what, dlerror());
	}
	free(copy);
	/* Loaded: what was tried before says nothing now (a backend with
	 * devices gives why as a note on them). */
	if (lib)
		why[0] = '\0';
	return lib;
}

#endif
