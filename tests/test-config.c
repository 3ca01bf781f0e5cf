/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-config.c - option strings, configuration files, the environment, precedence and origins. */
#include "config.h"

#include "tap.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void capture_fn(void *user, enum devcache_log_level level, const char *message)
{
	struct capture *cap = user;

	if (cap->n < CAPTURE_MAX) {
		cap->level[cap->n] = level;
		snprintf(cap->text[cap->n], sizeof cap->text[cap->n], "%s", message);
	}
	cap->n++;
}

/* How many captured messages contain needle (at level, or any level when -1). */
static size_t capture_count(const struct capture *cap, int level, const char *needle)
{
	size_t found = 0;

	for (size_t i = 0; i < cap->n && i < CAPTURE_MAX; i++)
		if ((level < 0 || (int)cap->level[i] == level) && strstr(cap->text[i], needle))
			found++;
	return found;
}

static void capture_show(const struct capture *cap)
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

static int setup(void **state)
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

static int teardown(void **state)
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
static const char *write_file(struct fixture *fx, const char *name, const char *text, char *path,
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

static void report_fn(void *user, const char *message)
{
	struct fixture *fx = user;

	if (fx->n_reports < 8)
		snprintf(fx->reports[fx->n_reports], sizeof fx->reports[0], "%s", message);
	fx->n_reports++;
}

/* The value of a tunable in the fixture's set, formatted. */
static const char *value(struct fixture *fx, enum tunable_id id)
{
	static char text[4096];

	tunable_format(id, &fx->set.v[id], text, sizeof text);
	return text;
}

/* The text kept for a name that may be a backend module's tunable. */
static const char *pending(struct fixture *fx, const char *key)
{
	for (size_t i = 0; i < fx->set.n_pending; i++)
		if (strcmp(fx->set.pending[i].key, key) == 0)
			return fx->set.pending[i].value;
	fail_msg("%s is not pending", key);
	return NULL;
}

static const char *origin(struct fixture *fx, enum tunable_id id)
{
	return fx->set.v[id].origin;
}

/* PATH:LINE, for comparing origins and messages. */
static const char *at(const char *path, int line)
{
	static char buf[8][PATH_MAX + 16];
	static int next;
	char *b = buf[next++ % 8];

	snprintf(b, sizeof buf[0], "%s:%d", path, line);
	return b;
}

/* The value of name in ctx; its origin through origin_p. */
static const char *ctx_get(devcache_ctx_t *ctx, const char *name, const char **origin_p)
{
	static char text[4096];
	int rc = devcache_config_get(ctx, name, text, sizeof text, origin_p);

	if (rc)
		fail_msg("devcache_config_get(%s): %d: %s", name, rc, devcache_last_error());
	return text;
}

static int open_ex(struct fixture *fx, const char *options, unsigned flags)
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
static bool system_file_present(void)
{
	return access(SYSCONFDIR "/devcache.conf", F_OK) == 0;
}

static void assert_default_or_system(const char *orig)
{
	assert_non_null(orig);
	if (strcmp(orig, "default") != 0 && strncmp(orig, SYSCONFDIR "/devcache.conf:",
						       strlen(SYSCONFDIR "/devcache.conf:")) != 0)
		fail_msg("origin '%s': expected the default or the system file", orig);
}

/* ---- option strings ------------------------------------------------------------ */

static void string_pairs(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:8,log_level:debug", "TEST", &fx->log), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_string_equal(origin(fx, TUN_load_workers), "TEST");
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_DEBUG);
	assert_string_equal(origin(fx, TUN_log_level), "TEST");
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");
	assert_int_equal(fx->cap.n, 0);
}

static void string_equals_and_spaces(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     " load_workers = 8 ,\tlog_level=  info , "
					     "staging_buffer_size : 1M ,caching:off",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_INFO);
	assert_int_equal(fx->set.v[TUN_staging_buffer_size].u.size, MiB);
	assert_false(fx->set.v[TUN_caching].u.b);
	assert_string_equal(origin(fx, TUN_caching), "TEST");
}

static void string_brackets_protect_commas(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "backends:[cuda,hip],hip_library:[a.so, b.so],"
					     "roundup_power2_divisions:[64:8,256:4],load_workers:3",
					     "TEST", &fx->log),
			 0);
	assert_string_equal(value(fx, TUN_backends), "[cuda,hip]");
	assert_int_equal(fx->set.v[TUN_backends].n_items, 2);
	assert_string_equal(fx->set.v[TUN_backends].items[1], "hip");
	/* A module's tunable waits, as written, until the modules are found. */
	assert_string_equal(pending(fx, "hip_library"), "[a.so, b.so]");
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[6], 8);
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[7], 0);
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[8], 4);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 3);
}

