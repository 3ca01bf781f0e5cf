/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* config-fixture.h - what the configuration tests share: a directory, a tunable set, a captured log. */
#ifndef DEVCACHE_TEST_CONFIG_FIXTURE_H
#define DEVCACHE_TEST_CONFIG_FIXTURE_H

#include "tap.h"

#include <limits.h>
#include <stdbool.h>

#include "internal.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* snprintf that fails the test rather than cut a path short. */
#define xsnprintf(buf, size, ...)                                                                \
	do {                                                                                       \
		if ((size_t)snprintf(buf, size, __VA_ARGS__) >= (size_t)(size))                    \
			fail_msg("%s:%d: text too long", __FILE__, __LINE__);                      \
	} while (0)

/* ---- captured log messages ---------------------------------------------- */

#define CAPTURE_MAX 64

struct capture {
	size_t n;
	enum devcache_log_level level[CAPTURE_MAX];
	char text[CAPTURE_MAX][1024];
};

/* A devcache_log_fn keeping what it is given in a struct capture (user). */
void capture_fn(void *user, enum devcache_log_level level, const char *message);
/* How many captured messages contain needle (at level, or any level when -1). */
size_t capture_count(const struct capture *cap, int level, const char *needle);
/* Each captured message, as a TAP comment. */
void capture_show(const struct capture *cap);

/* ---- fixture: a temporary directory, a tunable set, a log ----------------- */

struct fixture {
	char dir[PATH_MAX];
	struct tunable_set set;
	struct log_state log;
	struct capture cap;
	devcache_ctx_t *ctx;
	char *saved_xdg, *saved_home;
	/* what a config_report_fn received */
	size_t n_reports;
	char reports[8][1024];
};

/* A fixture for state: every DEVCACHE_* variable a test sets is removed,
 * XDG_CONFIG_HOME and HOME restored, the directory removed, at teardown. */
int setup(void **state);
int teardown(void **state);
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* Run alike from make check or by hand: no configuration from outside. */
void no_outside_config(void);

/* Write text to DIR/name (creating DIR/sub/ when name has one) and return the path. */
const char *write_file(struct fixture *fx, const char *name, const char *text, char *path,
		       size_t size);
/* A config_report_fn: keeps what it is given in fx->reports. */
void report_fn(void *user, const char *message);
/* The value of a tunable in the fixture's set, formatted. */
const char *value(struct fixture *fx, enum tunable_id id);
/* The text kept for a name that may be a backend module's tunable. */
const char *pending(struct fixture *fx, const char *key);
const char *origin(struct fixture *fx, enum tunable_id id);
/* PATH:LINE, for comparing origins and messages. */
const char *at(const char *path, int line);
/* The value of name in ctx; its origin through origin_p. */
const char *ctx_get(devcache_ctx_t *ctx, const char *name, const char **origin_p);
/* devcache_open_ex() into fx->ctx (closing the one before), logging to fx->cap. */
int open_ex(struct fixture *fx, const char *options, unsigned flags);
/* With files read, the system file (SYSCONFDIR) may set a value on some machines. */
bool system_file_present(void);
/* Fails unless orig is "default" or a line of the system file. */
void assert_default_or_system(const char *orig);

#endif
