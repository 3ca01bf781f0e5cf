/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* i18n.c - message translation in the library's own text domain. */
#include "internal.h"

#include <stdlib.h>

#if ENABLE_NLS
#include <libintl.h>

static pthread_once_t bound = PTHREAD_ONCE_INIT;

/* A library binds its domain but never calls textdomain(): that belongs to the
 * program.  DEVCACHE_LOCALEDIR lets an uninstalled build find its catalogues. */
static void bind_domain(void)
{
	const char *dir = secure_getenv("DEVCACHE_LOCALEDIR");

	bindtextdomain(PACKAGE, dir && *dir ? dir : LOCALEDIR);
	bind_textdomain_codeset(PACKAGE, "UTF-8");
}

const char *i18n_gettext(const char *msgid)
{
	pthread_once(&bound, bind_domain);
	return dgettext(PACKAGE, msgid);
}

const char *i18n_ngettext(const char *one, const char *many, unsigned long n)
{
	pthread_once(&bound, bind_domain);
	return dngettext(PACKAGE, one, many, n);
}
#else
const char *i18n_gettext(const char *msgid)
{
	return msgid;
}

const char *i18n_ngettext(const char *one, const char *many, unsigned long n)
{
	return n == 1 ? one : many;
}
#endif