static void string_list_continuation(void **state)
{
	struct fixture *fx = *state;
	const struct tunable_value *b = &fx->set.v[TUN_backends];

	assert_int_equal(config_apply_string(&fx->set,
					     "backends:cuda,hip,^ze,load_workers:3,"
					     "hip_library:a.so, b.so",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(b->n_items, 3);
	assert_string_equal(b->items[0], "cuda");
	assert_string_equal(b->items[1], "hip");
	assert_string_equal(b->items[2], "^ze");
	assert_string_equal(b->origin, "TEST");
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 3);
	assert_string_equal(pending(fx, "hip_library"), "a.so,b.so");
	assert_int_equal(config_apply_string(&fx->set, "backends=cuda,,hip,", "TEST", &fx->log), 0);
	assert_string_equal(value(fx, TUN_backends), "cuda,hip");
}

static void string_item_without_colon(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:8,oops", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'oops'");
	assert_int_equal(config_apply_string(&fx->set, "log_level:debug, cuda", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'cuda'");
	assert_int_equal(config_apply_string(&fx->set, "oops", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: expected KEY:VALUE, found 'oops'");
	/* a bracketed list is complete: no continuation after it */
	assert_int_equal(config_apply_string(&fx->set, "backends:[cuda],hip", "TEST", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: expected KEY:VALUE, found 'hip'");
	assert_int_equal(config_apply_string(&fx->set, ":5", "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "TEST: missing key before ':5'");
}

/* "backends:host,host,..." of exactly size bytes, as long lists are
 * written: NULL-terminated, to free; *items_p says how many items. */
static char *long_list(size_t size, size_t *items_p)
{
	static const char head[] = "backends:host";
	char *text = malloc(size + 1);

	assert_non_null(text);
	assert_true(size >= sizeof head - 1);
	memcpy(text, head, sizeof head - 1);
	size_t len = sizeof head - 1, items = 1;
	/* ",host" while more than 6 bytes are left, then ",h" to ",hhhhh"
	 * to end exactly */
	assert_true(size - len > 6);
	for (; size - len > 6; items++, len += 5)
		memcpy(text + len, ",host", 5);
	text[len++] = ',';
	memset(text + len, 'h', size - len);
	text[size] = '\0';
	items++;
	*items_p = items;
	return text;
}

/* A list's continuations once made the parse quadratic (a 1 MB list took
 * most of a minute): a string of one byte more than CONFIG_OPTIONS_MAX is
 * refused, naming the limit, before any of it is parsed; one of exactly
 * CONFIG_OPTIONS_MAX bytes, one long list, parses whole. */
static void string_length_limit(void **state)
{
	struct fixture *fx = *state;
	const struct tunable_value *b = &fx->set.v[TUN_backends];
	char expect[256];
	size_t items;
	char *text = malloc(CONFIG_OPTIONS_MAX + 2);

	/* first one long value, which any parser reads quickly */
	assert_non_null(text);
	memset(text, 'a', CONFIG_OPTIONS_MAX + 1);
	memcpy(text, "backend_path:/", strlen("backend_path:/"));
	text[CONFIG_OPTIONS_MAX + 1] = '\0';
	xsnprintf(expect, sizeof expect,
		  "%s: option string of %u bytes is longer than the limit of %u bytes", "TEST",
		  CONFIG_OPTIONS_MAX + 1, CONFIG_OPTIONS_MAX);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_backend_path), "default");
	free(text);

	text = long_list(CONFIG_OPTIONS_MAX + 1, &items);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_backends), "default");
	/* the same from devcache_open, naming its source */
	assert_int_equal(devcache_open(&fx->ctx, text), DEVCACHE_ECONFIG);
	assert_null(fx->ctx);
	assert_contains(devcache_last_error(), "devcache_open: option string of ");
	free(text);

	text = long_list(CONFIG_OPTIONS_MAX, &items);
	assert_int_equal(strlen(text), CONFIG_OPTIONS_MAX);
	assert_int_equal(config_apply_string(&fx->set, text, "TEST", &fx->log), 0);
	assert_int_equal(b->n_items, items);
	assert_string_equal(b->items[0], "host");
	assert_string_equal(b->items[items / 2], "host");
	assert_int_equal(strlen(b->str), CONFIG_OPTIONS_MAX - strlen("backends:"));
	assert_string_equal(origin(fx, TUN_backends), "TEST");
	free(text);
}

static void string_empty_items_skipped(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, ",,load_workers:8,, ,log_level:error,", "TEST",
					     &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_ERROR);
	assert_int_equal(config_apply_string(&fx->set, "", "TEST", &fx->log), 0);
	assert_int_equal(config_apply_string(&fx->set, " , ", "TEST", &fx->log), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 8);
}

static void string_pytorch_paste(void **state)
{
	static const unsigned table[DIVISION_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1,
							   8, 8, 8, 8, 8, 8, 8};
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "max_split_size_mb:512,roundup_power2_divisions:[256:1,"
					     "512:2,>:8],garbage_collection_threshold:0.6,"
					     "expandable_segments:True",
					     "DEVCACHE_OPTIONS", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].special, TV_VALUE);
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].u.size, 512 * MiB);
	assert_memory_equal(fx->set.v[TUN_roundup_power2_divisions].divisions, table, sizeof table);
	assert_string_equal(value(fx, TUN_roundup_power2_divisions), "[256:1,512:2,>:8]");
	assert_true(fx->set.v[TUN_garbage_collection_threshold].u.f == 0.6);
	assert_true(fx->set.v[TUN_expandable_segments].u.b);
	assert_string_equal(origin(fx, TUN_max_split_size_mb), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_roundup_power2_divisions), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_garbage_collection_threshold), "DEVCACHE_OPTIONS");
	assert_string_equal(origin(fx, TUN_expandable_segments), "DEVCACHE_OPTIONS");
	assert_int_equal(fx->cap.n, 0);
}

