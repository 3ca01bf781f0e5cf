/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tool.h - what the subcommands of the devcache tool share. */
#ifndef DEVCACHE_TOOL_H
#define DEVCACHE_TOOL_H

#include "config.h"

#include <stdbool.h>
#include <stdio.h>

#include <devcache.h>

#include "../lib/bytes.h" /* format_bytes(), built into the tool too */
#include "../lib/utf8.h"  /* likewise */

#if ENABLE_NLS
#include <libintl.h>
#define _(s) gettext(s)
#define P_(one, many, n) ngettext(one, many, n)
#else
#define _(s) (s)
#define P_(one, many, n) ((n) == 1 ? (one) : (many))
#endif
#define N_(s) s

/* Exit statuses, documented in devcache(1). */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_OOM = 3 };

/* The width of the terminal the tool lays its text out for. */
#define TOOL_COLUMNS 80

struct tool {
	char *options; /* every -o, before and after the command, comma-joined */
	int verbose;   /* -v count */
};

/* The options every command takes, after the command as before it: getopt's
 * short options and long options, and their handler. */
#define TOOL_SHORTOPTS "o:vh"
#define TOOL_LONGOPTS                                                                      \
	{"options", required_argument, NULL, 'o'}, {"verbose", no_argument, NULL, 'v'},    \
		{"help", no_argument, NULL, 'h'}
/* -o or -v: returns -1 to go on; anything else: says so, returns the status. */
int tool_common_option(struct tool *t, int c, const char *arg);
/* The lines of a command's --help that describe those options. */
void tool_print_common_options(void);
bool tool_add_options(struct tool *t, const char *more);

/* "devcache COMMAND: MESSAGE" on stderr. */
void tool_error(const char *fmt, ...) DEVCACHE_PRINTF(1, 2);
/* "Try 'devcache COMMAND --help'..." on stderr; returns EXIT_USAGE. */
int tool_try_help(void);
/* After a command's options: 0 where no operand is left, else an error
 * naming the first and EXIT_USAGE. */
int tool_no_operands(int argc, char **argv);
/* The exit status a library error code calls for. */
int tool_status(int err);
/* Open a context with the tool's options; on failure print why and return
 * the exit status. */
int tool_open(const struct tool *t, devcache_ctx_t **ctx_p);
/* Find a device of an open context; on failure print why and return the
 * exit status: 2 for a malformed name, 1 for a device this machine lacks
 * (the same command works where it exists). */
int tool_device(devcache_ctx_t *ctx, const char *name, devcache_device_t **dev_p);
/* A size as --memory takes it: bytes, or a number with K, M, G or T (KiB,
 * MiB ...: powers of 1024; "24G", "80GiB", "1.5T").  false where text is
 * not one, or is 0. */
bool tool_parse_size(const char *text, uint64_t *bytes_p);
/* A "KEY: N kB" line of a /proc file (VmHWM of /proc/self/status,
 * MemAvailable of /proc/meminfo), in bytes; 0 where it cannot be read. */
uint64_t tool_proc_kb(const char *path, const char *key);
/* Whether -o gave tunable name. */
bool tool_option_given(const struct tool *t, const char *name);
/* A tunable's origin as the user knows it: -o is the command line. */
const char *tool_origin(const char *origin);

/* The columns text takes on the terminal: its characters (UTF-8). */
size_t tool_width(const char *s);
/* text on out, its lines broken at spaces (or anywhere in a word longer than
 * a line) so that none passes TOOL_COLUMNS; the first line starts with first
 * (already counted in first_width), the others with indent spaces. */
void tool_wrap(FILE *out, size_t first_width, size_t indent, const char *text);

/* text from input (a name, a key, a value, a path) as it may reach the
 * terminal: control characters and bytes that are not UTF-8 as \xNN
 * (utf8_show(), as the library's messages have them).  text itself where
 * nothing needs it, else a buffer of the tool's that the eighth next call
 * reuses; "?" without memory. */
const char *tool_shown(const char *text);

/* A copy of text with each byte that is not part of valid UTF-8 replaced by
 * U+FFFD, for JSON; NULL without memory. */
char *tool_utf8_clean(const char *text);

int cmd_info(struct tool *t, int argc, char **argv);
int cmd_config(struct tool *t, int argc, char **argv);
int cmd_replay(struct tool *t, int argc, char **argv);
int cmd_tune(struct tool *t, int argc, char **argv);
int cmd_inspect(struct tool *t, int argc, char **argv);
int cmd_load(struct tool *t, int argc, char **argv);
int cmd_dump(struct tool *t, int argc, char **argv);
int cmd_demo(struct tool *t, int argc, char **argv);

#endif
