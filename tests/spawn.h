/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* spawn.h - run the devcache tool from a test and capture what it prints. */
#ifndef DEVCACHE_TEST_SPAWN_H
#define DEVCACHE_TEST_SPAWN_H

struct result {
	int status; /* exit status */
	char out[65536];
	char err[65536];
};

/* Run $TEST_TOOL with args (NULL-terminated) and extra environment entries
 * ("NAME=VALUE", or "-NAME" to unset); fails the test if it cannot. */
void spawn_tool(struct result *r, const char *const *env, const char *const *args);

/* As spawn_tool, but with standard error on a pseudo-terminal, as a person
 * at a terminal runs it: r->err holds what the terminal received, escape
 * sequences and carriage returns included. */
void spawn_tool_on_tty(struct result *r, const char *const *env, const char *const *args);

/* spawn_tool() into the test's own struct result r, the arguments written
 * out: RUN_TOOL(plain, "config", "--json"). */
#define RUN_TOOL(env, ...)                                                                         \
	do {                                                                                       \
		const char *args_[] = {__VA_ARGS__, NULL};                                         \
		spawn_tool(&r, env, args_);                                                        \
	} while (0)

/* text written to the file name in folder dir, for the tool to read; its
 * path, in one of eight buffers that later calls reuse in turn. */
const char *spawn_file(const char *dir, const char *name, const char *text);

#define RUN_TOOL_ON_TTY(env, ...)                                                                  \
	do {                                                                                       \
		const char *args_[] = {__VA_ARGS__, NULL};                                         \
		spawn_tool_on_tty(&r, env, args_);                                                 \
	} while (0)

#endif