static void string_compat_keys(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set,
					     "backend:native,release_lock_on_cudamalloc:True,"
					     "pinned_use_cuda_host_register:true,"
					     "pinned_num_register_threads:8,load_workers:5",
					     "TEST", &fx->log),
			 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 5);
	assert_string_equal(origin(fx, TUN_backends), "default");
	assert_int_equal(fx->cap.n, 4);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO, "accepts and ignores"), 4);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_INFO);
	assert_string_equal(fx->cap.text[0],
			    "TEST: backend is a PyTorch option that libdevcache accepts and ignores "
			    "(PyTorch's choice between its native allocator and cudaMallocAsync)");
	assert_contains(fx->cap.text[1], "TEST: release_lock_on_cudamalloc is a PyTorch option");
	assert_contains(fx->cap.text[3], "TEST: pinned_num_register_threads is a PyTorch option");
	/* any value: PyTorch's, not ours, to check */
	assert_int_equal(config_apply_string(&fx->set, "backend:cudaMallocAsync,expandable_segments:true",
					     "TEST", &fx->log),
			 0);
	assert_true(fx->set.v[TUN_expandable_segments].u.b);
}

static void string_unknown_key(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "max_split_size:512", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: unknown tunable 'max_split_size' "
						   "(did you mean 'max_split_size_mb'?)");
	assert_int_equal(config_apply_string(&fx->set, "garbage_colection_threshold:0.6", "devcache_open",
					     &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: unknown tunable 'garbage_colection_threshold' (did you mean "
			    "'garbage_collection_threshold'?)");
	assert_int_equal(config_apply_string(&fx->set, "frobnicate:1", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "DEVCACHE_OPTIONS: unknown tunable 'frobnicate' "
						   "(devcache config lists them all)");
	assert_string_equal(origin(fx, TUN_max_split_size_mb), "default");
}

static void string_bad_value(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(config_apply_string(&fx->set, "load_workers:0", "TEST", &fx->log), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "TEST: load_workers: '0' is out of range (accepted: at least 1 and at most 64)");
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 2);
	assert_string_equal(origin(fx, TUN_load_workers), "default");
	assert_int_equal(config_apply_string(&fx->set, "max_split_size_mb:abc", "DEVCACHE_OPTIONS", &fx->log),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc' (expected a size in "
			    "MiB such as 512, or with a unit such as 2G, or unlimited)");
}

/* ---- configuration files ------------------------------------------------------- */

static void file_syntax(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "syntax.conf",
		   "# libdevcache test configuration\n"
		   "   # an indented comment\n"
		   "\n"
		   "load_workers = 8\n"
		   "log_level: debug\n"
		   "staging_buffers=6   # six buffers\n"
		   "trace = /tmp/a#b\n"
		   "backends = [cuda, hip]   \n"
		   "\tkeep_ram_copy\t=\tfalse\n"
		   "mmap = false\r\n"
		   "max_split_size_mb:512\t# PyTorch's unit\n"
		   "roundup_power2_divisions = [256:1,512:2,>:8]",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_string_equal(value(fx, TUN_load_workers), "8");
	assert_string_equal(origin(fx, TUN_load_workers), at(path, 4));
	assert_string_equal(value(fx, TUN_log_level), "debug");
	assert_string_equal(origin(fx, TUN_log_level), at(path, 5));
	assert_string_equal(value(fx, TUN_staging_buffers), "6");
	assert_string_equal(origin(fx, TUN_staging_buffers), at(path, 6));
	assert_string_equal(value(fx, TUN_trace), "/tmp/a#b");
	assert_string_equal(value(fx, TUN_backends), "[cuda,hip]");
	assert_string_equal(origin(fx, TUN_backends), at(path, 8));
	assert_string_equal(value(fx, TUN_keep_ram_copy), "false");
	assert_string_equal(origin(fx, TUN_keep_ram_copy), at(path, 9));
	assert_string_equal(value(fx, TUN_mmap), "false");
	assert_string_equal(origin(fx, TUN_mmap), at(path, 10));
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].u.size, 512 * MiB);
	assert_string_equal(origin(fx, TUN_max_split_size_mb), at(path, 11));
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[9], 8);
	assert_string_equal(origin(fx, TUN_roundup_power2_divisions), at(path, 12));
	assert_string_equal(origin(fx, TUN_caching), "default");
}

static void file_crlf(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "crlf.conf",
		   "# written on Windows\r\nload_workers: 7\r\n\r\nlog_level = info  # note\r\n"
		   "trace = /tmp/t\r\n",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 7);
	assert_string_equal(origin(fx, TUN_load_workers), at(path, 2));
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_INFO);
	assert_string_equal(origin(fx, TUN_log_level), at(path, 4));
	assert_string_equal(fx->set.v[TUN_trace].str, "/tmp/t");
}

static void file_errors_carry_line(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 256];

	write_file(fx, "range.conf", "log_level = info\n\nload_workers = 0\nstaging_buffers = 8\n", path,
		   sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		 "%s:3: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	assert_string_equal(devcache_last_error(), expect);
	/* lines before the error are applied, lines after it are not */
	assert_string_equal(origin(fx, TUN_log_level), at(path, 1));
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");

	write_file(fx, "nosep.conf", "# c\nload_workers 8\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:2: expected 'KEY = VALUE', found 'load_workers 8'", path);
	assert_string_equal(devcache_last_error(), expect);

	write_file(fx, "nokey.conf", "= 5\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:1: expected 'KEY = VALUE', found '= 5'", path);
	assert_string_equal(devcache_last_error(), expect);

	write_file(fx, "typo.conf", "log_levle = debug\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:1: unknown tunable 'log_levle' (did you mean 'log_level'?)",
		 path);
	assert_string_equal(devcache_last_error(), expect);
}

