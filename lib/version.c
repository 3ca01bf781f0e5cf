/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* version.c - the version of the library actually loaded, to compare with the headers'. */
#include "internal.h"

unsigned devcache_version(void)
{
	return DEVCACHE_VERSION;
}

const char *devcache_version_string(void)
{
	return DEVCACHE_VERSION_STRING;
}
