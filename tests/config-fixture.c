/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* config-fixture.c - the configuration tests' fixture: a directory, a tunable set, a captured log. */
#include "config.h"

#include "config-fixture.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- captured log messages ---------------------------------------------- */

void capture_fn(void *user, enum devcache_log_level level, const char *message)
{
	struct capture *cap = user;

	if (cap->n < CAPTURE_MAX) {
		cap->level[cap->n] = level;
		snprintf(cap->text[cap->n], sizeof cap->text[cap->n], "%s", message);
	}
	cap->n++;
}

/* How many captured messages contain needle (at level, or any level when -1). */
size_t capture_count(const struct capture *cap, int level, const char *needle)
{
	size_t found = 0;

	for (size_t i = 0; i < cap->n && i < CAPTURE_MAX; i++)
		if ((level < 0 || (int)cap->level[i] == level) && strstr(cap->text[i], needle))
			found++;
	return found;
}

void capture_show(const struct capture *cap)
{
	for (size_t i = 0; i < cap->n && i < CAPTURE_MAX; i++)
		print_message("# log %d: %s\n", cap->level[i], cap->text[i]);
}

/* ---- fixture: a temporary directory, a tunable set, a log ----------------- */

/* Every DEVCACHE_* variable a test sets; teardown removes them all. */
static const char *const test_vars[] = {
	"DEVCACHE_CONF",   "DEVCACHE_OPTIONS",           "DEVCACHE_BACKEND_PATH",
	"DEVCACHE_OPTION", "DEVCACHE_MAX_SPLIT_SIZE_MB", "DEVCACHE_FROB",
	"DEVCACHE_CONFIG", "DEVCACHE_LOG_LEVEL",
};

static char *dup_env(const char *name)
{
	const char *v = getenv(name);

	return v ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *saved)
{
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
	free(saved);
}

int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fixture *fx = calloc(1, sizeof *fx);

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof fx->dir, "%s/devcache-test-config-XXXXXX",
		 tmp && *tmp == '/' ? tmp : "/tmp");
	if (!mkdtemp(fx->dir) || tunable_set_defaults(&fx->set)) {
		free(fx);
		return -1;
	}
	/* Messages pass straight to the capture, at every level. */
	log_init(&fx->log, capture_fn, &fx->cap);
	log_flush(&fx->log, DEVCACHE_LOG_DEBUG);
	fx->saved_xdg = dup_env("XDG_CONFIG_HOME");
	fx->saved_home = dup_env("HOME");
	*state = fx;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return type == FTW_DP ? rmdir(path) : unlink(path);
}

int teardown(void **state)
{
	struct fixture *fx = *state;

	devcache_close(fx->ctx);
	tunable_set_free(&fx->set);
	log_destroy(&fx->log);
	for (size_t i = 0; i < sizeof test_vars / sizeof *test_vars; i++)
		unsetenv(test_vars[i]);
	restore_env("XDG_CONFIG_HOME", fx->saved_xdg);
	restore_env("HOME", fx->saved_home);
	chmod(fx->dir, 0700);
	nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

/* Write text to DIR/name (creating DIR/sub/ when name has one) and return the path. */
const char *write_file(struct fixture *fx, const char *name, const char *text, char *path,
		       size_t size)
{
	FILE *f;

	for (const char *slash = strchr(name, '/'); slash; slash = strchr(slash + 1, '/')) {
		xsnprintf(path, size, "%s/%.*s", fx->dir, (int)(slash - name), name);
		if (mkdir(path, 0700) && errno != EEXIST)
			fail_msg("mkdir %s: %s", path, strerror(errno));
	}
	xsnprintf(path, size, "%s/%s", fx->dir, name);
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		fail_msg("cannot write %s: %s", path, strerror(errno));
	return path;
}

void report_fn(void *user, const char *message)
{
	struct fixture *fx = user;

	if (fx->n_reports < 8)
		snprintf(fx->reports[fx->n_reports], sizeof fx->reports[0], "%s", message);
	fx->n_reports++;
}

/* The value of a tunable in the fixture's set, formatted. */
const char *value(struct fixture *fx, enum tunable_id id)
{
	static char text[4096];

	tunable_format(id, &fx->set.v[id], text, sizeof text);
	return text;
}

/* The text kept for a name that may be a backend module's tunable. */
const char *pending(struct fixture *fx, const char *key)
{
	for (size_t i = 0; i < fx->set.n_pending; i++)
		if (strcmp(fx->set.pending[i].key, key) == 0)
			return fx->set.pending[i].value;
	fail_msg("%s is not pending", key);
	return NULL;
}

const char *origin(struct fixture *fx, enum tunable_id id)
{
	return fx->set.v[id].origin;
}

/* PATH:LINE, for comparing origins and messages. */
const char *at(const char *path, int line)
{
	static char buf[8][PATH_MAX + 16];
	static int next;
	char *b = buf[next++ % 8];

	snprintf(b, sizeof buf[0], "%s:%d", path, line);
	return b;
}

/* The value of name in ctx; its origin through origin_p. */
const char *ctx_get(devcache_ctx_t *ctx, const char *name, const char **origin_p)
{
	static char text[4096];
	int rc = devcache_config_get(ctx, name, text, sizeof text, origin_p);

	if (rc)
		fail_msg("devcache_config_get(%s): %d: %s", name, rc, devcache_last_error());
	return text;
}

int open_ex(struct fixture *fx, const char *options, unsigned flags)
{
	devcache_open_args_t args = {
		.struct_size = sizeof args,
		.options = options,
		.log_fn = capture_fn,
		.log_user = &fx->cap,
		.flags = flags,
	};

	devcache_close(fx->ctx);
	fx->ctx = NULL;
	memset(&fx->cap, 0, sizeof fx->cap);
	return devcache_open_ex(&fx->ctx, &args);
}

/* With files read, the system file (SYSCONFDIR) may set a value on some machines. */
bool system_file_present(void)
{
	return access(SYSCONFDIR "/devcache.conf", F_OK) == 0;
}

void assert_default_or_system(const char *orig)
{
	assert_non_null(orig);
	if (strcmp(orig, "default") != 0 && strncmp(orig, SYSCONFDIR "/devcache.conf:",
						       strlen(SYSCONFDIR "/devcache.conf:")) != 0)
		fail_msg("origin '%s': expected the default or the system file", orig);
}

/* Run alike from make check or by hand: no configuration from outside. */
void no_outside_config(void)
{
	unsetenv("DEVCACHE_CONF");
	unsetenv("DEVCACHE_OPTIONS");
	unsetenv("DEVCACHE_BACKEND_PATH");
}