static void file_missing(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/nope.conf", fx->dir);
	assert_int_equal(config_apply_file(&fx->set, path, false, &fx->log, NULL, NULL), 0);
	assert_int_equal(config_apply_file(&fx->set, path, false, &fx->log, report_fn, fx), 0);
	assert_int_equal(fx->n_reports, 0);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 path, strerror(ENOENT));
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	assert_int_equal(fx->n_reports, 1);
	assert_string_equal(fx->reports[0], expect);
}

static void file_directory(void **state)
{
	struct fixture *fx = *state;
	char expect[PATH_MAX + 64];

	xsnprintf(expect, sizeof expect, "%s: not a regular file", fx->dir);
	/* a directory is an error even where a missing file would be skipped */
	assert_int_equal(config_apply_file(&fx->set, fx->dir, false, &fx->log, NULL, NULL), DEVCACHE_EIO);
	assert_string_equal(devcache_last_error(), expect);
}

/* A FIFO would block the open until a writer came, /dev/zero would never
 * end: anything but a regular file is refused at once, named.  The alarm
 * turns a hang into a failure. */
static void file_not_regular(void **state)
{
	struct fixture *fx = *state;
	char fifo[PATH_MAX], expect[PATH_MAX + 64];
	const char *paths[] = {fifo, "/dev/null", "/dev/zero"};

	xsnprintf(fifo, sizeof fifo, "%s/fifo.conf", fx->dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
		xsnprintf(expect, sizeof expect, "%s: not a regular file", paths[i]);
		for (int must_exist = 0; must_exist < 2; must_exist++) {
			alarm(10);
			int rc = config_apply_file(&fx->set, paths[i], must_exist, &fx->log, NULL, NULL);
			alarm(0);
			assert_int_equal(rc, DEVCACHE_EIO);
			assert_string_equal(devcache_last_error(), expect);
		}
	}
	/* DEVCACHE_CONF naming the FIFO: devcache_open fails, naming it. */
	setenv("DEVCACHE_CONF", fifo, 1);
	alarm(10);
	int rc = devcache_open(&fx->ctx, NULL);
	alarm(0);
	assert_int_equal(rc, DEVCACHE_EIO);
	xsnprintf(expect, sizeof expect, "%s: not a regular file", fifo);
	assert_string_equal(devcache_last_error(), expect);
}

/* Write a file of exactly size bytes: comment lines, then a setting. */
static void write_sized(const char *path, size_t size)
{
	static const char setting[] = "load_workers = 7\n";
	FILE *f = fopen(path, "w");
	size_t left = size - (sizeof setting - 1);

	assert_non_null(f);
	while (left > 0) {
		size_t n = left > 80 ? 80 : left;

		/* a line of n bytes: '#', spaces, newline */
		fprintf(f, "%s%*s\n", n > 1 ? "#" : "", (int)(n > 1 ? n - 2 : 0), "");
		left -= n;
	}
	fputs(setting, f);
	assert_int_equal(fclose(f), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, size);
}

/* A configuration file of CONFIG_FILE_MAX bytes is read; one byte more is
 * refused before anything is read, and the message names the limit. */
static void file_size_limit(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/big.conf", fx->dir);
	write_sized(path, CONFIG_FILE_MAX);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 7);
	write_sized(path, CONFIG_FILE_MAX + 1);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		  "%s: configuration file of %u bytes is larger than the limit of %u bytes", path,
		  CONFIG_FILE_MAX + 1, CONFIG_FILE_MAX);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(fx->n_reports, 1);
	assert_string_equal(fx->reports[0], expect);
}

