/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tool.h - what the subcommands of the devcache tool share. */
#ifndef DEVCACHE_TOOL_H
#define DEVCACHE_TOOL_H

#include "config.h"

#include <devcache.h>

#if ENABLE_NLS
#include <libintl.h>
#define _(s) gettext(s)
#else
#define _(s) (s)
#endif
#define N_(s) s

/* Exit statuses, documented in devcache(1). */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

struct tool {
	const char *options; /* -o */
	int verbose;         /* -v count */
};

void tool_error(const char *fmt, ...) DEVCACHE_PRINTF(1, 2);
/* The exit status a library error code calls for. */
int tool_status(int err);
/* Open a context with the tool's options; on failure print why and return
 * the exit status. */
int tool_open(const struct tool *t, devcache_ctx_t **ctx_p);
/* Find a device of an open context; on failure print why and return the
 * exit status: 2 for a malformed name, 1 for a device this machine lacks
 * (the same command works where it exists). */
int tool_device(devcache_ctx_t *ctx, const char *name, devcache_device_t **dev_p);
void tool_format_bytes(uint64_t bytes, char *buf, size_t size);

int cmd_info(const struct tool *t, int argc, char **argv);
int cmd_config(const struct tool *t, int argc, char **argv);
int cmd_replay(const struct tool *t, int argc, char **argv);
int cmd_inspect(const struct tool *t, int argc, char **argv);
int cmd_load(const struct tool *t, int argc, char **argv);
int cmd_dump(const struct tool *t, int argc, char **argv);
int cmd_demo(const struct tool *t, int argc, char **argv);

#endif
