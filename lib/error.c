/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* error.c - error codes, their translated names, and the thread-local detail message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Like errno: one per thread, so concurrent calls never see each other's. */
static __thread char detail[1024];

/* The message may quote the one it replaces (devcache_last_error() as an
 * argument): it is written aside first, as vsnprintf() must not read
 * what it writes. */
int err_setv(int code, const char *fmt, va_list ap)
{
	char text[sizeof detail];

	vsnprintf(text, sizeof text, fmt, ap);
	memcpy(detail, text, sizeof detail);
	return code;
}

int err_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_setv(code, fmt, ap);
	va_end(ap);
	return code;
}

void err_clear(void)
{
	detail[0] = '\0';
}

const char *devcache_last_error(void)
{
	return detail;
}

static const char *const messages[] = {
	[0] = N_("Success"),
	[-DEVCACHE_EINVAL] = N_("Invalid argument"),
	[-DEVCACHE_ENOMEM] = N_("Out of memory"),
	[-DEVCACHE_ECONFIG] = N_("Configuration error"),
	[-DEVCACHE_ENODEV] = N_("No such device"),
	[-DEVCACHE_EBACKEND] = N_("Backend or driver failure"),
	[-DEVCACHE_EABI] = N_("Backend module ABI mismatch"),
	[-DEVCACHE_EIO] = N_("Input/output error"),
	[-DEVCACHE_EFORMAT] = N_("Malformed file"),
	[-DEVCACHE_ENOTSUP] = N_("Not supported"),
	[-DEVCACHE_EBUSY] = N_("Resource busy"),
	[-DEVCACHE_ECANCELED] = N_("Operation canceled"),
	[-DEVCACHE_ENOENT] = N_("No such entry"),
	[-DEVCACHE_EAGAIN] = N_("Not ready yet"),
};

const char *devcache_strerror(int err)
{
	if (err > 0 || err < DEVCACHE_ERROR_MIN)
		return _("Unknown error");
	return _(messages[-err]);
}