/* Run config_apply_file in a child without root's right to read every file. */
static int apply_as_nobody(const char *path, char *message, size_t size)
{
	int fds[2], status;
	pid_t pid;

	if (pipe(fds))
		return INT_MIN;
	pid = fork();
	if (pid == 0) {
		struct tunable_set set;
		int rc;

		close(fds[0]);
		if (setgid(65534) || setuid(65534))
			_exit(77);
		if (tunable_set_defaults(&set))
			_exit(78);
		rc = config_apply_file(&set, path, false, NULL, NULL, NULL);
		tunable_set_free(&set);
		if (write(fds[1], devcache_last_error(), strlen(devcache_last_error()) + 1) < 0)
			_exit(79);
		_exit(-rc);
	}
	close(fds[1]);
	ssize_t got = pid > 0 ? read(fds[0], message, size - 1) : -1;
	message[got > 0 ? got : 0] = '\0';
	close(fds[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return INT_MIN;
	return WEXITSTATUS(status) >= 77 ? WEXITSTATUS(status) : -WEXITSTATUS(status);
}

static void file_unreadable(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];
	int rc;

	write_file(fx, "secret.conf", "load_workers = 8\n", path, sizeof path);
	assert_int_equal(chmod(path, 0), 0);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s", path, strerror(EACCES));
	if (geteuid() != 0) {
		rc = config_apply_file(&fx->set, path, false, &fx->log, NULL, NULL);
		assert_int_equal(rc, DEVCACHE_EIO);
		assert_string_equal(devcache_last_error(), expect);
		assert_string_equal(origin(fx, TUN_load_workers), "default");
		return;
	}
	/* Root reads every file: check as nobody instead, or skip. */
	char message[PATH_MAX + 256];

	assert_int_equal(chmod(fx->dir, 0755), 0);
	rc = apply_as_nobody(path, message, sizeof message);
	if (rc == 77) {
		print_message("# SKIP running as root, which reads every file, and cannot become "
			      "nobody to check an unreadable one\n");
		skip();
	}
	assert_int_equal(rc, DEVCACHE_EIO);
	assert_string_equal(message, expect);
}

static void file_report_mode(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 256];

	write_file(fx, "many.conf",
		   "load_workers = 0\n"
		   "staging_buffers = 8\n"
		   "log_levle = debug\n"
		   "nonsense\n"
		   "max_split_size_mb = 10\n"
		   "caching = no\n",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	assert_int_equal(fx->n_reports, 4);
	xsnprintf(expect, sizeof expect,
		 "%s:1: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	assert_string_equal(fx->reports[0], expect);
	xsnprintf(expect, sizeof expect, "%s:3: unknown tunable 'log_levle' (did you mean 'log_level'?)",
		 path);
	assert_string_equal(fx->reports[1], expect);
	xsnprintf(expect, sizeof expect, "%s:4: expected 'KEY = VALUE', found 'nonsense'", path);
	assert_string_equal(fx->reports[2], expect);
	xsnprintf(expect, sizeof expect,
		 "%s:5: max_split_size_mb: '10' is out of range (accepted: greater than 20M, or unlimited)",
		 path);
	assert_string_equal(fx->reports[3], expect);
	/* the good lines around the errors still apply */
	assert_string_equal(origin(fx, TUN_staging_buffers), at(path, 2));
	assert_false(fx->set.v[TUN_caching].u.b);
	assert_string_equal(origin(fx, TUN_caching), at(path, 6));
	assert_string_equal(origin(fx, TUN_load_workers), "default");
}

/* ---- precedence ---------------------------------------------------------------- */

static void sources_precedence(void **state)
{
	struct fixture *fx = *state;
	char sys[PATH_MAX], user[PATH_MAX], conf[PATH_MAX];
	struct config_sources src = {
		.backend_path = "/env/modules",
		.env_options = "max_cache_ram:4G,max_cache_vram:4G",
		.options = "max_cache_vram:5G,direct_io:true",
	};

	src.system_file = write_file(fx, "system.conf",
				     "load_workers = 3\nstaging_buffers = 3\nlog_level = error\n"
				     "max_cache_ram = 1G\nmax_cache_vram = 1G\nbackend_path = /system\n",
				     sys, sizeof sys);
	src.user_file = write_file(fx, "user.conf",
				   "staging_buffers = 4\nlog_level = info\nmax_cache_ram = 2G\n"
				   "max_cache_vram = 2G\nbackend_path = /user\n",
				   user, sizeof user);
	src.conf_file = write_file(fx, "conf.conf",
				   "log_level = debug\nmax_cache_ram = 3G\nmax_cache_vram = 3G\n"
				   "backend_path = /conf\n",
				   conf, sizeof conf);
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(value(fx, TUN_load_workers), "3");
	assert_string_equal(origin(fx, TUN_load_workers), at(sys, 1));
	assert_string_equal(value(fx, TUN_staging_buffers), "4");
	assert_string_equal(origin(fx, TUN_staging_buffers), at(user, 1));
	assert_string_equal(value(fx, TUN_log_level), "debug");
	assert_string_equal(origin(fx, TUN_log_level), at(conf, 1));
	assert_string_equal(value(fx, TUN_backend_path), "/env/modules");
	assert_string_equal(origin(fx, TUN_backend_path), "DEVCACHE_BACKEND_PATH");
	assert_string_equal(value(fx, TUN_max_cache_ram), "4G");
	assert_string_equal(origin(fx, TUN_max_cache_ram), "DEVCACHE_OPTIONS");
	assert_string_equal(value(fx, TUN_max_cache_vram), "5G");
	assert_string_equal(origin(fx, TUN_max_cache_vram), "devcache_open");
	assert_string_equal(value(fx, TUN_direct_io), "true");
	assert_string_equal(origin(fx, TUN_direct_io), "devcache_open");
	assert_string_equal(value(fx, TUN_keep_ram_copy), "true");
	assert_string_equal(origin(fx, TUN_keep_ram_copy), "default");
}

static void sources_options_after_backend_path(void **state)
{
	struct fixture *fx = *state;
	struct config_sources src = {
		.backend_path = "/env/modules",
		.env_options = "backend_path:/opts/modules",
	};

	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(value(fx, TUN_backend_path), "/opts/modules");
	assert_string_equal(origin(fx, TUN_backend_path), "DEVCACHE_OPTIONS");
	src.options = "backend_path:/open/modules";
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(origin(fx, TUN_backend_path), "devcache_open");
}

static void sources_missing_files(void **state)
{
	struct fixture *fx = *state;
	char sys[PATH_MAX], user[PATH_MAX], conf[PATH_MAX], expect[PATH_MAX + 128];
	struct config_sources src = {.system_file = sys, .user_file = user, .env_options = "load_workers:9"};

	xsnprintf(sys, sizeof sys, "%s/no-system.conf", fx->dir);
	xsnprintf(user, sizeof user, "%s/no-user.conf", fx->dir);
	xsnprintf(conf, sizeof conf, "%s/no-conf.conf", fx->dir);
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(origin(fx, TUN_load_workers), "DEVCACHE_OPTIONS");
	/* DEVCACHE_CONF names a file the user wants: missing is an error, and stops */
	src.conf_file = conf;
	src.env_options = "staging_buffers:9";
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 conf, strerror(ENOENT));
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");
}

/* ---- devcache_open and the real environment -------------------------------------- */

static void open_reads_environment(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], conf[PATH_MAX], modules[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf",
		   "load_workers = 3\nstaging_buffers = 3\nmax_cache_ram = 1G\nmax_cache_vram = 1G\n",
		   user, sizeof user);
	write_file(fx, "extra.conf", "staging_buffers = 5\nmax_cache_ram = 2G\nmax_cache_vram = 2G\n",
		   conf, sizeof conf);
	xsnprintf(modules, sizeof modules, "%s/modules", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", conf, 1);
	setenv("DEVCACHE_BACKEND_PATH", modules, 1);
	setenv("DEVCACHE_OPTIONS", "max_cache_ram:3G,max_cache_vram:3G", 1);
	assert_int_equal(devcache_open(&fx->ctx, "max_cache_vram:4G"), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "3");
	assert_string_equal(orig, at(user, 1));
	assert_string_equal(ctx_get(fx->ctx, "staging_buffers", &orig), "5");
	assert_string_equal(orig, at(conf, 1));
	assert_string_equal(ctx_get(fx->ctx, "max_cache_ram", &orig), "3G");
	assert_string_equal(orig, "DEVCACHE_OPTIONS");
	assert_string_equal(ctx_get(fx->ctx, "max_cache_vram", &orig), "4G");
	assert_string_equal(orig, "devcache_open");
	assert_string_equal(ctx_get(fx->ctx, "backend_path", &orig), modules);
	assert_string_equal(orig, "DEVCACHE_BACKEND_PATH");
	ctx_get(fx->ctx, "keep_ram_copy", &orig);
	assert_default_or_system(orig);
}

static void open_user_file_from_home(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX];
	const char *orig;

	write_file(fx, ".config/devcache/devcache.conf", "# home\nload_workers = 6\n", user, sizeof user);
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", fx->dir, 1);
	assert_int_equal(open_ex(fx, NULL, 0), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "6");
	assert_string_equal(orig, at(user, 2));
	/* a relative XDG_CONFIG_HOME is ignored, as the XDG specification says */
	setenv("XDG_CONFIG_HOME", "relative/config", 1);
	assert_int_equal(open_ex(fx, NULL, 0), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "6");
	assert_string_equal(orig, at(user, 2));
}

static void open_no_env(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], missing[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf", "load_workers = 5\n", user, sizeof user);
	xsnprintf(missing, sizeof missing, "%s/missing.conf", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", missing, 1);
	setenv("DEVCACHE_OPTIONS", "staging_buffers:9", 1);
	setenv("DEVCACHE_BACKEND_PATH", "/env/modules", 1);
	setenv("DEVCACHE_FROB", "1", 1);
	assert_int_equal(open_ex(fx, "direct_io:true", DEVCACHE_OPEN_NO_ENV), 0);
	ctx_get(fx->ctx, "load_workers", &orig);
	assert_default_or_system(orig);
	ctx_get(fx->ctx, "staging_buffers", &orig);
	assert_default_or_system(orig);
	ctx_get(fx->ctx, "backend_path", &orig);
	assert_default_or_system(orig);
	assert_string_equal(ctx_get(fx->ctx, "direct_io", &orig), "true");
	assert_string_equal(orig, "devcache_open");
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_FROB"), 0);

	/* both flags: nothing but the string */
	assert_int_equal(open_ex(fx, "direct_io:true", DEVCACHE_OPEN_NO_ENV | DEVCACHE_OPEN_NO_FILES), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "2");
	assert_string_equal(orig, "default");
	assert_string_equal(ctx_get(fx->ctx, "backend_path", &orig), BACKENDDIR);
	assert_string_equal(orig, "default");
	assert_int_equal(fx->cap.n, 0);
}

static void open_no_files(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], missing[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf", "load_workers = 5\n", user, sizeof user);
	xsnprintf(missing, sizeof missing, "%s/missing.conf", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", missing, 1); /* an error, were it read */
	setenv("DEVCACHE_OPTIONS", "staging_buffers:6", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "2");
	assert_string_equal(orig, "default");
	assert_string_equal(ctx_get(fx->ctx, "staging_buffers", &orig), "6");
	assert_string_equal(orig, "DEVCACHE_OPTIONS");
	/* without the flag the missing DEVCACHE_CONF fails the open */
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	assert_null(fx->ctx);
	assert_contains(devcache_last_error(), missing);
	assert_contains(devcache_last_error(), "cannot open configuration file");
}

static void open_bad_values(void **state)
{
	struct fixture *fx = *state;
	char conf[PATH_MAX], expect[PATH_MAX + 256];

	setenv("DEVCACHE_OPTIONS", "max_split_size_mb:abc", 1);
	{
		devcache_open_args_t args = {.struct_size = sizeof args,
					     .log_fn = capture_fn,
					     .log_user = &fx->cap,
					     .flags = DEVCACHE_OPEN_NO_FILES};
		devcache_ctx_t *ctx = (devcache_ctx_t *)&args; /* must be reset to NULL */

		assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_ECONFIG);
		assert_null(ctx);
	}
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc' (expected a size in "
			    "MiB such as 512, or with a unit such as 2G, or unlimited)");
	if (!system_file_present()) {
		assert_int_equal(devcache_open(&fx->ctx, NULL), DEVCACHE_ECONFIG);
		assert_null(fx->ctx);
		assert_contains(devcache_last_error(), "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc'");
	}
	unsetenv("DEVCACHE_OPTIONS");

	assert_int_equal(open_ex(fx, "load_workers:0", DEVCACHE_OPEN_NO_FILES), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: load_workers: '0' is out of range (accepted: at least 1 and "
			    "at most 64)");

	write_file(fx, "bad.conf", "load_workers = 4\nlog_level = loud\n", conf, sizeof conf);
	setenv("DEVCACHE_CONF", conf, 1);
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		 "%s:2: log_level: invalid enum 'loud' (expected one of: none, error, warning, info, "
		 "debug)",
		 conf);
	assert_string_equal(devcache_last_error(), expect);
}

/* A slip in a name gets its "did you mean" wherever the name is written:
 * the open string, DEVCACHE_OPTIONS, a configuration file, and the name
 * of an environment variable.  PyTorch's options, which are accepted and
 * ignored, are names a user writes too. */
static void unknown_names_get_a_hint_everywhere(void **state)
{
	struct fixture *fx = *state;
	char conf[4096], expect[4608];

	assert_int_equal(open_ex(fx, "pinned_use_cuda_host_registr:True", DEVCACHE_OPEN_NO_FILES),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: unknown tunable 'pinned_use_cuda_host_registr' (did you "
			    "mean 'pinned_use_cuda_host_register'?)");

	setenv("DEVCACHE_OPTIONS", "pinned_use_cuda_host_registr:True", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: unknown tunable 'pinned_use_cuda_host_registr' (did you "
			    "mean 'pinned_use_cuda_host_register'?)");
	unsetenv("DEVCACHE_OPTIONS");

	write_file(fx, "slip.conf", "pinned_use_cuda_host_registr = True\n", conf, sizeof conf);
	setenv("DEVCACHE_CONF", conf, 1);
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		  "%s:1: unknown tunable 'pinned_use_cuda_host_registr' (did you mean "
		  "'pinned_use_cuda_host_register'?)",
		  conf);
	assert_string_equal(devcache_last_error(), expect);
	unsetenv("DEVCACHE_CONF");

	setenv("DEVCACHE_MAX_SPLT_SIZE_MB", "512", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	unsetenv("DEVCACHE_MAX_SPLT_SIZE_MB");
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_MAX_SPLT_SIZE_MB is ignored "
				       "(did you mean DEVCACHE_OPTIONS=max_split_size_mb:VALUE?)"),
			 1);
	/* PyTorch's options are not set through DEVCACHE_OPTIONS either. */
	setenv("DEVCACHE_BACKEND", "native", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	unsetenv("DEVCACHE_BACKEND");
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING, "DEVCACHE_OPTIONS=backend:"), 0);
}

static void open_warns_unknown_env(void **state)
{
	struct fixture *fx = *state;

	setenv("DEVCACHE_OPTION", "log_level:debug", 1);
	setenv("DEVCACHE_MAX_SPLIT_SIZE_MB", "512", 1);
	setenv("DEVCACHE_FROB", "1", 1);
	setenv("DEVCACHE_CONFIG", "/etc/devcache.conf", 1);
	setenv("DEVCACHE_OPTIONS", "load_workers:3", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_OPTION is ignored (did "
				       "you mean DEVCACHE_OPTIONS?)"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "environment variable DEVCACHE_MAX_SPLIT_SIZE_MB is ignored: set "
				       "tunables with DEVCACHE_OPTIONS=max_split_size_mb:VALUE"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_FROB is ignored "
				       "(libdevcache reads DEVCACHE_CONF, DEVCACHE_OPTIONS, "
				       "DEVCACHE_BACKEND_PATH and DEVCACHE_LOCALEDIR)"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_CONFIG is ignored (did "
				       "you mean DEVCACHE_CONF?)"),
			 1);
	/* the variables libdevcache reads are not warned about */
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_OPTIONS is ignored"), 0);
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_LOCALEDIR is ignored"), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", NULL), "3");

	/* the warnings pass through log_level like every message */
	setenv("DEVCACHE_OPTIONS", "log_level:error", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_int_equal(capture_count(&fx->cap, -1, "environment variable"), 0);
}

static void open_log_level_filters(void **state)
{
	static const char *const loaded = "backend host (built-in): loaded, 1 device";
	struct fixture *fx = *state;
	const unsigned flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV;

	assert_int_equal(open_ex(fx, "log_level:debug", flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, loaded), 1);

	assert_int_equal(open_ex(fx, NULL, flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, ""), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO, ""), 0);

	/* info: the PyTorch key's message, but no debug */
	assert_int_equal(open_ex(fx, "log_level:info,backend:native", flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO,
				       "devcache_open: backend is a PyTorch option that libdevcache "
				       "accepts and ignores"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, ""), 0);

	/* the level is known only at the end: an earlier message still obeys it */
	assert_int_equal(open_ex(fx, "backend:native,log_level:warning", flags), 0);
	assert_int_equal(fx->cap.n, 0);

	/* a level set in a file works the same */
	{
		char conf[PATH_MAX];

		write_file(fx, "debug.conf", "log_level = debug\n", conf, sizeof conf);
		setenv("DEVCACHE_CONF", conf, 1);
		assert_int_equal(open_ex(fx, NULL, 0), 0);
		assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, loaded), 1);
	}
}

/* ---- devcache_config_check_file ---------------------------------------------------- */

static void check_file_reports_every_error(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[4][PATH_MAX + 256];

	write_file(fx, "check.conf",
		   "# check me\n"
		   "load_workers = 0\n"
		   "staging_buffers = 8\n"
		   "log_levle = debug\n"
		   "backend = native\n"
		   "nonsense\n"
		   "max_split_size_mb = 10\n",
		   path, sizeof path);
	xsnprintf(expect[0], sizeof expect[0],
		 "%s:2: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	xsnprintf(expect[1], sizeof expect[1],
		 "%s:4: unknown tunable 'log_levle' (did you mean 'log_level'?)", path);
	xsnprintf(expect[2], sizeof expect[2], "%s:6: expected 'KEY = VALUE', found 'nonsense'", path);
	xsnprintf(expect[3], sizeof expect[3],
		 "%s:7: max_split_size_mb: '10' is out of range (accepted: greater than 20M, or unlimited)",
		 path);
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), DEVCACHE_ECONFIG);
	assert_int_equal(fx->cap.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(fx->cap.level[i], DEVCACHE_LOG_ERROR);
		assert_string_equal(fx->cap.text[i], expect[i]);
	}
	assert_string_equal(devcache_last_error(), expect[0]);
}

static void check_file_good(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "good.conf",
		   "# fine\nload_workers = 4\nbackends = cuda, hip\nbackend = native\n"
		   "roundup_power2_divisions = [256:1,512:2,>:8]\n",
		   path, sizeof path);
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), 0);
	assert_int_equal(fx->cap.n, 0);
}

static void check_file_missing(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/absent.conf", fx->dir);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 path, strerror(ENOENT));
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), DEVCACHE_ECONFIG);
	assert_int_equal(fx->cap.n, 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_ERROR);
	assert_string_equal(fx->cap.text[0], expect);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(devcache_config_check_file(NULL, capture_fn, &fx->cap), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_config_check_file: NULL argument");
}

/* The header promises every error goes to log_fn and the first is the detail;
 * a file that is not a regular one (a directory) must say so too. */
static void check_file_directory(void **state)
{
	struct fixture *fx = *state;
	char expect[PATH_MAX + 64];

	xsnprintf(expect, sizeof expect, "%s: not a regular file", fx->dir);
	assert_int_equal(devcache_config_check_file(fx->dir, capture_fn, &fx->cap), DEVCACHE_EIO);
	capture_show(&fx->cap);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(fx->cap.n, 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_ERROR);
	assert_contains(fx->cap.text[0], expect);
}

/* ---- argument checks ------------------------------------------------------------- */

static void open_ex_validation(void **state)
{
	struct fixture *fx = *state;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .log_fn = capture_fn,
				     .log_user = &fx->cap,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	devcache_ctx_t *ctx = (devcache_ctx_t *)&args;

	assert_int_equal(devcache_open_ex(NULL, &args), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: NULL argument");
	assert_int_equal(devcache_open_ex(&ctx, NULL), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: NULL argument");
	assert_int_equal(devcache_open(NULL, NULL), DEVCACHE_EINVAL);

	args.struct_size = 0;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_null(ctx);
	assert_string_equal(devcache_last_error(),
			    "devcache_open_ex: struct_size 0 is not that of any known devcache_open_args_t");
	args.struct_size = sizeof args + 8;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "struct_size");
	args.struct_size = offsetof(devcache_open_args_t, reserved) - 1;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);

	args.struct_size = sizeof args;
	args.flags = 0x4;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_null(ctx);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: unknown flags 0x4");
	args.flags = DEVCACHE_OPEN_NO_FILES | 0x80000000u;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "unknown flags 0x80000001");

	/* a caller built against a struct without the reserved tail still opens */
	args.flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV;
	args.struct_size = offsetof(devcache_open_args_t, reserved);
	assert_int_equal(devcache_open_ex(&fx->ctx, &args), 0);
	assert_non_null(fx->ctx);
}

static void config_get_errors(void **state)
{
	struct fixture *fx = *state;
	char small[4], buf[64];
	const char *orig = "unset";

	assert_int_equal(open_ex(fx, "log_level:info", DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV), 0);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", buf, sizeof buf, NULL), 0);
	assert_string_equal(buf, "info");
	assert_int_equal(devcache_config_get(fx->ctx, "nope", buf, sizeof buf, &orig), DEVCACHE_ENOENT);
	assert_string_equal(devcache_last_error(), "unknown tunable 'nope'");
	assert_string_equal(orig, "unset");
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", small, sizeof small, &orig),
			 DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "log_level: the value needs 5 bytes, the buffer has 4");
	assert_int_equal(devcache_config_get(NULL, "log_level", buf, sizeof buf, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, NULL, buf, sizeof buf, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", NULL, 8, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", buf, 0, NULL), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_config_get: NULL argument");
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(string_pairs),
		T(string_equals_and_spaces),
		T(string_brackets_protect_commas),
		T(string_list_continuation),
		T(string_item_without_colon),
		T(string_length_limit),
		T(string_empty_items_skipped),
		T(string_pytorch_paste),
		T(string_compat_keys),
		T(string_unknown_key),
		T(string_bad_value),
		T(file_syntax),
		T(file_crlf),
		T(file_errors_carry_line),
		T(file_missing),
		T(file_directory),
		T(file_not_regular),
		T(file_size_limit),
		T(file_unreadable),
		T(file_report_mode),
		T(sources_precedence),
		T(sources_options_after_backend_path),
		T(sources_missing_files),
		T(open_reads_environment),
		T(open_user_file_from_home),
		T(open_no_env),
		T(open_no_files),
		T(open_bad_values),
		T(open_warns_unknown_env),
		T(unknown_names_get_a_hint_everywhere),
		T(open_log_level_filters),
		T(check_file_reports_every_error),
		T(check_file_good),
		T(check_file_missing),
		T(check_file_directory),
		T(open_ex_validation),
		T(config_get_errors),
	};

	/* Run alike from make check or by hand: no configuration from outside. */
	unsetenv("DEVCACHE_CONF");
	unsetenv("DEVCACHE_OPTIONS");
	unsetenv("DEVCACHE_BACKEND_PATH");
	return RUN_TAP(tests);
}
